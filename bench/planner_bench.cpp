// Planning time of the FCP planner (MakePlan: sharding, assignment, transfer
// graph, colouring, coalescing, backward; no file I/O) on the paper's setup:
// lognormal batches of 32K tokens per worker up to 512K, block 4096,
// coalesce 16, causal, Llama-3-70B attention (64/8/128). The batch is
// generated (seeded) outside the timed loop.
//   planner_bench --benchmark_filter=... ; results in docs/planner-benchmark.md
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "fcp/plan.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/workload.h"

namespace fcp {
namespace {

// range(0): workers; range(1): max_imbalance in percent (100 = time mode,
// no bound; 5 = the default); range(2): the batch's seed (1: the tables of
// docs/planner-benchmark.md; 0: `fcp workload --dist lognormal --seed 0`,
// issue 39's planning-time batch).
void BM_FcpPlan(benchmark::State& state) {
  const int32_t workers = static_cast<int32_t>(state.range(0));
  WorkloadConfig w;
  w.workers = workers;
  w.tokens_per_worker = 32768;
  w.max_len = 524288;
  w.seed = static_cast<uint64_t>(state.range(2));
  const std::vector<int64_t> lengths = GenerateWorkload(w);
  PlannerConfig c;
  c.workers = workers;
  c.block_size = 4096;
  c.coalesce = 16;
  c.mask = {MaskKind::kCausal, 0};
  c.attention = {64, 8, 128, 2};
  c.max_imbalance = static_cast<double>(state.range(1)) / 100;
  Plan plan;
  for (auto _ : state) {
    plan = MakePlan(lengths, c);
    benchmark::DoNotOptimize(plan.blocks.data());
    benchmark::ClobberMemory();
  }
  // Counted once, outside the timed loop.
  int64_t transfers = 0;
  for (const ForwardStage& s : plan.forward) transfers += static_cast<int64_t>(s.send.size());
  state.counters["sequences"] = static_cast<double>(lengths.size());
  state.counters["blocks"] = static_cast<double>(plan.blocks.size());
  state.counters["transfers"] = static_cast<double>(transfers);
  state.counters["stages"] = static_cast<double>(plan.forward.size());
  state.counters["delta"] = ComputePlanMetrics(plan).max_degree;
}

// Small batches plan in milliseconds: several iterations per repetition.
// Each group also plans issue 39's batch (seed 0) with the default planner.
BENCHMARK(BM_FcpPlan)
    ->ArgNames({"N", "max_imbalance_pct", "seed"})
    ->ArgsProduct({{16, 64, 256}, {5, 100}, {1}})
    ->Args({256, 5, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.5)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
// Large batches plan in seconds: one plan per repetition.
BENCHMARK(BM_FcpPlan)
    ->ArgNames({"N", "max_imbalance_pct", "seed"})
    ->ArgsProduct({{1024, 4096}, {5, 100}, {1}})
    ->Args({4096, 5, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace
}  // namespace fcp
