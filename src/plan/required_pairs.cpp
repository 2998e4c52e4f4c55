#include "fcp/required_pairs.h"

#include <algorithm>
#include <future>
#include <iterator>
#include <span>
#include <string>
#include <utility>

#include "buckets.h"
#include "concurrently.h"
#include "fcp/error.h"

namespace fcp {

SequenceIndex::SequenceIndex(const std::vector<int64_t>& sequences,
                             const std::vector<Block>& blocks) {
  pieces_.StartCounting(sequences.size());
  const auto fail = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidPlan, "plan: " + what);
  };
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto& segments = blocks[b].segments;
    for (size_t k = 0; k < segments.size(); ++k) {
      const Segment& s = segments[k];
      // Built only for a message: this loop runs over every segment of a plan.
      const auto where = [&] {
        return "block " + std::to_string(b) + " segment " + std::to_string(k) + ": ";
      };
      if (s.seq < 0 || static_cast<size_t>(s.seq) >= sequences.size())
        fail(where() + "sequence " + std::to_string(s.seq) + " does not exist (" +
             std::to_string(sequences.size()) + " sequences)");
      if (s.length <= 0) fail(where() + "length must be > 0, got " + std::to_string(s.length));
      // Written so that no sum can overflow, whatever a plan file holds.
      if (s.start < 0 || s.start > sequences[s.seq] || s.length > sequences[s.seq] - s.start)
        fail(where() + "[seq, start, length] = [" + std::to_string(s.seq) + ", " +
             std::to_string(s.start) + ", " + std::to_string(s.length) +
             "] lies outside sequence " + std::to_string(s.seq) + " of length " +
             std::to_string(sequences[s.seq]));
      pieces_.Count(static_cast<size_t>(s.seq));
    }
  }
  // One array for all sequences, filled in block order as the rows of a
  // vector per sequence would be.
  pieces_.FinishCounting();
  pieces_.items.resize(static_cast<size_t>(pieces_.offset.back()));
  std::vector<int64_t> fill = pieces_.RowStarts();
  for (size_t b = 0; b < blocks.size(); ++b)
    for (const Segment& s : blocks[b].segments)
      pieces_.items[fill[s.seq]++] = {s.start, s.length, static_cast<int32_t>(b)};
  for (size_t seq = 0; seq < sequences.size(); ++seq) {
    const auto pieces = pieces_.Slice(std::span(pieces_.items), seq);
    // Most sequences have one piece, and blocks numbered in token order (as
    // the planner's are) list the others in order already.
    const auto by_start = [](const Piece& a, const Piece& b) { return a.start < b.start; };
    if (!std::is_sorted(pieces.begin(), pieces.end(), by_start))
      std::sort(pieces.begin(), pieces.end(), by_start);
    int64_t next = 0;
    for (const Piece& p : pieces) {
      if (p.start < next)
        fail("sequence " + std::to_string(seq) + ": token " + std::to_string(p.start) +
             " lies in more than one segment (blocks overlap)");
      if (p.start > next)
        fail("sequence " + std::to_string(seq) + ": tokens [" + std::to_string(next) + ", " +
             std::to_string(p.start) + ") are in no block");
      next = p.start + p.length;
    }
    if (next != sequences[seq])
      fail("sequence " + std::to_string(seq) + ": tokens [" + std::to_string(next) + ", " +
           std::to_string(sequences[seq]) + ") are in no block");
  }
}

std::vector<RequiredPair> RequiredPairs(const std::vector<int64_t>& sequences,
                                        const std::vector<Block>& blocks, const Mask& mask,
                                        bool spare_core) {
  return RequiredPairs(sequences, blocks, mask, SequenceIndex(sequences, blocks), spare_core);
}

namespace {

// RequiredPairs lists its rows in two halves on two threads from this many
// candidate pairs (lognormal batches: N = 256 has 58K pairs, N = 4096 735K;
// a thread costs tens of microseconds, listing a pair about 100
// instructions).
constexpr int64_t kConcurrentCandidates = int64_t{1} << 17;

// The pieces of a sequence that overlap `keys`: [first, last).
std::pair<const SequenceIndex::Piece*, const SequenceIndex::Piece*> KeyPieces(
    std::span<const SequenceIndex::Piece> pieces, TokenRange keys) {
  const SequenceIndex::Piece* first = std::upper_bound(
      pieces.data(), pieces.data() + pieces.size(), keys.begin,
      [](int64_t token, const SequenceIndex::Piece& p) { return token < p.start + p.length; });
  const SequenceIndex::Piece* last = std::lower_bound(
      first, pieces.data() + pieces.size(), keys.end,
      [](const SequenceIndex::Piece& p, int64_t token) { return p.start < token; });
  return {first, last};
}

}  // namespace

