// FCP planned per batch by the simulated step (fcp/fcp_tuning.h): each
// candidate heavy fraction planned by MakePlan and simulated, the fastest kept.
#include "fcp/fcp_tuning.h"

#include <cmath>
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

TunedFcpPlan TuneFcpPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config,
                         const FcpTuning& tuning) {
  if (config.planner != "fcp")
    throw Error(ErrorCode::kInvalidArgument, "tune: only the fcp planner is tuned (planner '" +
                                                 QuoteForError(config.planner) + "')");
  tuning.validate();
  std::vector<double> fractions = {config.heavy_fraction};
  for (double fraction : tuning.heavy_fractions) {
    bool seen = false;
    for (double f : fractions) seen = seen || f == fraction;
    if (!seen) fractions.push_back(fraction);
  }
  TunedFcpPlan best;
  bool have = false;
  for (double fraction : fractions) {
    PlannerConfig candidate = config;
    candidate.heavy_fraction = fraction;
    FcpTuningTry tried{fraction, false, 0};
    // Whole items (no split) only where they can be balanced at all.
    const bool hopeless = fraction == 0 && config.heavy_fraction != 0 &&
                          FcpComputeImbalanceFloor(lengths, candidate) > config.max_imbalance;
    if (!hopeless) {
      Plan plan = MakePlan(lengths, candidate);
      tried.simulated = true;
      tried.step_s = Simulate(plan, tuning.profile, tuning.sim).total_time_s;
      if (!have || tried.step_s < best.step_s) {
        best.plan = std::move(plan);
        best.heavy_fraction = fraction;
        best.step_s = tried.step_s;
        have = true;
      }
    }
    best.tried.push_back(tried);
  }
  return best;
}

}  // namespace fcp
