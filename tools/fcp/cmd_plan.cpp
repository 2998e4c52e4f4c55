// fcp plan | validate | inspect.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "fcp/cost_model.h"
#include "fcp/error.h"
#include "fcp/lengths_file.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/workload.h"

namespace fcp::cli {
namespace {

struct PlanOptions {
  std::string lengths_path;
  std::string out;
  std::string mask = "causal";
  int64_t window = 0;
  bool check = false;
  PlannerConfig config;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void AddPlanCommands(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  PlannerConfig& config = options->config;
  CLI::App* plan = app.add_subcommand("plan", "Plan a batch and write the plan file");
  plan->add_option("--lengths", options->lengths_path,
                   "File of sequence lengths (whitespace-separated; '-' = stdin)")
      ->required();
  plan->add_option("--workers", config.workers, "Number of workers N")->required();
  CLI::Option* block_size_option =
      plan->add_option("--block-size", config.block_size, "Tokens per block")->capture_default_str();
  plan->add_option("--coalesce", config.coalesce, "Sub-stages coalesced per stage (c)")
      ->capture_default_str();
  // Checked at parse time so a bad name is a usage error (exit 2).
  plan->add_option("--mask", options->mask, "causal | full | sliding_window")
      ->capture_default_str()
      ->check(CLI::IsMember({MaskKindName(MaskKind::kCausal), MaskKindName(MaskKind::kFull),
                             MaskKindName(MaskKind::kSlidingWindow)}));
  plan->add_option("--window", options->window, "Window for --mask sliding_window");
  plan->add_option("--heads-q", config.attention.heads_q, "Query heads")->capture_default_str();
  plan->add_option("--heads-kv", config.attention.heads_kv, "Key/value heads")->capture_default_str();
  plan->add_option("--head-dim", config.attention.head_dim, "Head dimension")->capture_default_str();
  plan->add_option("--dtype-bytes", config.attention.dtype_bytes, "Bytes per element")
      ->capture_default_str();
  plan->add_option("--token-cap", config.token_cap, "Max tokens per worker (default ceil(T/N))");
  std::string planner_names;
  for (const PlannerInfo& p : Planners()) planner_names += (planner_names.empty() ? "" : ", ") + p.name;
  plan->add_option("--planner", config.planner, "Planner: " + planner_names)
      ->capture_default_str();
  plan->add_option("--heavy-fraction", config.heavy_fraction,
                   "fcp: split query blocks heavier than this fraction of a worker's mean work (0 = never)")
      ->capture_default_str();
  plan->add_option("--max-split", config.max_split,
                   "fcp: most pieces a heavy block is split into (but see --rescue-max-split)")
      ->capture_default_str();
  plan->add_option("--network-flops-per-byte", config.network_flops_per_byte,
                   "fcp: attention FLOPs per network byte of the cluster; picks the heavy-block "
                   "split by the worst worker's FLOPs + bytes x this (0 = as configured)")
      ->capture_default_str();
  plan->add_option("--max-imbalance", config.max_imbalance,
                   "fcp: with a network ratio, the cheapest plan whose compute and traffic "
                   "imbalance are within this (>= 1: no bound)")
      ->capture_default_str();
  plan->add_option("--rescue-max-split", config.rescue_max_split,
                   "fcp: a plan outside --max-imbalance is planned again with heavy blocks in "
                   "3, 5, 6, 8 pieces (not above this) until one is within it (0 = never)")
      ->capture_default_str();
  plan->add_option("--traffic-leveling", config.traffic_leveling,
                   "fcp: a plan with balanced compute and unbalanced traffic gets exchanges "
                   "that level the traffic without raising the largest cost")
      ->capture_default_str();
  plan->add_option("--local-search", config.local_search_rounds,
                   "fcp: local-search effort after the greedy assignment (0 = off)")
      ->capture_default_str();
  plan->add_option("--reshuffle-locality", config.reshuffle_locality,
                   "fcp: exchanges that keep blocks on their dataloader worker (fewer tokens "
                   "reshuffled; false when the training loop feeds the plan's layout)")
      ->capture_default_str();
  plan->add_option("--node-workers", config.node_workers,
                   "fcp: workers per node (consecutive ids); reshuffle flows inside a node are "
                   "not charged when the home layout is weighed")
      ->capture_default_str();
  plan->add_option("--out", options->out, "Plan file to write ('-' = stdout)")->required();
  plan->add_flag("--check", options->check, "Validate the plan before writing it (debug self-check)");
  plan->callback([options, block_size_option] {
    PlannerConfig& c = options->config;
    c.mask.kind = ParseMaskKind(options->mask);
    c.mask.window = options->window;
    if (c.mask.kind == MaskKind::kSlidingWindow && options->window == 0)
      throw UsageError("plan: --mask sliding_window needs --window W");
    c.self_check = options->check;
    CheckFlags([&] {
      c.validate_settings();
      FindPlanner(c.planner);
    });
    const std::vector<int64_t> lengths = ReadLengthsFile(options->lengths_path);
    const auto start = std::chrono::steady_clock::now();
    const Plan result = MakePlan(lengths, c);
    const double seconds = SecondsSince(start);
    WriteOutput(options->out, WritePlanJson(result), "plan");
    // A block never holds more than the cap: say so when --block-size asked for more.
    if (block_size_option->count() > 0 && c.block_size > result.token_cap)
      std::fprintf(stderr, "fcp plan: note: --block-size %lld is above the token cap %lld; blocks hold at most "
                   "%lld tokens\n", static_cast<long long>(c.block_size), static_cast<long long>(result.token_cap),
                   static_cast<long long>(result.token_cap));
    if (options->out != "-")
      std::fprintf(stderr, "fcp plan: %zu blocks, %zu forward stages, planned in %.2f ms -> %s\n",
                   result.blocks.size(), result.forward.size(), seconds * 1e3,
                   options->out.c_str());
  });

  auto validate_path = std::make_shared<std::string>();
  CLI::App* validate = app.add_subcommand("validate", "Check a plan file against every rule");
  validate->add_option("--plan", *validate_path, "Plan file ('-' = stdin)")->required();
  validate->callback([validate_path] {
    const Plan p = ReadPlanJsonFile(*validate_path);
    ValidatePlan(p);
    fmt::print("{}: valid fcp-plan ({} workers, {} blocks, {} forward and {} backward stages)\n",
               *validate_path, p.workers, p.blocks.size(), p.forward.size(), p.backward.size());
  });

  auto inspect_path = std::make_shared<std::string>();
  auto inspect_profile = std::make_shared<std::string>("gpu-x");
  CLI::App* inspect = app.add_subcommand("inspect", "Summarise a plan: balance, traffic, stages");
  inspect->add_option("--plan", *inspect_path, "Plan file ('-' = stdin)")->required();
  inspect->add_option("--profile", *inspect_profile,
                      "Hardware profile whose node size splits traffic into NVLink and NIC bytes")
      ->capture_default_str();
  inspect->callback([inspect_path, inspect_profile] {
    const int32_t gpus_per_node = ResolveProfile(*inspect_profile).gpus_per_node;
    const Plan p = ReadPlanJsonFile(*inspect_path);
    ValidatePlan(p);
    // Planning time is not part of the (deterministic) plan: re-plan the same
    // batch with the file's settings and time that, when the planner is known.
    // Settings this version rejects (the format lets planner_options hold
    // anything) only skip the re-plan: the plan itself is valid.
    double seconds = -1;
    for (const PlannerInfo& info : Planners()) {
      if (info.name != p.planner) continue;
      try {
        const PlannerConfig c = PlannerConfigOf(p);
        const auto start = std::chrono::steady_clock::now();
        const Plan again = MakePlan(p.sequences, c);
        seconds = SecondsSince(start);
        if (!(again == p))
          fmt::print("note: re-planning this batch with planner '{}' gives a different plan "
                     "(made by another version or settings)\n", p.planner);
      } catch (const Error& e) {
        fmt::print("note: not re-planned with the file's settings: {}\n", e.what());
      }
    }
    fmt::print("{}", FormatPlanSummary(p, ComputePlanMetrics(p, gpus_per_node), seconds));
  });
}

}  // namespace fcp::cli
