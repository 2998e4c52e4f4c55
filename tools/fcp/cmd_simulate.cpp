// fcp simulate | compare: run plans on the model cluster.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "commands.h"
#include "fcp/cost_model.h"
#include "fcp/error.h"
#include "fcp/fcp_tuning.h"
#include "fcp/file_io.h"
#include "fcp/lengths_file.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/simulator.h"
#include "fcp/workload.h"

namespace fcp::cli {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Percent(double x) { return fmt::format("{:.1f}%", 100 * x); }

// One pass's bound terms in ms: the largest (which is the bound), then the rest.
std::string PassBoundsLine(const PassBounds& b) {
  return fmt::format(
      "{:.3f} ms ({}); compute max {:.3f} / mean {:.3f}, NIC in {:.3f} / out {:.3f}, "
      "NVLink in {:.3f} / out {:.3f}",
      b.bound_s * 1e3, b.binding, b.max_compute_s * 1e3, b.mean_compute_s * 1e3, b.nic_in_s * 1e3,
      b.nic_out_s * 1e3, b.nvlink_in_s * 1e3, b.nvlink_out_s * 1e3);
}

void PrintSimSummary(const Plan& plan, const SimResult& r) {
  fmt::print("simulate: planner {}, {} workers, profile {}\n", r.planner, r.workers, r.profile);
  fmt::print("  time:      forward {:.3f} ms, backward {:.3f} ms, total {:.3f} ms\n",
             r.forward_time_s * 1e3, r.backward_time_s * 1e3, r.total_time_s * 1e3);
  fmt::print("  bound:     {:.3f} ms (forward + backward lower bounds), time / bound {:.3f}x\n",
             r.bound_s * 1e3, r.bound_ratio);
  fmt::print("    forward  {}\n", PassBoundsLine(r.forward_bounds));
  fmt::print("    backward {}\n", PassBoundsLine(r.backward_bounds));
  fmt::print(
      "  MFU:       {} (normalised by saturated kernel efficiency {}; by this batch's "
      "single-GPU efficiency {}: {})\n",
      Percent(r.mfu), Percent(r.normalized_mfu), Percent(r.reference_efficiency),
      Percent(r.batch_normalized_mfu));
  fmt::print("  imbalance: compute {}, traffic {} (forward K/V), all traffic {}\n",
             Percent(r.compute_imbalance), Percent(r.traffic_imbalance),
             Percent(r.total_traffic_imbalance));
  fmt::print(
      "  per worker: busy {:.3f} ms mean, exposed communication {:.3f} ms mean / {:.3f} ms max\n",
      r.mean_busy_s * 1e3, r.mean_exposed_comm_s * 1e3, r.max_exposed_comm_s * 1e3);
  fmt::print(
      "  plan: {} blocks, {} forward / {} backward stages, coalesce {}, token cap {}; "
      "{} transfers, {} reshuffle flows; dK/dV partials leave per {}\n",
      plan.blocks.size(), plan.forward.size(), plan.backward.size(), plan.coalesce, plan.token_cap,
      r.transfers, r.reshuffle_flows, PartialReturnName(r.partial_return));
  if (r.workers <= 16) {
    fmt::print("  {:>6} {:>10} {:>12} {:>10} {:>12} {:>12}\n", "worker", "busy ms", "exposed ms",
               "idle ms", "fwd GFLOP", "fwd KV MiB");
    for (int32_t w = 0; w < r.workers; ++w) {
      const WorkerSimStats& s = r.worker_stats[w];
      fmt::print("  {:>6} {:>10.3f} {:>12.3f} {:>10.3f} {:>12.1f} {:>12.1f}\n", w, s.busy_s * 1e3,
                 s.exposed_comm_s * 1e3, s.idle_s * 1e3, s.forward_flops / 1e9,
                 (s.forward_kv_bytes_sent + s.forward_kv_bytes_received) / 1048576.0);
    }
  }
}

struct CompareOptions {
  std::string dist = "lognormal";
  std::vector<int32_t> workers = {16, 32, 64, 128, 256};
  std::vector<std::string> planners = {"fcp", "ring", "bytescale", "wlb", "magi"};
  std::string profile = "gpu-x";
  std::string csv;
  std::string lengths_path;
  std::string mask = "causal";
  int64_t window = 0;
  std::string reshuffle = "both";            // none | charged | both: the rules compared
  std::string reshuffle_charge = "overlap";  // how rule (b) runs the reshuffle: overlap | blocking
  std::string transfers = "pull";
  std::string network = NetworkModelName(SimConfig{}.network);
  std::optional<double> network_quantum;
  int32_t seeds = 1;
  bool validate = false;
  bool tune = false;
  WorkloadConfig workload;
  PlannerConfig planner;
  std::optional<double> network_flops_per_byte;  // unset: from the profile
};

// The two comparisons on equal terms (DESIGN.md section 8): every planner of a
// row set is simulated under the same rule, never FCP under one and a
// baseline under the other.
enum class CompareRule {
  // (a) Each planner in its own layout: the dataloader adopts the plan, no
  // reshuffle is charged to anybody.
  kOwnLayout,
  // (b) Everybody starts from the dataloader layout (PLAN_FORMAT's
  // contiguous shares) and is charged the reshuffle to its plan's layout (its
  // blocks' owners) and back, by the same simulator rule for every planner.
  kDataloader,
};
const char* CompareRuleName(CompareRule rule) {
  return rule == CompareRule::kOwnLayout ? "own-layout" : "dataloader";
}

struct Row {
  uint64_t seed;
  int32_t workers;
  std::string planner;
  CompareRule rule;
  std::string reshuffle;
  Plan plan;  // header fields only once simulated (the blocks are dropped)
  SimResult sim;
  double plan_s, sim_s;
  size_t blocks = 0;
  double tokens_per_worker = 0;  // the batch's T / N
};

class Progress {
 public:
  explicit Progress(size_t total) : total_(total), enabled_(total > 4 && isatty(fileno(stderr))) {}
  void Step(const std::string& what) {
    ++done_;
    if (!enabled_) return;
    const int width = 30;
    const int filled = static_cast<int>(width * done_ / total_);
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %-40s", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), done_, total_, what.c_str());
    if (done_ == total_) std::fprintf(stderr, "\r%*s\r", width + 60, "");
    std::fflush(stderr);
  }

