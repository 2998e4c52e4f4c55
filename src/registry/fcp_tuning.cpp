// FCP planned per batch by the simulated step (fcp/fcp_tuning.h): each
// candidate (heavy fraction, imbalance bound, node relays, row ranges, spread
// stages) planned by MakePlan and simulated, the fastest kept.
#include "fcp/fcp_tuning.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <string>
#include <utility>

#include "fcp/error.h"
#include "fcp/planner_registry.h"

namespace fcp {

void FcpTuning::validate() const {
  profile.validate();
  sim.validate();
  const auto check = [](const std::optional<double>& value, const char* name) {
    if (value && (!std::isfinite(*value) || *value < 0))
      throw Error(ErrorCode::kInvalidArgument, std::string("tune: ") + name + " " +
                                                   std::to_string(*value) +
                                                   " is not a finite number >= 0");
  };
  for (const FcpTuningCandidate& candidate : candidates) {
    check(candidate.heavy_fraction, "heavy fraction");
    check(candidate.max_imbalance, "max imbalance");
  }
}

FcpTuningSettings FcpTuningSettings::Of(const PlannerConfig& config) {
  return {config.heavy_fraction, config.max_imbalance, config.node_relays, config.row_ranges,
          config.spread_stages};
}

PlannerConfig FcpTuningSettings::Applied(PlannerConfig config) const {
  config.heavy_fraction = heavy_fraction;
  config.max_imbalance = max_imbalance;
  config.node_relays = node_relays;
  config.row_ranges = row_ranges;
  config.spread_stages = spread_stages;
  return config;
}

FcpTuning FcpTuningFor(HardwareProfile profile, const PlannerConfig& config) {
  FcpTuning tuning;
  tuning.profile = std::move(profile);
  tuning.sim.reshuffle =
      config.reshuffle_locality ? ReshuffleMode::kOverlapped : ReshuffleMode::kNone;
  return tuning;
}

TunedFcpPlan TuneFcpPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config,
                         const FcpTuning& tuning) {
  if (config.planner != "fcp")
    throw Error(ErrorCode::kInvalidArgument, "tune: only the fcp planner is tuned (planner '" +
                                                 QuoteForError(config.planner) + "')");
  tuning.validate();
  // The config's own settings first, then each candidate's not tried yet.
  std::vector<FcpTuningSettings> settings = {FcpTuningSettings::Of(config)};
  for (const FcpTuningCandidate& variant : tuning.candidates) {
    const FcpTuningSettings& own = settings.front();
    const FcpTuningSettings candidate{variant.heavy_fraction.value_or(own.heavy_fraction),
                                      variant.max_imbalance.value_or(own.max_imbalance),
                                      variant.node_relays.value_or(own.node_relays),
                                      variant.row_ranges.value_or(own.row_ranges),
                                      variant.spread_stages.value_or(own.spread_stages)};
    if (std::find(settings.begin(), settings.end(), candidate) == settings.end())
      settings.push_back(candidate);
  }
  // The candidates are independent: each is planned and simulated on a
  // thread of its own (the results do not depend on the threads; the choice
  // below is in candidate order).
  struct Outcome {
    Plan plan;
    SimResult sim;
  };
  TunedFcpPlan best;
  std::vector<std::future<Outcome>> outcomes(settings.size());
  for (size_t k = 0; k < settings.size(); ++k) {
    const PlannerConfig candidate = settings[k].Applied(config);
    best.tried.push_back({settings[k], false, 0});
    // Whole items (no split) only where they can be balanced at all.
    if (k > 0 && candidate.heavy_fraction == 0 &&
        FcpComputeImbalanceFloor(lengths, candidate) > candidate.max_imbalance)
      continue;
    best.tried[k].simulated = true;
    outcomes[k] = std::async(std::launch::async, [&lengths, &tuning, candidate] {
      Outcome o{MakePlan(lengths, candidate), {}};
      o.sim = Simulate(o.plan, tuning.profile, tuning.sim);
      return o;
    });
  }
  // The config's own plan (k = 0) is never skipped: the first kept.
  for (size_t k = 0; k < settings.size(); ++k) {
    if (!outcomes[k].valid()) continue;
    Outcome o = outcomes[k].get();  // rethrows a candidate's error
    best.tried[k].step_s = o.sim.total_time_s;
    if (k == 0 || o.sim.total_time_s < best.sim.total_time_s) {
      best.plan = std::move(o.plan);
      best.settings = settings[k];
      best.sim = std::move(o.sim);
    }
  }
  return best;
}

}  // namespace fcp
