#include <algorithm>
#include <cmath>
#include <string>

#include "fcp/error.h"
#include "fcp/plan_limits.h"
#include "fcp/planner.h"
#include "fcp/planner_options.h"
#include "fcp/required_pairs.h"

namespace fcp {

void PlannerConfig::validate_settings() const {
  CheckPlannerOptionRanges(*this);  // every scalar field, by its row of the table
  step_costs.validate("planner: step_costs");
  mask.validate();
  attention.validate();
}

void PlannerConfig::validate(const std::vector<int64_t>& lengths) const {
  const auto fail = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "planner: " + what);
  };
  validate_settings();
  if (lengths.empty()) fail("the batch has no sequences");
  int64_t total = 0;
  __int128 squares = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] < 1)
      fail("sequence " + std::to_string(s) + " has length " + std::to_string(lengths[s]) +
           " (must be >= 1)");
    if (lengths[s] > kMaxSequenceTokens)
      fail("sequence " + std::to_string(s) + " is longer than 2^31 tokens");
    total += lengths[s];
    if (total > kMaxTotalTokens) fail("the batch holds more than 2^40 tokens");
    // The plan validator's bound too: planning sums work in int64.
    squares += static_cast<__int128>(lengths[s]) * lengths[s];
    if (squares > kMaxTokenPairs)
      fail("the batch holds more than 2^62 token pairs (sum of length^2, at sequence " +
           std::to_string(s) + ")");
  }
  // Fewest candidate block pairs any plan of this batch lists (each sequence
  // spans at least ceil(L / block_size) pieces, sorted: the i-th attends at
  // least i + 1 of them under a causal mask, all of them under a full one,
  // itself under a window): checked here from the sizes, so that a batch
  // that cannot be planned fails before its blocks are built.
  if (static_cast<int64_t>(lengths.size()) > kMaxRequiredPairs)
    fail("the batch has " + std::to_string(lengths.size()) + " sequences, more than 2^27");
  double fewest_pairs = 0;
  for (int64_t len : lengths) {
    const double pieces = std::ceil(static_cast<double>(len) / static_cast<double>(block_size));
    fewest_pairs += mask.kind == MaskKind::kFull     ? pieces * pieces
                    : mask.kind == MaskKind::kCausal ? pieces * (pieces + 1) / 2
                                                     : pieces;
  }
  if (fewest_pairs > static_cast<double>(kMaxRequiredPairs))
    fail("block size " + std::to_string(block_size) + " gives at least " +
         std::to_string(static_cast<int64_t>(std::min(fewest_pairs, 0x1.0p62))) +
         " candidate block pairs, more than 2^27 can be listed in memory; use larger blocks");
  const int64_t even_share = (total + workers - 1) / workers;
  if (token_cap != 0 && token_cap < even_share)
    throw Error(ErrorCode::kInfeasible,
                "planner: token_cap " + std::to_string(token_cap) + " is below ceil(T/N) = " +
                    std::to_string(even_share) + " (T = " + std::to_string(total) + " tokens on " +
                    std::to_string(workers) + " workers): no assignment fits");
}

int64_t PlannerConfig::EffectiveTokenCap(const std::vector<int64_t>& lengths) const {
  if (token_cap != 0) return token_cap;
  int64_t total = 0;
  for (int64_t len : lengths) total += len;
  return (total + workers - 1) / workers;
}

Plan PlanHeader(const std::vector<int64_t>& lengths, const PlannerConfig& config,
                const std::string& planner) {
  Plan plan;
  plan.planner = planner;
  plan.workers = config.workers;
  plan.mask = config.mask;
  plan.attention = config.attention;
  plan.block_size = config.block_size;
  plan.coalesce = config.coalesce;
  plan.token_cap = config.EffectiveTokenCap(lengths);
  plan.sequences = lengths;
  return plan;
}

}  // namespace fcp
