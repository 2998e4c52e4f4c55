// Zig-zag ring attention (fcp/baselines.h). Required block pairs are found per
// sequence with a sliding window over its chunks (the attended key range of
// consecutive query chunks moves monotonically for every mask kind), keeping a
// bitset of the blocks inside the window: O(chunks * blocks / 64) per
// sequence instead of enumerating chunk pairs.
#include <algorithm>
#include <cstdint>
#include <numeric>

#include "baseline_common.h"
#include "fcp/baselines.h"
#include "fcp/mask.h"

namespace fcp {
namespace {

struct Piece {
  int64_t begin, end;
  int32_t block;
};

class BlockMatrix {
 public:
  explicit BlockMatrix(int32_t blocks)
      : words_((blocks + 63) / 64), bits_(static_cast<size_t>(blocks) * words_, 0) {}
  bool get(int32_t q, int32_t kv) const {
    return (bits_[static_cast<size_t>(q) * words_ + kv / 64] >> (kv % 64)) & 1;
  }
  void OrRow(int32_t q, const std::vector<uint64_t>& mask) {
    uint64_t* row = bits_.data() + static_cast<size_t>(q) * words_;
    for (int32_t w = 0; w < words_; ++w) row[w] |= mask[w];
  }
  int32_t words() const { return words_; }

 private:
  int32_t words_;
  std::vector<uint64_t> bits_;
};

// Marks every (block of a query piece, block of a key piece) with allowed pairs.
void MarkSequence(const Mask& mask, int64_t length, const std::vector<Piece>& pieces,
                  BlockMatrix& matrix, std::vector<int32_t>& count, std::vector<uint64_t>& window) {
  size_t lo = 0, hi = 0;  // pieces [lo, hi) are in the window
  const auto add = [&](int32_t b) {
    if (count[b]++ == 0) window[b / 64] |= uint64_t{1} << (b % 64);
  };
  const auto remove = [&](int32_t b) {
    if (--count[b] == 0) window[b / 64] &= ~(uint64_t{1} << (b % 64));
  };
  for (const Piece& q : pieces) {
    const TokenRange keys = AttendedKeys(mask, {q.begin, q.end}, length);
    while (hi < pieces.size() && pieces[hi].begin < keys.end) add(pieces[hi++].block);
    while (lo < hi && pieces[lo].end <= keys.begin) remove(pieces[lo++].block);
    matrix.OrRow(q.block, window);
  }
  for (size_t k = lo; k < hi; ++k) remove(pieces[k].block);
}

}  // namespace

Plan MakeRingPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  Plan plan = PlanHeader(lengths, config, "ring");
  const int32_t n = config.workers;
  std::vector<int32_t> members(n);
  std::iota(members.begin(), members.end(), 0);
  std::vector<int32_t> member_blocks(n, -1);
  for (size_t s = 0; s < lengths.size(); ++s)
    baselines::AddZigZagSequence(plan, static_cast<int32_t>(s), members, member_blocks);

  const int32_t blocks = static_cast<int32_t>(plan.blocks.size());
  BlockMatrix matrix(blocks);
  std::vector<int32_t> count(blocks, 0);
  std::vector<uint64_t> window(matrix.words(), 0);
  std::vector<Piece> pieces;
  for (size_t s = 0; s < lengths.size(); ++s) {
    pieces.clear();
    for (int32_t c = 0; c < 2 * n; ++c) {
      const int64_t begin = ZigZagChunkBegin(lengths[s], 2 * n, c);
      const int64_t end = ZigZagChunkBegin(lengths[s], 2 * n, c + 1);
      if (end > begin) pieces.push_back({begin, end, member_blocks[ZigZagMember(n, c)]});
    }
    MarkSequence(plan.mask, lengths[s], pieces, matrix, count, window);
  }

  std::vector<int32_t> ring;  // members with tokens, in worker order
  for (int32_t m = 0; m < n; ++m)
    if (member_blocks[m] >= 0) ring.push_back(member_blocks[m]);
  baselines::AddRing(plan, ring, [&](int32_t q, int32_t kv) { return matrix.get(q, kv); });
  baselines::FinishPlan(plan, 1);
  return plan;
}

}  // namespace fcp
