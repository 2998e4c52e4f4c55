// The check the plan reader fuzzer applies to one input, shared with the
// unit test that replays the seed corpus and past findings (regressions/)
// in every build. Returns normally when the input is handled as documented:
// rejected with fcp::Error of the right code, or read, validated and measured.
// Anything else -- another exception, a wrong code, a broken round trip, a
// crash or a sanitizer report -- escapes as an exception or aborts.
#pragma once

#include <stdexcept>
#include <string>

#include "check_common.h"
#include "fcp/error.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "fcp/plan_metrics.h"

namespace fcp::fuzz {

// What became of one input, for tests that want to know how far it got.
enum class Outcome { kParseError, kInvalidPlan, kValid };

inline Outcome CheckPlanText(const std::string& text) {
  Plan plan;
  if (!PassesOrRejects("reader", ErrorCode::kParse, [&] { plan = ReadPlanJson(text); }))
    return Outcome::kParseError;
  // A parsed plan writes back to text that parses to the same plan.
  if (!(ReadPlanJson(WritePlanJson(plan)) == plan))
    throw std::logic_error("plan JSON round trip changed the plan");
  if (!PassesOrRejects("validator", ErrorCode::kInvalidPlan, [&] { ValidatePlan(plan); }))
    return Outcome::kInvalidPlan;
  const PlanMetrics metrics = ComputePlanMetrics(plan);
  if (metrics.max_tokens > plan.token_cap)
    throw std::logic_error("a valid plan's metrics exceed its token cap");
  // The stricter check may reject a valid plan, but only with kInvalidPlan.
  PassesOrRejects("validator", ErrorCode::kInvalidPlan,
                  [&] { ValidatePlan(plan, {.forbid_redundant_transfers = true}); });
  return Outcome::kValid;
}

}  // namespace fcp::fuzz
