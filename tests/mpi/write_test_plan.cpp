// write_test_plan KIND WORKERS MASK COALESCE OUT [WINDOW]: writes one of the
// hand-built test plans (test_plans.h) for the `fcp run` script tests.
// KIND: greedy | ring; MASK: causal | full | sliding_window.
#include <cstdio>
#include <exception>
#include <string>

#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "test_plans.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: write_test_plan greedy|ring WORKERS MASK COALESCE OUT [WINDOW]\n");
    return 2;
  }
  try {
    fcp::testing::TestPlanSpec spec;
    spec.sequences = {1, 16, 37, 5, 32, 60, 9, 1, 23};
    spec.workers = std::stoi(argv[2]);
    spec.mask.kind = fcp::ParseMaskKind(argv[3]);
    if (spec.mask.kind == fcp::MaskKind::kSlidingWindow)
      spec.mask.window = argc > 6 ? std::stoll(argv[6]) : 20;
    spec.coalesce = std::stoi(argv[4]);
    spec.attention = {4, 2, 8, 4};
    const std::string kind = argv[1];
    const fcp::Plan plan = kind == "ring" ? fcp::testing::MakeRingTestPlan(spec)
                                          : fcp::testing::MakeGreedyTestPlan(spec);
    fcp::ValidatePlan(plan);
    fcp::WritePlanJsonFile(plan, argv[5]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_test_plan: %s\n", e.what());
    return 1;
  }
  return 0;
}
