// fcp/attention_kernel.h — block attention kernels for packed (varlen)
// sequences: the compute a worker runs for one plan pair (q_block, kv_block).
//
// Layout (the .npy layout of the runtime's inputs): a query buffer holds rows
// of heads_q * head_dim floats (row = token, then head, then dim), a key or
// value buffer rows of heads_kv * head_dim floats; an output buffer is laid
// out like the queries and an LSE buffer holds heads_q floats per row.
// A block pair is described by a list of SegmentPairs: query rows
// [q_row, q_row + q_len) are tokens [q_pos, q_pos + q_len) of one sequence and
// key rows [k_row, k_row + k_len) tokens [k_pos, k_pos + k_len) of the same
// sequence; the mask (fcp/mask.h) decides which (query, key) token pairs
// count. Query head h reads key/value head h / (heads_q / heads_kv) (GQA).
//
// Forward merges into (o, lse): o holds the softmax-normalised output over the
// keys seen so far and lse the natural-log sum of exp(scale * q.k) over them
// (-inf: none yet). Merging a partial (o', lse') uses the log-sum-exp rule
//   lse'' = max + log(exp(lse - max) + exp(lse' - max)),
//   o''   = o * exp(lse - lse'') + o' * exp(lse' - lse''),
// which never exponentiates a positive number, so long rows do not overflow.
// Backward takes the final (merged) lse and delta = rowsum(o * do) per row
// and head, and accumulates (adds) into dq, dk, dv.
//
// Precision: q, k, v (and d_o) are float32 or bfloat16 (fcp/bfloat16.h);
// everything the kernel writes or accumulates (o, lse, dq, dk, dv) and all
// arithmetic is float32, so partials merge and gradients sum across calls
// without bfloat16 rounding. The bfloat16 kernel widens each tile it reads
// (exactly) into float32 scratch and then runs the float32 kernel's very
// operations: on inputs rounded to bfloat16 the two give the same bits. Work: 4 * heads_q *
// head_dim FLOPs per allowed token pair forward, 2.5x that backward; the CPU
// kernel tiles through BLAS sgemm and skips tiles the mask empties.
// The interface holds raw pointers so a CUDA kernel can implement it on device
// memory later; implementations must be safe to call from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "fcp/bfloat16.h"
#include "fcp/mask.h"

namespace fcp {

struct AttentionDims {
  int32_t heads_q = 1;
  int32_t heads_kv = 1;
  int32_t head_dim = 1;
  float scale = 1.0f;  // softmax scale, usually 1/sqrt(head_dim)

  int64_t q_row_floats() const { return int64_t{heads_q} * head_dim; }
  int64_t kv_row_floats() const { return int64_t{heads_kv} * head_dim; }
  // Error(kInvalidArgument) for non-positive sizes or heads_q % heads_kv != 0.
  void validate() const;
};

struct SegmentPair {
  int64_t q_row = 0;  // first row in the query (and output) buffer
  int64_t k_row = 0;  // first row in the key/value buffers
  int64_t q_pos = 0;  // token position of q_row inside its sequence
  int64_t k_pos = 0;  // token position of k_row inside the same sequence
  int64_t q_len = 0;
  int64_t k_len = 0;
  bool operator==(const SegmentPair&) const = default;
};

// T: the inputs' element type, float or BFloat16.
template <class T>
struct ForwardBuffersOf {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  float* o = nullptr;    // in/out, merged
  float* lse = nullptr;  // in/out, merged
};
using ForwardBuffers = ForwardBuffersOf<float>;

template <class T>
struct BackwardBuffersOf {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* d_o = nullptr;        // gradient of the output, laid out like q
  const float* lse = nullptr;    // final lse of each query row and head
  const float* delta = nullptr;  // rowsum(o * d_o) per row and head
  float* dq = nullptr;           // accumulated
  float* dk = nullptr;           // accumulated
  float* dv = nullptr;           // accumulated
};
using BackwardBuffers = BackwardBuffersOf<float>;

class AttentionKernel {
 public:
  virtual ~AttentionKernel() = default;
  virtual void Forward(const AttentionDims& dims, const Mask& mask,
                       std::span<const SegmentPair> pairs, const ForwardBuffers& io) = 0;
  virtual void Backward(const AttentionDims& dims, const Mask& mask,
                        std::span<const SegmentPair> pairs, const BackwardBuffers& io) = 0;
  // bfloat16 inputs. The CPU kernel implements them; the default throws
  // Error(kInvalidArgument) naming the operation (the CUDA kernel takes float32).
  virtual void Forward(const AttentionDims& dims, const Mask& mask,
                       std::span<const SegmentPair> pairs, const ForwardBuffersOf<BFloat16>& io);
  virtual void Backward(const AttentionDims& dims, const Mask& mask,
                        std::span<const SegmentPair> pairs, const BackwardBuffersOf<BFloat16>& io);
};

struct CpuKernelOptions {
  int32_t q_tile_rows = 64;    // rows of a query tile (>= 1)
  int32_t kv_tile_rows = 128;  // rows of a key/value tile (>= 1)
  // Called between tiles so a caller can drive communication progress while
  // the kernel runs (MPI progresses only inside MPI calls). May be empty.
  std::function<void()> progress;
  void validate() const;
};

std::unique_ptr<AttentionKernel> MakeCpuAttentionKernel(const CpuKernelOptions& options = {});

// Sets o = 0 and lse = -inf for `rows` rows (the identity of the merge).
void InitForwardOutput(const AttentionDims& dims, int64_t rows, float* o, float* lse);

// Merges the partial (o2, lse2) of `rows` rows into (o, lse).
void MergeForwardPartial(const AttentionDims& dims, int64_t rows, const float* o2,
                         const float* lse2, float* o, float* lse);

// delta[row][head] = sum over dim of o * d_o, for `rows` rows.
void ComputeDelta(const AttentionDims& dims, int64_t rows, const float* o, const float* d_o,
                  float* delta);

// Limits the BLAS library to `threads` threads (the runtime runs one rank per
// core and wants 1). A no-op for BLAS builds without a thread control.
void SetBlasThreads(int32_t threads);

}  // namespace fcp
