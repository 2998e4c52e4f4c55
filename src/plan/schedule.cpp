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

bool PairLess(const BlockPair& a, const BlockPair& b) {
  return a.q_block != b.q_block ? a.q_block < b.q_block : a.kv_block < b.kv_block;
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
  const int32_t c = plan.coalesce;
  const int32_t transfer_stages = (sub_stages + c - 1) / c;
  plan.forward.assign(transfer_stages + 1, ForwardStage{});
  plan.backward.assign(transfer_stages > 0 ? transfer_stages + 2 : 1, BackwardStage{});

  // Stage in which each (block, dst) arrives, looked up by binary search over
  // edges re-sorted by (dst, block).
  struct Arrival {
    int32_t dst, block, stage;
  };
  std::vector<Arrival> arrivals(edges.size());
  for (size_t e = 0; e < edges.size(); ++e) {
    const int32_t stage = sub_stage[e] / c;
    FCP_CHECK(sub_stage[e] >= 0 && sub_stage[e] < sub_stages, "sub-stage out of range");
    arrivals[e] = {edges[e].dst, edges[e].block, stage};
    plan.forward[stage].send.push_back(edges[e]);
    plan.backward[stage].send_kv.push_back(edges[e]);
    plan.backward[stage + 2].send_dkv.push_back({edges[e].block, edges[e].dst, edges[e].src});
  }
  std::sort(arrivals.begin(), arrivals.end(), [](const Arrival& a, const Arrival& b) {
    return a.dst != b.dst ? a.dst < b.dst : a.block < b.block;
  });
  for (const RequiredPair& p : pairs) {
    const int32_t worker = plan.blocks[p.q_block].worker;
    int32_t stage = 0;
    if (plan.blocks[p.kv_block].worker != worker) {
      auto it = std::lower_bound(arrivals.begin(), arrivals.end(), std::make_pair(worker, p.kv_block),
                                 [](const Arrival& a, const std::pair<int32_t, int32_t>& key) {
                                   return a.dst != key.first ? a.dst < key.first : a.block < key.second;
                                 });
      FCP_CHECK(it != arrivals.end() && it->dst == worker && it->block == p.kv_block,
                "every remote pair has a transfer");
      stage = it->stage + 1;
    }
    plan.forward[stage].compute.push_back({p.q_block, p.kv_block});
    plan.backward[stage].compute.push_back({p.q_block, p.kv_block});
  }
  for (ForwardStage& s : plan.forward) {
    std::sort(s.send.begin(), s.send.end(), TransferLess);
    std::sort(s.compute.begin(), s.compute.end(), PairLess);
  }
  for (BackwardStage& s : plan.backward) {
    std::sort(s.send_kv.begin(), s.send_kv.end(), TransferLess);
    std::sort(s.send_dkv.begin(), s.send_dkv.end(), TransferLess);
    std::sort(s.compute.begin(), s.compute.end(), PairLess);
  }
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
