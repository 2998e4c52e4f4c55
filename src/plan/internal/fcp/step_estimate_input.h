// fcp/step_estimate_input.h — the step estimate (fcp/step_estimate.h) of a
// plan in progress: blocks whose owners are given apart (an assignment's
// owner vector) and their required pairs already computed, as the FCP
// planner holds its candidates. Private to the plan layer and its tests.
//
// Invariants: the same as EstimateStep(plan, costs), which is this one with
// owner[b] = plan.blocks[b].worker and pairs = RequiredPairs(plan): the two
// give identical estimates. Cost: O(P log P + S + N) for P required pairs,
// S segments, N workers (no RequiredPairs).
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/mask.h"
#include "fcp/plan.h"
#include "fcp/required_pairs.h"
#include "fcp/step_estimate.h"

namespace fcp::detail {

struct StepEstimateInput {
  const std::vector<int64_t>* sequences = nullptr;  // lengths, dataloader order
  const std::vector<Block>* blocks = nullptr;       // their worker fields are not read
  const std::vector<int32_t>* owner = nullptr;      // per block, in [0, workers)
  // Every required pair of `blocks`, sorted by (q_block, kv_block), each once
  // (as RequiredPairs gives them).
  const std::vector<RequiredPair>* pairs = nullptr;
  Mask mask;
  AttentionShape attention;
  int32_t workers = 1;
  int32_t coalesce = 16;
};

// Error(kInvalidArgument) from costs.validate(); Error(kInvalidPlan) for an
// owner outside [0, workers) or an owner vector of the wrong size.
StepEstimate EstimateStep(const StepEstimateInput& input, const StepCosts& costs);

}  // namespace fcp::detail
