// fcp/mask.h — attention masks and exact counts of allowed token pairs.
//
// A mask says which key tokens of a sequence a query token of the same
// sequence attends (tokens of different sequences never attend each other):
//   causal          k <= q
//   full            always
//   sliding_window  q - W < k <= q      (W >= 1; W = 1 is the diagonal only)
// AllowedPairs counts the allowed (q, k) pairs between a query range and a key
// range of one sequence in closed form, O(1), never enumerating tokens; counts
// fit int64 for sequences up to 2^31 tokens.
#pragma once

#include <cstdint>
#include <string>

namespace fcp {

enum class MaskKind { kCausal, kFull, kSlidingWindow };

struct Mask {
  MaskKind kind = MaskKind::kCausal;
  int64_t window = 0;  // tokens; used (and >= 1) only for kSlidingWindow

  // Throws Error(kInvalidArgument) naming the problem, e.g. a window < 1.
  void validate() const;
  bool operator==(const Mask&) const = default;
};

// "causal", "full", "sliding_window".
const char* MaskKindName(MaskKind kind);
// Inverse of MaskKindName; throws Error(kInvalidArgument) for other strings.
MaskKind ParseMaskKind(const std::string& name);

// Half-open token range [begin, end) inside one sequence.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

// Number of (q, k) with q in `queries`, k in `keys` that the mask allows.
int64_t AllowedPairs(const Mask& mask, TokenRange queries, TokenRange keys);

// The smallest key range of a sequence of `sequence_length` tokens that holds
// every key some query of `queries` attends. Every key segment overlapping it
// (and only those) has AllowedPairs > 0 with `queries`.
TokenRange AttendedKeys(const Mask& mask, TokenRange queries, int64_t sequence_length);

}  // namespace fcp