 private:
  size_t total_, done_ = 0;
  bool enabled_;
};

// `fcp simulate`'s progress line on a terminal (SimConfig::on_progress): both
// passes' shares done, redrawn at most every kRedraw_s, erased at the end.
// The passes report from two threads, hence the lock.
class PassProgressLine {
 public:
  void Update(int pass, double done) {
    const std::lock_guard lock(mutex_);
    done_[pass] = done;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::duration<double>(kRedraw_s)) return;
    last_ = now;
    drawn_ = true;
    std::fprintf(stderr, "\rfcp simulate: forward %3.0f%%, backward %3.0f%%", 100 * done_[0],
                 100 * done_[1]);
    std::fflush(stderr);
  }
  void Erase() {
    const std::lock_guard lock(mutex_);
    if (drawn_) std::fprintf(stderr, "\r%60s\r", "");
  }

 private:
  static constexpr double kRedraw_s = 0.25;
  std::mutex mutex_;
  double done_[2] = {0, 0};
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  bool drawn_ = false;
};

// Reshuffle bytes of both passes, all workers (0 when none is charged).
double ReshuffleBytes(const SimResult& r) {
  double bytes = 0;
  for (const WorkerSimStats& w : r.worker_stats) bytes += w.reshuffle_bytes_sent;
  return bytes;
}

