#include "fcp/schedule.h"

#include <algorithm>
#include <numeric>

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
  const int32_t workers = plan.workers;
  bool in_range = workers > 0;
  for (const Block& b : plan.blocks) in_range = in_range && b.worker >= 0 && b.worker < workers;
  std::vector<Transfer> edges;
  if (!in_range) {  // no worker buckets: one comparison sort
    for (const RequiredPair& p : pairs) {
      const int32_t src = plan.blocks[p.kv_block].worker, dst = plan.blocks[p.q_block].worker;
      if (src != dst) edges.push_back({p.kv_block, src, dst});
    }
    std::sort(edges.begin(), edges.end(), TransferLess);
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
    return edges;
  }
  // Bucket the remote pairs by sender, then sort each bucket by (dst, block)
  // packed in one integer: the same order, without a comparator call.
  std::vector<int32_t> begin(static_cast<size_t>(workers) + 1, 0);
  for (const RequiredPair& p : pairs) {
    const int32_t src = plan.blocks[p.kv_block].worker;
    if (src != plan.blocks[p.q_block].worker) ++begin[src + 1];
  }
  for (int32_t w = 0; w < workers; ++w) begin[w + 1] += begin[w];
  std::vector<uint64_t> keys(begin.back());
  std::vector<int32_t> fill(begin.begin(), begin.end() - 1);
  for (const RequiredPair& p : pairs) {
    const int32_t src = plan.blocks[p.kv_block].worker, dst = plan.blocks[p.q_block].worker;
    if (src != dst)
      keys[fill[src]++] = static_cast<uint64_t>(dst) << 32 | static_cast<uint32_t>(p.kv_block);
  }
  edges.reserve(keys.size());
  for (int32_t src = 0; src < workers; ++src) {
    const auto first = keys.begin() + begin[src], last = keys.begin() + begin[src + 1];
    std::sort(first, last);
    for (auto k = first; k != last; ++k)
      if (k == first || *k != *(k - 1))
        edges.push_back({static_cast<int32_t>(*k & 0xffffffffu), src, static_cast<int32_t>(*k >> 32)});
  }
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
  std::vector<size_t> sends(plan.forward.size(), 0);
  for (size_t e = 0; e < edges.size(); ++e) {
    FCP_CHECK(sub_stage[e] >= 0 && sub_stage[e] < sub_stages, "sub-stage out of range");
    ++sends[sub_stage[e] / c];
  }

  // The edges of each block, in edge order (so sorted by (src, dst)), for
  // finding the edge of a remote pair among its block's few.
  std::vector<int32_t> block_begin(plan.blocks.size() + 1, 0);
  for (const Transfer& t : edges) {
    FCP_CHECK(t.block >= 0 && static_cast<size_t>(t.block) < plan.blocks.size(), "edge block in range");
    ++block_begin[t.block + 1];
  }
  for (size_t b = 0; b < plan.blocks.size(); ++b) block_begin[b + 1] += block_begin[b];
  std::vector<int32_t> by_block(edges.size());
  {
    std::vector<int32_t> fill(block_begin.begin(), block_begin.end() - 1);
    for (size_t e = 0; e < edges.size(); ++e) by_block[fill[edges[e].block]++] = static_cast<int32_t>(e);
  }
  // Stage of every pair: 0 for local ones, else the one after its K/V arrives.
  std::vector<int32_t> pair_stage(pairs.size(), 0);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const RequiredPair& p = pairs[k];
    const int32_t worker = plan.blocks[p.q_block].worker;
    if (plan.blocks[p.kv_block].worker == worker) continue;
    // The edge that brings kv_block to this worker.
    const Transfer key{p.kv_block, plan.blocks[p.kv_block].worker, worker};
    const auto first = by_block.begin() + block_begin[p.kv_block];
    const auto last = by_block.begin() + block_begin[p.kv_block + 1];
    auto it = std::lower_bound(first, last, key, [&](int32_t e, const Transfer& k) {
      return TransferLess(edges[e], k);
    });
    FCP_CHECK(it != last && edges[*it] == key, "every remote pair has a transfer");
    pair_stage[k] = sub_stage[*it] / c + 1;
  }

  // Exact sizes first: the lists are long and filled one element at a time.
  std::vector<size_t> computes(plan.forward.size(), 0);
  for (int32_t stage : pair_stage) ++computes[stage];
  for (size_t s = 0; s < plan.forward.size(); ++s) {
    plan.forward[s].send.reserve(sends[s]);
    plan.backward[s].send_kv.reserve(sends[s]);
    if (sends[s] > 0) plan.backward[s + 2].send_dkv.reserve(sends[s]);
    plan.forward[s].compute.reserve(computes[s]);
    plan.backward[s].compute.reserve(computes[s]);
  }

  for (size_t e = 0; e < edges.size(); ++e) {
    const int32_t stage = sub_stage[e] / c;
    plan.forward[stage].send.push_back(edges[e]);
    plan.backward[stage].send_kv.push_back(edges[e]);
  }
  // The reversed dK/dV edges, visited by receiver: a stable bucket sort by
  // dst of the (src, dst, block)-sorted edges is (dst, src, block) order, so
  // every stage's list comes out sorted. Receivers outside [0, workers)
  // (not from a planner) fall back to sorting each stage.
  std::vector<int32_t> dst_begin(static_cast<size_t>(std::max(plan.workers, 0)) + 1, 0);
  bool by_receiver = plan.workers > 0;
  for (const Transfer& t : edges) {
    by_receiver = by_receiver && t.dst >= 0 && t.dst < plan.workers;
    if (by_receiver) ++dst_begin[t.dst + 1];
  }
  std::vector<int32_t> reversed(edges.size());
  if (by_receiver) {
    for (size_t w = 0; w + 1 < dst_begin.size(); ++w) dst_begin[w + 1] += dst_begin[w];
    for (size_t e = 0; e < edges.size(); ++e) reversed[dst_begin[edges[e].dst]++] = static_cast<int32_t>(e);
  } else {
    std::iota(reversed.begin(), reversed.end(), 0);
  }
  for (int32_t e : reversed)
    plan.backward[sub_stage[e] / c + 2].send_dkv.push_back({edges[e].block, edges[e].dst, edges[e].src});
  if (!by_receiver)
    for (BackwardStage& s : plan.backward) std::sort(s.send_dkv.begin(), s.send_dkv.end(), TransferLess);

  // Pairs are visited in sorted order, so every stage's computes are sorted.
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
