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
using detail::RowIndex;

bool TransferLess(const Transfer& a, const Transfer& b) {
  if (a.src != b.src) return a.src < b.src;
  if (a.dst != b.dst) return a.dst < b.dst;
  return a.block < b.block;
}

// The pairs grouped by receiver (the owner of the query block) without
// moving them: each query block's row of the (q-sorted) pairs, and each
// worker's blocks. Owners are copied into one compact array: the pair loops
// below look one up per pair, and a Block is much larger than its worker.
struct PairsByReceiver {
  std::vector<int32_t> owner;   // of each block
  RowIndex<int32_t> pair_rows;  // row q: the pairs (and their pair stages) of query block q
  Buckets blocks_of;            // the blocks of each worker, ascending

  // Calls f(k) for every pair k whose query block worker w owns.
  template <typename F>
  void ForEachPair(int32_t w, F f) const {
    for (int32_t q : blocks_of.row(w))
      for (int32_t k = pair_rows.offset[q]; k < pair_rows.offset[q + 1]; ++k) f(k);
  }
};

// Requires block owners in [0, plan.workers) and pairs sorted by q_block
// (internal errors otherwise).
PairsByReceiver GroupPairs(const Plan& plan, const std::vector<RequiredPair>& pairs) {
  const auto blocks = static_cast<int32_t>(plan.blocks.size());
  PairsByReceiver g;
  g.owner.resize(blocks);
  for (int32_t b = 0; b < blocks; ++b) {
    g.owner[b] = plan.blocks[b].worker;
    FCP_CHECK(g.owner[b] >= 0 && g.owner[b] < plan.workers, "block owners in [0, workers)");
  }
  // Rows by counting: the pairs are sorted by q_block, so row q is where
  // they already stand.
  g.pair_rows.StartCounting(static_cast<size_t>(blocks));
  int32_t q = 0;  // the previous pair's query block
  for (const RequiredPair& p : pairs) {
    FCP_CHECK(p.q_block >= 0 && p.q_block < blocks && p.kv_block >= 0 && p.kv_block < blocks,
              "pair blocks in range");
    FCP_CHECK(p.q_block >= q, "pairs sorted by q_block");
    q = p.q_block;
    g.pair_rows.Count(static_cast<size_t>(q));
  }
  g.pair_rows.FinishCounting();
  g.blocks_of = BucketBy(plan.workers, plan.blocks.size(), [&](int32_t b) { return g.owner[b]; });
  return g;
}

bool StrictlySorted(const std::vector<Transfer>& edges) {
  return std::adjacent_find(edges.begin(), edges.end(), [](const Transfer& a, const Transfer& b) {
           return !TransferLess(a, b);
         }) == edges.end();
}

std::vector<Transfer> TransferEdges(const Plan& plan, const std::vector<RequiredPair>& pairs,
                                    const PairsByReceiver& g) {
  // Per receiver, the K/V blocks it needs from other workers, each once and
  // ascending, all in one array receiver by receiver: (dst, block) order. A
  // stable bucket sort by sender then gives (src, dst, block); the senders'
  // edge counts are taken on the way.
  detail::Rows<int32_t> needed;  // row w: the blocks receiver w needs
  std::vector<int32_t> seen(plan.blocks.size(), -1);
  RowIndex<int32_t> by_sender;  // the edges' rows by sender, counted on the way
  by_sender.StartCounting(static_cast<size_t>(plan.workers));
  needed.items.reserve(pairs.size());  // at most one edge per pair; only the used part is touched
  needed.offset.assign(1, 0);
  for (int32_t w = 0; w < plan.workers; ++w) {
    const int32_t first = needed.offset.back();
    g.ForEachPair(w, [&](int32_t k) {
      const int32_t kv = pairs[k].kv_block;
      if (g.owner[kv] == w || seen[kv] == w) return;
      seen[kv] = w;
      needed.items.push_back(kv);
      by_sender.Count(static_cast<size_t>(g.owner[kv]));
    });
    // Often already sorted: the rows of a worker's consecutive query blocks
    // of one sequence list their new K/V blocks in ascending order.
    const auto row = needed.items.begin() + first;
    if (!std::is_sorted(row, needed.items.end())) std::sort(row, needed.items.end());
    needed.offset.push_back(static_cast<int32_t>(needed.items.size()));
  }
  by_sender.FinishCounting();
  std::vector<int32_t> next = by_sender.RowStarts();
  std::vector<Transfer> edges(needed.items.size());
  for (int32_t w = 0; w < plan.workers; ++w)
    for (int32_t kv : needed.row(w)) {
      const int32_t src = g.owner[kv];
      edges[next[src]++] = {kv, src, w};
    }
  return edges;
}

