// Small hand-built plans for the runtime tests, independent of the planners
// in src/plan and src/baselines so the executor can be tested on its own:
//  - greedy: sequences cut into blocks of block_size tokens, short pieces
//    packed into shared (varlen) blocks, blocks dealt to workers in a seeded
//    random order; every needed remote K/V block sent directly by its owner
//    in the earliest stage with room under the congestion bound c; partial
//    dK/dV returned directly after the last use.
//  - ring: one contiguous block per worker (its dataloader share); K/V
//    blocks travel around the ring (relays, and blocks passing workers that
//    do not need them); partial dK/dV travel the ring behind them,
//    accumulating at each relay, and end at the owner.
// Both pass ValidatePlan (checked by the tests that use them).
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/plan.h"

namespace fcp::testing {

struct TestPlanSpec {
  std::vector<int64_t> sequences;
  int32_t workers = 2;
  int64_t block_size = 16;
  int32_t coalesce = 1;
  Mask mask;
  AttentionShape attention{2, 1, 8, 4};
  uint64_t seed = 1;
};

Plan MakeGreedyTestPlan(const TestPlanSpec& spec);
Plan MakeRingTestPlan(const TestPlanSpec& spec);
// `plan` with each backward stage's dK/dV partials listed in reverse (still
// valid: a stage's list order is free), so some become final out of list order.
Plan WithPartialsReversed(Plan plan);

}  // namespace fcp::testing
