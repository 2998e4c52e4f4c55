// fcp/cuda_attention.h — the CUDA attention backend (issue 6), behind the
// AttentionKernel interface of fcp/attention_kernel.h, so the executor runs
// plans on a GPU unchanged.
//
// The kernel takes the interface's float32 host buffers, copies the rows its
// segment pairs touch to the device (converting q, k, v, d_o to bf16 there),
// computes with float32 accumulation and copies o, lse (forward) or dq, dk,
// dv (backward) back. Precision is therefore bf16's: relative errors around
// 1e-2 against the float64 reference, not the CPU kernel's 1e-5.
// One thread per (query row, query head); the forward merges each pair's
// partial into (o, lse) with the LSE rule, and pairs whose query rows are
// disjoint run in one launch (a coalesced stage is one launch per "wave").
// Head dim is limited to 256. Not thread-safe: one kernel per thread, each
// with its own stream; several kernels may share a device.
// Available only in builds with FCP_WITH_CUDA (the fcp_cuda library).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "fcp/attention_kernel.h"

namespace fcp {

// Usable CUDA devices: 0 when there is none or no driver (never throws).
int32_t CudaDeviceCount();

struct CudaKernelOptions {
  int32_t device = 0;              // CUDA device ordinal (>= 0)
  int32_t threads_per_block = 128;  // multiple of 32 in [32, 1024]
  // Called while the host waits for the device, so MPI transfers progress
  // during the compute (the executor sets it). May be empty.
  std::function<void()> progress;
  void validate() const;
};

// Error(kBackend, "... no CUDA device ...") when the device does not exist.
std::unique_ptr<AttentionKernel> MakeCudaAttentionKernel(const CudaKernelOptions& options = {});

}  // namespace fcp
