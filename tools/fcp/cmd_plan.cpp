// fcp plan | validate | inspect.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string_view>
#include <variant>

#include <fmt/format.h>

#include "commands.h"
#include "fcp/cost_model.h"
#include "fcp/error.h"
#include "fcp/fcp_tuning.h"
#include "fcp/lengths_file.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/planner_options.h"
#include "fcp/planner_registry.h"
#include "fcp/simulator.h"
#include "fcp/workload.h"

namespace fcp::cli {
namespace {

struct PlanOptions {
  std::string lengths_path;
  std::string out;
  std::string mask = "causal";
  int64_t window = 0;
  bool check = false;
  bool tune = false;
  std::string profile = "gpu-x";
  PlannerConfig config;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The plan command's work, once its flags are parsed.
void RunPlan(PlanOptions& options, bool block_size_given) {
  PlannerConfig& c = options.config;
  c.mask.kind = ParseMaskKind(options.mask);
  c.mask.window = options.window;
  if (c.mask.kind == MaskKind::kSlidingWindow && options.window == 0)
    throw UsageError("plan: --mask sliding_window needs --window W");
  c.self_check = options.check;
  CheckFlags([&] {
    c.validate_settings();
    FindPlanner(c.planner);
  });
  // The hardware the FCP planner ranks its candidates for (and --tune
  // simulates on).
  const HardwareProfile profile = ResolveProfile(options.profile);
  c.step_costs = StepCostsOf(profile, /*reshuffle=*/false);
  FcpTuning tuning;
  if (options.tune) {
    if (c.planner != "fcp")
      throw UsageError("plan: --tune tunes the fcp planner, not '" + c.planner + "'");
    tuning = FcpTuningFor(profile, c);
  }
  const std::vector<int64_t> lengths = ReadLengthsFile(options.lengths_path);
  const auto start = std::chrono::steady_clock::now();
  std::optional<TunedFcpPlan> tuned;
  if (options.tune) tuned = TuneFcpPlan(lengths, c, tuning);
  const Plan result = tuned ? std::move(tuned->plan) : MakePlan(lengths, c);
  const double seconds = SecondsSince(start);
  WriteOutput(options.out, WritePlanJson(result), "plan");
  if (tuned) {
    std::string tries;
    for (const FcpTuningTry& t : tuned->tried)
      tries += fmt::format(
          "{}{:g}/{:g}{}{}{}: {}", tries.empty() ? "" : ", ", t.settings.heavy_fraction,
          t.settings.max_imbalance, t.settings.node_relays ? "/relays" : "",
          t.settings.row_ranges ? "" : "/whole", t.settings.spread_stages ? "/spread" : "",
          t.simulated ? fmt::format("{:.2f} ms", t.step_s * 1e3)
                      : std::string("skipped (whole items cannot be balanced)"));
    const FcpTuningSettings& kept = tuned->settings;
    std::fprintf(stderr,
                 "fcp plan: tuned on %s (reshuffle %s): heavy fraction %g, max imbalance %g, "
                 "node relays %s, row ranges %s, spread stages %s, simulated step %.2f ms (heavy "
                 "fraction/max imbalance[/relays][/whole][/spread]: %s)\n",
                 tuning.profile.name.c_str(), ReshuffleModeName(tuning.sim.reshuffle),
                 kept.heavy_fraction, kept.max_imbalance, kept.node_relays ? "on" : "off",
                 kept.row_ranges ? "on" : "off", kept.spread_stages ? "on" : "off",
                 tuned->sim.total_time_s * 1e3, tries.c_str());
  }
  // A block never holds more than the cap: say so when --block-size asked for more.
  if (block_size_given && c.block_size > result.token_cap)
    std::fprintf(stderr,
                 "fcp plan: note: --block-size %lld is above the token cap %lld; blocks hold at "
                 "most %lld tokens\n",
                 static_cast<long long>(c.block_size), static_cast<long long>(result.token_cap),
                 static_cast<long long>(result.token_cap));
  if (options.out != "-")
    std::fprintf(stderr, "fcp plan: %zu blocks, %zu forward stages, planned in %.2f ms -> %s\n",
                 result.blocks.size(), result.forward.size(), seconds * 1e3, options.out.c_str());
}

void AddPlanCommand(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand("plan", "Plan a batch and write the plan file");
  plan->add_option("--lengths", options->lengths_path,
                   "File of sequence lengths (whitespace-separated; '-' = stdin)")
      ->required();
  AddPlannerFlags(*plan, options->config);
  plan->get_option("--workers")->required()->default_str("");  // no default to show
  // Checked at parse time so a bad name is a usage error (exit 2).
  plan->add_option("--mask", options->mask, "causal | full | sliding_window")
      ->capture_default_str()
      ->check(CLI::IsMember({MaskKindName(MaskKind::kCausal), MaskKindName(MaskKind::kFull),
                             MaskKindName(MaskKind::kSlidingWindow)}));
  plan->add_option("--window", options->window, "Window for --mask sliding_window");
  std::string planner_names;
  for (const PlannerInfo& p : Planners())
    planner_names += (planner_names.empty() ? "" : ", ") + p.name;
  plan->add_option("--planner", options->config.planner, "Planner: " + planner_names)
      ->capture_default_str();
  plan->add_option("--out", options->out, "Plan file to write ('-' = stdout)")->required();
  plan->add_flag("--check", options->check,
                 "Validate the plan before writing it (debug self-check)");
  plan->add_flag("--tune", options->tune,
                 "fcp: plan at several heavy-split fractions and imbalance bounds, simulate "
                 "each on --profile and keep the fastest (a planning and a simulation per "
                 "candidate)");
  plan->add_option("--profile", options->profile,
                   "Hardware profile (built-in name or JSON file) the fcp planner ranks its "
                   "candidates for, and --tune simulates on")
      ->capture_default_str();
  const CLI::Option* block_size = plan->get_option("--block-size");
  plan->callback([options, block_size] { RunPlan(*options, block_size->count() > 0); });
}

void AddValidateCommand(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* validate = app.add_subcommand("validate", "Check a plan file against every rule");
  validate->add_option("--plan", *path, "Plan file ('-' = stdin)")->required();
  validate->callback([path] {
    const Plan p = ReadPlanJsonFile(*path);
    ValidatePlan(p);
    fmt::print("{}: valid fcp-plan ({} workers, {} blocks, {} forward and {} backward stages)\n",
               *path, p.workers, p.blocks.size(), p.forward.size(), p.backward.size());
  });
}

// Planning time is not part of the (deterministic) plan: re-plans the same
// batch with the file's settings and times that, when the planner is known
// (-1 when not). Settings this version rejects (the format lets
// planner_options hold anything) only skip the re-plan: the plan itself is valid.
double ReplanSeconds(const Plan& p) {
  double seconds = -1;
  for (const PlannerInfo& info : Planners()) {
    if (info.name != p.planner) continue;
    try {
      const PlannerConfig c = PlannerConfigOf(p);
      const auto start = std::chrono::steady_clock::now();
      const Plan again = MakePlan(p.sequences, c);
      seconds = SecondsSince(start);
      if (!(again == p))
        fmt::print(
            "note: re-planning this batch with planner '{}' gives a different plan "
            "(made by another version or settings)\n",
            p.planner);
    } catch (const Error& e) {
      fmt::print("note: not re-planned with the file's settings: {}\n", e.what());
    }
  }
  return seconds;
}

void AddInspectCommand(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto profile = std::make_shared<std::string>("gpu-x");
  CLI::App* inspect = app.add_subcommand("inspect", "Summarise a plan: balance, traffic, stages");
  inspect->add_option("--plan", *path, "Plan file ('-' = stdin)")->required();
  inspect
      ->add_option("--profile", *profile,
                   "Hardware profile whose node size splits traffic into NVLink and NIC bytes")
      ->capture_default_str();
  inspect->callback([path, profile] {
    const int32_t gpus_per_node = ResolveProfile(*profile).gpus_per_node;
    const Plan p = ReadPlanJsonFile(*path);
    ValidatePlan(p);
    const double seconds = ReplanSeconds(p);
    fmt::print("{}", FormatPlanSummary(p, ComputePlanMetrics(p, gpus_per_node), seconds));
  });
}

}  // namespace

void AddPlannerFlags(CLI::App& command, PlannerConfig& config,
                     std::initializer_list<std::string_view> skip) {
  for (const PlannerOption& o : PlannerOptions()) {
    if (std::find(skip.begin(), skip.end(), o.field) != skip.end()) continue;
    CLI::Option* flag = std::visit(
        [&](auto field) {
          return command.add_option(std::string("--") + o.flag, field(config), o.help);
        },
        o.ref);
    if (o.show_default) flag->capture_default_str();
  }
}

void AddPlanCommands(CLI::App& app) {
  AddPlanCommand(app);
  AddValidateCommand(app);
  AddInspectCommand(app);
}

}  // namespace fcp::cli
