// fcp plan | validate | inspect.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "fcp/error.h"
#include "fcp/plan.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
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

std::string Percent(double x) { return fmt::format("{:.2f}%", 100 * x); }

void PrintSummary(const Plan& plan, const PlanMetrics& m, double planning_seconds) {
  const int32_t n = plan.workers;
  fmt::print("plan: planner {}, {} workers, {} sequences, {} tokens, {} blocks, mask {}{}\n",
             plan.planner, n, plan.sequences.size(), m.total_tokens, plan.blocks.size(),
             MaskKindName(plan.mask.kind),
             plan.mask.kind == MaskKind::kSlidingWindow ? fmt::format(" (window {})", plan.mask.window)
                                                        : std::string());
  fmt::print("  block size {}, coalesce {}, token cap {}\n", plan.block_size, plan.coalesce,
             plan.token_cap);
  if (n <= 64) {
    fmt::print("  {:>6} {:>8} {:>12} {:>10} {:>10} {:>10} {:>10}\n", "worker", "tokens",
               "fwd GFLOP", "sent MiB", "recv MiB", "blk sent", "blk recv");
    for (int32_t w = 0; w < n; ++w) {
      const WorkerMetrics& x = m.workers[w];
      fmt::print("  {:>6} {:>8} {:>12.1f} {:>10.1f} {:>10.1f} {:>10} {:>10}\n", w, x.tokens,
                 x.forward_flops / 1e9, x.bytes_sent / 1048576.0, x.bytes_received / 1048576.0,
                 x.kv_blocks_sent, x.kv_blocks_received);
    }
  }
  double mean_traffic = 0, max_traffic = 0;
  for (const WorkerMetrics& x : m.workers) {
    mean_traffic += static_cast<double>(x.traffic_bytes()) / n;
    max_traffic = std::max(max_traffic, static_cast<double>(x.traffic_bytes()));
  }
  fmt::print("  tokens:   max {} (cap {}), imbalance {}\n", m.max_tokens, plan.token_cap,
             Percent(m.token_imbalance));
  fmt::print("  compute:  max {:.1f} GFLOP, lower bound {:.1f} (gap {}), imbalance {}\n",
             m.max_compute / 1e9, m.compute_lower_bound / 1e9,
             Percent(m.compute_lower_bound > 0 ? m.max_compute / m.compute_lower_bound - 1 : 0),
             Percent(m.compute_imbalance));
  fmt::print("  traffic:  max {:.1f} MiB sent+received, mean {:.1f}, imbalance {} (send {}, receive {})\n",
             max_traffic / 1048576.0, mean_traffic / 1048576.0, Percent(m.traffic_imbalance),
             Percent(m.send_imbalance), Percent(m.receive_imbalance));
  fmt::print("            lower bound on the max {:.1f} MiB (the K/V one query block needs beyond the cap)\n",
             m.traffic_lower_bound_bytes / 1048576.0);
  fmt::print("  stages:   forward {} ({} with transfers; lower bound ceil(Delta/c) = ceil({}/{}) = {}), "
             "backward {}\n",
             m.forward_stages, m.forward_transfer_stages, m.max_degree, plan.coalesce,
             m.transfer_stage_lower_bound, m.backward_stages);
  fmt::print("  pairs:    {} required block pairs, {} K/V transfers\n", m.required_pairs,
             m.transfer_edges);
  fmt::print("  reshuffle: {} tokens ({}) leave their dataloader worker, {:.1f} MiB in + out\n",
             m.reshuffle_tokens, Percent(m.total_tokens ? double(m.reshuffle_tokens) / m.total_tokens : 0),
             m.reshuffle_bytes / 1048576.0);
  if (planning_seconds >= 0) fmt::print("  planning time: {:.2f} ms\n", planning_seconds * 1e3);
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
  plan->add_option("--block-size", config.block_size, "Tokens per block")->capture_default_str();
  plan->add_option("--coalesce", config.coalesce, "Sub-stages coalesced per stage (c)")
      ->capture_default_str();
  plan->add_option("--mask", options->mask, "causal | full | sliding_window")->capture_default_str();
  plan->add_option("--window", options->window, "Window for --mask sliding_window");
  plan->add_option("--heads-q", config.attention.heads_q, "Query heads")->capture_default_str();
  plan->add_option("--heads-kv", config.attention.heads_kv, "Key/value heads")->capture_default_str();
  plan->add_option("--head-dim", config.attention.head_dim, "Head dimension")->capture_default_str();
  plan->add_option("--dtype-bytes", config.attention.dtype_bytes, "Bytes per element")
      ->capture_default_str();
  plan->add_option("--token-cap", config.token_cap, "Max tokens per worker (default ceil(T/N))");
  plan->add_option("--planner", config.planner, "Planner (see 'fcp plan --list')")
      ->capture_default_str();
  plan->add_option("--heavy-fraction", config.heavy_fraction,
                   "fcp: split query blocks heavier than this fraction of a worker's mean work (0 = never)")
      ->capture_default_str();
  plan->add_option("--max-split", config.max_split, "fcp: most pieces a heavy block is split into")
      ->capture_default_str();
  plan->add_option("--local-search", config.local_search_rounds,
                   "fcp: local-search effort after the greedy assignment (0 = off)")
      ->capture_default_str();
  plan->add_option("--out", options->out, "Plan file to write ('-' = stdout)")->required();
  plan->add_flag("--check", options->check, "Validate the plan before writing it (debug self-check)");
  plan->callback([options] {
    PlannerConfig& c = options->config;
    c.mask.kind = ParseMaskKind(options->mask);
    c.mask.window = options->window;
    if (c.mask.kind == MaskKind::kSlidingWindow && options->window == 0)
      throw UsageError("plan: --mask sliding_window needs --window W");
    c.self_check = options->check;
    const std::vector<int64_t> lengths = ReadLengthsFile(options->lengths_path);
    const auto start = std::chrono::steady_clock::now();
    const Plan result = MakePlan(lengths, c);
    const double seconds = SecondsSince(start);
    WritePlanJsonFile(result, options->out);
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
  CLI::App* inspect = app.add_subcommand("inspect", "Summarise a plan: balance, traffic, stages");
  inspect->add_option("--plan", *inspect_path, "Plan file ('-' = stdin)")->required();
  inspect->callback([inspect_path] {
    const Plan p = ReadPlanJsonFile(*inspect_path);
    ValidatePlan(p);
    // Planning time is not part of the (deterministic) plan: re-plan the same
    // batch with the file's settings and time that, when the planner is known.
    double seconds = -1;
    for (const PlannerInfo& info : Planners()) {
      if (info.name != p.planner) continue;
      PlannerConfig c;
      c.workers = p.workers;
      c.block_size = p.block_size;
      c.coalesce = p.coalesce;
      c.mask = p.mask;
      c.attention = p.attention;
      c.token_cap = p.token_cap;
      c.planner = p.planner;
      const auto start = std::chrono::steady_clock::now();
      const Plan again = MakePlan(p.sequences, c);
      seconds = SecondsSince(start);
      if (!(again == p))
        fmt::print("note: re-planning this batch with planner '{}' gives a different plan "
                   "(made by another version or settings)\n", p.planner);
    }
    PrintSummary(p, ComputePlanMetrics(p), seconds);
  });
}

}  // namespace fcp::cli
