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

#include <algorithm>
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

namespace detail {

// The number of pairs with k <= q for queries q and keys k (the causal
// count; a sliding window is the difference of two of them).
inline int64_t PairsWithKeyAtMostQuery(TokenRange q, TokenRange k) {
  // For each q, keys allowed: k in [k0, min(k1, q + 1)) -> max(0, min(k1, q+1) - k0).
  if (q.empty() || k.empty()) return 0;
  // Split queries into: q + 1 <= k0 (zero), k0 <= q < k1 (q + 1 - k0), q >= k1 (k1 - k0).
  int64_t total = 0;
  const int64_t ramp_begin = std::max(q.begin, k.begin);
  const int64_t ramp_end = std::min(q.end, k.end);
  if (ramp_end > ramp_begin) {
    // sum_{q=ramp_begin}^{ramp_end-1} (q + 1 - k0)
    const int64_t first = ramp_begin + 1 - k.begin;
    const int64_t last = ramp_end - k.begin;
    total += (first + last) * (ramp_end - ramp_begin) / 2;
  }
  const int64_t flat_begin = std::max(q.begin, k.end);
  if (q.end > flat_begin) total += (q.end - flat_begin) * k.size();
  return total;
}

}  // namespace detail

// AllowedPairs and AttendedKeys are inline: the planner calls them once per
// candidate block pair (millions at N = 4096), where a call cost more than
// the count.

// Number of (q, k) with q in `queries`, k in `keys` that the mask allows.
inline int64_t AllowedPairs(const Mask& mask, TokenRange queries, TokenRange keys) {
  if (queries.empty() || keys.empty()) return 0;
  switch (mask.kind) {
    case MaskKind::kFull:
      return queries.size() * keys.size();
    case MaskKind::kCausal:
      return detail::PairsWithKeyAtMostQuery(queries, keys);
    case MaskKind::kSlidingWindow: {
      // q - W < k <= q  ==  (k <= q) minus (k <= q - W).
      // Pairs with k <= q - W are pairs with k <= q' for q' = q - W.
      const TokenRange shifted{queries.begin - mask.window, queries.end - mask.window};
      return detail::PairsWithKeyAtMostQuery(queries, keys) -
             detail::PairsWithKeyAtMostQuery(shifted, keys);
    }
  }
  return 0;
}

// The smallest key range of a sequence of `sequence_length` tokens that holds
// every key some query of `queries` attends. Every key segment overlapping it
// (and only those) has AllowedPairs > 0 with `queries`.
inline TokenRange AttendedKeys(const Mask& mask, TokenRange queries, int64_t sequence_length) {
  if (queries.empty()) return {0, 0};
  switch (mask.kind) {
    case MaskKind::kFull:
      return {0, sequence_length};
    case MaskKind::kCausal:
      return {0, queries.end};
    case MaskKind::kSlidingWindow:
      return {std::max<int64_t>(0, queries.begin - mask.window + 1), queries.end};
  }
  return {0, 0};
}

}  // namespace fcp