void BuildStagesFromSubStages(Plan& plan, const std::vector<RequiredPair>& pairs,
                              const PairsByReceiver& g, const std::vector<Transfer>& edges,
                              const std::vector<int32_t>& sub_stage, int32_t sub_stages,
                              StageGrouping grouping) {
  FCP_CHECK(sub_stage.size() == edges.size(), "one sub-stage per edge");
  FCP_CHECK(StrictlySorted(edges), "edges sorted by (src, dst, block), unique");
  for (const Transfer& t : edges)
    FCP_CHECK(t.block >= 0 && static_cast<size_t>(t.block) < plan.blocks.size() && t.dst >= 0 &&
                  t.dst < plan.workers,
              "edge block and receiver in range");
  const int32_t c = plan.coalesce;
  // In 64 bits: sub_stages + c - 1 overflows an int32 for c near 2^31.
  const auto transfer_stages = static_cast<int32_t>((int64_t{sub_stages} + c - 1) / c);
  plan.forward.assign(transfer_stages + 1, ForwardStage{});
  plan.backward.assign(transfer_stages > 0 ? transfer_stages + 2 : 1, BackwardStage{});
  const int32_t run = SpreadRunColours(c);  // kRoundRobin's
  std::vector<int32_t> edge_stage(edges.size());
  std::vector<int32_t> sends(plan.forward.size(), 0), computes(plan.forward.size(), 0);
  for (size_t e = 0; e < edges.size(); ++e) {
    FCP_CHECK(sub_stage[e] >= 0 && sub_stage[e] < sub_stages, "sub-stage out of range");
    edge_stage[e] = grouping == StageGrouping::kRoundRobin ? sub_stage[e] / run % transfer_stages
                                                           : sub_stage[e] / c;
    ++sends[edge_stage[e]];
  }

  // Edges by receiver; a stable bucket sort of the (src, dst, block)-sorted
  // edges by dst is (dst, src, block) order.
  const Buckets edges_to =
      BucketBy(plan.workers, edges.size(), [&](int32_t e) { return edges[e].dst; });
  // Stage of every pair: 0 for a local one (but see below), else the one after its K/V
  // arrives, found one receiver at a time: arrival[kv] is the stage after
  // the edge owner(kv) -> receiver.
  std::vector<int32_t> pair_stage(pairs.size(), 0);
  std::vector<int32_t> arrival(plan.blocks.size(), -1);
  for (int32_t w = 0; w < plan.workers; ++w) {
    for (int32_t e : edges_to.row(w))
      if (edges[e].src == g.owner[edges[e].block]) arrival[edges[e].block] = edge_stage[e] + 1;
    g.ForEachPair(w, [&](int32_t k) {
      const int32_t kv = pairs[k].kv_block;
      if (g.owner[kv] == w) return;
      FCP_CHECK(arrival[kv] > 0, "every remote pair has a transfer");
      pair_stage[k] = arrival[kv];
    });
    for (int32_t e : edges_to.row(w)) arrival[edges[e].block] = -1;
  }
  // A piece of a short sequence split between workers (one segment, the
  // sequence shorter than a block) computes its local pairs in the last
  // stage of its remote ones: the kernel then sees each query row's keys in
  // one pass, at the efficiency of the whole short sequence instead of two
  // fragments (docs/planner.md, steps 1 and 9). Blocks of long sequences keep their
  // local pairs in stage 0, where they hide the first transfers.
  for (size_t q = 0; q < g.pair_rows.rows(); ++q) {
    const Block& block = plan.blocks[q];
    const auto row = g.pair_rows.Slice(std::span(pair_stage), q);
    if (block.segments.size() == 1 && plan.sequences[block.segments[0].seq] < plan.block_size) {
      const int32_t last_remote = row.empty() ? 0 : *std::max_element(row.begin(), row.end());
      for (int32_t& stage : row)
        if (stage == 0) stage = last_remote;
    }
    for (int32_t stage : row) ++computes[stage];
  }

  // Each stage's lists at their exact sizes, filled through a cursor per
  // stage. Visiting edges and pairs in their sorted orders (the dK/dV edges
  // by receiver, reversed) leaves every stage's lists sorted.
  std::vector<Transfer*> send_at(plan.forward.size()), send_dkv_at(plan.forward.size());
  std::vector<BlockPair*> compute_at(plan.forward.size());
  for (size_t s = 0; s < plan.forward.size(); ++s) {
    plan.forward[s].send.resize(sends[s]);
    plan.forward[s].compute.resize(computes[s]);
    send_at[s] = plan.forward[s].send.data();
    compute_at[s] = plan.forward[s].compute.data();
    if (sends[s] > 0) {  // only stages below transfer_stages send, so s + 2 exists
      plan.backward[s + 2].send_dkv.resize(sends[s]);
      send_dkv_at[s] = plan.backward[s + 2].send_dkv.data();
    }
  }
  for (size_t e = 0; e < edges.size(); ++e) *send_at[edge_stage[e]]++ = edges[e];
  for (int32_t e : edges_to.items)
    *send_dkv_at[edge_stage[e]]++ = {edges[e].block, edges[e].dst, edges[e].src};
  for (size_t k = 0; k < pairs.size(); ++k)
    *compute_at[pair_stage[k]]++ = {pairs[k].q_block, pairs[k].kv_block};
  // The backward pulls the same K/V and computes the same pairs, stage by stage.
  for (size_t s = 0; s < plan.forward.size(); ++s) {
    plan.backward[s].send_kv = plan.forward[s].send;
    plan.backward[s].compute = plan.forward[s].compute;
  }
}

}  // namespace