std::vector<RequiredPair> RequiredPairs(const std::vector<int64_t>& sequences,
                                        const std::vector<Block>& blocks, const Mask& mask,
                                        const SequenceIndex& index, bool spare_core) {
  // Every required pair is one of these (query segment, key piece) pairs:
  // per segment in block order, the key pieces [first, last) it may attend.
  using PieceRange = std::pair<const SequenceIndex::Piece*, const SequenceIndex::Piece*>;
  std::vector<PieceRange> key_pieces;
  // A row has at most one pair per block however many candidates list it
  // (a ring plan's rows list each block once per sequence: ~5e8 candidates at
  // N = 256 for 65536 pairs), so memory is bounded by the pairs, not the
  // candidates: `bound` = sum over rows of min(candidates, blocks).
  int64_t candidates = 0, bound = 0;
  const int64_t row_limit = static_cast<int64_t>(blocks.size());
  std::vector<int64_t> row_candidates;
  row_candidates.reserve(blocks.size());
  for (const Block& block : blocks) {
    int64_t row = 0;
    for (const Segment& s : block.segments) {
      key_pieces.push_back(
          KeyPieces(index.pieces(s.seq),
                    AttendedKeys(mask, {s.start, s.start + s.length}, sequences[s.seq])));
      row += key_pieces.back().second - key_pieces.back().first;
    }
    row_candidates.push_back(row);
    candidates += row;
    bound += std::min(row, row_limit);
  }
  if (bound > kMaxRequiredPairs)
    throw Error(ErrorCode::kInvalidArgument,
                "required pairs: these blocks give up to " + std::to_string(bound) +
                    " required block pairs (" + std::to_string(candidates) +
                    " candidate block pairs), more than 2^27 can be listed in memory; use larger "
                    "blocks");
  // Each query block's row is listed straight into `pairs`, then sorted and
  // merged in place (or summed per block, below), so `pairs` holds the rows
  // before it and one unmerged row: reserved for every candidate when that
  // is within the bound (never moved), else for the bound.
  std::vector<RequiredPair> pairs;
  pairs.reserve(static_cast<size_t>(candidates <= kMaxRequiredPairs ? candidates : bound));
  // Rows [q_begin, q_end) appended to `out`; `next_segment`: the key pieces of
  // q_begin's first segment.
  const auto list_rows = [&](size_t q_begin, size_t q_end, const PieceRange* next_segment,
                             std::vector<RequiredPair>& out) {
    // Rows listing many more candidates than there are blocks (ring plans)
    // are summed per K/V block in `dense` instead of listed and sorted: same
    // pairs, O(candidates + row log row) instead of O(candidates log
    // candidates).
    std::vector<int64_t> dense;
    std::vector<int32_t> dense_touched;
    for (size_t q = q_begin; q < q_end; ++q) {
      const size_t row_begin = out.size();
      const bool summed = row_candidates[q] > 4 * row_limit;
      if (summed && dense.empty()) dense.assign(blocks.size(), 0);
      for (const Segment& s : blocks[q].segments) {
        const TokenRange queries{s.start, s.start + s.length};
        const auto [first, last] = *next_segment++;
        for (const SequenceIndex::Piece* it = first; it != last; ++it) {
          const int64_t n =
              AllowedPairs(mask, queries, TokenRange{it->start, it->start + it->length});
          if (n <= 0) continue;
          if (!summed) {
            out.push_back({static_cast<int32_t>(q), it->block, n});
          } else {
            if (dense[it->block] == 0) dense_touched.push_back(it->block);
            dense[it->block] += n;
          }
        }
      }
      if (summed) {
        std::sort(dense_touched.begin(), dense_touched.end());
        for (int32_t kv : dense_touched) {
          out.push_back({static_cast<int32_t>(q), kv, dense[kv]});
          dense[kv] = 0;
        }
        dense_touched.clear();
        continue;
      }
      // Blocks numbered in token order (as the planner's are) give sorted rows.
      const auto row = out.begin() + static_cast<std::ptrdiff_t>(row_begin);
      const auto by_kv = [](const RequiredPair& a, const RequiredPair& b) {
        return a.kv_block < b.kv_block;
      };
      if (!std::is_sorted(row, out.end(), by_kv)) std::sort(row, out.end(), by_kv);
      // A K/V block met through two pieces (of one sequence or two): one
      // pair, the sum. Rare: most rows have no neighbours to merge.
      const auto same_kv = [](const RequiredPair& a, const RequiredPair& b) {
        return a.kv_block == b.kv_block;
      };
      auto merged = std::adjacent_find(row, out.end(), same_kv);
      if (merged != out.end()) {
        for (auto it = merged + 1; it != out.end(); ++it) {
          if (it->kv_block == merged->kv_block)
            merged->token_pairs += it->token_pairs;
          else
            *++merged = *it;
        }
        out.erase(merged + 1, out.end());
      }
    }
  };
  // Many candidates, or a core to spare (within the reservation): the later
  // rows, from the one where half the candidates are listed, on a second
  // thread into a part of their own, appended after (rows are independent;
  // the pairs the same). At N = 4096 the rows are listed three times a
  // planning, each about 4%.
  size_t split = blocks.size();
  const PieceRange* split_segment = key_pieces.data() + key_pieces.size();
  int64_t listed = candidates;  // by the rows before `split`
  if ((candidates >= kConcurrentCandidates || spare_core) && candidates <= kMaxRequiredPairs) {
    listed = 0;
    split_segment = key_pieces.data();
    for (split = 0; split < blocks.size() && 2 * listed < candidates; ++split) {
      listed += row_candidates[split];
      split_segment += blocks[split].segments.size();
    }
  }
  std::future<std::vector<RequiredPair>> later;
  if (split < blocks.size())
    later = detail::Concurrently([&, split, split_segment, listed] {
      std::vector<RequiredPair> part;
      part.reserve(static_cast<size_t>(candidates - listed));
      list_rows(split, blocks.size(), split_segment, part);
      return part;
    });
  list_rows(0, split, key_pieces.data(), pairs);
  if (later.valid()) {
    const std::vector<RequiredPair> part = later.get();
    pairs.insert(pairs.end(), part.begin(), part.end());
  }
  return pairs;
}

