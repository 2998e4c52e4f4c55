#include "fcp/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fcp/error.h"
#include "fcp/file_io.h"
#include "io/json_text.h"

namespace fcp {
namespace {

using nlohmann::json;

// GPU-X: an H100 SXM5 node, 8 GPUs on NVLink 4, one ConnectX-7 per GPU.
HardwareProfile GpuX() {
  HardwareProfile p;
  p.name = "gpu-x";
  p.description = "H100-like: 989 TFLOP/s bf16, NVLink 4 inside 8-GPU nodes, 400 Gb/s NIC per GPU";
  // NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOP/s dense BF16.
  p.peak_flops = 989e12;
  // DGX/HGX H100: 8 GPUs per NVLink domain.
  p.gpus_per_node = 8;
  // NVLink 4: 18 links x 25 GB/s = 450 GB/s each way (900 GB/s bidirectional, datasheet).
  p.nvlink_bytes_per_s = 450e9;
  // ConnectX-7 400 Gb/s = 50 GB/s each way; DESIGN.md section 4, paper section 3.5.
  p.nic_bytes_per_s = 50e9;
  // NCCL point-to-point latency order of magnitude (NCCL src/graph/tuning.cc base
  // latencies of a few us for the Simple protocol plus hardware latency); approximate.
  p.nvlink_latency_s = 4e-6;
  p.nic_latency_s = 8e-6;
  // CUDA launch plus varlen metadata setup of one FlashAttention call; approximate.
  p.kernel_launch_s = 8e-6;
  // Paper section 6.1: 6 SMs of the H100's 132 run communication kernels.
  p.compute_sm_fraction = 126.0 / 132.0;
  // FA3 paper (Shah et al. 2024, Figs. 5-6): hdim 128 bf16 backward reaches about
  // 3/4 of the forward throughput at the same sequence length.
  p.backward_efficiency_ratio = 0.75;
  // Forward causal varlen FA3 on H100 (paper section 3.1 / Figure 3: 25% at 512-token
  // blocks, low below 2K, saturating from 4K; FA3 paper: ~650 TFLOP/s = 0.66 of peak
  // for causal hdim 128 at 16K+). Points between are read off that shape; approximate
  // until calibrated on a real GPU (load a measured curve with LoadProfileJson).
  p.efficiency = {{128, 0.07},  {256, 0.14},  {512, 0.25},    {1024, 0.38},   {2048, 0.50},
                  {4096, 0.58}, {8192, 0.62}, {16384, 0.645}, {32768, 0.655}, {65536, 0.66}};
  return p;
}

// GPU-Y: a B200 node, 8 GPUs on NVLink 5, one 800 Gb/s NIC per GPU.
HardwareProfile GpuY() {
  HardwareProfile p;
  p.name = "gpu-y";
  p.description = "B200-like: 2.25 PFLOP/s bf16, NVLink 5 inside 8-GPU nodes, 800 Gb/s NIC per GPU";
  // NVIDIA HGX B200 datasheet: 2.25 PFLOP/s dense BF16 per GPU (4.5 sparse).
  p.peak_flops = 2.25e15;
  p.gpus_per_node = 8;
  // NVLink 5: 1.8 TB/s bidirectional per GPU = 900 GB/s each way.
  p.nvlink_bytes_per_s = 900e9;
  // ConnectX-8 800 Gb/s = 100 GB/s each way (DESIGN.md section 4).
  p.nic_bytes_per_s = 100e9;
  p.nvlink_latency_s = 4e-6;  // as gpu-x; approximate
  p.nic_latency_s = 8e-6;
  p.kernel_launch_s = 8e-6;
  // Paper section 6.1: 8 SMs of the B200's 148 run communication kernels.
  p.compute_sm_fraction = 140.0 / 148.0;
  // FA4 backward is relatively slower than FA3's on Hopper; approximate.
  p.backward_efficiency_ratio = 0.7;
  // Forward causal FA4 on B200: public FA4 numbers reach ~1.6 PFLOP/s (~0.70 of peak)
  // on long sequences; DESIGN.md: B200 needs larger blocks to saturate, so the curve
  // is gpu-x's shifted about one octave right. Approximate until calibrated.
  p.efficiency = {{128, 0.04},  {256, 0.08},  {512, 0.15},   {1024, 0.27},  {2048, 0.40},
                  {4096, 0.52}, {8192, 0.61}, {16384, 0.66}, {32768, 0.69}, {65536, 0.70}};
  return p;
}

[[noreturn]] void ParseFail(const std::string& what) {
  throw Error(ErrorCode::kParse, "profile: " + what);
}

double NumberField(const json& j, const char* name) {
  const json& v = j.at(name);
  if (!v.is_number()) ParseFail(std::string("field '") + name + "' must be a number");
  return v.get<double>();
}

}  // namespace

void HardwareProfile::validate() const {
  const auto fail = [this](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "profile '" + name + "': " + what);
  };
  // Rates of at least one per second: below that, times run past what a
  // double holds and the simulation stalls instead of naming the field.
  const auto rate = [&](const char* field, double v) {
    if (!(v >= 1) || !std::isfinite(v))
      fail(fmt::format("{} must be >= 1 per second, got {:g}", field, v));
  };
  const auto non_negative = [&](const char* field, double v) {
    if (!(v >= 0) || !std::isfinite(v)) fail(fmt::format("{} must be >= 0, got {:g}", field, v));
  };
  const auto fraction = [&](const char* field, double v) {
    if (!(v > 0 && v <= 1)) fail(fmt::format("{} must be in (0, 1], got {:g}", field, v));
  };
  rate("peak_flops", peak_flops);
  if (gpus_per_node < 1) fail("gpus_per_node must be >= 1, got " + std::to_string(gpus_per_node));
  rate("nvlink_bytes_per_s", nvlink_bytes_per_s);
  rate("nic_bytes_per_s", nic_bytes_per_s);
  non_negative("nvlink_latency_s", nvlink_latency_s);
  non_negative("nic_latency_s", nic_latency_s);
  non_negative("kernel_launch_s", kernel_launch_s);
  fraction("compute_sm_fraction", compute_sm_fraction);
  fraction("backward_efficiency_ratio", backward_efficiency_ratio);
  ValidateEfficiencyTable(efficiency, "profile '" + name + "'");
}