// The rules `--reshuffle` names: none = (a), charged = (b), both = (a) then (b).
std::vector<CompareRule> ParseCompareRules(const std::string& name) {
  if (name == "none") return {CompareRule::kOwnLayout};
  if (name == "charged") return {CompareRule::kDataloader};
  if (name == "both") return {CompareRule::kOwnLayout, CompareRule::kDataloader};
  throw UsageError("compare: --reshuffle must be none, charged or both, got '" + name + "'");
}

void WriteCsv(const std::string& path, const CompareOptions& o, const std::vector<Row>& rows) {
  std::ostringstream file;
  file << "dist,seed,workers,tokens_per_worker,block_size,coalesce,mask,planner,rule,reshuffle,"
          "profile,"
          "forward_time_s,backward_time_s,total_time_s,mfu,normalized_mfu,batch_normalized_mfu,"
          "reference_efficiency,compute_imbalance,traffic_imbalance,total_traffic_imbalance,"
          "mean_busy_s,mean_exposed_comm_s,max_exposed_comm_s,plan_token_cap,plan_coalesce,"
          "forward_stages,blocks,plan_s,sim_s,bound_s,bound_ratio";
  for (const char* pass : {"forward", "backward"})
    for (const char* term : {"mean_compute_s", "max_compute_s", "nic_in_s", "nic_out_s",
                             "nvlink_in_s", "nvlink_out_s", "bound_s", "binding"})
      file << ',' << pass << "_bound_" << term;
  file << ",reshuffle_bytes\n";
  for (const Row& r : rows) {
    const SimResult& s = r.sim;
    file << fmt::format(
        "{},{},{},{:.9g},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},"
        "{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{},{},{},{},{:.6f},{:.6f}",
        o.lengths_path.empty() ? o.dist : "file", r.seed, r.workers, r.tokens_per_worker,
        o.planner.block_size, o.planner.coalesce, MaskKindName(o.planner.mask.kind), r.planner,
        CompareRuleName(r.rule), r.reshuffle, s.profile, s.forward_time_s, s.backward_time_s,
        s.total_time_s, s.mfu, s.normalized_mfu, s.batch_normalized_mfu, s.reference_efficiency,
        s.compute_imbalance, s.traffic_imbalance, s.total_traffic_imbalance, s.mean_busy_s,
        s.mean_exposed_comm_s, s.max_exposed_comm_s, r.plan.token_cap, r.plan.coalesce,
        r.plan.forward.size(), r.blocks, r.plan_s, r.sim_s);
    file << fmt::format(",{:.9g},{:.9g}", s.bound_s, s.bound_ratio);
    for (const PassBounds* b : {&s.forward_bounds, &s.backward_bounds})
      file << fmt::format(",{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{}", b->mean_compute_s,
                          b->max_compute_s, b->nic_in_s, b->nic_out_s, b->nvlink_in_s,
                          b->nvlink_out_s, b->bound_s, b->binding);
    file << fmt::format(",{:.9g}\n", ReshuffleBytes(s));
  }
  WriteOutput(path, file.str(), "compare: csv");
}