TokenRange AttendedRows(const std::vector<int64_t>& sequences, const Block& q, const Block& kv,
                        const Mask& mask) {
  TokenRange span{0, 0};
  int64_t row = 0;  // kv's first row of the segment
  for (const Segment& k : kv.segments) {
    for (const Segment& x : q.segments) {
      if (x.seq != k.seq) continue;
      const TokenRange keys = AttendedKeys(mask, {x.start, x.start + x.length}, sequences[k.seq]);
      const int64_t lo = std::max(keys.begin, k.start), hi = std::min(keys.end, k.start + k.length);
      if (lo >= hi) continue;
      const TokenRange rows{row + lo - k.start, row + hi - k.start};
      span = span.empty()
                 ? rows
                 : TokenRange{std::min(span.begin, rows.begin), std::max(span.end, rows.end)};
    }
    row += k.length;
  }
  return span;
}

std::vector<AttendedSpan> AttendedSpans(const std::vector<int64_t>& sequences,
                                        const std::vector<Block>& blocks,
                                        const std::vector<int32_t>& owner, const Mask& mask,
                                        const std::vector<RequiredPair>& required) {
  // The pairs come by query block: regrouped by K/V block (a counting sort),
  // so each block's spans are made together, its receivers in a dense table.
  const size_t n_blocks = blocks.size();
  const detail::Buckets by_kv =
      detail::BucketBy(n_blocks, required.size(), [&](int32_t i) { return required[i].kv_block; });
  const int32_t workers = owner.empty() ? 0 : 1 + *std::max_element(owner.begin(), owner.end());
  std::vector<TokenRange> span(static_cast<size_t>(workers));
  std::vector<uint8_t> seen(static_cast<size_t>(workers), 0);
  std::vector<int32_t> touched;
  std::vector<AttendedSpan> spans;
  for (size_t kv = 0; kv < n_blocks; ++kv) {
    int64_t tokens = -1;  // worked out once the block has a receiver
    for (const int32_t pair : by_kv.row(kv)) {
      const int32_t q = required[pair].q_block, w = owner[q];
      if (w == owner[kv]) continue;
      if (tokens < 0) tokens = blocks[kv].tokens();
      if (!seen[w]) {
        seen[w] = 1;
        touched.push_back(w);
        span[w] = {};
      }
      TokenRange& rows = span[w];
      // Already the whole block: no other pair can widen it (under the
      // causal mask most spans are whole after their first pair).
      if (rows.begin == 0 && rows.end == tokens) continue;
      const TokenRange more = AttendedRows(sequences, blocks[q], blocks[kv], mask);
      if (more.empty()) continue;
      rows = rows.empty()
                 ? more
                 : TokenRange{std::min(rows.begin, more.begin), std::max(rows.end, more.end)};
    }
    std::sort(touched.begin(), touched.end());
    for (int32_t w : touched) {
      spans.push_back({static_cast<int32_t>(kv), w, span[w]});
      seen[w] = 0;
    }
    touched.clear();
  }
  return spans;
}