std::vector<std::string> BuiltinProfileNames() { return {"gpu-x", "gpu-y"}; }

HardwareProfile BuiltinProfile(const std::string& name) {
  if (name == "gpu-x") return GpuX();
  if (name == "gpu-y") return GpuY();
  throw Error(ErrorCode::kInvalidArgument, "profile: unknown built-in profile '" +
                                               QuoteForError(name) + "' (available: gpu-x, gpu-y)");
}

HardwareProfile ParseProfileJson(const std::string& text) {
  json j;
  try {
    j = detail::ParseJson(text);
  } catch (const detail::JsonTextError& e) {
    ParseFail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) ParseFail("the top level must be an object");
  HardwareProfile p;
  if (j.contains("base")) {
    if (!j["base"].is_string()) ParseFail("field 'base' must be a string");
    try {
      p = BuiltinProfile(j["base"].get<std::string>());
    } catch (const Error& e) {
      ParseFail(e.what());
    }
  }
  if (j.contains("name")) {
    if (!j["name"].is_string()) ParseFail("field 'name' must be a string");
    p.name = j["name"].get<std::string>();
  }
  if (j.contains("description")) {
    if (!j["description"].is_string()) ParseFail("field 'description' must be a string");
    p.description = j["description"].get<std::string>();
  }
  const auto number = [&](const char* field, double& out, double scale) {
    if (j.contains(field)) out = NumberField(j, field) * scale;
  };
  number("peak_flops", p.peak_flops, 1);
  number("nvlink_bytes_per_s", p.nvlink_bytes_per_s, 1);
  number("nic_bytes_per_s", p.nic_bytes_per_s, 1);
  number("nvlink_latency_us", p.nvlink_latency_s, 1e-6);
  number("nic_latency_us", p.nic_latency_s, 1e-6);
  number("kernel_launch_us", p.kernel_launch_s, 1e-6);
  number("compute_sm_fraction", p.compute_sm_fraction, 1);
  number("backward_efficiency_ratio", p.backward_efficiency_ratio, 1);
  if (j.contains("gpus_per_node")) {
    const json& g = j["gpus_per_node"];
    // get<int32_t> would wrap 2^32 + 1 around to 1.
    if (!g.is_number_integer() ||
        (g.is_number_unsigned() ? g.get<uint64_t>() > uint64_t{INT32_MAX}
                                : g.get<int64_t>() < INT32_MIN || g.get<int64_t>() > INT32_MAX))
      ParseFail("field 'gpus_per_node' must be an integer in [1, 2^31), got " +
                detail::QuoteJson(g));
    p.gpus_per_node = g.get<int32_t>();
  }
  if (j.contains("efficiency")) {
    const json& table = j["efficiency"];
    if (!table.is_array()) ParseFail("field 'efficiency' must be an array of [tokens, fraction]");
    p.efficiency.clear();
    for (size_t i = 0; i < table.size(); ++i) {
      const json& e = table[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_number() || !e[1].is_number())
        ParseFail("efficiency[" + std::to_string(i) + "] must be [tokens, fraction]");
      p.efficiency.push_back({e[0].get<double>(), e[1].get<double>()});
    }
  }
  try {
    p.validate();
  } catch (const Error& e) {
    ParseFail(e.what());
  }
  return p;
}

