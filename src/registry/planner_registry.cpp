#include "fcp/planner_registry.h"

#include <algorithm>
#include <string>

#include "fcp/baselines.h"
#include "fcp/error.h"

namespace fcp {

const std::vector<PlannerInfo>& Planners() {
  static const std::vector<PlannerInfo> planners = [] {
    std::vector<PlannerInfo> all = {
        {"fcp", "FCP: fixed-size blocks, balanced assignment, congestion-free coalesced stages",
         &MakeFcpPlan},
        {"ring", "Ring attention, zig-zag: 2N chunks per sequence, K/V relayed around the ring",
         &MakeRingPlan},
        {"bytescale",
         "ByteScale-like: short sequences whole, long ones on a length-sized ring group",
         &MakeByteScalePlan},
        {"wlb", "WLB-LLM-like: ring or bytescale, whichever the cost model predicts faster",
         &MakeWlbPlan},
        {"magi",
         "MagiAttention-like: ceil(T/8N) chunks, compute-only LPT, one uncontrolled fetch stage",
         &MakeMagiPlan},
        {"magi-dynamic",
         "MagiAttention's dynamic solver: sequential shards, shard grid placed under a 1.10x "
         "work cap, Q/O and K/V moved",
         &MakeMagiDynamicPlan},
        {"fcp-nopipe", "FCP ablation: FCP's assignment, all transfers then all compute",
         &MakeFcpNoPipelinePlan},
        {"fcp-random-order", "FCP ablation: random pull order instead of congestion-free colouring",
         &MakeFcpRandomOrderPlan},
        {"fcp-nocoalesce", "FCP ablation: coalesce degree 1", &MakeFcpNoCoalescePlan},
    };
    std::sort(all.begin(), all.end(),
              [](const PlannerInfo& a, const PlannerInfo& b) { return a.name < b.name; });
    return all;
  }();
  return planners;
}

const PlannerInfo& FindPlanner(const std::string& name) {
  for (const PlannerInfo& p : Planners())
    if (p.name == name) return p;
  std::string names;
  for (const PlannerInfo& p : Planners()) names += (names.empty() ? "" : ", ") + p.name;
  throw Error(ErrorCode::kInvalidArgument,
              "planner: unknown planner '" + QuoteForError(name) + "' (available: " + names + ")");
}

Plan MakePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  // The order of the checks is the order of the messages: settings, the
  // planner's name (before any work), then the lengths.
  config.validate_settings();
  const PlannerInfo& planner = FindPlanner(config.planner);
  config.validate(lengths);
  Plan plan = planner.make(lengths, config);
  if (config.self_check) {
    try {
      ValidatePlan(plan);
    } catch (const Error& e) {
      throw Error(ErrorCode::kInternal,
                  "planner '" + config.planner + "' produced an invalid plan: " + e.what());
    }
  }
  return plan;
}

}  // namespace fcp
