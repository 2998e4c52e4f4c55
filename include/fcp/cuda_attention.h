// fcp/cuda_attention.h — the CUDA attention backend (issue 6), behind the
// AttentionKernel interface of fcp/attention_kernel.h, so the executor runs
// plans on a GPU unchanged.
//
// The kernel takes the interface's float32 host buffers, copies the rows its
// segment pairs touch to the device (converting q, k, v, d_o to bf16 there),
// computes with float32 accumulation and copies o, lse (forward) or dq, dk,
// dv (backward) back. Precision is therefore bf16's: relative errors of a
// few 1e-3 against the float64 reference (bound 2e-2; lse 1e-3), not the
// CPU kernel's 1e-5. One thread per (query row, query head); the forward
// merges each pair's partial into (o, lse) with the LSE rule, and pairs whose
// query rows are disjoint run in one launch (a coalesced stage is one launch
// per "wave"); the backward is a query pass (dq) and a key pass (dk, dv).
// Cost: the pairs' FLOPs (backward: 1.4x the usual 2.5x forward, P is
// recomputed) on CUDA cores, plus host<->device copies of the touched rows.
// Head dim is limited to 256. Not thread-safe: one kernel per thread, each
// with its own stream; several kernels may share a device.
// Available only in builds with FCP_WITH_CUDA (the fcp_cuda library).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fcp/attention_kernel.h"

namespace fcp {

// Usable CUDA devices: 0 when there is none or no driver (never throws).
int32_t CudaDeviceCount();
// The device's name (cudaDeviceProp::name); Error(kBackend) if it is absent.
std::string CudaDeviceName(int32_t device);

struct CudaKernelOptions {
  int32_t device = 0;               // CUDA device ordinal (>= 0)
  int32_t threads_per_block = 128;  // multiple of 32 in [32, 1024]
  // Called while the host waits for the device, so MPI transfers progress
  // during the compute (the executor sets it). May be empty.
  std::function<void()> progress;
  void validate() const;
};

// Error(kBackend, "... no CUDA device ...") when the device does not exist.
std::unique_ptr<AttentionKernel> MakeCudaAttentionKernel(const CudaKernelOptions& options = {});

// Benchmarks (scripts/gpu_check.sh). Device-resident random bf16 inputs, no
// host copies: the kernels' own time, one warm-up then the mean of
// `repeats` runs timed with CUDA events. The batch is one sequence of
// `tokens` tokens computed as one block pair (a plan's diagonal pair).
struct CudaAttentionTiming {
  double forward_s = 0;
  double backward_s = 0;  // 0 unless asked for
};
CudaAttentionTiming TimeCudaAttention(const AttentionDims& dims, const Mask& mask, int64_t tokens,
                                      int32_t repeats, bool backward,
                                      const CudaKernelOptions& options = {});

// The device's measured bf16 matrix rate in FLOP/s: cuBLAS GEMM n x n x n,
// bf16 in and out, float32 accumulation; the "100%" of kernel efficiency.
double MeasureBf16MatmulRate(int32_t device, int64_t n, int32_t repeats);

}  // namespace fcp
