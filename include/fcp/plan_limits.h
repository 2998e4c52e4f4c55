// fcp/plan_limits.h — the largest cluster and batch a plan may describe.
//
// One definition, read by the plan validator (ValidatePlan), the planner's
// input checks (PlannerConfig::validate) and the option table's range for
// `workers`, so the three cannot drift apart.
// Invariant: below these limits the closed-form counts of tokens, token pairs
// and bytes the library computes stay within int64.
#pragma once

#include <cstdint>

namespace fcp {

inline constexpr int32_t kMaxWorkers = 1 << 20;
inline constexpr int64_t kMaxSequenceTokens = int64_t{1} << 31;  // one sequence
inline constexpr int64_t kMaxTotalTokens = int64_t{1} << 40;     // the whole batch
// Sum over sequences of length^2: any sum of allowed token pairs (a worker's
// work, two workers' together) stays below 2^63.
inline constexpr int64_t kMaxTokenPairs = int64_t{1} << 62;

}  // namespace fcp