HardwareProfile LoadProfileJson(const std::string& path) {
  // Profiles are a few hundred bytes; 16 MiB bounds a wrong file's read.
  return ParseProfileJson(ReadInputFile(path, "profile", uint64_t{1} << 24));
}

std::string WriteProfileJson(const HardwareProfile& p) {
  json j;
  j["name"] = p.name;
  j["description"] = p.description;
  j["peak_flops"] = p.peak_flops;
  j["gpus_per_node"] = p.gpus_per_node;
  j["nvlink_bytes_per_s"] = p.nvlink_bytes_per_s;
  j["nic_bytes_per_s"] = p.nic_bytes_per_s;
  j["nvlink_latency_us"] = p.nvlink_latency_s * 1e6;
  j["nic_latency_us"] = p.nic_latency_s * 1e6;
  j["kernel_launch_us"] = p.kernel_launch_s * 1e6;
  j["compute_sm_fraction"] = p.compute_sm_fraction;
  j["backward_efficiency_ratio"] = p.backward_efficiency_ratio;
  json table = json::array();
  for (const EfficiencyPoint& e : p.efficiency) table.push_back({e.tokens, e.efficiency});
  j["efficiency"] = table;
  return j.dump(2) + "\n";
}

HardwareProfile ResolveProfile(const std::string& name_or_path) {
  for (const std::string& name : BuiltinProfileNames())
    if (name == name_or_path) return BuiltinProfile(name);
  return LoadProfileJson(name_or_path);
}

double KernelEfficiency(const HardwareProfile& profile, double kernel_tokens) {
  return InterpolateEfficiency(profile.efficiency, kernel_tokens);
}

double SaturatedEfficiency(const HardwareProfile& profile) {
  return profile.efficiency.back().efficiency;
}

double NetworkFlopsPerByte(const HardwareProfile& profile) {
  return profile.peak_flops * profile.compute_sm_fraction * SaturatedEfficiency(profile) /
         profile.nic_bytes_per_s;
}

double EquivalentKernelTokens(int64_t q_tokens, int64_t token_pairs) {
  if (q_tokens <= 0) return 0;
  return 2.0 * static_cast<double>(token_pairs) / static_cast<double>(q_tokens);
}

double AttentionTime_s(const HardwareProfile& profile, double flops, double kernel_tokens,
                       bool backward) {
  double rate =
      profile.peak_flops * profile.compute_sm_fraction * KernelEfficiency(profile, kernel_tokens);
  if (backward) rate *= profile.backward_efficiency_ratio;
  return flops / rate;
}

bool SameNode(const HardwareProfile& profile, int32_t a, int32_t b) {
  return a / profile.gpus_per_node == b / profile.gpus_per_node;
}

double LinkBandwidth_bytes_per_s(const HardwareProfile& profile, int32_t src, int32_t dst) {
  return SameNode(profile, src, dst) ? profile.nvlink_bytes_per_s : profile.nic_bytes_per_s;
}

double LinkLatency_s(const HardwareProfile& profile, int32_t src, int32_t dst) {
  return SameNode(profile, src, dst) ? profile.nvlink_latency_s : profile.nic_latency_s;
}

double TransferTime_s(const HardwareProfile& profile, double bytes, int32_t src, int32_t dst) {
  return LinkLatency_s(profile, src, dst) + bytes / LinkBandwidth_bytes_per_s(profile, src, dst);
}

StepCosts StepCostsOf(const HardwareProfile& profile, bool reshuffle) {
  StepCosts c;
  c.compute_flops_per_s = profile.peak_flops * profile.compute_sm_fraction;
  c.efficiency = profile.efficiency;
  c.backward_flops_factor = kBackwardFlopsFactor;
  c.backward_efficiency_ratio = profile.backward_efficiency_ratio;
  c.kernel_launch_us = profile.kernel_launch_s * 1e6;
  c.node_workers = profile.gpus_per_node;
  c.nvlink_bytes_per_us = profile.nvlink_bytes_per_s * 1e-6;
  c.nic_bytes_per_us = profile.nic_bytes_per_s * 1e-6;
  c.nvlink_latency_us = profile.nvlink_latency_s * 1e6;
  c.nic_latency_us = profile.nic_latency_s * 1e6;
  c.reshuffle = reshuffle;
  return c;
}

}  // namespace fcp
