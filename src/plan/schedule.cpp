#include "fcp/schedule.h"

#include <algorithm>

#include "fcp/edge_coloring.h"
#include "fcp/error.h"

namespace fcp {
namespace {

bool TransferLess(const Transfer& a, const Transfer& b) {
  if (a.src != b.src) return a.src < b.src;
  if (a.dst != b.dst) return a.dst < b.dst;
  return a.block < b.block;
}

}  // namespace

std::vector<Transfer> TransferEdges(const Plan& plan, const std::vector<RequiredPair>& pairs) {
  std::vector<Transfer> edges;
  for (const RequiredPair& p : pairs) {
    const int32_t src = plan.blocks[p.kv_block].worker, dst = plan.blocks[p.q_block].worker;
    if (src != dst) edges.push_back({p.kv_block, src, dst});
  }
  std::sort(edges.begin(), edges.end(), TransferLess);
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  return edges;
}

void BuildStagesFromSubStages(Plan& plan, const std::vector<RequiredPair>& pairs,
                              const std::vector<Transfer>& edges,
                              const std::vector<int32_t>& sub_stage, int32_t sub_stages) {
  FCP_CHECK(sub_stage.size() == edges.size(), "one sub-stage per edge");
  FCP_CHECK(std::is_sorted(edges.begin(), edges.end(), TransferLess), "edges sorted by (src, dst, block)");
  const int32_t c = plan.coalesce;
  const int32_t transfer_stages = (sub_stages + c - 1) / c;
  plan.forward.assign(transfer_stages + 1, ForwardStage{});
  plan.backward.assign(transfer_stages > 0 ? transfer_stages + 2 : 1, BackwardStage{});

  for (size_t e = 0; e < edges.size(); ++e) {
    const int32_t stage = sub_stage[e] / c;
    FCP_CHECK(sub_stage[e] >= 0 && sub_stage[e] < sub_stages, "sub-stage out of range");
    plan.forward[stage].send.push_back(edges[e]);
    plan.backward[stage].send_kv.push_back(edges[e]);
    plan.backward[stage + 2].send_dkv.push_back({edges[e].block, edges[e].dst, edges[e].src});
  }
  for (const RequiredPair& p : pairs) {
    const int32_t worker = plan.blocks[p.q_block].worker;
    int32_t stage = 0;
    if (plan.blocks[p.kv_block].worker != worker) {
      // The edge that brings kv_block to this worker (edges are sorted).
      const Transfer key{p.kv_block, plan.blocks[p.kv_block].worker, worker};
      auto it = std::lower_bound(edges.begin(), edges.end(), key, TransferLess);
      FCP_CHECK(it != edges.end() && *it == key, "every remote pair has a transfer");
      stage = sub_stage[it - edges.begin()] / c + 1;
    }
    plan.forward[stage].compute.push_back({p.q_block, p.kv_block});
    plan.backward[stage].compute.push_back({p.q_block, p.kv_block});
  }
  // Edges and pairs were visited in sorted order, so every stage's sends and
  // computes are already sorted; only the reversed dK/dV edges are not.
  for (BackwardStage& s : plan.backward) std::sort(s.send_dkv.begin(), s.send_dkv.end(), TransferLess);
}

void BuildStages(Plan& plan, const std::vector<RequiredPair>& pairs, bool self_check) {
  const std::vector<Transfer> edges = TransferEdges(plan, pairs);
  std::vector<BipartiteEdge> graph(edges.size());
  for (size_t e = 0; e < edges.size(); ++e) graph[e] = {edges[e].src, edges[e].dst};
  const EdgeColoring coloring = ColorBipartiteEdges(plan.workers, plan.workers, graph);
  if (self_check) CheckEdgeColoring(plan.workers, plan.workers, graph, coloring);
  BuildStagesFromSubStages(plan, pairs, edges, coloring.color, coloring.num_colors);
}

}  // namespace fcp
