// libFuzzer target: arbitrary bytes through the plan reader, then (when they
// parse) the validator, then (when valid) the metrics. fcp::Error is the
// documented way to reject input; anything else -- a crash, another
// exception, a sanitizer report, a huge allocation -- is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fcp/error.h"
#include "fcp/plan.h"
#include "fcp/plan_metrics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fcp::Plan plan;
  try {
    plan = fcp::ReadPlanJson(text);
  } catch (const fcp::Error& e) {
    if (e.code() != fcp::ErrorCode::kParse) __builtin_trap();  // the reader only reports kParse
    return 0;
  }
  // A parsed plan must write back to text that parses to the same plan.
  if (!(fcp::ReadPlanJson(fcp::WritePlanJson(plan)) == plan)) __builtin_trap();
  for (bool strict : {false, true}) {
    try {
      fcp::ValidatePlan(plan, {.forbid_redundant_transfers = strict});
    } catch (const fcp::Error& e) {
      if (e.code() != fcp::ErrorCode::kInvalidPlan) __builtin_trap();
      return 0;
    }
  }
  const fcp::PlanMetrics metrics = fcp::ComputePlanMetrics(plan);
  if (metrics.max_tokens > plan.token_cap) __builtin_trap();
  return 0;
}
