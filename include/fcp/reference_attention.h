// fcp/reference_attention.h — naive float64 attention over a packed batch,
// the ground truth for the kernel tests, `fcp check` and the multi-rank runs.
//
// Inputs are in global token order (sequences back to back, as the .npy
// inputs of `fcp run`): q and d_o [T, heads_q, head_dim], k and v
// [T, heads_kv, head_dim]. Every (query, key) pair the mask allows inside a
// sequence is enumerated directly, in double precision, with the
// max-subtracted softmax; no tiling, no merging, so it shares no code path
// with the kernels it checks. Cost: O(sum over sequences of L^2) * heads_q *
// head_dim time, O(T * heads * head_dim) memory. Meant for test-sized batches.
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/attention_kernel.h"
#include "fcp/mask.h"

namespace fcp {

struct ReferenceAttentionResult {
  std::vector<double> o;    // [T, heads_q, head_dim]
  std::vector<double> lse;  // [T, heads_q], natural log
  // Filled only when d_o was given:
  std::vector<double> dq;  // [T, heads_q, head_dim]
  std::vector<double> dk;  // [T, heads_kv, head_dim]
  std::vector<double> dv;  // [T, heads_kv, head_dim]
};

// `d_o` may be null: forward only. Sizes are implied by sum(sequences) and
// dims. Error(kInvalidArgument) for bad dims or negative lengths.
ReferenceAttentionResult ReferenceAttention(const std::vector<int64_t>& sequences, const Mask& mask,
                                            const AttentionDims& dims, const float* q,
                                            const float* k, const float* v, const float* d_o);

// ||got - want||_F / ||want||_F over n values; when want is all zeros (no
// scale to be relative to), the RMS of got.
double RelativeError(const float* got, const double* want, int64_t n);

}  // namespace fcp
