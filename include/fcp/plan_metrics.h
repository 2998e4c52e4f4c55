// fcp/plan_metrics.h — what a plan costs, counted straight from the plan file:
// per-worker tokens, compute and traffic, stage counts against their lower
// bounds, imbalances and reshuffle volume. Independent of any cost model or
// simulator (those weigh the same counts with time). O(size of the plan).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/plan.h"

namespace fcp {

struct WorkerMetrics {
  int64_t tokens = 0;             // tokens owned
  double forward_flops = 0;       // attention FLOPs of the pairs this worker computes
  int64_t kv_blocks_sent = 0;     // forward K/V transfers sent
  int64_t kv_blocks_received = 0;
  int64_t bytes_sent = 0;         // forward K/V bytes
  int64_t bytes_received = 0;
  int64_t traffic_bytes() const { return bytes_sent + bytes_received; }
};

struct PlanMetrics {
  std::vector<WorkerMetrics> workers;
  int64_t total_tokens = 0;
  int64_t max_tokens = 0;
  double total_forward_flops = 0;
  double max_pair_flops = 0;       // the largest single block pair (a compute lower-bound term)
  int64_t required_pairs = 0;
  int64_t transfer_edges = 0;      // forward K/V transfers
  int32_t max_degree = 0;          // Delta: max over workers of sends and of receives
  int32_t forward_stages = 0;
  int32_t forward_transfer_stages = 0;   // stages with at least one send
  int32_t transfer_stage_lower_bound = 0;  // ceil(Delta / coalesce)
  int32_t backward_stages = 0;
  // (max - mean) / max of each per-worker quantity, as in the paper.
  double compute_imbalance = 0;
  double traffic_imbalance = 0;    // bytes sent + received
  double send_imbalance = 0;
  double receive_imbalance = 0;
  double token_imbalance = 0;
  // Lower bound on the largest per-worker compute: max(total / N, largest query block's work)
  double compute_lower_bound = 0;
  double max_compute = 0;
  // Lower bound on the largest per-worker traffic of any plan with this
  // blocking and cap: a worker computing query block i receives every K/V
  // token i needs except the at most token_cap it owns (relays do not help
  // the receiver): max over i of (K/V bytes i needs - token_cap's worth).
  int64_t traffic_lower_bound_bytes = 0;
  int64_t max_traffic_bytes = 0;
  int64_t reshuffle_tokens = 0;    // tokens whose owner differs from their dataloader worker
  int64_t reshuffle_bytes = 0;     // Q, K, V in and O out for those tokens (dtype_bytes each)
  // The most tokens one worker moves in the reshuffle, in (owned, from other
  // dataloader workers) plus out (its dataloader share owned elsewhere):
  // what an overlapped reshuffle waits for, rather than the total.
  int64_t max_worker_reshuffle_tokens = 0;
};

// (max - mean) / max; 0 for an all-zero or empty vector.
double Imbalance(const std::vector<double>& values);

// Counts from the plan. Precondition: ValidatePlan(plan) passes.
PlanMetrics ComputePlanMetrics(const Plan& plan);

// The multi-line report `fcp inspect` prints (and Python's Plan.summary()):
// header, per-worker table (up to 64 workers), balance, stages, reshuffle.
// `planning_seconds` < 0 leaves out the planning-time line. O(workers).
std::string FormatPlanSummary(const Plan& plan, const PlanMetrics& metrics,
                              double planning_seconds);

}  // namespace fcp
