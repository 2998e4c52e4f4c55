// Plan quality on the paper's setup and other length mixes: compute and
// traffic imbalance against their lower bounds, token cap, stage count
// against ceil(Delta/c), and traffic volume. Prints a Markdown table
// (docs/planner-quality.md records its output). Deterministic: fixed seeds.
//
//   build/bench/planner_quality [--workers 16,64,256]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/workload.h"

namespace {

struct Mix {
  const char* name;
  fcp::WorkloadConfig config;
};

std::vector<int> ParseList(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

double Gap(double value, double bound) { return bound > 0 ? value / bound - 1 : 0; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> workers = {16, 64, 256};
  if (argc == 3 && std::string(argv[1]) == "--workers") workers = ParseList(argv[2]);
  std::printf(
      "| mix | N | seed | mode | compute imb. | compute gap to LB | traffic imb. | max traffic / LB "
      "| max tokens / cap | fwd transfer stages / ceil(Delta/c) | mean / max traffic MiB "
      "| tokens reshuffled |\n");
  std::printf("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int n : workers) {
    std::vector<Mix> mixes;
    for (uint64_t seed : {0, 1, 2}) {
      fcp::WorkloadConfig c;
      c.workers = n;
      c.seed = seed;
      mixes.push_back({"lognormal (paper)", c});
    }
    fcp::WorkloadConfig bimodal;
    bimodal.workers = n;
    bimodal.dist = fcp::LengthDistribution::kBimodal;
    mixes.push_back({"bimodal short + very long", bimodal});
    fcp::WorkloadConfig short_only;
    short_only.workers = n;
    short_only.dist = fcp::LengthDistribution::kUniform;
    short_only.max_len = 4096;
    mixes.push_back({"all short (uniform 1..4K)", short_only});
    fcp::WorkloadConfig giant;
    giant.workers = n;
    giant.dist = fcp::LengthDistribution::kFixed;
    giant.max_len = static_cast<int64_t>(n) * giant.tokens_per_worker;
    mixes.push_back({"one giant sequence", giant});
    for (const Mix& mix : mixes) {
      const std::vector<int64_t> lengths = fcp::GenerateWorkload(mix.config);
      // The default plan (cheapest within 5% imbalance), balance mode (no
      // network ratio) and time mode (no imbalance bound).
      struct Mode {
        const char* name;
        double ratio, max_imbalance;
      };
      const fcp::PlannerConfig defaults;
      for (const Mode& mode :
           {Mode{"default", defaults.network_flops_per_byte, defaults.max_imbalance},
            Mode{"balance", 0.0, defaults.max_imbalance},
            Mode{"time", defaults.network_flops_per_byte, 1.0}}) {
        fcp::PlannerConfig pc;
        pc.workers = n;
        pc.network_flops_per_byte = mode.ratio;
        pc.max_imbalance = mode.max_imbalance;
        const fcp::Plan plan = fcp::MakePlan(lengths, pc);
        const fcp::PlanMetrics m = fcp::ComputePlanMetrics(plan);
        double mean_traffic = 0;
        for (const fcp::WorkerMetrics& w : m.workers) mean_traffic += w.traffic_bytes() / double(n);
        std::printf(
            "| %s | %d | %llu | %s | %.2f%% | %.2f%% | %.2f%% | %.2f | %lld / %lld | %d / %d | %.0f / %.0f "
            "| %.1f%% |\n",
            mix.name, n, static_cast<unsigned long long>(mix.config.seed), mode.name,
            100 * m.compute_imbalance, 100 * Gap(m.max_compute, m.compute_lower_bound),
            100 * m.traffic_imbalance,
            m.traffic_lower_bound_bytes > 0
                ? double(m.max_traffic_bytes) / double(m.traffic_lower_bound_bytes)
                : 0.0,
            static_cast<long long>(m.max_tokens), static_cast<long long>(plan.token_cap),
            m.forward_transfer_stages, m.transfer_stage_lower_bound, mean_traffic / 1048576.0,
            double(m.max_traffic_bytes) / 1048576.0,
            100.0 * double(m.reshuffle_tokens) / double(m.total_tokens));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
