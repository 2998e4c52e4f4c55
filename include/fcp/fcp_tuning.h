// fcp/fcp_tuning.h — FCP planned per batch by the simulated step (opt-in:
// `fcp plan --tune`): the plan of the config as given and of a few other
// heavy-split fractions, each simulated on a hardware profile, the fastest
// kept.
//
// Why: how far heavy blocks are split decides the step by more than any
// proxy the planner computes sees. Pieces balance FLOPs but multiply the
// K/V receivers, the transfer stages and the short kernels; on the
// benchmark set the best fraction per batch is 1.6% (N = 16) and 3.5%
// (N = 64) faster than the default 0.1 in geometric mean, up to 11% on a
// row, and no fraction is best on every batch, nor does the step's lower
// bound pick the right one (docs/planner-quality.md, "Whole items against
// the heavy split"). The simulation does, at the price of one planning and
// one simulation per candidate: on the lognormal batches about 15 ms a
// candidate at N = 16, 60 ms at N = 64, 2-3 s at N = 256 (the five of
// `fcp plan --tune`: 0.08, 0.28 and 11 s; docs/planner-quality.md). So it is for
// plans made ahead of the training step (a packing job, a prefetching
// dataloader with cores to spare), not the default.
//
// Invariants: pure and deterministic (same lengths, config and tuning, the
// same plan); every candidate is MakePlan's for config with one heavy
// fraction, so MakeFcpPlan's promises hold (the token cap, ceil(Delta / c)
// forward stages), the plan records the fraction it was made with, and
// re-planning with its recorded options re-makes it byte for byte. The
// config's own plan is the first candidate and a later one is kept only if
// strictly faster, so the result's simulated step is never above the
// untuned plan's on the tuning profile. Cost: K plannings and K
// simulations for the K candidates tried, run concurrently (a thread per
// candidate, each simulation two more), so the wall time can approach the
// slowest candidate's where cores are free; the result does not depend on
// the threads.
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/plan.h"
#include "fcp/planner.h"
#include "fcp/simulator.h"

namespace fcp {

struct FcpTuning {
  HardwareProfile profile;  // the judge: the step simulated on it
  SimConfig sim;            // how (reshuffle, transfers, network engine); its
                            // on_progress, if set, hears every candidate at once
  // Heavy fractions tried after the config's own (skipped where equal to
  // it), in this order: coarser splits and none (0). None is skipped where
  // whole items cannot come within the config's imbalance bound
  // (FcpComputeImbalanceFloor): there it was 20-98% slower on every batch
  // measured, and planning it costs as much as any other candidate.
  std::vector<double> heavy_fractions = {0.2, 0.3, 0.4, 0};
  void validate() const;  // Error(kInvalidArgument) naming the field
};

// One candidate, as tried.
struct FcpTuningTry {
  double heavy_fraction = 0;
  bool simulated = false;  // false: skipped (whole items cannot be balanced)
  double step_s = 0;       // its simulated step (when simulated)
};

struct TunedFcpPlan {
  Plan plan;                        // the fastest candidate's (ties: the earlier)
  double heavy_fraction = 0;        // the one it was made with
  SimResult sim;                    // its simulation (sim.total_time_s: its step)
  std::vector<FcpTuningTry> tried;  // every candidate, the config's own first
};

// The tuning that judges plans as they will run: on `profile`, the
// reshuffle overlapped where `config` keeps tokens home for it
// (reshuffle_locality), not charged where the training loop feeds the
// plan's layout; the rest as SimConfig's defaults. What `fcp plan --tune`
// and `fcp.plan(..., tune=)` use.
FcpTuning FcpTuningFor(HardwareProfile profile, const PlannerConfig& config);

// Error(kInvalidArgument) where config.planner is not "fcp", and as MakePlan
// and Simulate for bad settings, lengths or tuning.
TunedFcpPlan TuneFcpPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config,
                         const FcpTuning& tuning);

}  // namespace fcp
