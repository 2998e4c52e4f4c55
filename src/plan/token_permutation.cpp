#include "fcp/token_permutation.h"

#include <string>

#include "fcp/error.h"

namespace fcp {

TokenPermutation PlannedTokenOrder(const Plan& plan) {
  TokenPermutation result;
  result.worker_offsets.assign(static_cast<size_t>(plan.workers) + 1, 0);
  for (const Block& b : plan.blocks) result.worker_offsets[b.worker + 1] += b.tokens();
  for (int32_t w = 0; w < plan.workers; ++w)
    result.worker_offsets[w + 1] += result.worker_offsets[w];

  const std::vector<int64_t> sequence_offsets = SequenceOffsets(plan.sequences);
  result.order.resize(static_cast<size_t>(result.worker_offsets.back()));
  // One write cursor per worker: a single pass over the blocks in id order
  // yields every worker's blocks in increasing id.
  std::vector<int64_t> cursor(result.worker_offsets.begin(), result.worker_offsets.end() - 1);
  for (const Block& b : plan.blocks)
    for (const Segment& s : b.segments) {
      const int64_t first = sequence_offsets[s.seq] + s.start;
      int64_t& at = cursor[b.worker];
      for (int64_t i = 0; i < s.length; ++i) result.order[at + i] = first + i;
      at += s.length;
    }
  return result;
}

std::vector<int64_t> InvertPermutation(const std::vector<int64_t>& permutation) {
  const int64_t size = static_cast<int64_t>(permutation.size());
  std::vector<int64_t> inverse(permutation.size(), -1);
  for (int64_t p = 0; p < size; ++p) {
    const int64_t g = permutation[p];
    if (g < 0 || g >= size || inverse[g] != -1)
      throw Error(ErrorCode::kInvalidArgument,
                  "permutation: entry " + std::to_string(p) + " = " + std::to_string(g) +
                      (g < 0 || g >= size ? " is out of range [0, " + std::to_string(size) + ")"
                                          : " occurs twice"));
    inverse[g] = p;
  }
  return inverse;
}

}  // namespace fcp
