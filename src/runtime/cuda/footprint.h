// footprint.h — host side of the CUDA kernel's staging: the rows of the
// query and key buffers a list of segment pairs touches, and the pairs
// rebased onto those rows, so only they travel to the device. Pairs with an
// empty side are dropped (they have no allowed token pair). Header-only so
// the host tests check it without a GPU. O(pairs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "attention_math.h"
#include "fcp/attention_kernel.h"
#include "fcp/error.h"

namespace fcp::gpu {

// The rows of the query and key buffers a list of pairs touches, and the
// pairs rebased onto them.
struct Footprint {
  int64_t q_begin = 0, q_rows = 0, k_begin = 0, k_rows = 0;
  std::vector<PairDesc> pairs;
};

inline Footprint FootprintOf(std::span<const SegmentPair> pairs) {
  Footprint f;
  int64_t q_lo = std::numeric_limits<int64_t>::max(), q_hi = 0,
          k_lo = std::numeric_limits<int64_t>::max(), k_hi = 0;
  for (const SegmentPair& s : pairs) {
    if (s.q_len < 0 || s.k_len < 0 || s.q_row < 0 || s.k_row < 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "cuda attention: a segment pair has a negative row or length");
    if (s.q_len == 0 || s.k_len == 0) continue;
    q_lo = std::min(q_lo, s.q_row);
    q_hi = std::max(q_hi, s.q_row + s.q_len);
    k_lo = std::min(k_lo, s.k_row);
    k_hi = std::max(k_hi, s.k_row + s.k_len);
  }
  if (q_lo == std::numeric_limits<int64_t>::max()) return f;
  f.q_begin = q_lo;
  f.q_rows = q_hi - q_lo;
  f.k_begin = k_lo;
  f.k_rows = k_hi - k_lo;
  for (const SegmentPair& s : pairs)
    if (s.q_len > 0 && s.k_len > 0)
      f.pairs.push_back({s.q_row - q_lo, s.k_row - k_lo, s.q_pos, s.k_pos, s.q_len, s.k_len});
  return f;
}

}  // namespace fcp::gpu
