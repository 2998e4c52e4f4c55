#include "baseline_common.h"

#include <algorithm>

#include "fcp/baselines.h"
#include "fcp/error.h"

namespace fcp {

int64_t ZigZagChunkBegin(int64_t length, int32_t chunks, int32_t c) {
  return static_cast<int64_t>((static_cast<__int128>(c) * length) / chunks);
}

int32_t ZigZagMember(int32_t members, int32_t c) { return c < members ? c : 2 * members - 1 - c; }

namespace baselines {

void AddZigZagSequence(Plan& plan, int32_t seq, const std::vector<int32_t>& members,
                       std::vector<int32_t>& member_blocks) {
  const int32_t k = static_cast<int32_t>(members.size());
  const int64_t length = plan.sequences[seq];
  member_blocks.resize(k, -1);
  for (int32_t m = 0; m < k; ++m) {
    for (int32_t c : {m, 2 * k - 1 - m}) {
      const int64_t begin = ZigZagChunkBegin(length, 2 * k, c);
      const int64_t end = ZigZagChunkBegin(length, 2 * k, c + 1);
      if (end <= begin) continue;
      if (member_blocks[m] < 0) {
        member_blocks[m] = static_cast<int32_t>(plan.blocks.size());
        plan.blocks.push_back({members[m], {}});
      }
      plan.blocks[member_blocks[m]].segments.push_back({seq, begin, end - begin});
    }
  }
}

void AddRing(Plan& plan, const std::vector<int32_t>& ring_blocks, const RequiredFn& required) {
  const int32_t k = static_cast<int32_t>(ring_blocks.size());
  if (plan.forward.size() < static_cast<size_t>(k)) plan.forward.resize(k);
  if (plan.backward.size() < static_cast<size_t>(k + 1)) plan.backward.resize(k + 1);
  const auto worker = [&](int32_t member) { return plan.blocks[ring_blocks[member]].worker; };
  for (int32_t jm = 0; jm < k; ++jm) {
    const int32_t block = ring_blocks[jm];
    int32_t last_use = -1, first_remote_use = -1;
    for (int32_t s = 0; s < k; ++s) {
      const int32_t r = (jm + s) % k;
      if (!required(ring_blocks[r], block)) continue;
      plan.forward[s].compute.push_back({ring_blocks[r], block});
      plan.backward[s].compute.push_back({ring_blocks[r], block});
      last_use = s;
      if (s >= 1 && first_remote_use < 0) first_remote_use = s;
    }
    for (int32_t s = 0; s < last_use; ++s) {
      const Transfer t{block, worker((jm + s) % k), worker((jm + s + 1) % k)};
      plan.forward[s].send.push_back(t);
      plan.backward[s].send_kv.push_back(t);
    }
    if (first_remote_use < 0) continue;
    for (int32_t s = first_remote_use; s < k; ++s)
      plan.backward[s + 1].send_dkv.push_back(
          {block, worker((jm + s) % k), worker((jm + s + 1) % k)});
  }
}

std::vector<PullEdge> PullEdges(const Plan& plan, const std::vector<RequiredPair>& required) {
  std::vector<PullEdge> edges;
  for (const RequiredPair& p : required) {
    const int32_t w = plan.blocks[p.q_block].worker;
    if (plan.blocks[p.kv_block].worker != w) edges.push_back({p.kv_block, w, 0});
  }
  std::sort(edges.begin(), edges.end(), [](const PullEdge& a, const PullEdge& b) {
    return a.dst != b.dst ? a.dst < b.dst : a.block < b.block;
  });
  edges.erase(std::unique(edges.begin(), edges.end(),
                          [](const PullEdge& a, const PullEdge& b) {
                            return a.dst == b.dst && a.block == b.block;
                          }),
              edges.end());
  return edges;
}

void BuildPullStages(Plan& plan, const std::vector<RequiredPair>& required,
                     const std::vector<PullEdge>& edges, bool pipelined) {
  std::vector<PullEdge> sorted = edges;
  std::sort(sorted.begin(), sorted.end(), [](const PullEdge& a, const PullEdge& b) {
    return a.dst != b.dst ? a.dst < b.dst : a.block < b.block;
  });
  const auto edge_of = [&](int32_t dst, int32_t block) -> const PullEdge& {
    auto it = std::lower_bound(sorted.begin(), sorted.end(), PullEdge{block, dst, 0},
                               [](const PullEdge& a, const PullEdge& b) {
                                 return a.dst != b.dst ? a.dst < b.dst : a.block < b.block;
                               });
    FCP_CHECK(it != sorted.end() && it->dst == dst && it->block == block,
              "a remote pair has no transfer edge");
    return *it;
  };
  int32_t transfer_stages = 0;
  for (const PullEdge& e : sorted) transfer_stages = std::max(transfer_stages, e.stage + 1);
  if (!pipelined && !sorted.empty()) transfer_stages = 1;
  const int32_t compute_offset = sorted.empty() ? 0 : 1;
  // Without transfers everything is local: one stage each way.
  plan.forward.assign(std::max(1, transfer_stages + compute_offset), {});
  plan.backward.assign(std::max(1, transfer_stages + 2 * compute_offset), {});
  for (const PullEdge& e : sorted) {
    const int32_t stage = pipelined ? e.stage : 0;
    const Transfer kv{e.block, plan.blocks[e.block].worker, e.dst};
    plan.forward[stage].send.push_back(kv);
    plan.backward[stage].send_kv.push_back(kv);
    plan.backward[stage + 2].send_dkv.push_back({e.block, e.dst, plan.blocks[e.block].worker});
  }
  for (const RequiredPair& p : required) {
    const int32_t w = plan.blocks[p.q_block].worker;
    int32_t stage = 0;
    if (!pipelined)
      stage = compute_offset;
    else if (plan.blocks[p.kv_block].worker != w)
      stage = edge_of(w, p.kv_block).stage + 1;
    plan.forward[stage].compute.push_back({p.q_block, p.kv_block});
    plan.backward[stage].compute.push_back({p.q_block, p.kv_block});
  }
}

namespace {

// The most transfers of `transfers` that one worker sends or receives: the
// coalesce factor the stage needs (`sends`, `receives` are scratch).
int32_t MostTransfersAtOneWorker(const std::vector<Transfer>& transfers, int32_t workers,
                                 std::vector<int32_t>& sends, std::vector<int32_t>& receives) {
  sends.assign(workers, 0);
  receives.assign(workers, 0);
  int32_t most = 0;
  for (const Transfer& t : transfers) {
    most = std::max(most, ++sends[t.src]);
    most = std::max(most, ++receives[t.dst]);
  }
  return most;
}

}  // namespace

void FinishPlan(Plan& plan, int32_t min_coalesce) {
  // A stage is empty when every list is (remote-compute lists included).
  while (!plan.forward.empty() && plan.forward.back() == ForwardStage{}) plan.forward.pop_back();
  while (!plan.backward.empty() && plan.backward.back() == BackwardStage{})
    plan.backward.pop_back();
  std::vector<int64_t> tokens(plan.workers, 0);
  for (const Block& b : plan.blocks) tokens[b.worker] += b.tokens();
  plan.token_cap = std::max<int64_t>(1, *std::max_element(tokens.begin(), tokens.end()));
  int32_t coalesce = std::max(1, min_coalesce);
  std::vector<int32_t> sends, receives;
  const auto most = [&](const std::vector<Transfer>& list) {
    coalesce = std::max(coalesce, MostTransfersAtOneWorker(list, plan.workers, sends, receives));
  };
  for (const ForwardStage& s : plan.forward)
    for (const auto* list : {&s.send, &s.send_q, &s.send_o}) most(*list);
  for (const BackwardStage& s : plan.backward)
    for (const auto* list : {&s.send_kv, &s.send_dkv, &s.send_q, &s.send_dq}) most(*list);
  plan.coalesce = coalesce;
}

Plan FcpAssignment(const std::vector<int64_t>& lengths, const PlannerConfig& config,
                   const std::string& planner) {
  Plan plan = MakeFcpPlan(lengths, config);
  plan.planner = planner;
  plan.forward.clear();
  plan.backward.clear();
  return plan;
}

}  // namespace baselines
}  // namespace fcp
