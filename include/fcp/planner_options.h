// fcp/planner_options.h — the table of the planner's settings: one row per
// scalar field of PlannerConfig, the one place its name, flag, help, type and
// range are written. Generated from it: the `fcp plan` and `fcp compare`
// flags (tools/fcp), fcp.plan's keywords (python/), the range checks of
// PlannerConfig::validate_settings, the options FCP records in a plan's
// header (plan.planner_options) and their reading back by PlannerConfigOf.
// A new knob is a field of PlannerConfig and a row of the table
// (src/plan/planner_options.cpp); docs/planner.md's table of knobs is checked
// against it by tests/planner_options_test.cpp.
//
// Not in the table (structured, spelled out where they are used): the mask
// (a kind and a window), the planner's name (checked against the registry)
// and self_check (`--check`).
//
// Invariants: fields and flags are unique; a row's value lives in exactly one
// PlannerConfig field, reached through `ref`; rows with `recorded` are the
// FCP tuning knobs, and RecordedPlannerOptions lists them sorted by field.
// Complexity: every function is O(rows).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fcp/planner.h"

namespace fcp {

// Where a row's value lives in a PlannerConfig, by its C++ type.
template <typename T>
using PlannerField = T& (*)(PlannerConfig&);
using PlannerFieldRef = std::variant<PlannerField<int32_t>, PlannerField<int64_t>,
                                     PlannerField<double>, PlannerField<bool>>;

struct PlannerOption {
  const char* field;  // the PlannerConfig member; the name recorded in plan.planner_options
  const char* flag;   // the CLI flag without "--"; fcp.plan's keyword is it with '_' for '-'
  const char* help;   // the flag's help text (fcp.plan's docstring too)
  PlannerFieldRef ref;
  // Checked by validate_settings: min <= value <= max (a double also finite),
  // else "<field> must be >= <min><min_note>, got <value>". No range
  // (checked = false): checked elsewhere (the attention shape's own validate).
  bool checked = false;
  double min = 0;
  const char* min_note = "";  // what the least value means, e.g. " (0 = never)"
  double max = std::numeric_limits<double>::infinity();
  const char* max_text = "";  // how the message writes max, e.g. "2^20"
  bool recorded = false;      // FCP's tuning knob: written to plan.planner_options
  bool show_default = true;   // the CLI help shows the default (token_cap's 0 is explained instead)
};

// Every row, in the order of the CLI help and of the checks.
const std::vector<PlannerOption>& PlannerOptions();
// The row of field `field` or of flag / keyword `name` (with '-' or '_'); nullptr if none.
const PlannerOption* FindPlannerOption(std::string_view name);
// fcp.plan's keyword for `option`: its flag with '_' for '-'.
std::string PythonKeyword(const PlannerOption& option);
// The type of the row's field: "int" (int32 or int64), "float" or "bool".
const char* OptionTypeName(const PlannerOption& option);
// The row's value in `config` as a double (a bool as 0 or 1).
double OptionValue(const PlannerOption& option, const PlannerConfig& config);
// The row's default, OptionValue of PlannerConfig{}, as the CLI shows it ("0.1", "true").
std::string OptionDefaultText(const PlannerOption& option);
// Error(kInvalidArgument) "planner: <field> must be ..." for the first
// checked row whose value in `config` is out of range.
void CheckPlannerOptionRanges(const PlannerConfig& config);

}  // namespace fcp