int32_t SpreadRunColours(int32_t coalesce) {
  FCP_CHECK(coalesce >= 1, "coalesce >= 1");
  int32_t run = std::max(1, coalesce / kSpreadRunsPerStage);
  while (coalesce % run != 0) --run;  // ends at 1 at the latest
  return run;
}

void ReverseBackwardTransferStages(Plan& plan) {
  const auto stages = static_cast<int32_t>(plan.forward.size());
  if (stages < 3) return;                // one transfer stage: nothing to reorder
  const int32_t transfers = stages - 1;  // T: forward stages 0..T-1 send
  FCP_CHECK(plan.backward.size() == static_cast<size_t>(transfers) + 2,
            "a backward of BuildStages's shape");
  std::vector<BackwardStage> reordered(plan.backward.size());
  reordered[0].compute = std::move(plan.backward[0].compute);
  for (int32_t e = 0; e < transfers; ++e) {
    reordered[transfers - 1 - e].send_kv = std::move(plan.backward[e].send_kv);
    reordered[transfers + 1 - e].send_dkv = std::move(plan.backward[e + 2].send_dkv);
  }
  for (int32_t a = 1; a <= transfers; ++a)
    reordered[transfers + 1 - a].compute = std::move(plan.backward[a].compute);
  plan.backward = std::move(reordered);
}

std::vector<Transfer> TransferEdges(const Plan& plan, const std::vector<RequiredPair>& pairs) {
  return TransferEdges(plan, pairs, GroupPairs(plan, pairs));
}

void BuildStagesFromSubStages(Plan& plan, const std::vector<RequiredPair>& pairs,
                              const std::vector<Transfer>& edges,
                              const std::vector<int32_t>& sub_stage, int32_t sub_stages,
                              StageGrouping grouping) {
  BuildStagesFromSubStages(plan, pairs, GroupPairs(plan, pairs), edges, sub_stage, sub_stages,
                           grouping);
}

void BuildStages(Plan& plan, const std::vector<RequiredPair>& pairs, bool self_check,
                 StageGrouping grouping) {
  const PairsByReceiver g = GroupPairs(plan, pairs);  // once for both steps
  const std::vector<Transfer> edges = TransferEdges(plan, pairs, g);
  std::vector<BipartiteEdge> graph(edges.size());
  for (size_t e = 0; e < edges.size(); ++e) graph[e] = {edges[e].src, edges[e].dst};
  const EdgeColoring coloring = ColorBipartiteEdges(plan.workers, plan.workers, graph);
  if (self_check) CheckEdgeColoring(plan.workers, plan.workers, graph, coloring);
  BuildStagesFromSubStages(plan, pairs, g, edges, coloring.color, coloring.num_colors, grouping);
  if (plan.workers <= kReversedBackwardMaxWorkers) ReverseBackwardTransferStages(plan);
}

}  // namespace fcp