void RunCompare(CompareOptions& o) {
  const HardwareProfile profile = ResolveProfile(o.profile);
  o.planner.network_flops_per_byte =
      o.network_flops_per_byte.value_or(NetworkFlopsPerByte(profile));
  o.planner.step_costs = StepCostsOf(profile, /*reshuffle=*/false);  // FCP ranks for the profile
  o.planner.mask.kind = ParseMaskKind(o.mask);
  o.planner.mask.window = o.window;
  if (o.planner.mask.kind == MaskKind::kSlidingWindow && o.window == 0)
    throw UsageError("compare: --mask sliding_window needs --window W");
  o.workload.dist = ParseLengthDistribution(o.dist);
  if (o.seeds < 1) throw UsageError("compare: --seeds must be >= 1");
  std::vector<CompareRule> rules;
  ReshuffleMode charge{};
  TransferMode transfers{};
  NetworkModel network{};
  CheckFlags([&] {
    rules = ParseCompareRules(o.reshuffle);
    charge = ParseReshuffleMode(o.reshuffle_charge);
    if (charge == ReshuffleMode::kNone)
      throw UsageError("compare: --reshuffle-charge must be overlap or blocking, got 'none'");
    transfers = ParseTransferMode(o.transfers);
    network = ParseNetworkModel(o.network);
    SimConfig sim_settings;
    sim_settings.network_quantum = o.network_quantum;
    sim_settings.validate();
    PlannerConfig settings = o.planner;
    settings.workers = 1;  // checked per value of --workers below
    settings.validate_settings();
    if (o.lengths_path.empty()) {
      WorkloadConfig w = o.workload;
      w.workers = 1;
      w.validate();
    }
  });
  const std::vector<int32_t>& workers = o.workers;
  const std::vector<std::string>& planners = o.planners;
  if (workers.empty() || planners.empty())
    throw UsageError("compare: empty --workers or --planners");
  CheckFlags([&] {
    for (const std::string& p : planners) FindPlanner(p);  // unknown names fail before any work
  });
  std::vector<int64_t> file_lengths;
  if (!o.lengths_path.empty()) file_lengths = ReadLengthsFile(o.lengths_path);

  const uint64_t first_seed = o.workload.seed;
  Progress progress(workers.size() * planners.size() * o.seeds * rules.size());
  std::vector<Row> rows;
  for (int32_t n : workers)
    for (int32_t k = 0; k < o.seeds; ++k) {
      WorkloadConfig wc = o.workload;
      wc.workers = n;
      wc.seed = first_seed + k;
      const std::vector<int64_t> lengths =
          file_lengths.empty() ? GenerateWorkload(wc) : file_lengths;
      const double tokens_per_worker =
          static_cast<double>(SequenceOffsets(lengths).back()) / static_cast<double>(n);
      for (const std::string& name : planners) {
        // Only the FCP family reads PlannerConfig::reshuffle_locality; a
        // baseline's plan is the same under both rules, so it is made once.
        const bool plan_per_rule = name.rfind("fcp", 0) == 0;
        std::optional<Plan> shared_plan;
        double shared_plan_s = 0;
        for (const CompareRule rule : rules) {
          PlannerConfig pc = o.planner;
          pc.workers = n;
          pc.planner = name;
          SimConfig sc;
          // The same reshuffle for every planner of the rule: none, or the
          // plan's own blocks' layout reached from the dataloader's and left.
          sc.reshuffle = rule == CompareRule::kOwnLayout ? ReshuffleMode::kNone : charge;
          // A batch simulated without the reshuffle is planned without its locality.
          pc.reshuffle_locality = sc.reshuffle != ReshuffleMode::kNone;
          sc.transfers = transfers;
          sc.network = network;
          sc.network_quantum = o.network_quantum;
          auto start = std::chrono::steady_clock::now();
          // --tune: FCP's heavy split and imbalance bound chosen by this very
          // simulation (fcp_tuning.h), whose result is the row's: its time is in plan s.
          std::optional<TunedFcpPlan> tuned;
          if (o.tune && name == "fcp") tuned = TuneFcpPlan(lengths, pc, FcpTuning{profile, sc});
          Row row{wc.seed, n, name, rule, ReshuffleModeName(sc.reshuffle), {}, {}, 0, 0};
          if (tuned) {
            row.plan = std::move(tuned->plan);
            row.plan_s = SecondsSince(start);
          } else if (!plan_per_rule && shared_plan) {
            row.plan = *shared_plan;
            row.plan_s = shared_plan_s;
          } else {
            row.plan = MakePlan(lengths, pc);
            row.plan_s = SecondsSince(start);
            if (o.validate) ValidatePlan(row.plan);
            if (!plan_per_rule && rules.size() > 1) {
              shared_plan = row.plan;
              shared_plan_s = row.plan_s;
            }
          }
          start = std::chrono::steady_clock::now();
          row.sim = tuned ? std::move(tuned->sim) : Simulate(row.plan, profile, sc);
          row.sim_s = SecondsSince(start);
          progress.Step(fmt::format("{} N={} seed {} {}", name, n, wc.seed, CompareRuleName(rule)));
          row.blocks = row.plan.blocks.size();
          row.tokens_per_worker = tokens_per_worker;
          row.plan.blocks.clear();  // keep only the header fields the table needs
          rows.push_back(std::move(row));
        }
      }
    }

  // The partial return each planner ran with, as the simulations report it.
  std::string partials;
  for (const std::string& name : planners) {
    const auto row =
        std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.planner == name; });
    if (row == rows.end()) continue;
    partials += fmt::format("{}{} per {}", partials.empty() ? "" : ", ", name,
                            PartialReturnName(row->sim.partial_return));
  }
  std::string rule_text;
  for (const CompareRule rule : rules)
    rule_text += rule == CompareRule::kOwnLayout
                     ? "; rule own-layout: every planner in its own layout, no reshuffle charged"
                     : fmt::format(
                           "; rule dataloader: every planner from the dataloader layout, "
                           "reshuffle to its layout and back charged ({})",
                           ReshuffleModeName(charge));
  fmt::print(
      "compare: {}, block {}, coalesce {}, mask {}, profile {}; transfers {}; dK/dV partials: {}; "
      "network {}{}{}\n",
      file_lengths.empty()
          ? fmt::format("{} tokens per worker, dist {}", o.workload.tokens_per_worker, o.dist)
          : fmt::format("lengths from {} ({} tokens)", o.lengths_path,
                        SequenceOffsets(file_lengths).back()),
      o.planner.block_size, o.planner.coalesce, o.mask, profile.name, o.transfers, partials,
      o.network,
      o.tune ? "; fcp tuned (heavy split and imbalance bound by the simulated step)" : "",
      rule_text);
  fmt::print(
      "{:>5} {:>5} {:<17} {:<10} {:>10} {:>7} {:>7} {:>7} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} "
      "{:>7}\n",
      "N", "seed", "planner", "rule", "time ms", "MFU", "normMFU", "batchN", "comp-imb", "traf-imb",
      "exposed", "resh MiB", "plan s", "sim s", "/bound");
  for (const Row& r : rows) {
    const SimResult& s = r.sim;
    fmt::print(
        "{:>5} {:>5} {:<17} {:<10} {:>10.3f} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7.2f}ms {:>9.1f} "
        "{:>8.3f} {:>8.3f} {:>6.3f}x\n",
        r.workers, r.seed, r.planner, CompareRuleName(r.rule), s.total_time_s * 1e3, Percent(s.mfu),
        Percent(s.normalized_mfu), Percent(s.batch_normalized_mfu), Percent(s.compute_imbalance),
        Percent(s.traffic_imbalance), s.mean_exposed_comm_s * 1e3, ReshuffleBytes(s) / 1048576.0,
        r.plan_s, r.sim_s, s.bound_ratio);
  }
  // FCP's speedup over each baseline under the same rule (MFU ratio = time
  // ratio on the same batch).
  bool header = false;
  for (const Row& f : rows) {
    if (f.planner != "fcp") continue;
    std::string line;
    for (const Row& b : rows)
      if (b.workers == f.workers && b.seed == f.seed && b.rule == f.rule && b.planner != "fcp" &&
          b.sim.mfu > 0)
        line += fmt::format("  {} {:.2f}x", b.planner, f.sim.mfu / b.sim.mfu);
    if (line.empty()) continue;
    if (!header) fmt::print("FCP MFU / baseline MFU, each under the same rule:\n");
    header = true;
    fmt::print("  N={:<4} seed {} {:<10}:{}\n", f.workers, f.seed, CompareRuleName(f.rule), line);
  }
  if (!o.csv.empty()) WriteCsv(o.csv, o, rows);
}

}  // namespace

