// fcp_gpu_bench: the CUDA attention kernel's measured efficiency curve
// f(len) = achieved TFLOP/s / the chip's measured bf16 matrix rate (cuBLAS),
// for one causal sequence of len = 256 .. 16K tokens per block (the axis of
// fcp/cost_model.h's f(len)), written as a simulator profile: the gpu-x
// profile's network with this chip's measured peak, forward curve and
// backward/forward ratio (fcp simulate --profile FILE). Used by
// scripts/gpu_check.sh. A time budget bounds the run: lengths whose
// estimated time (from the previous length, O(len^2)) would not fit are
// skipped and listed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "fcp/cost_model.h"
#include "fcp/cuda_attention.h"
#include "fcp/error.h"
#include "fcp/mask.h"

namespace {

struct Options {
  std::vector<int64_t> lens = {256, 512, 1024, 2048, 4096, 8192, 16384};
  int32_t heads_q = 64, heads_kv = 8, head_dim = 128;  // Llama-3-70B
  std::string mask = "causal";
  int64_t window = 0;
  int64_t gemm_n = 8192;
  double budget_s = 180;
  std::string name = "h200-measured";
  std::string out;
  int32_t device = 0;
};

int Main(const Options& opt) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  if (fcp::CudaDeviceCount() == 0)
    throw fcp::Error(fcp::ErrorCode::kBackend, "gpu bench: no CUDA device");
  const fcp::Mask mask{fcp::ParseMaskKind(opt.mask), opt.window};
  mask.validate();
  const fcp::AttentionDims dims{opt.heads_q, opt.heads_kv, opt.head_dim,
                                1.0f / std::sqrt(static_cast<float>(opt.head_dim))};
  dims.validate();
  const std::string device = fcp::CudaDeviceName(opt.device);
  const double peak = fcp::MeasureBf16MatmulRate(opt.device, opt.gemm_n, 10);
  fmt::print("device {}: measured bf16 matrix rate {:.1f} TFLOP/s (cuBLAS {}^3)\n", device,
             peak * 1e-12, opt.gemm_n);
  fmt::print("{:>7} {:>12} {:>12} {:>8} {:>12} {:>12} {:>8}\n", "tokens", "fwd ms", "fwd TFLOP/s",
             "fwd eff", "bwd ms", "bwd TFLOP/s", "bwd eff");
  std::vector<fcp::EfficiencyPoint> forward_curve;
  std::vector<double> backward_ratios;
  std::vector<int64_t> skipped;
  double last_s = 0;
  int64_t last_len = 0;
  for (int64_t len : opt.lens) {
    // Estimated forward+backward time of one call at this length.
    const double ratio = last_len > 0 ? static_cast<double>(len) / last_len : 1.0;
    const double estimate_s = last_s * ratio * ratio;
    if (elapsed() + 3 * estimate_s > opt.budget_s) {
      skipped.push_back(len);
      continue;
    }
    const int32_t repeats =
        std::clamp(static_cast<int32_t>(0.3 / std::max(estimate_s, 1e-6)), 1, 10);
    fcp::CudaKernelOptions ko;
    ko.device = opt.device;
    const fcp::CudaAttentionTiming t =
        fcp::TimeCudaAttention(dims, mask, len, repeats, /*backward=*/true, ko);
    const double pairs = static_cast<double>(fcp::AllowedPairs(mask, {0, len}, {0, len}));
    const double fwd_flops = 4.0 * dims.heads_q * dims.head_dim * pairs,
                 bwd_flops = fcp::kBackwardFlopsFactor * fwd_flops;
    const double fwd_rate = fwd_flops / t.forward_s, bwd_rate = bwd_flops / t.backward_s;
    fmt::print("{:>7} {:>12.3f} {:>12.2f} {:>7.1f}% {:>12.3f} {:>12.2f} {:>7.1f}%\n", len,
               t.forward_s * 1e3, fwd_rate * 1e-12, 100 * fwd_rate / peak, t.backward_s * 1e3,
               bwd_rate * 1e-12, 100 * bwd_rate / peak);
    std::fflush(stdout);
    // The profile's fractions must lie in (0, 1].
    forward_curve.push_back({static_cast<double>(len), std::clamp(fwd_rate / peak, 1e-9, 1.0)});
    backward_ratios.push_back(std::clamp(bwd_rate / fwd_rate, 1e-9, 1.0));
    last_s = t.forward_s + t.backward_s;
    last_len = len;
  }
  if (!skipped.empty())
    fmt::print("skipped (time budget {:.0f} s): {}\n", opt.budget_s, fmt::join(skipped, ", "));
  if (!opt.out.empty()) {
    if (forward_curve.empty())
      throw fcp::Error(fcp::ErrorCode::kInternal, "gpu bench: no length was measured");
    fcp::HardwareProfile profile = fcp::BuiltinProfile("gpu-x");  // network and latencies
    profile.name = opt.name;
    profile.description = fmt::format(
        "{}: fcp_cuda kernel measured by fcp_gpu_bench ({}/{} heads, dim {}, {} mask); peak = cuBLAS bf16 "
        "GEMM {}^3; network from gpu-x",
        device, dims.heads_q, dims.heads_kv, dims.head_dim, opt.mask, opt.gemm_n);
    profile.peak_flops = peak;
    profile.efficiency = forward_curve;
    std::sort(backward_ratios.begin(), backward_ratios.end());
    profile.backward_efficiency_ratio = backward_ratios[backward_ratios.size() / 2];  // median
    profile.validate();
    std::ofstream f(opt.out);
    f << fcp::WriteProfileJson(profile) << "\n";
    f.close();
    if (!f) throw fcp::Error(fcp::ErrorCode::kIo, "gpu bench: cannot write " + opt.out);
    fcp::LoadProfileJson(opt.out);  // the simulator can read it back
    fmt::print("simulator profile {} written to {}\n", opt.name, opt.out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Measure the CUDA attention kernel's efficiency curve"};
  app.add_option("--lens", opt.lens, "Block lengths in tokens")->capture_default_str();
  app.add_option("--heads-q", opt.heads_q)->capture_default_str();
  app.add_option("--heads-kv", opt.heads_kv)->capture_default_str();
  app.add_option("--head-dim", opt.head_dim)->capture_default_str();
  app.add_option("--mask", opt.mask, "causal | full | sliding_window")->capture_default_str();
  app.add_option("--window", opt.window, "Window of sliding_window")->capture_default_str();
  app.add_option("--gemm-n", opt.gemm_n, "Size of the cuBLAS GEMM measuring the matrix rate")
      ->capture_default_str();
  app.add_option("--budget-s", opt.budget_s, "Skip lengths that would not fit in this many seconds")
      ->capture_default_str();
  app.add_option("--name", opt.name, "Profile name")->capture_default_str();
  app.add_option("--out", opt.out, "Write the profile JSON here");
  app.add_option("--device", opt.device, "CUDA device")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return Main(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fcp_gpu_bench: %s\n", e.what());
    return 1;
  }
}
