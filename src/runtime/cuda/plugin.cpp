// The CUDA backend as a module `fcp run --device cuda` loads with dlopen
// (tools/fcp/cuda_plugin.h), so that no other command maps the CUDA
// libraries (cuBLAS alone is over 200 MB of address space and RSS at start).
// Two C entry points; C++ types cross the boundary (same compiler, same
// fcp headers; the module is built with the binary that loads it).
#include "fcp/cuda_attention.h"

extern "C" {

__attribute__((visibility("default"))) int32_t fcp_cuda_device_count() {
  return fcp::CudaDeviceCount();
}

// Ownership of the kernel passes to the caller (delete through AttentionKernel's
// virtual destructor). Throws what MakeCudaAttentionKernel throws.
__attribute__((visibility("default"))) fcp::AttentionKernel* fcp_make_cuda_kernel(
    const fcp::CudaKernelOptions* options) {
  return fcp::MakeCudaAttentionKernel(*options).release();
}

}  // extern "C"