constexpr const char* kTransfersHelp =
    "How the runtime moves stage transfers: pull (receivers pull K/V, partials pushed on their "
    "own stream) | grouped (one send/receive call per stage)";
constexpr const char* kNetworkHelp =
    "Max-min rate engine: auto (exact up to 256 workers, quantized above) | exact (the "
    "reference) | fast (flows bundled per port pair, only changed rates updated: the same rates "
    "up to rounding, step times within ~1e-9) | quantized (rates recomputed at most once per "
    "quantum of simulated time: an approximation for large N, docs/simulator.md)";

constexpr const char* kNetworkQuantumHelp =
    "quantized: the recomputation quantum as a fraction of the pass's mean stage transfer time "
    "at NIC bandwidth (> 0; default 0.02 up to 256 workers, 0.2 above: the values checked "
    "against exact, docs/simulator.md)";

void AddSimulateCommands(CLI::App& app) {
  struct SimulateOptions {
    std::string plan, profile = "gpu-x", trace, reshuffle = "overlap", transfers = "pull",
                      partials = "auto", network = NetworkModelName(SimConfig{}.network);
    bool json = false, per_worker = false, no_validate = false;
    int32_t dkv_bytes = 0;
    std::optional<double> network_quantum;
  };
  auto so = std::make_shared<SimulateOptions>();
  CLI::App* sim = app.add_subcommand("simulate", "Simulate a plan on a model cluster");
  sim->add_option("--plan", so->plan, "Plan file ('-' = stdin)")->required();
  sim->add_option("--profile", so->profile, "Hardware profile: gpu-x, gpu-y or a JSON file")
      ->capture_default_str();
  sim->add_option("--trace", so->trace, "Write a Chrome trace (Perfetto) to this file");
  sim->add_option("--reshuffle", so->reshuffle, "overlap | blocking | none")->capture_default_str();
  sim->add_option("--transfers", so->transfers, kTransfersHelp)->capture_default_str();
  sim->add_option("--partials", so->partials,
                  "When a dK/dV partial leaves: auto (the plan's planner's runtime: per block for "
                  "FCP, per stage for the baselines and fcp-nopipe) | block (once its block's "
                  "pairs are done) | stage (after the stage's compute)")
      ->capture_default_str();
  sim->add_option("--network", so->network, kNetworkHelp)->capture_default_str();
  sim->add_option("--network-quantum", so->network_quantum, kNetworkQuantumHelp);
  sim->add_option("--dkv-bytes", so->dkv_bytes,
                  "Bytes per element of partial dK/dV transfers (0 = the plan's dtype)")
      ->capture_default_str();
  CLI::Option* json_flag = sim->add_flag("--json", so->json, "Print the result as JSON");
  sim->add_flag("--per-worker", so->per_worker, "With --json: include per-worker statistics")
      ->needs(json_flag);
  sim->add_flag("--no-validate", so->no_validate, "Skip ValidatePlan (large trusted plans)");
  sim->callback([so] {
    SimConfig config;
    CheckFlags([&] {
      config.reshuffle = ParseReshuffleMode(so->reshuffle);
      config.transfers = ParseTransferMode(so->transfers);
      config.partial_return = ParsePartialReturn(so->partials);
      config.network = ParseNetworkModel(so->network);
      config.dkv_dtype_bytes = so->dkv_bytes;
      config.network_quantum = so->network_quantum;
      config.validate();
    });
    const HardwareProfile profile = ResolveProfile(so->profile);
    config.record_trace = !so->trace.empty();
    const Plan plan = ReadPlanJsonFile(so->plan);
    if (!so->no_validate) ValidatePlan(plan);
    auto progress = std::make_shared<PassProgressLine>();
    if (isatty(fileno(stderr)))
      config.on_progress = [progress](int pass, double done) { progress->Update(pass, done); };
    const auto start = std::chrono::steady_clock::now();
    const SimResult result = [&] {
      // Erased also when the simulation throws, before its error is printed.
      const std::unique_ptr<PassProgressLine, void (*)(PassProgressLine*)> erase(
          progress.get(), [](PassProgressLine* line) { line->Erase(); });
      return Simulate(plan, profile, config);
    }();
    const double seconds = SecondsSince(start);
    if (!so->trace.empty()) {
      std::ostringstream trace;
      WriteChromeTrace(result, trace);
      WriteOutput(so->trace, trace.str(), "simulate: trace");
    }
    if (so->json)
      fmt::print("{}", SimResultJson(result, so->per_worker));
    else
      PrintSimSummary(plan, result);
    const NetworkModel engine = ResolveNetworkModel(config.network, plan.workers);
    const std::string quantum =
        engine == NetworkModel::kQuantized
            ? fmt::format(", quantum {:g}", NetworkQuantumFor(config, plan.workers))
            : "";
    std::fprintf(stderr, "fcp simulate: simulated in %.3f s (network %s%s)%s\n", seconds,
                 NetworkModelName(engine), quantum.c_str(),
                 so->trace.empty() ? "" : (", trace -> " + so->trace).c_str());
  });

  auto co = std::make_shared<CompareOptions>();
  CLI::App* cmp =
      app.add_subcommand("compare", "Plan and simulate one batch per N with several planners");
  cmp->add_option("--dist", co->dist, "lognormal | uniform | fixed | bimodal | pareto")
      ->capture_default_str();
  cmp->add_option("--lengths", co->lengths_path, "Use this lengths file instead of --dist");
  cmp->add_option("--workers", co->workers, "Comma-separated worker counts")
      ->delimiter(',')
      ->check(CLI::Range(1, std::numeric_limits<int32_t>::max()))
      ->capture_default_str();
  cmp->add_option("--planners", co->planners, "Comma-separated planner names")
      ->delimiter(',')
      ->capture_default_str();
  cmp->add_option("--profile", co->profile, "gpu-x, gpu-y or a JSON profile")
      ->capture_default_str();
  cmp->add_option("--csv", co->csv, "Also write one CSV row per (N, seed, planner)");
  AddWorkloadShapeFlags(*cmp, co->workload, "First workload seed");
  cmp->add_option("--seeds", co->seeds, "Batches per N (seeds seed..seed+k-1)")
      ->capture_default_str();
  // The planner's flags as `fcp plan` has them, but N (--workers is a list
  // here), the network ratio (the profile's unless given) and the reshuffle
  // locality (set per rule: on where the reshuffle is charged).
  AddPlannerFlags(*cmp, co->planner, {"workers", "network_flops_per_byte", "reshuffle_locality"});
  cmp->add_option("--network-flops-per-byte", co->network_flops_per_byte,
                  "fcp: the planner's network ratio (default: the profile's; 0 = balance only)");
  cmp->add_option("--mask", co->mask, "causal | full | sliding_window")->capture_default_str();
  cmp->add_option("--window", co->window, "Window for --mask sliding_window");
  cmp->add_option("--reshuffle", co->reshuffle,
                  "The rules compared, each the same for every planner: none (each in its own "
                  "layout, no reshuffle charged) | charged (all from the dataloader layout, the "
                  "reshuffle to each plan's layout and back charged) | both")
      ->capture_default_str();
  cmp->add_option("--reshuffle-charge", co->reshuffle_charge,
                  "How the charged rule runs every planner's reshuffle: overlap (with local work) "
                  "| blocking")
      ->capture_default_str();
  cmp->add_option("--transfers", co->transfers, kTransfersHelp)->capture_default_str();
  cmp->add_option("--network", co->network, kNetworkHelp)->capture_default_str();
  cmp->add_option("--network-quantum", co->network_quantum, kNetworkQuantumHelp);
  cmp->add_flag("--validate", co->validate, "ValidatePlan every plan (slow at large N)");
  cmp->add_flag("--tune", co->tune,
                "fcp: heavy split and imbalance bound chosen per batch by the simulated step on "
                "--profile (as `fcp plan --tune`; a planning and a simulation per candidate, all "
                "in plan s)");
  cmp->callback([co] { RunCompare(*co); });
}

}  // namespace fcp::cli
