// fcp/fcp_tuning.h — FCP planned per batch by the simulated step (opt-in:
// `fcp plan --tune`): the plan of the config as given and of a few variants
// (other heavy-split fractions, other imbalance bounds, node relays,
// whole-block sends, spread stages), each simulated on a hardware profile, the fastest kept.
//
// Why: how far heavy blocks are split decides the step by more than any
// proxy the planner computes sees. Pieces balance FLOPs but multiply the
// K/V receivers, the transfer stages and the short kernels; on the
// benchmark set the best fraction per batch is 1.6% (N = 16) and 3.5%
// (N = 64) faster than the default 0.1 in geometric mean, up to 11% on a
// row, and no fraction is best on every batch, nor does the step's lower
// bound pick the right one (the measurement log of docs/planner.md, "Whole items
// against the heavy split"). The imbalance bound chooses among the planner's own
// candidates (split and layout variants) by a cost the simulation does not
// always agree with: a looser bound (0.1) or none (1, time mode) as two
// more candidates adds 0.2-1.0 points (the measurement log, "Tuned by
// simulation"). The simulation picks, at the price of one planning and
// one simulation per candidate: on the lognormal batches (seed 0) about 8
// ms of CPU a candidate at N = 16, 60 ms at N = 64, 0.9 s at N = 256 (the
// ten of `fcp plan --tune`: 0.05, 0.34 and 4.7 s wall, 0.09, 0.65 and 9.2
// s of CPU, on a quiet 2-core machine, 2026-12-06). So it is for
// plans made ahead of the training step (a packing job, a prefetching
// dataloader with cores to spare), not the default.
//
// Invariants: pure and deterministic (same lengths, config and tuning, the
// same plan); every candidate is MakePlan's for config with its settings
// (FcpTuningSettings), so MakeFcpPlan's promises hold (the token
// cap, ceil(Delta / c) forward stages), the plan records the options it was
// made with, and re-planning with its recorded options re-makes it byte for
// byte. The config's own plan is the first candidate and a later one is
// kept only if strictly faster, so the result's simulated step is never
// above the untuned plan's on the tuning profile. Cost: K plannings and K
// simulations for the K candidates tried, run concurrently (a thread per
// candidate, each simulation two more), so the wall time can approach the
// slowest candidate's where cores are free; the result does not depend on
// the threads.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/plan.h"
#include "fcp/planner.h"
#include "fcp/simulator.h"

namespace fcp {

// One variant of the config: the fields set replace the config's.
struct FcpTuningCandidate {
  std::optional<double> heavy_fraction = std::nullopt;
  std::optional<double> max_imbalance = std::nullopt;
  std::optional<bool> node_relays = std::nullopt;
  std::optional<bool> row_ranges = std::nullopt;
  std::optional<bool> spread_stages = std::nullopt;
};

struct FcpTuning {
  HardwareProfile profile;  // the judge: the step simulated on it
  SimConfig sim;            // how (reshuffle, transfers, network engine); its
                            // on_progress, if set, hears every candidate at once
  // Tried after the config's own plan, in this order, each once (one that
  // comes out as an earlier one's settings is not tried again): coarser
  // splits and none (heavy fraction 0), then the imbalance bound loosened
  // and lifted, then the config's own settings with node relays (they lower
  // the step on some batches and raise it on others), then with whole-block
  // sends (row_ranges off: cutting sends to the attended rows lowers every
  // port's bytes, yet where the reshuffle's flows share the ports it made 7
  // of 48 sliding-window rows 0.01-1.06% slower, docs/plan-format.md), then
  // with spread stages (spread_stages: up to 15% faster where the network
  // binds at N = 256, up to 6% slower on other rows, docs/planner.md step 9).
  // Whole items are skipped where they cannot come within the candidate's
  // imbalance bound (FcpComputeImbalanceFloor): there they were 20-98%
  // slower on every batch measured, and planning them costs as much as any
  // other candidate.
  std::vector<FcpTuningCandidate> candidates = {
      {.heavy_fraction = 0.2}, {.heavy_fraction = 0.3}, {.heavy_fraction = 0.4},
      {.heavy_fraction = 0},   {.max_imbalance = 0.1},  {.max_imbalance = 1},
      {.node_relays = true},   {.row_ranges = false},   {.spread_stages = true}};
  void validate() const;  // Error(kInvalidArgument) naming the field
};

// The settings a candidate plans with: the tuned fields of a PlannerConfig.
struct FcpTuningSettings {
  double heavy_fraction = 0;
  double max_imbalance = 0;
  bool node_relays = false;
  bool row_ranges = true;
  bool spread_stages = false;

  static FcpTuningSettings Of(const PlannerConfig& config);
  // `config` with these settings (its other fields as they are).
  PlannerConfig Applied(PlannerConfig config) const;
  bool operator==(const FcpTuningSettings&) const = default;
};

// One candidate, as tried.
struct FcpTuningTry {
  FcpTuningSettings settings;
  bool simulated = false;  // false: skipped (whole items cannot be balanced)
  double step_s = 0;       // its simulated step (when simulated)
};

struct TunedFcpPlan {
  Plan plan;                        // the fastest candidate's (ties: the earlier)
  FcpTuningSettings settings;       // the settings it was made with
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
