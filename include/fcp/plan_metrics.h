// fcp/plan_metrics.h — what a plan costs, counted straight from the plan file:
// per-worker tokens, compute and traffic, stage counts against their lower
// bounds, imbalances and reshuffle volume. Independent of any cost model or
// simulator (those weigh the same counts with time). The one hardware fact
// it uses, the node size that splits traffic into NVLink and NIC bytes, is a
// parameter. O(size of the plan) plus the reshuffle floor (reshuffle_floor.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/plan.h"
#include "fcp/reshuffle_floor.h"

namespace fcp {

struct WorkerMetrics {
  int64_t tokens = 0;          // tokens owned
  double forward_flops = 0;    // attention FLOPs of the pairs this worker computes
  int64_t kv_blocks_sent = 0;  // forward K/V transfers sent
  int64_t kv_blocks_received = 0;
  int64_t bytes_sent = 0;  // forward K/V bytes
  int64_t bytes_received = 0;
  // The same bytes split by link: to or from workers of its own node
  // (NVLink), and across nodes (NIC).
  int64_t nvlink_bytes_sent = 0;
  int64_t nvlink_bytes_received = 0;
  int64_t nic_bytes_sent = 0;
  int64_t nic_bytes_received = 0;
  // Reshuffle: tokens it owns from other dataloader workers (in), tokens of
  // its dataloader share owned elsewhere (out), and the forward's bytes:
  // Q, K, V of the first and O of the second come in; O of the first and
  // Q, K, V of the second go out. The backward mirrors them (dO in,
  // dQ, dK, dV out): its in-bytes are the forward's out-bytes and back.
  int64_t reshuffle_tokens_in = 0;
  int64_t reshuffle_tokens_out = 0;
  int64_t reshuffle_bytes_in = 0;
  int64_t reshuffle_bytes_out = 0;
  int64_t traffic_bytes() const { return bytes_sent + bytes_received; }
};

struct PlanMetrics {
  std::vector<WorkerMetrics> workers;
  int64_t total_tokens = 0;
  int64_t max_tokens = 0;
  double total_forward_flops = 0;
  double max_pair_flops = 0;  // the largest single block pair (a compute lower-bound term)
  int64_t required_pairs = 0;
  int64_t transfer_edges = 0;  // forward K/V transfers
  int32_t max_degree = 0;      // Delta: max over workers of sends and of receives
  int32_t forward_stages = 0;
  int32_t forward_transfer_stages = 0;     // stages with at least one send
  int32_t transfer_stage_lower_bound = 0;  // ceil(Delta / coalesce)
  int32_t backward_stages = 0;
  // (max - mean) / max of each per-worker quantity, as in the paper.
  double compute_imbalance = 0;
  double traffic_imbalance = 0;  // bytes sent + received
  double send_imbalance = 0;
  double receive_imbalance = 0;
  double nic_send_imbalance = 0;  // of nic_bytes_sent: the ports that set the time
  double nic_receive_imbalance = 0;
  int64_t max_bytes_sent = 0;  // forward K/V, busiest worker of each direction
  int64_t max_bytes_received = 0;
  int64_t max_nic_bytes_sent = 0;
  int64_t max_nic_bytes_received = 0;
  int32_t gpus_per_node = 0;  // the node size the split used
  int64_t nvlink_bytes = 0;   // forward K/V bytes inside nodes, all workers
  int64_t nic_bytes = 0;      // forward K/V bytes across nodes
  double token_imbalance = 0;
  // Lower bound on the largest per-worker compute: max(total / N, largest query block's work;
  // with the remote-compute extension, the largest pair's)
  double compute_lower_bound = 0;
  double max_compute = 0;
  // Lower bound on the largest per-worker traffic of any plan with this
  // blocking and cap: a worker computing query block i receives every K/V
  // token i needs except the at most token_cap it owns (relays do not help
  // the receiver): max over i of (K/V bytes i needs - token_cap's worth).
  int64_t traffic_lower_bound_bytes = 0;
  int64_t max_traffic_bytes = 0;
  int64_t reshuffle_tokens = 0;  // tokens whose owner differs from their dataloader worker
  int64_t reshuffle_bytes = 0;   // Q, K, V in and O out for those tokens (dtype_bytes each)
  // The most tokens one worker moves in the reshuffle, in (owned, from other
  // dataloader workers) plus out (its dataloader share owned elsewhere):
  // what an overlapped reshuffle waits for, rather than the total.
  int64_t max_worker_reshuffle_tokens = 0;
  // The busiest worker's forward reshuffle bytes of each direction (see
  // WorkerMetrics): what its ports carry beyond the stage transfers.
  int64_t max_worker_reshuffle_bytes_in = 0;
  int64_t max_worker_reshuffle_bytes_out = 0;
  // The fewest tokens any plan of this batch with perfectly balanced forward
  // work within the plan's token cap moves (reshuffle_floor.h).
  ReshuffleFloor reshuffle_floor;
};

// (max - mean) / max; 0 for an all-zero or empty vector.
double Imbalance(const std::vector<double>& values);

// The node size of the built-in hardware profiles (cost_model.h).
inline constexpr int32_t kBuiltinGpusPerNode = 8;

// Counts from the plan; workers w and v share a node when w / gpus_per_node
// == v / gpus_per_node. Precondition: ValidatePlan(plan) passes.
// Error(kInvalidArgument) if gpus_per_node < 1.
PlanMetrics ComputePlanMetrics(const Plan& plan, int32_t gpus_per_node = kBuiltinGpusPerNode);

// The multi-line report `fcp inspect` prints (and Python's Plan.summary()):
// header, per-worker table (up to 64 workers), balance, ports (sent and
// received apart, NIC bytes apart), stages, reshuffle and its floor.
// `planning_seconds` < 0 leaves out the planning-time line. O(workers).
std::string FormatPlanSummary(const Plan& plan, const PlanMetrics& metrics,
                              double planning_seconds);

}  // namespace fcp
