// `fcp run --device cuda` loads the CUDA backend (libfcp_cuda_plugin.so,
// next to the fcp binary, built from src/runtime/cuda/plugin.cpp) on first
// use, so every other command starts without mapping the CUDA libraries.
// Errors are Error(kBackend) naming the module and dlerror().
#pragma once

#include <cstdint>
#include <memory>

#include "fcp/attention_kernel.h"
#include "fcp/cuda_attention.h"

namespace fcp::cli {

int32_t PluginCudaDeviceCount();  // loads the module; 0 if it has no device
std::unique_ptr<AttentionKernel> PluginMakeCudaKernel(const CudaKernelOptions& options);

}  // namespace fcp::cli
