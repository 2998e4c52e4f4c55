#include "cuda_plugin.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "fcp/error.h"

namespace fcp::cli {
namespace {

struct Plugin {
  int32_t (*device_count)() = nullptr;
  AttentionKernel* (*make_kernel)(const CudaKernelOptions*) = nullptr;
};

// Loaded once (in-process workers call this from several threads).
const Plugin& LoadPlugin() {
  static std::once_flag once;
  static Plugin plugin;
  static std::string error;
  std::call_once(once, [] {
    std::error_code ignored;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ignored);
    const std::string path = (self.parent_path() / "libfcp_cuda_plugin.so").string();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      error = "run: --device cuda: cannot load the CUDA backend " + path + ": " + dlerror();
      return;
    }
    plugin.device_count = reinterpret_cast<int32_t (*)()>(dlsym(handle, "fcp_cuda_device_count"));
    plugin.make_kernel = reinterpret_cast<AttentionKernel* (*)(const CudaKernelOptions*)>(
        dlsym(handle, "fcp_make_cuda_kernel"));
    if (!plugin.device_count || !plugin.make_kernel)
      error = "run: --device cuda: " + path + " is not the fcp CUDA backend";
  });
  if (!error.empty()) throw Error(ErrorCode::kBackend, error);
  return plugin;
}

}  // namespace

int32_t PluginCudaDeviceCount() { return LoadPlugin().device_count(); }

std::unique_ptr<AttentionKernel> PluginMakeCudaKernel(const CudaKernelOptions& options) {
  return std::unique_ptr<AttentionKernel>(LoadPlugin().make_kernel(&options));
}

}  // namespace fcp::cli
