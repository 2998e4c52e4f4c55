#include "fcp/mask.h"

#include <algorithm>

#include "enum_names.h"
#include "fcp/error.h"

namespace fcp {
namespace {

// Sum over q in [q0, q1) of clamp(q - offset, 0, width): the number of keys
// k in [key_begin, key_end) with k <= q - shift is such a clamped linear term.
// Here: count of pairs with k <= q (upper diagonal bound) for keys [k0, k1).
int64_t PairsWithKeyAtMostQuery(TokenRange q, TokenRange k) {
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

}  // namespace

void Mask::validate() const {
  if (kind == MaskKind::kSlidingWindow && window < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "mask: sliding_window needs window >= 1, got " + std::to_string(window));
  if (kind != MaskKind::kSlidingWindow && window != 0)
    throw Error(ErrorCode::kInvalidArgument,
                std::string("mask: window is only meaningful for sliding_window, got window ") +
                    std::to_string(window) + " with mask " + MaskKindName(kind));
}

constexpr detail::EnumName<MaskKind> kMaskKindNames[] = {
    {MaskKind::kCausal, "causal"},
    {MaskKind::kFull, "full"},
    {MaskKind::kSlidingWindow, "sliding_window"},
};

const char* MaskKindName(MaskKind kind) { return detail::NameOf(kMaskKindNames, kind); }

MaskKind ParseMaskKind(const std::string& name) {
  return detail::ValueNamed(kMaskKindNames, name, "mask: unknown kind");
}

int64_t AllowedPairs(const Mask& mask, TokenRange queries, TokenRange keys) {
  if (queries.empty() || keys.empty()) return 0;
  switch (mask.kind) {
    case MaskKind::kFull:
      return queries.size() * keys.size();
    case MaskKind::kCausal:
      return PairsWithKeyAtMostQuery(queries, keys);
    case MaskKind::kSlidingWindow: {
      // q - W < k <= q  ==  (k <= q) minus (k <= q - W).
      // Pairs with k <= q - W are pairs with k <= q' for q' = q - W.
      const TokenRange shifted{queries.begin - mask.window, queries.end - mask.window};
      return PairsWithKeyAtMostQuery(queries, keys) - PairsWithKeyAtMostQuery(shifted, keys);
    }
  }
  return 0;
}

TokenRange AttendedKeys(const Mask& mask, TokenRange queries, int64_t sequence_length) {
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
