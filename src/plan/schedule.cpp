#include "fcp/schedule.h"

#include <algorithm>
#include <span>

#include "buckets.h"
#include "fcp/edge_coloring.h"
#include "fcp/error.h"

namespace fcp {
namespace {

using detail::BucketBy;
using detail::Buckets;

bool TransferLess(const Transfer& a, const Transfer& b) {
  if (a.src != b.src) return a.src < b.src;
  if (a.dst != b.dst) return a.dst < b.dst;
  return a.block < b.block;
}

// Checks that every block has an owner in [0, plan.workers): the buckets
// below are per worker.
void CheckOwners(const Plan& plan) {
  for (const Block& b : plan.blocks)
    FCP_CHECK(b.worker >= 0 && b.worker < plan.workers, "block owners in [0, workers)");
}

bool StrictlySorted(const std::vector<Transfer>& edges) {
  return std::adjacent_find(edges.begin(), edges.end(), [](const Transfer& a, const Transfer& b) {
           return !TransferLess(a, b);
         }) == edges.end();
}

}  // namespace

std::vector<Transfer> TransferEdges(const Plan& plan, const std::vector<RequiredPair>& pairs) {
  CheckOwners(plan);
  const auto src = [&](int32_t k) { return plan.blocks[pairs[k].kv_block].worker; };
  const auto dst = [&](int32_t k) { return plan.blocks[pairs[k].q_block].worker; };
  std::vector<int32_t> remote;
  for (int32_t k = 0; k < static_cast<int32_t>(pairs.size()); ++k)
    if (src(k) != dst(k)) remote.push_back(k);
  // Least significant key first: by block, then dst, then src (all stable).
  const int32_t blocks = static_cast<int32_t>(plan.blocks.size());
  const Buckets by_block = BucketBy(blocks, remote, [&](int32_t k) { return pairs[k].kv_block; });
  const Buckets by_dst = BucketBy(plan.workers, by_block.items, dst);
  const Buckets by_src = BucketBy(plan.workers, by_dst.items, src);
  std::vector<Transfer> edges;
  for (int32_t k : by_src.items) {
    const Transfer t{pairs[k].kv_block, src(k), dst(k)};
    if (edges.empty() || !(edges.back() == t)) edges.push_back(t);
  }
  return edges;
}

void BuildStagesFromSubStages(Plan& plan, const std::vector<RequiredPair>& pairs,
                              const std::vector<Transfer>& edges,
                              const std::vector<int32_t>& sub_stage, int32_t sub_stages) {
  FCP_CHECK(sub_stage.size() == edges.size(), "one sub-stage per edge");
  FCP_CHECK(StrictlySorted(edges), "edges sorted by (src, dst, block), unique");
  CheckOwners(plan);
  for (const Transfer& t : edges)
    FCP_CHECK(t.block >= 0 && static_cast<size_t>(t.block) < plan.blocks.size() && t.dst >= 0 &&
                  t.dst < plan.workers,
              "edge block and receiver in range");
  const int32_t c = plan.coalesce;
  const int32_t transfer_stages = (sub_stages + c - 1) / c;
  plan.forward.assign(transfer_stages + 1, ForwardStage{});
  plan.backward.assign(transfer_stages > 0 ? transfer_stages + 2 : 1, BackwardStage{});
  std::vector<int32_t> edge_stage(edges.size());
  for (size_t e = 0; e < edges.size(); ++e) {
    FCP_CHECK(sub_stage[e] >= 0 && sub_stage[e] < sub_stages, "sub-stage out of range");
    edge_stage[e] = sub_stage[e] / c;
  }

  // Edges and pairs by receiver; a stable bucket sort of the (src, dst,
  // block)-sorted edges by dst is (dst, src, block) order.
  const Buckets edges_to =
      BucketBy(plan.workers, edges.size(), [&](size_t e) { return edges[e].dst; });
  const Buckets pairs_to = BucketBy(plan.workers, pairs.size(), [&](size_t k) {
    return plan.blocks[pairs[k].q_block].worker;
  });
  // Stage of every pair: 0 for a local one, else the one after its K/V
  // arrives, found one receiver at a time: arrival[kv] is the stage after
  // the edge owner(kv) -> receiver.
  std::vector<int32_t> pair_stage(pairs.size(), 0);
  std::vector<int32_t> arrival(plan.blocks.size(), -1);
  for (int32_t w = 0; w < plan.workers; ++w) {
    for (int32_t e : edges_to.row(w))
      if (edges[e].src == plan.blocks[edges[e].block].worker)
        arrival[edges[e].block] = edge_stage[e] + 1;
    for (int32_t k : pairs_to.row(w)) {
      const int32_t kv = pairs[k].kv_block;
      if (plan.blocks[kv].worker == w) continue;
      FCP_CHECK(arrival[kv] > 0, "every remote pair has a transfer");
      pair_stage[k] = arrival[kv];
    }
    for (int32_t e : edges_to.row(w)) arrival[edges[e].block] = -1;
  }

  // Exact sizes first: the lists are long and filled one element at a time.
  std::vector<size_t> sends(plan.forward.size(), 0), computes(plan.forward.size(), 0);
  for (int32_t stage : edge_stage) ++sends[stage];
  for (int32_t stage : pair_stage) ++computes[stage];
  for (size_t s = 0; s < plan.forward.size(); ++s) {
    plan.forward[s].send.reserve(sends[s]);
    plan.backward[s].send_kv.reserve(sends[s]);
    if (sends[s] > 0) plan.backward[s + 2].send_dkv.reserve(sends[s]);
    plan.forward[s].compute.reserve(computes[s]);
    plan.backward[s].compute.reserve(computes[s]);
  }
  // Visiting edges and pairs in their sorted orders (the dK/dV edges by
  // receiver, reversed) leaves every stage's lists sorted.
  for (size_t e = 0; e < edges.size(); ++e) {
    plan.forward[edge_stage[e]].send.push_back(edges[e]);
    plan.backward[edge_stage[e]].send_kv.push_back(edges[e]);
  }
  for (int32_t e : edges_to.items)
    plan.backward[edge_stage[e] + 2].send_dkv.push_back(
        {edges[e].block, edges[e].dst, edges[e].src});
  for (size_t k = 0; k < pairs.size(); ++k) {
    const BlockPair pair{pairs[k].q_block, pairs[k].kv_block};
    plan.forward[pair_stage[k]].compute.push_back(pair);
    plan.backward[pair_stage[k]].compute.push_back(pair);
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
