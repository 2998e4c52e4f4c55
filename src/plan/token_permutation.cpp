#include "fcp/token_permutation.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "fcp/error.h"

namespace fcp {

TokenLayout::TokenLayout(const Plan& plan) {
  const int32_t n = plan.workers;
  worker_offsets_.assign(static_cast<size_t>(n) + 1, 0);
  block_offsets_.assign(static_cast<size_t>(n) + 1, 0);
  for (const Block& b : plan.blocks) {
    worker_offsets_[b.worker + 1] += b.tokens();
    ++block_offsets_[b.worker + 1];
  }
  for (int32_t w = 0; w < n; ++w) {
    worker_offsets_[w + 1] += worker_offsets_[w];
    block_offsets_[w + 1] += block_offsets_[w];
  }

  // Blocks grouped by owner, increasing id within a group (one stable pass),
  // and each segment's planned position from a per-worker cursor.
  blocks_by_worker_.resize(plan.blocks.size());
  std::vector<int64_t> next_block(block_offsets_.begin(), block_offsets_.end() - 1);
  std::vector<int64_t> cursor(worker_offsets_.begin(), worker_offsets_.end() - 1);
  const std::vector<int64_t> sequence_offsets = SequenceOffsets(plan.sequences);
  block_pieces_.resize(plan.blocks.size());
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const Block& block = plan.blocks[b];
    blocks_by_worker_[next_block[block.worker]++] = static_cast<int32_t>(b);
    for (const Segment& s : block.segments) {
      const Piece piece{sequence_offsets[s.seq] + s.start, s.length, cursor[block.worker],
                        block.worker};
      block_pieces_[b].push_back(piece);
      by_global_.push_back(piece);
      cursor[block.worker] += s.length;
    }
  }
  // Segments tile [0, T), so their starts are distinct: the order is total.
  std::sort(by_global_.begin(), by_global_.end(),
            [](const Piece& a, const Piece& b) { return a.global_begin < b.global_begin; });
}

std::vector<int64_t> TokenLayout::WorkerOrder(int32_t worker) const {
  if (worker < 0 || worker >= workers())
    throw Error(ErrorCode::kInvalidArgument, "token layout: worker " + std::to_string(worker) +
                                                 " is not in [0, " + std::to_string(workers()) +
                                                 ")");
  std::vector<int64_t> order(worker_offsets_[worker + 1] - worker_offsets_[worker]);
  auto out = order.begin();
  for (int64_t i = block_offsets_[worker]; i < block_offsets_[worker + 1]; ++i)
    for (const Piece& p : block_pieces_[blocks_by_worker_[i]]) {
      std::iota(out, out + p.length, p.global_begin);
      out += p.length;
    }
  return order;
}

std::vector<int64_t> TokenLayout::Order() const {
  std::vector<int64_t> order(total_tokens());
  // Each piece knows its planned position: one pass over the blocks suffices.
  for (const std::vector<Piece>& pieces : block_pieces_)
    for (const Piece& p : pieces)
      std::iota(order.begin() + p.planned_position, order.begin() + p.planned_position + p.length,
                p.global_begin);
  return order;
}

void TokenLayout::CheckRange(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > total_tokens())
    throw Error(ErrorCode::kInvalidArgument,
                "token layout: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") is not inside [0, " + std::to_string(total_tokens()) + ")");
}

template <typename Visit>
void TokenLayout::ForEachRun(int64_t begin, int64_t end, Visit visit) const {
  if (begin == end) return;
  // The last piece starting at or before `begin` (the first starts at 0).
  auto it = std::upper_bound(by_global_.begin(), by_global_.end(), begin,
                             [](int64_t g, const Piece& p) { return g < p.global_begin; });
  for (--it; begin < end; ++it) {
    const int64_t count = std::min(end, it->global_begin + it->length) - begin;
    visit(*it, begin, count);
    begin += count;
  }
}

std::vector<int64_t> TokenLayout::PlannedPositions(int64_t begin, int64_t end) const {
  CheckRange(begin, end);
  std::vector<int64_t> positions(end - begin);
  ForEachRun(begin, end, [&](const Piece& p, int64_t first, int64_t count) {
    const auto out = positions.begin() + (first - begin);
    std::iota(out, out + count, p.planned_position + (first - p.global_begin));
  });
  return positions;
}

TokenLayout::Placement TokenLayout::Place(int64_t begin, int64_t end) const {
  CheckRange(begin, end);
  Placement result{std::vector<int32_t>(end - begin), std::vector<int64_t>(end - begin)};
  ForEachRun(begin, end, [&](const Piece& p, int64_t first, int64_t count) {
    const int64_t offset = first - begin;
    std::fill_n(result.owner.begin() + offset, count, p.owner);
    std::iota(result.index.begin() + offset, result.index.begin() + offset + count,
              p.planned_position + (first - p.global_begin) - worker_offsets_[p.owner]);
  });
  return result;
}

}  // namespace fcp
