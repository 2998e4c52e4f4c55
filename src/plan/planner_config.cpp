#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "fcp/error.h"
#include "fcp/planner.h"
#include "fcp/required_pairs.h"

namespace fcp {

void PlannerConfig::validate_settings() const {
  const auto fail = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "planner: " + what);
  };
  if (workers < 1) fail("workers must be >= 1, got " + std::to_string(workers));
  if (workers > (1 << 20)) fail("workers must be <= 2^20, got " + std::to_string(workers));
  if (block_size < 1) fail("block_size must be >= 1, got " + std::to_string(block_size));
  if (coalesce < 1) fail("coalesce must be >= 1, got " + std::to_string(coalesce));
  if (token_cap < 0) fail("token_cap must be >= 0 (0 = ceil(T/N)), got " + std::to_string(token_cap));
  if (!(heavy_fraction >= 0) || !std::isfinite(heavy_fraction))
    fail("heavy_fraction must be >= 0 (0 = no splitting), got " + std::to_string(heavy_fraction));
  if (max_split < 1) fail("max_split must be >= 1, got " + std::to_string(max_split));
  if (!(max_imbalance >= 0) || !std::isfinite(max_imbalance))
    fail("max_imbalance must be >= 0 (>= 1: no bound), got " + std::to_string(max_imbalance));
  if (!(network_flops_per_byte >= 0) || !std::isfinite(network_flops_per_byte))
    fail("network_flops_per_byte must be >= 0 (0 = no split search), got " +
         std::to_string(network_flops_per_byte));
  if (rescue_max_split < 0)
    fail("rescue_max_split must be >= 0 (0 = no rescue), got " + std::to_string(rescue_max_split));
  if (node_workers < 1) fail("node_workers must be >= 1, got " + std::to_string(node_workers));
  if (local_search_rounds < 0)
    fail("local_search_rounds must be >= 0, got " + std::to_string(local_search_rounds));
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
  for (size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] < 1)
      fail("sequence " + std::to_string(s) + " has length " + std::to_string(lengths[s]) +
           " (must be >= 1)");
    if (lengths[s] > (int64_t{1} << 31)) fail("sequence " + std::to_string(s) + " is longer than 2^31 tokens");
    total += lengths[s];
    if (total > (int64_t{1} << 40)) fail("the batch holds more than 2^40 tokens");
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

namespace {

// A recorded integer option read back: a double cast to int32_t out of
// range is undefined behaviour, so anything but an int32_t value fails.
int32_t IntOption(const char* name, double value) {
  if (!(value >= INT32_MIN && value <= INT32_MAX) || value != std::trunc(value))
    throw Error(ErrorCode::kInvalidArgument, std::string("planner_options: ") + name +
                                                 " must be a 32-bit integer, got " +
                                                 fmt::format("{}", value));
  return static_cast<int32_t>(value);
}

// The settings FCP records in plan.planner_options, by name (sorted), read
// and written through one table so the two directions cannot drift apart.
struct RecordedOption {
  const char* name;
  double (*get)(const PlannerConfig&);
  void (*set)(PlannerConfig&, double);
};
constexpr RecordedOption kRecordedOptions[] = {
    {"heavy_fraction", [](const PlannerConfig& c) { return c.heavy_fraction; },
     [](PlannerConfig& c, double v) { c.heavy_fraction = v; }},
    {"local_search_rounds", [](const PlannerConfig& c) { return double(c.local_search_rounds); },
     [](PlannerConfig& c, double v) { c.local_search_rounds = IntOption("local_search_rounds", v); }},
    {"max_imbalance", [](const PlannerConfig& c) { return c.max_imbalance; },
     [](PlannerConfig& c, double v) { c.max_imbalance = v; }},
    {"max_split", [](const PlannerConfig& c) { return double(c.max_split); },
     [](PlannerConfig& c, double v) { c.max_split = IntOption("max_split", v); }},
    {"network_flops_per_byte", [](const PlannerConfig& c) { return c.network_flops_per_byte; },
     [](PlannerConfig& c, double v) { c.network_flops_per_byte = v; }},
    {"node_workers", [](const PlannerConfig& c) { return double(c.node_workers); },
     [](PlannerConfig& c, double v) { c.node_workers = IntOption("node_workers", v); }},
    {"rescue_max_split", [](const PlannerConfig& c) { return double(c.rescue_max_split); },
     [](PlannerConfig& c, double v) { c.rescue_max_split = IntOption("rescue_max_split", v); }},
    {"reshuffle_locality", [](const PlannerConfig& c) { return c.reshuffle_locality ? 1.0 : 0.0; },
     [](PlannerConfig& c, double v) { c.reshuffle_locality = v != 0; }},
    {"traffic_leveling", [](const PlannerConfig& c) { return c.traffic_leveling ? 1.0 : 0.0; },
     [](PlannerConfig& c, double v) { c.traffic_leveling = v != 0; }},
};

}  // namespace

std::vector<std::pair<std::string, double>> RecordedPlannerOptions(const PlannerConfig& config) {
  std::vector<std::pair<std::string, double>> options;
  for (const RecordedOption& o : kRecordedOptions) options.emplace_back(o.name, o.get(config));
  return options;
}

PlannerConfig PlannerConfigOf(const Plan& plan) {
  PlannerConfig c{.workers = plan.workers, .block_size = plan.block_size,
                  .coalesce = plan.coalesce, .mask = plan.mask, .attention = plan.attention,
                  .token_cap = plan.token_cap, .planner = plan.planner};
  for (const auto& [name, value] : plan.planner_options)
    for (const RecordedOption& o : kRecordedOptions)
      if (name == o.name) o.set(c, value);
  return c;
}

}  // namespace fcp
