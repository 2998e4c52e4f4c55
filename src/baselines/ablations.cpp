// FCP ablations (fcp/baselines.h, the paper's Table 2): FCP's block assignment
// with one scheduling component taken away.
#include <algorithm>
#include <random>

#include "baseline_common.h"
#include "fcp/baselines.h"
#include "fcp/required_pairs.h"

namespace fcp {
namespace {

// Seed of the random pull order: fixed so the ablation plan is deterministic.
constexpr uint64_t kRandomOrderSeed = 0x9e3779b97f4a7c15ULL;

}  // namespace

Plan MakeFcpNoPipelinePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  Plan plan = baselines::FcpAssignment(lengths, config, "fcp-nopipe");
  const std::vector<RequiredPair> required = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  baselines::BuildPullStages(plan, required, baselines::PullEdges(plan, required),
                             /*pipelined=*/false);
  baselines::FinishPlan(plan, config.coalesce);
  return plan;
}

Plan MakeFcpRandomOrderPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  Plan plan = baselines::FcpAssignment(lengths, config, "fcp-random-order");
  const std::vector<RequiredPair> required = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  std::vector<baselines::PullEdge> edges = baselines::PullEdges(plan, required);
  // Edges come sorted by (dst, block): shuffle each receiver's run, then give
  // its k-th pull the sub-stage k / c.
  std::mt19937_64 rng(kRandomOrderSeed);
  for (size_t begin = 0; begin < edges.size();) {
    size_t end = begin;
    while (end < edges.size() && edges[end].dst == edges[begin].dst) ++end;
    // Fisher-Yates with the engine's raw output: identical on every platform.
    for (size_t i = end - begin; i > 1; --i)
      std::swap(edges[begin + i - 1], edges[begin + rng() % i]);
    for (size_t k = begin; k < end; ++k)
      edges[k].stage = static_cast<int32_t>((k - begin) / config.coalesce);
    begin = end;
  }
  baselines::BuildPullStages(plan, required, edges, /*pipelined=*/true);
  baselines::FinishPlan(plan, config.coalesce);
  return plan;
}

Plan MakeFcpNoCoalescePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  PlannerConfig single = config;
  single.coalesce = 1;
  Plan plan = MakeFcpPlan(lengths, single);
  plan.planner = "fcp-nocoalesce";
  return plan;
}

}  // namespace fcp
