// WLB-LLM-like planner (fcp/baselines.h): per batch, the faster of ring and
// ByteScale-like as the cost model predicts. The estimator is the simulator
// itself on the built-in gpu-x profile without reshuffle: PlannerConfig
// carries no hardware, and WLB-LLM's own estimator is profile-guided.
#include "fcp/baselines.h"
#include "fcp/cost_model.h"
#include "fcp/simulator.h"

namespace fcp {

Plan MakeWlbPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  const HardwareProfile profile = BuiltinProfile("gpu-x");
  SimConfig sim;  // the default engine: exact up to 256 workers, quantized above
  sim.reshuffle = ReshuffleMode::kNone;
  Plan ring = MakeRingPlan(lengths, config);
  Plan bytescale = MakeByteScalePlan(lengths, config);
  const double ring_s = Simulate(ring, profile, sim).total_time_s;
  const double bytescale_s = Simulate(bytescale, profile, sim).total_time_s;
  // Ties go to ring (the balanced choice).
  Plan chosen = bytescale_s < ring_s ? std::move(bytescale) : std::move(ring);
  chosen.planner = "wlb";
  return chosen;
}

}  // namespace fcp
