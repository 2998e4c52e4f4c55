// fcp/planner_registry.h — every planner by name: FCP, its ablations and the
// baselines, and MakePlan, which runs the one a PlannerConfig names.
//
// The registry sits above the planning layer and the baselines (target
// fcp_registry): the FCP planner alone (fcp/planner.h, fcp_plan) needs
// neither the baselines nor the cost model they use.
// Invariants: Planners() is sorted by name, names are unique, and every
// entry is a pure function (same lengths and config, byte-identical plan).
// Complexity: lookups are O(planners); MakePlan costs what its planner costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/plan.h"
#include "fcp/planner.h"

namespace fcp {

// A planner: a pure function from lengths and config to a plan.
using PlannerFn = Plan (*)(const std::vector<int64_t>& lengths, const PlannerConfig& config);

struct PlannerInfo {
  std::string name;         // what --planner takes and plan.planner records
  std::string description;  // one line
  PlannerFn make;
};

// Every planner, sorted by name (the table is in src/registry/planner_registry.cpp).
const std::vector<PlannerInfo>& Planners();
// Error(kInvalidArgument) listing the names if `name` is unknown.
const PlannerInfo& FindPlanner(const std::string& name);

// Validates the settings and the planner's name, then the lengths, then runs
// the planner named by config.planner (with config.self_check, validates its
// plan: Error(kInternal) if it breaks a rule).
Plan MakePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);

}  // namespace fcp
