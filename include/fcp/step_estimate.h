// fcp/step_estimate.h — a closed-form estimate of a plan's training step
// (forward + backward attention, with or without the reshuffle), cheap
// enough to rank candidate plans, in microseconds, from plain numbers (the
// plan layer sees no HardwareProfile: the model layer fills StepCosts from
// one, StepCostsOf in fcp/cost_model.h).
//
// What it counts, per worker and pass (docs/simulator.md, "The step
// estimate", has the formulas and their error against `fcp simulate`):
//  * compute: every required pair of the worker's query blocks at the
//    kernel efficiency of its kernel length (cost_model.h: 2 P / q). A
//    block's pairs with itself run per query segment (exact, as the
//    simulator merges them); its other pairs with K/V held locally as one
//    kernel of its largest sequence's tokens; those with received K/V as
//    one kernel per stage they arrive in (min(blocks received, the
//    worker's transfer stages)); one launch per stage with compute. The
//    backward is backward_flops_factor x the FLOPs at
//    backward_efficiency_ratio x the rate.
//  * ports: each K/V block a worker needs and does not own crosses once
//    (owner out, needer in) per pass, the backward adding the dK/dV
//    partials back; NIC across nodes, NVLink inside; with the reshuffle,
//    Q, K, V in and O out (forward), dO in and dQ, dK, dV out (backward)
//    between each token's dataloader worker and its owner.
//  * the receive chain: a worker pulls its blocks c at a time (forward:
//    those away from home once their sender's reshuffle inflow is in), a
//    group done when its slowest pull and its in-port bytes are; a pull
//    shares its sender's out-port with the other receivers pulling from it
//    (that port's other bytes over the pass time, as a processor-sharing
//    queue slows a job: 1 / (1 - load)), the pass time found as a fixed
//    point. With one pull per stage, or small blocks, pulls wait on each
//    other across workers, which the ports alone do not show.
//  * the pipeline: a worker's pass is the larger of its compute (plus the
//    wait for its first received blocks where its local compute is
//    shorter than a stage's transfers) and its transfers (the busiest port
//    or the receive chain, the longer) plus its last
//    stage's compute with received K/V (the worker's transfer stages:
//    ceil(blocks it receives / coalesce)), plus one latency per transfer
//    stage (for the whole pass); with the
//    reshuffle, at least the path of its blocks away from home: their
//    inputs in (its in-port's and its dataloader workers' out-ports'
//    reshuffle bytes, as the inflows share them and finish together),
//    their compute, and their outputs final only at the pass's end (O and
//    dQ of blocks that compute with received K/V, dK and dV of blocks
//    whose partials come back) out of its out-port; its blocks at home
//    compute meanwhile.
// The pass is the largest worker's; the step the sum of the two passes.
// It ignores the order of a worker's stages (its pulls are taken by gate),
// transfers cut to their attended rows, and max-min sharing beyond the
// busiest port and the senders' out-ports.
//
// Invariants: pure and deterministic; every term >= 0; total_us =
// forward.time_us + backward.time_us. Cost: RequiredPairs' (O(S log S + C +
// P log P), fcp/required_pairs.h) plus O(P log P + S + N log N) for P
// required pairs, S segments, N workers, and O(pulls) per evaluation of the
// fixed point (one where the chains add nothing, a few otherwise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/plan.h"

namespace fcp {

// One point of a kernel efficiency curve (HardwareProfile::efficiency).
struct EfficiencyPoint {
  double tokens = 0;      // kernel length (causal-equivalent segment length)
  double efficiency = 0;  // fraction of peak_flops reached, in (0, 1]
  bool operator==(const EfficiencyPoint&) const = default;
};

// f(kernel_tokens) of `curve` (non-empty, tokens increasing): interpolated
// linearly in log2(len), proportional to len below the first point,
// constant above the last; the curve of fcp/cost_model.h. O(log points).
double InterpolateEfficiency(const std::vector<EfficiencyPoint>& curve, double kernel_tokens);

// Error(kInvalidArgument) "<context>: efficiency table is empty" or
// "<context>: efficiency point <i>: ..." unless `curve` is a table
// InterpolateEfficiency reads: non-empty, tokens >= 1 and increasing, each
// efficiency in (0, 1]. The one check of the table, for the step estimate's
// costs, the planner's and a hardware profile's. O(points).
void ValidateEfficiencyTable(const std::vector<EfficiencyPoint>& curve, const std::string& context);

// The cost description the estimate needs, in plain numbers.
struct StepCosts {
  // FLOP/s of the attention kernel at efficiency 1 (peak x the SM share left
  // to attention).
  double compute_flops_per_s = 0;
  // Forward kernel efficiency f(len) (InterpolateEfficiency).
  std::vector<EfficiencyPoint> efficiency;
  // The backward's FLOPs per forward FLOP of the same pairs, and its kernel
  // efficiency relative to the forward's.
  double backward_flops_factor = 2.5;
  double backward_efficiency_ratio = 1;
  double kernel_launch_us = 0;
  int32_t node_workers = 8;  // consecutive workers sharing the fast links
  double nvlink_bytes_per_us = 0;
  double nic_bytes_per_us = 0;
  double nvlink_latency_us = 0;
  double nic_latency_us = 0;
  bool reshuffle = false;  // charge the reshuffle from the dataloader layout (overlapped)

  // Error(kInvalidArgument) "<context>: <field> ..." naming the bad field.
  void validate(const std::string& context = "step estimate") const;
  bool operator==(const StepCosts&) const = default;
};

// The gpu-x profile's costs (StepCostsOf(BuiltinProfile("gpu-x"), false), a
// test keeps the two equal), written out so that the planner has them with
// no profile: PlannerConfig::step_costs's default.
StepCosts GpuXStepCosts();

// One pass's estimate, in microseconds, and what bounds it.
struct PassEstimate {
  double time_us = 0;
  double compute_us = 0;    // the largest worker's compute (launches included)
  double port_us = 0;       // the largest worker's transfers: busiest port or receive chain
  double fill_us = 0;       // the largest worker's fill and drain
  double latency_us = 0;    // one latency per transfer stage
  double reshuffle_us = 0;  // the critical worker's path through the reshuffle beyond its
                            // compute, ports and fill
  int32_t critical_worker = 0;
  std::string
      binding;  // "compute" or "ports" (its transfers): the larger term of the critical worker
};

struct StepEstimate {
  PassEstimate forward, backward;
  double total_us = 0;  // forward + backward
};

// The estimate of `plan`'s blocks and owners (its stages are not read: the
// transfer stages are ceil(max K/V blocks a worker receives or sends /
// coalesce)). Error(kInvalidArgument) from costs.validate(); Error(kInvalidPlan)
// when the blocks do not tile the sequences.
StepEstimate EstimateStep(const Plan& plan, const StepCosts& costs);

}  // namespace fcp
