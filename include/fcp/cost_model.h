// fcp/cost_model.h — what attention work and transfers cost on a model
// cluster: a hardware profile (peak compute, kernel efficiency curve, NVLink
// inside a node, one NIC per GPU across nodes) and the formulas the simulator
// and the cost-model-driven planners (WLB-like) use.
//
// Kernel efficiency f(len) is the fraction of peak an attention kernel reaches
// on causal self-attention segments of `len` tokens (the paper's Figure 3 axis:
// a varlen kernel whose segments all have `len` tokens). It is a table per
// profile, interpolated linearly in log2(len); below the first point f falls
// in proportion to len (a partly filled query tile does the work of a full
// one), above the last point it is constant.
//
// Kernel length of a merged query segment (the choice the simulator makes,
// docs/simulator.md): a query segment of q tokens that attends P allowed key
// tokens in one kernel is charged as a causal self-attention of length
// 2 * P / q tokens — the causal block with the same mean keys per query row,
// which is what sets the per-CTA loop length of a FlashAttention kernel. A
// 4K diagonal block maps to 4K; a 4K x 4K off-diagonal block to 8K; a 4K query
// block against 16 coalesced 4K key blocks to 128K (saturated).
//
// Invariants (HardwareProfile::validate): positive peak, bandwidths and
// gpus_per_node; non-negative latencies; fractions in (0, 1]; efficiency table
// non-empty, lengths strictly increasing and >= 1, values in (0, 1].
// All functions are pure; KernelEfficiency is O(log table size).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/step_estimate.h"

namespace fcp {

// Backward attention FLOPs per forward FLOP of the same pairs (dQ, dK, dV:
// PLAN_FORMAT.md, "Costs"; the paper's 2.5x).
inline constexpr double kBackwardFlopsFactor = 2.5;

// EfficiencyPoint and the curve through its points: fcp/step_estimate.h.

struct HardwareProfile {
  std::string name = "custom";
  std::string description;
  double peak_flops = 0;          // dense bf16 FLOP/s of one GPU
  int32_t gpus_per_node = 8;      // GPUs sharing one NVLink domain
  double nvlink_bytes_per_s = 0;  // per GPU, each direction
  double nic_bytes_per_s = 0;     // per GPU (one NIC each), each direction
  double nvlink_latency_s = 0;    // per transfer inside a node
  double nic_latency_s = 0;       // per transfer across nodes
  double kernel_launch_s = 0;     // fixed cost of one attention kernel (one per stage with work)
  // Share of the SMs left to attention while communication kernels hold the
  // rest (the paper reserves 6 SMs on GPU-X and 8 on GPU-Y for communication).
  double compute_sm_fraction = 1;
  // Backward kernel efficiency relative to the forward one at the same length.
  double backward_efficiency_ratio = 1;
  std::vector<EfficiencyPoint> efficiency;  // forward f(len), lengths increasing

  // Error(kInvalidArgument) naming the field.
  void validate() const;
  bool operator==(const HardwareProfile&) const = default;
};

// The built-in profiles: "gpu-x" (H100-like) and "gpu-y" (B200-like).
std::vector<std::string> BuiltinProfileNames();
// Error(kInvalidArgument) listing the names if unknown.
HardwareProfile BuiltinProfile(const std::string& name);

// JSON profile: every field of HardwareProfile with units in its name
// (peak_flops, nvlink_bytes_per_s, nic_bytes_per_s, nvlink_latency_us,
// nic_latency_us, kernel_launch_us, gpus_per_node, compute_sm_fraction,
// backward_efficiency_ratio, efficiency: [[tokens, fraction], ...]). With
// "base": "gpu-x" the missing fields come from that built-in profile, so a
// user can paste in only a measured efficiency curve. Error(kParse) naming the
// field, Error(kIo) if unreadable; the result is validated.
HardwareProfile ParseProfileJson(const std::string& text);
HardwareProfile LoadProfileJson(const std::string& path);
std::string WriteProfileJson(const HardwareProfile& profile);
// A built-in name, else a JSON file path.
HardwareProfile ResolveProfile(const std::string& name_or_path);

// f(len): interpolated kernel efficiency, see the header comment.
double KernelEfficiency(const HardwareProfile& profile, double kernel_tokens);
// f at the table's longest length: what one GPU reaches on long sequences.
double SaturatedEfficiency(const HardwareProfile& profile);
// Attention FLOPs the profile computes in the time its NIC moves one byte
// (peak x compute_sm_fraction x saturated f / NIC bytes per second): the
// PlannerConfig::network_flops_per_byte that describes this cluster.
double NetworkFlopsPerByte(const HardwareProfile& profile);
// 2 * token_pairs / q_tokens: the causal-equivalent kernel length (0 if q_tokens == 0).
double EquivalentKernelTokens(int64_t q_tokens, int64_t token_pairs);

// Seconds for `flops` of forward (or backward) attention in kernels of length
// `kernel_tokens`, with the SMs reserved for communication taken away.
double AttentionTime_s(const HardwareProfile& profile, double flops, double kernel_tokens,
                       bool backward);

// Network: workers w and v share a node when w / gpus_per_node == v / gpus_per_node.
bool SameNode(const HardwareProfile& profile, int32_t a, int32_t b);
double LinkBandwidth_bytes_per_s(const HardwareProfile& profile, int32_t src, int32_t dst);
double LinkLatency_s(const HardwareProfile& profile, int32_t src, int32_t dst);
// Uncontended transfer: latency + bytes / bandwidth.
double TransferTime_s(const HardwareProfile& profile, double bytes, int32_t src, int32_t dst);

// The step estimate's cost description of `profile` (fcp/step_estimate.h):
// its rates, latencies, node size and efficiency curve as plain numbers,
// the reshuffle charged or not. O(efficiency points).
StepCosts StepCostsOf(const HardwareProfile& profile, bool reshuffle);

}  // namespace fcp
