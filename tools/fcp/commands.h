// The subcommands of the `fcp` command. Each Add* registers one CLI11
// subcommand on `app` and sets its callback; a callback throws fcp::Error (or
// CLI::Error for usage) and main() turns that into one line on stderr and an
// exit code: 2 for usage errors, 1 for everything else.
#pragma once

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "fcp/error.h"
#include "fcp/planner.h"
#include "fcp/workload.h"

namespace fcp::cli {

void AddWorkloadCommand(CLI::App& app);
void AddPlanCommands(CLI::App& app);      // plan, validate, inspect
void AddSimulateCommands(CLI::App& app);  // simulate, compare
void AddEstimateCommand(CLI::App& app);   // estimate (cmd_estimate.cpp)
#ifdef FCP_WITH_MPI
void AddRunCommands(CLI::App& app);  // run, make-inputs, check (cmd_run.cpp)
#endif

// One flag per row of the planner's table (fcp/planner_options.h) but those
// whose field is in `skip`, bound to its field of `config`, whose value (the
// default) the help shows: `fcp plan` and `fcp compare` share them.
void AddPlannerFlags(CLI::App& command, PlannerConfig& config,
                     std::initializer_list<std::string_view> skip = {});

// The flags of the generated batch's shape, bound to `config`: tokens per
// worker, the length range, the lognormal parameters and the seed (shown as
// `seed_help`): `fcp workload` and `fcp compare` share them (cmd_workload.cpp).
void AddWorkloadShapeFlags(CLI::App& command, WorkloadConfig& config, const std::string& seed_help);

// An error already reported on stderr by the command: main() only exits
// with `exit_code` (used by `fcp run`, whose ranks must print before exiting).
struct ReportedError {
  int exit_code;
};

// For unsigned options: CLI11 2.1 would wrap "-1" around to the largest
// value. (Its NonNegativeNumber is a double range whose message prints
// DBL_MAX in 309 digits, and CLI::Range over uint64_t wraps "-1" first.)
inline const CLI::Validator kNotNegative(
    [](std::string& value) {
      return value.rfind('-', 0) == 0 ? "must be >= 0, got " + value : std::string();
    },
    "NOT NEGATIVE");

// CLI11 saturates a 64-bit integer that overflows (it rejects narrower
// ones); main() adds this check to every integer option of `app` and its
// subcommands, so "99999999999999999999" is a usage error, not INT64_MAX.
void RejectIntegerOverflow(CLI::App& app);

// For tolerances and sizes: a finite number > 0 (not NaN, inf or <= 0).
inline const CLI::Validator kPositiveFinite(
    [](std::string& value) {
      char* end = nullptr;
      const double x = std::strtod(value.c_str(), &end);
      return end != value.c_str() && *end == '\0' && std::isfinite(x) && x > 0
                 ? std::string()
                 : "must be a finite number > 0, got " + value;
    },
    "> 0");

// A usage error raised after parsing (a bad combination of flags): exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The exit-code rule (README): 2 when the command line is wrong (an unknown
// command or flag, a missing or malformed value, a value outside its range,
// contradicting flags), 1 when the command line is fine and the work fails
// (a file unreadable, malformed or invalid, an infeasible request, a full
// disk, a failing rank). Each command checks every flag value through
// CheckFlags before it reads any file: the library's Error for a value
// (PlannerConfig::validate_settings, WorkloadConfig::validate, a mode name)
// becomes a UsageError there.
// `text` to standard output for "-", else into the file `path` through
// fcp::WriteFileAtomically (complete or not at all). Error(kIo) naming `what`
// if standard output fails. The CLI, not the library, owns standard output.
void WriteOutput(const std::string& path, std::string_view text, const std::string& what);

template <typename Check>
void CheckFlags(Check check) {
  try {
    check();
  } catch (const fcp::Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace fcp::cli