void TrimTransfersToAttendedRows(Plan& plan, const std::vector<RequiredPair>& required) {
  std::vector<int32_t> owner;
  owner.reserve(plan.blocks.size());
  for (const Block& b : plan.blocks) owner.push_back(b.worker);
  // Under the causal and the full mask another block attends a block of one
  // segment whole or not at all (the two are disjoint ranges of a sequence,
  // one wholly before the other): only the pairs with blocks of several
  // segments can cut a transfer (skipping the others took 6% off planning
  // at N = 4096, lognormal seed 0, where nothing is cut).
  std::vector<RequiredPair> several;
  if (plan.mask.kind != MaskKind::kSlidingWindow)
    std::copy_if(
        required.begin(), required.end(), std::back_inserter(several),
        [&](const RequiredPair& p) { return plan.blocks[p.kv_block].segments.size() > 1; });
  const std::vector<RequiredPair>& looked_at =
      plan.mask.kind == MaskKind::kSlidingWindow ? required : several;
  // The spans that cut their block, indexed by block (most blocks have
  // none: a transfer of one moves the whole block).
  std::vector<AttendedSpan> cuts;
  detail::RowIndex<int64_t> cuts_of;  // by block
  cuts_of.StartCounting(plan.blocks.size());
  int64_t tokens = 0;
  int32_t block = -1;
  for (const AttendedSpan& s :
       AttendedSpans(plan.sequences, plan.blocks, owner, plan.mask, looked_at)) {
    if (s.kv_block != block) tokens = plan.blocks[block = s.kv_block].tokens();
    if (s.rows.begin == 0 && s.rows.end == tokens) continue;
    cuts.push_back(s);
    cuts_of.Count(static_cast<size_t>(s.kv_block));
  }
  cuts_of.FinishCounting();
  // No span cuts its block: every transfer moves its block whole as it is.
  if (cuts.empty()) return;
  // A relayed block moves whole on every hop: a forwarder then holds every
  // row the workers it forwards to may need.
  std::vector<uint8_t> relayed(plan.blocks.size(), 0);
  for (const ForwardStage& s : plan.forward)
    for (const Transfer& t : s.send) relayed[t.block] |= t.src != owner[t.block];
  for (const BackwardStage& s : plan.backward) {
    for (const Transfer& t : s.send_kv) relayed[t.block] |= t.src != owner[t.block];
    for (const Transfer& t : s.send_dkv) relayed[t.block] |= t.dst != owner[t.block];
  }
  const auto trim = [&](Transfer& t, int32_t receiver) {
    if (relayed[t.block]) return;
    const std::span<const AttendedSpan> of_block =
        cuts_of.Slice(std::span<const AttendedSpan>(cuts), static_cast<size_t>(t.block));
    const auto it = std::find_if(of_block.begin(), of_block.end(),
                                 [&](const AttendedSpan& s) { return s.worker == receiver; });
    if (it == of_block.end()) return;  // its receiver attends every row
    t.row_begin = it->rows.begin;
    t.row_count = it->rows.size();
  };
  for (ForwardStage& s : plan.forward)
    for (Transfer& t : s.send) trim(t, t.dst);
  for (BackwardStage& s : plan.backward) {
    for (Transfer& t : s.send_kv) trim(t, t.dst);
    for (Transfer& t : s.send_dkv) trim(t, t.src);  // the partial of the rows it received
  }
}

}  // namespace fcp
