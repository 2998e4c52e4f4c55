// The planner's table of settings (fcp/planner_options.h): each row reaches
// its own field, the recorded options keep their on-disk names and order,
// the range checks say what they always said, and docs/planner.md's table of
// knobs lists exactly the table's rows.
#include "fcp/planner_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/planner.h"

namespace fcp {
namespace {

std::string CheckMessage(const PlannerConfig& config) {
  return testing::ErrorMessage(ErrorCode::kInvalidArgument,
                               [&] { CheckPlannerOptionRanges(config); });
}

// Sets the row's field to `value` (a bool: value != 0).
void Set(const PlannerOption& o, PlannerConfig& c, double value) {
  std::visit(
      [&](auto field) {
        using T = std::remove_reference_t<decltype(field(c))>;
        field(c) = static_cast<T>(value);
      },
      o.ref);
}

// A default config with the named fields set through the table.
PlannerConfig With(std::initializer_list<std::pair<const char*, double>> values) {
  PlannerConfig c;
  for (const auto& [field, value] : values) Set(*FindPlannerOption(field), c, value);
  return c;
}

// The objective is derived from the two recorded knobs, so the recorded
// options (and the plans) stay those of before it had a name.
TEST(PlannerObjective, DerivedFromNetworkRatioAndImbalanceBound) {
  PlannerConfig c;
  EXPECT_EQ(c.Objective(), PlannerObjective::kBoundedCost);  // defaults: 12000, 0.05
  c.max_imbalance = kNoImbalanceBound;
  EXPECT_EQ(c.Objective(), PlannerObjective::kTime);
  c.max_imbalance = std::nextafter(kNoImbalanceBound, 0.0);
  EXPECT_EQ(c.Objective(), PlannerObjective::kBoundedCost);
  c.max_imbalance = 7;
  EXPECT_EQ(c.Objective(), PlannerObjective::kTime);
  c.network_flops_per_byte = 0;  // no ratio: balance, whatever the bound
  EXPECT_EQ(c.Objective(), PlannerObjective::kBalance);
  c.max_imbalance = 0.05;
  EXPECT_EQ(c.Objective(), PlannerObjective::kBalance);
  c.network_flops_per_byte = 1e-9;
  EXPECT_EQ(c.Objective(), PlannerObjective::kBoundedCost);
}

TEST(PlannerOptions, NamesAreUniqueAndKeywordsAreFlagsWithUnderscores) {
  std::set<std::string> fields, flags;
  for (const PlannerOption& o : PlannerOptions()) {
    EXPECT_TRUE(fields.insert(o.field).second) << o.field;
    EXPECT_TRUE(flags.insert(o.flag).second) << o.flag;
    EXPECT_EQ(FindPlannerOption(o.field), &o);
    EXPECT_EQ(FindPlannerOption(o.flag), &o);
    EXPECT_EQ(FindPlannerOption(PythonKeyword(o)), &o);
    EXPECT_THAT(PythonKeyword(o), ::testing::Not(::testing::HasSubstr("-")));
  }
  EXPECT_EQ(PythonKeyword(*FindPlannerOption("local_search_rounds")), "local_search");
  EXPECT_EQ(FindPlannerOption("no_such_knob"), nullptr);
}

// No two rows alias one field, and each row reaches the field it names:
// changing one row's value leaves every other row's value as it was.
TEST(PlannerOptions, EachRowReachesItsOwnField) {
  for (const PlannerOption& o : PlannerOptions()) {
    const PlannerConfig defaults;
    PlannerConfig changed = defaults;
    const double before = OptionValue(o, defaults);
    Set(o, changed, before == 0 ? 1 : before == 1 ? 0 : before + 3);
    EXPECT_NE(OptionValue(o, changed), before) << o.field;
    for (const PlannerOption& other : PlannerOptions())
      if (&other != &o) {
        EXPECT_EQ(OptionValue(other, changed), OptionValue(other, defaults)) << o.field;
      }
  }
  PlannerConfig c;
  Set(*FindPlannerOption("heads_kv"), c, 2);
  Set(*FindPlannerOption("local_search_rounds"), c, 7);
  Set(*FindPlannerOption("traffic_leveling"), c, 0);
  EXPECT_EQ(c.attention.heads_kv, 2);
  EXPECT_EQ(c.local_search_rounds, 7);
  EXPECT_FALSE(c.traffic_leveling);
}

TEST(PlannerOptions, TypesAndDefaultsComeFromTheConfig) {
  EXPECT_STREQ(OptionTypeName(*FindPlannerOption("workers")), "int");
  EXPECT_STREQ(OptionTypeName(*FindPlannerOption("token_cap")), "int");
  EXPECT_STREQ(OptionTypeName(*FindPlannerOption("heavy_fraction")), "float");
  EXPECT_STREQ(OptionTypeName(*FindPlannerOption("reshuffle_locality")), "bool");
  EXPECT_EQ(OptionDefaultText(*FindPlannerOption("block_size")), "4096");
  EXPECT_EQ(OptionDefaultText(*FindPlannerOption("heavy_fraction")), "0.1");
  EXPECT_EQ(OptionDefaultText(*FindPlannerOption("network_flops_per_byte")), "12000");
  EXPECT_EQ(OptionDefaultText(*FindPlannerOption("traffic_leveling")), "true");
}

// The names and order plan files have always had (the on-disk contract).
TEST(PlannerOptions, RecordedOptionsKeepTheirNamesAndOrder) {
  std::vector<std::string> names;
  for (const auto& [name, value] : RecordedPlannerOptions(PlannerConfig{}))
    if (name.rfind("step_costs.", 0) != 0) names.push_back(name);
  EXPECT_THAT(names,
              ::testing::ElementsAre("heavy_fraction", "local_search_rounds", "max_imbalance",
                                     "max_split", "network_flops_per_byte", "node_relays",
                                     "node_workers", "rescue_max_split", "reshuffle_locality",
                                     "row_ranges", "spread_stages", "traffic_leveling"));
  const auto values = RecordedPlannerOptions(With({{"max_split", 3}, {"traffic_leveling", 0}}));
  EXPECT_EQ(values[3].second, 3);
  EXPECT_EQ(values.back().first, "traffic_leveling");
  EXPECT_EQ(values.back().second, 0);
}

// The step costs are recorded field by field, the efficiency table point
// by point, sorted by name with the rest.
TEST(PlannerOptions, StepCostsAreRecordedByName) {
  PlannerConfig c;
  c.step_costs.efficiency = {{64, 0.25}, {1024, 0.5}};
  c.step_costs.nic_bytes_per_us = 123;
  const auto options = RecordedPlannerOptions(c);
  std::vector<std::pair<std::string, double>> costs;
  for (const auto& o : options)
    if (o.first.rfind("step_costs.", 0) == 0) costs.push_back(o);
  const std::vector<std::pair<std::string, double>> want = {
      {"step_costs.backward_efficiency_ratio", 0.75},
      {"step_costs.backward_flops_factor", 2.5},
      {"step_costs.compute_flops_per_s", 989e12 * (126.0 / 132.0)},
      {"step_costs.efficiency.0.efficiency", 0.25},
      {"step_costs.efficiency.0.tokens", 64},
      {"step_costs.efficiency.1.efficiency", 0.5},
      {"step_costs.efficiency.1.tokens", 1024},
      {"step_costs.kernel_launch_us", 8e-6 * 1e6},
      {"step_costs.nic_bytes_per_us", 123},
      {"step_costs.nic_latency_us", 8e-6 * 1e6},
      {"step_costs.nvlink_bytes_per_us", 450e9 * 1e-6},
      {"step_costs.nvlink_latency_us", 4e-6 * 1e6}};
  EXPECT_EQ(costs, want);
  EXPECT_TRUE(std::is_sorted(options.begin(), options.end()));
  Plan plan = PlanHeader({100}, c, "fcp");
  plan.planner_options = options;
  EXPECT_EQ(PlannerConfigOf(plan).step_costs, c.step_costs);
  // Recorded before the step costs (none): the defaults.
  plan.planner_options = {{"max_split", 2}};
  EXPECT_EQ(PlannerConfigOf(plan).step_costs, PlannerConfig{}.step_costs);
  // A table with a hole is refused, by the missing point.
  plan.planner_options = {{"step_costs.efficiency.0.tokens", 8},
                          {"step_costs.efficiency.0.efficiency", 0.5},
                          {"step_costs.efficiency.2.tokens", 16},
                          {"step_costs.efficiency.2.efficiency", 0.6}};
  try {
    PlannerConfigOf(plan);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "planner_options: step_costs.efficiency.1 is missing");
  }
}

// validate_settings checks the step costs, by the estimate's own check.
TEST(PlannerOptions, BadStepCostsAreNamed) {
  const auto message = [](const PlannerConfig& c) {
    return testing::ErrorMessage(ErrorCode::kInvalidArgument, [&] { c.validate_settings(); });
  };
  PlannerConfig c;
  EXPECT_EQ(message(c), "");
  c.step_costs.nic_bytes_per_us = 0;
  EXPECT_EQ(message(c), "planner: step_costs: nic_bytes_per_us must be > 0, got 0");
  c = PlannerConfig{};
  c.step_costs.efficiency = {{1024, 0.5}, {512, 0.6}};
  EXPECT_EQ(message(c),
            "planner: step_costs: efficiency point 1: tokens must increase (512 after 1024)");
}

// Random settings survive the way through plan.planner_options and back.
TEST(PlannerOptions, RecordedOptionsReadBackToTheSameConfig) {
  std::mt19937_64 rng(20);
  for (int trial = 0; trial < 200; ++trial) {
    PlannerConfig c;
    for (const PlannerOption& o : PlannerOptions()) {
      if (!o.recorded) continue;
      const std::string type = OptionTypeName(o);
      Set(o, c,
          type == "bool"  ? double(rng() % 2)
          : type == "int" ? double(rng() % 1000)
                          : std::ldexp(double(rng() % 100000), -int(rng() % 12)));
    }
    Plan plan = PlanHeader({100, 200}, c, "fcp");
    plan.planner_options = RecordedPlannerOptions(c);
    EXPECT_EQ(RecordedPlannerOptions(PlannerConfigOf(plan)), plan.planner_options);
  }
}

TEST(PlannerOptions, ReadingBackRefusesANonIntegerForAnIntegerField) {
  Plan plan = PlanHeader({100}, PlannerConfig{}, "fcp");
  for (double bad : {2.5, 1e10, -1e10, std::nan("")}) {
    plan.planner_options = {{"max_split", bad}};
    EXPECT_THROW(
        {
          try {
            PlannerConfigOf(plan);
          } catch (const Error& e) {
            EXPECT_THAT(e.what(), ::testing::StartsWith(
                                      "planner_options: max_split must be a 32-bit integer, got "));
            throw;
          }
        },
        Error);
  }
  plan.planner_options = {{"unknown_knob", 5}, {"node_workers", 2}};
  EXPECT_EQ(PlannerConfigOf(plan).node_workers, 2);  // unknown names are ignored
  // Recorded before node relays existed (no record): made without them, the default.
  EXPECT_FALSE(PlannerConfigOf(plan).node_relays);
  plan.planner_options.push_back({"node_relays", 1});
  EXPECT_TRUE(PlannerConfigOf(plan).node_relays);
  // Recorded before row ranges existed: made with whole blocks, though the
  // default is now on; a plan with no options at all keeps the default.
  EXPECT_FALSE(PlannerConfigOf(plan).row_ranges);
  plan.planner_options.push_back({"row_ranges", 1});
  EXPECT_TRUE(PlannerConfigOf(plan).row_ranges);
  // Recorded before spread stages existed: consecutive stages.
  EXPECT_FALSE(PlannerConfigOf(plan).spread_stages);
  plan.planner_options.push_back({"spread_stages", 1});
  EXPECT_TRUE(PlannerConfigOf(plan).spread_stages);
  plan.planner_options.clear();
  EXPECT_TRUE(PlannerConfigOf(plan).row_ranges);
}

TEST(PlannerOptions, RangeMessagesNameTheFieldAndTheValue) {
  EXPECT_EQ(CheckMessage(PlannerConfig{}), "");
  EXPECT_EQ(CheckMessage(With({{"workers", 0}})), "planner: workers must be >= 1, got 0");
  EXPECT_EQ(CheckMessage(With({{"workers", (1 << 20) + 1}})),
            "planner: workers must be <= 2^20, got 1048577");
  EXPECT_EQ(CheckMessage(With({{"token_cap", -1}})),
            "planner: token_cap must be >= 0 (0 = ceil(T/N)), got -1");
  EXPECT_EQ(CheckMessage(With({{"heavy_fraction", -1}})),
            "planner: heavy_fraction must be >= 0 (0 = no splitting), got -1.000000");
  EXPECT_EQ(CheckMessage(With({{"max_imbalance", std::nan("")}})),
            "planner: max_imbalance must be >= 0 (>= 1: no bound), got nan");
  EXPECT_EQ(CheckMessage(With({{"network_flops_per_byte", INFINITY}})),
            "planner: network_flops_per_byte must be >= 0 (0 = no split search), got inf");
  EXPECT_EQ(CheckMessage(With({{"local_search_rounds", -3}})),
            "planner: local_search_rounds must be >= 0, got -3");
  EXPECT_EQ(CheckMessage(With({{"node_workers", 0}})), "planner: node_workers must be >= 1, got 0");
  // validate_settings runs the same checks.
  EXPECT_THROW(With({{"max_split", 0}}).validate_settings(), Error);
}

// docs/planner.md's "Knobs" table: one row `| `field` | `--flag` | default |
// meaning |` per row of the table (and self_check, `--check`, not in it).
TEST(PlannerOptions, DocsListExactlyTheTablesKnobs) {
  std::ifstream in(std::filesystem::path(FCP_SOURCE_DIR) / "docs/planner.md");
  ASSERT_TRUE(in) << "docs/planner.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t start = doc.find("## Knobs");
  ASSERT_NE(start, std::string::npos);
  const std::string section = doc.substr(start, doc.find("\n## ", start + 1) - start);
  // field -> (flag, default). Parsed by hand: GCC 12's std::regex trips
  // -Wmaybe-uninitialized in the sanitizer build.
  std::map<std::string, std::pair<std::string, std::string>> documented;
  const auto trim = [](std::string cell) {
    cell.erase(0, cell.find_first_not_of(' '));
    cell.erase(cell.find_last_not_of(' ') + 1);
    return cell;
  };
  const auto quoted = [](const std::string& cell, const std::string& prefix) {
    const std::string open = "`" + prefix;
    if (cell.size() < open.size() + 1 || cell.compare(0, open.size(), open) != 0 ||
        cell.back() != '`')
      return std::string();
    return cell.substr(open.size(), cell.size() - open.size() - 1);
  };
  std::istringstream lines(section);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    for (size_t at = 1, bar; (bar = line.find('|', at)) != std::string::npos; at = bar + 1)
      cells.push_back(trim(line.substr(at, bar - at)));
    if (cells.size() < 3) continue;
    const std::string field = quoted(cells[0], ""), flag = quoted(cells[1], "--");
    if (!field.empty() && !flag.empty()) documented[field] = {flag, cells[2]};
  }
  ASSERT_EQ(documented.count("self_check"), 1u);
  documented.erase("self_check");
  for (const PlannerOption& o : PlannerOptions()) {
    ASSERT_EQ(documented.count(o.field), 1u) << "docs/planner.md lacks " << o.field;
    EXPECT_EQ(documented[o.field].first, o.flag) << o.field;
    if (o.show_default) {
      EXPECT_EQ(documented[o.field].second, OptionDefaultText(o)) << o.field;
    }
    documented.erase(o.field);
  }
  for (const auto& [field, flag_default] : documented)
    ADD_FAILURE() << "docs/planner.md documents " << field << ", which the table lacks";
}

}  // namespace
}  // namespace fcp
