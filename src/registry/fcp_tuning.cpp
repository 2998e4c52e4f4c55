// FCP planned per batch by the simulated step (fcp/fcp_tuning.h): each
// candidate heavy fraction planned by MakePlan and simulated, the fastest kept.
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
  for (double fraction : heavy_fractions)
    if (!std::isfinite(fraction) || fraction < 0)
      throw Error(ErrorCode::kInvalidArgument, "tune: heavy fraction " + std::to_string(fraction) +
                                                   " is not a finite number >= 0");
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
  std::vector<double> fractions = {config.heavy_fraction};
  for (double fraction : tuning.heavy_fractions)
    if (std::find(fractions.begin(), fractions.end(), fraction) == fractions.end())
      fractions.push_back(fraction);
  // The candidates are independent: each is planned and simulated on a
  // thread of its own (the results do not depend on the threads; the choice
  // below is in candidate order).
  struct Outcome {
    Plan plan;
    SimResult sim;
  };
  TunedFcpPlan best;
  std::vector<std::future<Outcome>> outcomes(fractions.size());
  for (size_t k = 0; k < fractions.size(); ++k) {
    PlannerConfig candidate = config;
    candidate.heavy_fraction = fractions[k];
    best.tried.push_back({fractions[k], false, 0});
    // Whole items (no split) only where they can be balanced at all.
    if (fractions[k] == 0 && config.heavy_fraction != 0 &&
        FcpComputeImbalanceFloor(lengths, candidate) > config.max_imbalance)
      continue;
    best.tried[k].simulated = true;
    outcomes[k] = std::async(std::launch::async, [&lengths, &tuning, candidate] {
      Outcome o{MakePlan(lengths, candidate), {}};
      o.sim = Simulate(o.plan, tuning.profile, tuning.sim);
      return o;
    });
  }
  // The config's own fraction (k = 0) is never skipped: the first kept.
  for (size_t k = 0; k < fractions.size(); ++k) {
    if (!outcomes[k].valid()) continue;
    Outcome o = outcomes[k].get();  // rethrows a candidate's error
    best.tried[k].step_s = o.sim.total_time_s;
    if (k == 0 || o.sim.total_time_s < best.sim.total_time_s) {
      best.plan = std::move(o.plan);
      best.heavy_fraction = fractions[k];
      best.sim = std::move(o.sim);
    }
  }
  return best;
}

}  // namespace fcp
