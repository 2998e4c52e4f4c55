#include "fcp/planner_options.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "fcp/error.h"
#include "fcp/plan_limits.h"

namespace fcp {
namespace {

template <typename T>
constexpr PlannerFieldRef Ref(PlannerField<T> field) {
  return field;
}
// The row's accessor of config.member (a captureless lambda as a function pointer).
#define FCP_FIELD(member) Ref(+[](PlannerConfig & c) -> auto& { return c.member; })

}  // namespace

// The order of the CLI help and of the checks; the meaning of each field is
// documented at PlannerConfig (include/fcp/planner.h). Built on first use, so
// that static initialisers elsewhere may use it.
const std::vector<PlannerOption>& PlannerOptions() {
  static const std::vector<PlannerOption> options = {
      {.field = "workers",
       .flag = "workers",
       .help = "Number of workers N",
       .ref = FCP_FIELD(workers),
       .checked = true,
       .min = 1,
       .max = kMaxWorkers,
       .max_text = "2^20"},
      {.field = "block_size",
       .flag = "block-size",
       .help = "Tokens per block",
       .ref = FCP_FIELD(block_size),
       .checked = true,
       .min = 1},
      {.field = "coalesce",
       .flag = "coalesce",
       .help = "Sub-stages coalesced per stage (c)",
       .ref = FCP_FIELD(coalesce),
       .checked = true,
       .min = 1},
      {.field = "heads_q",
       .flag = "heads-q",
       .help = "Query heads",
       .ref = FCP_FIELD(attention.heads_q)},
      {.field = "heads_kv",
       .flag = "heads-kv",
       .help = "Key/value heads",
       .ref = FCP_FIELD(attention.heads_kv)},
      {.field = "head_dim",
       .flag = "head-dim",
       .help = "Head dimension",
       .ref = FCP_FIELD(attention.head_dim)},
      {.field = "dtype_bytes",
       .flag = "dtype-bytes",
       .help = "Bytes per element",
       .ref = FCP_FIELD(attention.dtype_bytes)},
      {.field = "token_cap",
       .flag = "token-cap",
       .help = "Max tokens per worker (default ceil(T/N))",
       .ref = FCP_FIELD(token_cap),
       .checked = true,
       .min = 0,
       .min_note = " (0 = ceil(T/N))",
       .show_default = false},
      {.field = "heavy_fraction",
       .flag = "heavy-fraction",
       .help = "fcp: split query blocks heavier than this fraction of a worker's mean work "
               "(0 = never)",
       .ref = FCP_FIELD(heavy_fraction),
       .checked = true,
       .min = 0,
       .min_note = " (0 = no splitting)",
       .recorded = true},
      {.field = "max_split",
       .flag = "max-split",
       .help = "fcp: most pieces a heavy block is split into (but see --rescue-max-split)",
       .ref = FCP_FIELD(max_split),
       .checked = true,
       .min = 1,
       .recorded = true},
      {.field = "network_flops_per_byte",
       .flag = "network-flops-per-byte",
       .help = "fcp: attention FLOPs per network byte of the cluster; picks the heavy-block "
               "split by the worst worker's FLOPs + bytes x this (0 = as configured)",
       .ref = FCP_FIELD(network_flops_per_byte),
       .checked = true,
       .min = 0,
       .min_note = " (0 = no split search)",
       .recorded = true},
      {.field = "max_imbalance",
       .flag = "max-imbalance",
       .help = "fcp: with a network ratio, the cheapest plan whose compute and traffic "
               "imbalance are within this (>= 1: no bound)",
       .ref = FCP_FIELD(max_imbalance),
       .checked = true,
       .min = 0,
       .min_note = " (>= 1: no bound)",
       .recorded = true},
      {.field = "rescue_max_split",
       .flag = "rescue-max-split",
       .help = "fcp: a plan outside --max-imbalance is planned again with heavy blocks in 3, "
               "5, 6, 8 pieces (not above this) until one is within it (0 = never)",
       .ref = FCP_FIELD(rescue_max_split),
       .checked = true,
       .min = 0,
       .min_note = " (0 = no rescue)",
       .recorded = true},
      {.field = "traffic_leveling",
       .flag = "traffic-leveling",
       .help = "fcp: a plan with balanced compute and unbalanced traffic gets exchanges that level "
               "the traffic without raising the largest cost",
       .ref = FCP_FIELD(traffic_leveling),
       .recorded = true},
      {.field = "local_search_rounds",
       .flag = "local-search",
       .help = "fcp: local-search effort after the greedy assignment (0 = off)",
       .ref = FCP_FIELD(local_search_rounds),
       .checked = true,
       .min = 0,
       .recorded = true},
      {.field = "reshuffle_locality",
       .flag = "reshuffle-locality",
       .help = "fcp: exchanges, and a re-deal of the short sequences, that keep tokens on their "
               "dataloader worker (fewer tokens reshuffled; false when the training loop feeds "
               "the plan's layout)",
       .ref = FCP_FIELD(reshuffle_locality),
       .recorded = true},
      {.field = "node_workers",
       .flag = "node-workers",
       .help = "fcp: workers per node (consecutive ids); reshuffle flows inside a node are not "
               "charged when the home layout is weighed",
       .ref = FCP_FIELD(node_workers),
       .checked = true,
       .min = 1,
       .recorded = true},
      {.field = "node_relays",
       .flag = "node-relays",
       .help = "fcp: K/V sent once per receiving node and fanned out over its fast links, "
               "partial dK/dV summed in the node before they cross the network",
       .ref = FCP_FIELD(node_relays),
       .recorded = true},
      {.field = "row_ranges",
       .flag = "row-ranges",
       .help = "fcp: K/V sends carry only the rows their receiver attends (sliding-window and "
               "other masks that reach part of a block), partial dK/dV the same rows",
       .ref = FCP_FIELD(row_ranges),
       .recorded = true},
      {.field = "spread_stages",
       .flag = "spread-stages",
       .help = "fcp: the transfer graph's colours dealt round-robin over the stages, each "
               "worker's pulls spread over all of them (not c consecutive colours a stage)",
       .ref = FCP_FIELD(spread_stages),
       .recorded = true},
  };
  return options;
}
#undef FCP_FIELD

namespace {

// The recorded rows, sorted by field: the order plan.planner_options is written in.
const std::vector<const PlannerOption*>& RecordedRows() {
  static const std::vector<const PlannerOption*> rows = [] {
    std::vector<const PlannerOption*> r;
    for (const PlannerOption& o : PlannerOptions())
      if (o.recorded) r.push_back(&o);
    std::sort(r.begin(), r.end(), [](const PlannerOption* a, const PlannerOption* b) {
      return std::string_view(a->field) < std::string_view(b->field);
    });
    return r;
  }();
  return rows;
}

// A recorded option read back into the row's field. A double cast to an
// integer out of range is undefined behaviour, so an integer field takes
// only an integral value in its type's range; a bool is nonzero.
void SetRecorded(const PlannerOption& option, PlannerConfig& config, double value) {
  std::visit(
      [&](auto field) {
        using T = std::remove_reference_t<decltype(field(config))>;
        if constexpr (std::is_same_v<T, bool>) {
          field(config) = value != 0;
        } else if constexpr (std::is_integral_v<T>) {
          // 2^63 is exact as a double and the first value above int64's range.
          const double hi = std::is_same_v<T, int32_t> ? INT32_MAX : 0x1.0p63;
          if (!(value >= static_cast<double>(std::numeric_limits<T>::min()) &&
                (std::is_same_v<T, int32_t> ? value <= hi : value < hi)) ||
              value != std::trunc(value))
            throw Error(ErrorCode::kInvalidArgument,
                        fmt::format("planner_options: {} must be a {}-bit integer, got {}",
                                    option.field, 8 * sizeof(T), value));
          field(config) = static_cast<T>(value);
        } else {
          field(config) = value;
        }
      },
      option.ref);
}

// The step costs' recorded fields (PlannerConfig::step_costs; node_workers
// and reshuffle are not read by the planner, so not recorded), by the name
// after "step_costs.".
using CostField = double StepCosts::*;
constexpr std::pair<const char*, CostField> kCostFields[] = {
    {"backward_efficiency_ratio", &StepCosts::backward_efficiency_ratio},
    {"backward_flops_factor", &StepCosts::backward_flops_factor},
    {"compute_flops_per_s", &StepCosts::compute_flops_per_s},
    {"kernel_launch_us", &StepCosts::kernel_launch_us},
    {"nic_bytes_per_us", &StepCosts::nic_bytes_per_us},
    {"nic_latency_us", &StepCosts::nic_latency_us},
    {"nvlink_bytes_per_us", &StepCosts::nvlink_bytes_per_us},
    {"nvlink_latency_us", &StepCosts::nvlink_latency_us},
};
constexpr std::string_view kCostPrefix = "step_costs.";
constexpr std::string_view kEfficiencyPrefix = "step_costs.efficiency.";

// Reads a recorded "step_costs.*" option into `costs`; the efficiency
// points, "step_costs.efficiency.<i>.tokens" and ".efficiency", into
// `points` (index -> point), checked whole by the caller.
void SetRecordedCost(std::string_view name, double value, StepCosts& costs,
                     std::vector<std::pair<size_t, EfficiencyPoint>>& points) {
  if (name.substr(0, kEfficiencyPrefix.size()) == kEfficiencyPrefix) {
    const std::string_view rest = name.substr(kEfficiencyPrefix.size());
    const size_t dot = rest.find('.');
    const std::string_view index = rest.substr(0, dot), what = rest.substr(dot + 1);
    size_t i = 0;
    if (dot == std::string_view::npos || index.empty() || index.size() > 6 ||
        index.find_first_not_of("0123456789") != std::string_view::npos ||
        (what != "tokens" && what != "efficiency"))
      return;  // not a name this version writes: ignored, as unknown options are
    for (char ch : index) i = i * 10 + static_cast<size_t>(ch - '0');
    auto it =
        std::find_if(points.begin(), points.end(), [&](const auto& p) { return p.first == i; });
    if (it == points.end()) it = points.insert(points.end(), std::make_pair(i, EfficiencyPoint{}));
    (what == "tokens" ? it->second.tokens : it->second.efficiency) = value;
    return;
  }
  for (const auto& [field, member] : kCostFields)
    if (name.substr(kCostPrefix.size()) == field) costs.*member = value;
}

}  // namespace

const PlannerOption* FindPlannerOption(std::string_view name) {
  for (const PlannerOption& o : PlannerOptions())
    if (name == o.field || name == o.flag || name == PythonKeyword(o)) return &o;
  return nullptr;
}

std::string PythonKeyword(const PlannerOption& option) {
  std::string keyword = option.flag;
  std::replace(keyword.begin(), keyword.end(), '-', '_');
  return keyword;
}

const char* OptionTypeName(const PlannerOption& option) {
  return std::visit(
      [](auto field) {
        using T = std::remove_reference_t<decltype(field(std::declval<PlannerConfig&>()))>;
        return std::is_same_v<T, bool> ? "bool" : std::is_integral_v<T> ? "int" : "float";
      },
      option.ref);
}

double OptionValue(const PlannerOption& option, const PlannerConfig& config) {
  // The accessors take a mutable config so that one table serves reading and
  // writing; this only reads.
  PlannerConfig& c = const_cast<PlannerConfig&>(config);
  return std::visit([&](auto field) { return static_cast<double>(field(c)); }, option.ref);
}

std::string OptionDefaultText(const PlannerOption& option) {
  const PlannerConfig defaults;
  if (std::string_view(OptionTypeName(option)) == "bool")
    return OptionValue(option, defaults) != 0 ? "true" : "false";
  return fmt::format("{}", OptionValue(option, defaults));
}

void CheckPlannerOptionRanges(const PlannerConfig& config) {
  PlannerConfig& c = const_cast<PlannerConfig&>(config);  // read only, as in OptionValue
  for (const PlannerOption& o : PlannerOptions()) {
    if (!o.checked) continue;
    std::visit(
        [&](auto field) {
          const auto value = field(c);
          // Integers print as integers, doubles as std::to_string does ("-1.000000").
          const std::string text = std::to_string(value);
          const auto fail = [&](const std::string& what) {
            throw Error(ErrorCode::kInvalidArgument,
                        std::string("planner: ") + o.field + " must be " + what + ", got " + text);
          };
          const double x = static_cast<double>(value);
          if (!(x >= o.min) || !std::isfinite(x)) fail(fmt::format(">= {}{}", o.min, o.min_note));
          if (x > o.max) fail(std::string("<= ") + o.max_text);
        },
        o.ref);
  }
}

std::vector<std::pair<std::string, double>> RecordedPlannerOptions(const PlannerConfig& config) {
  std::vector<std::pair<std::string, double>> options;
  for (const PlannerOption* o : RecordedRows())
    options.emplace_back(o->field, OptionValue(*o, config));
  const std::string prefix(kCostPrefix), points(kEfficiencyPrefix);
  for (const auto& [field, member] : kCostFields)
    options.emplace_back(prefix + field, config.step_costs.*member);
  for (size_t i = 0; i < config.step_costs.efficiency.size(); ++i) {
    options.emplace_back(points + std::to_string(i) + ".efficiency",
                         config.step_costs.efficiency[i].efficiency);
    options.emplace_back(points + std::to_string(i) + ".tokens",
                         config.step_costs.efficiency[i].tokens);
  }
  std::sort(options.begin(), options.end());
  return options;
}

PlannerConfig PlannerConfigOf(const Plan& plan) {
  PlannerConfig c{.workers = plan.workers,
                  .block_size = plan.block_size,
                  .coalesce = plan.coalesce,
                  .mask = plan.mask,
                  .attention = plan.attention,
                  .token_cap = plan.token_cap,
                  .planner = plan.planner};
  // Plan files from before row ranges were made with whole blocks: a file
  // of FCP's that does not record row_ranges re-plans without them.
  if (!plan.planner_options.empty()) c.row_ranges = false;
  std::vector<std::pair<size_t, EfficiencyPoint>> points;
  for (const auto& [name, value] : plan.planner_options) {
    if (std::string_view(name).substr(0, kCostPrefix.size()) == kCostPrefix)
      SetRecordedCost(name, value, c.step_costs, points);
    for (const PlannerOption* o : RecordedRows())
      if (name == o->field) SetRecorded(*o, c, value);
  }
  // The recorded efficiency table replaces the default one whole: points 0
  // to k - 1, each with both fields (validate() checks their values).
  if (!points.empty()) {
    std::sort(points.begin(), points.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    c.step_costs.efficiency.clear();
    for (size_t i = 0; i < points.size(); ++i) {
      if (points[i].first != i)
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("planner_options: step_costs.efficiency.{} is missing", i));
      c.step_costs.efficiency.push_back(points[i].second);
    }
  }
  return c;
}

}  // namespace fcp
