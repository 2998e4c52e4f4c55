// Relays through the node (src/plan/node_relays.cpp): hand-drawn plans on
// 2 nodes x 2 workers with worked answers (one network transfer and one
// NVLink transfer of a block two workers of a node need; a partial summed in
// the node; a relay with no send to spare keeps the direct transfer), and
// over random planner workloads with every owner's port hot (and the
// planner's pass equal to the direct plan relayed): relayed plans validate (no redundant
// transfer), keep every compute stage and the stage counts, keep each
// stage within the congestion bound, never send more across nodes, leave
// a second crossing of a block into a node only where the relay had no
// room, and are deterministic.
#include "fcp/node_relays.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/plan.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/required_pairs.h"
#include "fcp/schedule.h"

namespace fcp {
namespace {

// A network ratio that makes every owner's port busier than its compute
// (every crossing may be relayed), and one that makes none.
constexpr double kHot = 1e30;
constexpr double kCold = 0;

RelayCounts Relay(Plan& plan, int32_t node_workers, double ratio = kHot) {
  return RelayThroughNodes(plan, node_workers,
                           RequiredPairs(plan.sequences, plan.blocks, plan.mask), ratio);
}

// A causal plan of 4-token blocks on 4 workers (nodes {0, 1} and {2, 3}):
// sequence s has 4 x blocks[s].size() tokens, its k-th block on blocks[s][k].
Plan FourWorkerPlan(const std::vector<std::vector<int32_t>>& blocks, int32_t coalesce) {
  Plan plan;
  plan.workers = 4;
  plan.coalesce = coalesce;
  plan.block_size = 4;
  std::vector<int64_t> tokens(4, 0);
  for (size_t s = 0; s < blocks.size(); ++s) {
    plan.sequences.push_back(4 * static_cast<int64_t>(blocks[s].size()));
    for (size_t k = 0; k < blocks[s].size(); ++k) {
      plan.blocks.push_back(
          {blocks[s][k], {{static_cast<int32_t>(s), 4 * static_cast<int64_t>(k), 4}}});
      tokens[blocks[s][k]] += 4;
    }
  }
  plan.token_cap = *std::max_element(tokens.begin(), tokens.end());
  return plan;
}

// Nodes {0, 1} and {2, 3}; blocks 0, 1, 2 of one causal sequence on workers
// 0, 2, 3. Worker 2 needs block 0; worker 3 needs blocks 0 and 1. Sub-stages
// (c = 1): stage 0 sends 0 -> 2 (block 0) and 2 -> 3 (block 1), stage 1
// sends 0 -> 3 (block 0), so block 0 crosses into node 1 twice.
Plan TwoNodesPlan() {
  Plan plan = FourWorkerPlan({{0, 2, 3}}, 1);
  const std::vector<RequiredPair> pairs = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  const std::vector<Transfer> edges = TransferEdges(plan, pairs);
  // Edges in (src, dst, block) order: 0->2 b0, 0->3 b0, 2->3 b1.
  BuildStagesFromSubStages(plan, pairs, edges, {0, 1, 0}, 2);
  ValidatePlan(plan, {.forbid_redundant_transfers = true});
  return plan;
}

TEST(NodeRelaysTest, BlockTwoWorkersOfANodeNeedCrossesOnceThenNvlink) {
  Plan plan = TwoNodesPlan();
  const Plan before = plan;
  const RelayCounts counts = Relay(plan, 2);
  EXPECT_EQ(counts.forward_kv, 1);
  EXPECT_EQ(counts.backward_kv, 1);
  EXPECT_EQ(counts.dkv, 1);
  // Block 0: 0 -> 2 across the network in stage 0, 2 -> 3 over NVLink in stage 1.
  EXPECT_EQ(plan.forward[0].send, (std::vector<Transfer>{{0, 0, 2}, {1, 2, 3}}));
  EXPECT_EQ(plan.forward[1].send, (std::vector<Transfer>{{0, 2, 3}}));
  EXPECT_EQ(plan.backward[1].send_kv, (std::vector<Transfer>{{0, 2, 3}}));
  // Partials of block 0: worker 2's (stage 2) into worker 3, whose sum goes
  // to the owner in stage 3, the only dK/dV that crosses the network.
  EXPECT_EQ(plan.backward[2].send_dkv, (std::vector<Transfer>{{0, 2, 3}, {1, 3, 2}}));
  EXPECT_EQ(plan.backward[3].send_dkv, (std::vector<Transfer>{{0, 3, 0}}));
  // Nothing else moved.
  for (size_t s = 0; s < plan.forward.size(); ++s)
    EXPECT_EQ(plan.forward[s].compute, before.forward[s].compute);
  for (size_t s = 0; s < plan.backward.size(); ++s)
    EXPECT_EQ(plan.backward[s].compute, before.backward[s].compute);
  ValidatePlan(plan, {.forbid_redundant_transfers = true});
}

// The validator knows relays: the relayed plan broken one rule at a time.
TEST(NodeRelaysTest, BrokenRelaysFailValidation) {
  Plan relayed = TwoNodesPlan();
  Relay(relayed, 2);
  const auto message = [](const Plan& plan) {
    return testing::ErrorMessage(ErrorCode::kInvalidPlan,
                                 [&] { ValidatePlan(plan, {.forbid_redundant_transfers = true}); });
  };
  ASSERT_EQ(message(relayed), "");
  // The relay sends block 0 in the stage it receives it: not held yet.
  Plan early = relayed;
  early.coalesce = 2;  // room for the moved send: only the holding rule breaks
  early.forward[1].send.clear();
  early.forward[0].send.push_back({0, 2, 3});
  EXPECT_NE(message(early).find("worker 2 does not hold block 0"), std::string::npos)
      << message(early);
  // Worker 3 also gets block 0 straight from its owner: a second receipt.
  Plan twice = relayed;
  twice.coalesce = 2;
  twice.forward[1].send.push_back({0, 0, 3});
  EXPECT_NE(message(twice).find("already holds block 0"), std::string::npos) << message(twice);
  // Worker 2's partial reaches the relay after the relay sent its sum on.
  Plan late = relayed;
  late.backward[2].send_dkv = {{1, 3, 2}};
  late.backward[3].send_dkv.push_back({0, 2, 3});
  EXPECT_NE(message(late).find("already sent its partial dK/dV of block 0"), std::string::npos)
      << message(late);
  // The relay keeps the sum: worker 2's partial never reaches the owner.
  Plan kept = relayed;
  kept.backward[3].send_dkv.clear();
  EXPECT_NE(message(kept).find("never returns its partial dK/dV of block 0"), std::string::npos)
      << message(kept);
}

TEST(NodeRelaysTest, OneWorkerANodeRelaysNothing) {
  Plan plan = TwoNodesPlan();
  const Plan before = plan;
  const RelayCounts counts = Relay(plan, 1);
  EXPECT_EQ(counts.forward_kv + counts.backward_kv + counts.dkv, 0);
  EXPECT_EQ(plan, before);
}

TEST(NodeRelaysTest, OwnerWhosePortIsNotBusyRelaysNothing) {
  Plan plan = TwoNodesPlan();
  const Plan before = plan;
  const RelayCounts counts = Relay(plan, 2, kCold);
  EXPECT_EQ(counts.forward_kv + counts.backward_kv + counts.dkv, 0);
  EXPECT_EQ(plan, before);
  // The gate's edge: block 0 (4 tokens, 4 * 4096 bytes) crosses twice in
  // each pass; worker 0 computes only the pair (0, 0), 10 allowed token
  // pairs, 10 * 4 * 64 * 128 FLOPs. Its forward port is hot once
  // ratio x 2 x 16384 bytes > 0.75 x 327680 FLOPs, i.e. ratio > 7.5; its
  // backward ports (2.5 x the work) once ratio > 18.75.
  plan = before;
  EXPECT_EQ(Relay(plan, 2, 7.4).forward_kv, 0);
  plan = before;
  const RelayCounts forward_only = Relay(plan, 2, 7.6);
  EXPECT_EQ(forward_only.forward_kv, 1);
  EXPECT_EQ(forward_only.backward_kv + forward_only.dkv, 0);
  plan = before;
  const RelayCounts all = Relay(plan, 2, 18.8);
  EXPECT_EQ(all.forward_kv + all.backward_kv + all.dkv, 3);
}

TEST(NodeRelaysTest, SameStageReceiptsStayDirect) {
  // Both receipts of block 0 in stage 0 (c = 2): the first is not held
  // before the stage, so nothing can be relayed.
  Plan plan = FourWorkerPlan({{0, 2, 3}}, 2);
  const std::vector<RequiredPair> pairs = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  BuildStagesFromSubStages(plan, pairs, TransferEdges(plan, pairs), {0, 1, 0}, 2);
  ASSERT_EQ(plan.forward[0].send.size(), 3u);
  const Plan before = plan;
  EXPECT_EQ(Relay(plan, 2).forward_kv, 0);
  EXPECT_EQ(plan.forward, before.forward);
}

TEST(NodeRelaysTest, RelayWithNoSendToSpareKeepsTheDirectTransfer) {
  // As TwoNodesPlan, plus a second sequence: its block 3 on worker 2 is
  // needed by worker 1 (block 4) and sent in stage 1, so worker 2 already
  // sends c = 1 block in the stage where it would relay block 0 to worker 3.
  Plan plan = FourWorkerPlan({{0, 2, 3}, {2, 1}}, 1);
  const std::vector<RequiredPair> pairs = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  const std::vector<Transfer> edges = TransferEdges(plan, pairs);
  // (src, dst, block): 0->2 b0, 0->3 b0, 2->1 b3, 2->3 b1.
  ASSERT_EQ(edges.size(), 4u);
  BuildStagesFromSubStages(plan, pairs, edges, {0, 1, 1, 0}, 2);
  ValidatePlan(plan, {.forbid_redundant_transfers = true});
  EXPECT_EQ(Relay(plan, 2).forward_kv, 0);  // worker 2 sends c = 1 in stage 1
  EXPECT_EQ(plan.forward[1].send, (std::vector<Transfer>{{0, 0, 3}, {3, 2, 1}}));
  ValidatePlan(plan, {.forbid_redundant_transfers = true});
}

// ---- random planner workloads ---------------------------------------------

struct Crossings {
  int64_t kv = 0, dkv = 0;  // transfers between nodes
};

Crossings CountCrossings(const Plan& plan, int32_t node) {
  Crossings c;
  for (const ForwardStage& s : plan.forward)
    for (const Transfer& t : s.send) c.kv += t.src / node != t.dst / node;
  for (const BackwardStage& s : plan.backward) {
    for (const Transfer& t : s.send_kv) c.kv += t.src / node != t.dst / node;
    for (const Transfer& t : s.send_dkv) c.dkv += t.src / node != t.dst / node;
  }
  return c;
}

// A K/V list's second and later crossings of a block into a node lie in the
// stage of its first, or in a stage where the first receiver already sends c.
void ExpectCrossingsOnlyWhereNoRoom(const Plan& plan,
                                    const std::vector<std::vector<Transfer>>& stages, int32_t node,
                                    const char* what) {
  std::map<std::pair<int32_t, int32_t>, std::pair<size_t, int32_t>>
      first;  // (block, node) -> (stage, worker)
  for (size_t s = 0; s < stages.size(); ++s) {
    std::vector<int32_t> sends(plan.workers, 0);
    for (const Transfer& t : stages[s]) ++sends[t.src];
    for (const Transfer& t : stages[s]) {
      if (t.src / node == t.dst / node) continue;
      const auto [it, fresh] = first.insert({{t.block, t.dst / node}, {s, t.dst}});
      if (fresh || it->second.first == s) continue;
      EXPECT_EQ(sends[it->second.second], plan.coalesce)
          << what << " stage " << s << ": block " << t.block << " crosses into node "
          << t.dst / node << " again while worker " << it->second.second << " could relay it";
    }
  }
}

TEST(NodeRelaysTest, RandomWorkloadsGiveValidDeterministicRelayedPlans) {
  std::mt19937_64 rng(39);
  int64_t relayed_total = 0;
  for (int trial = 0; trial < 60; ++trial) {
    PlannerConfig config;
    config.workers = static_cast<int32_t>(4 + rng() % 29);
    config.node_workers = static_cast<int32_t>(2 + rng() % 4);
    config.block_size = static_cast<int64_t>(16 << (rng() % 3));
    config.coalesce = static_cast<int32_t>(1 + rng() % 3);
    config.mask = rng() % 4 == 0 ? Mask{MaskKind::kFull, 0} : Mask{MaskKind::kCausal, 0};
    std::vector<int64_t> lengths(1 + rng() % 8);
    for (int64_t& l : lengths) l = static_cast<int64_t>(1 + rng() % 600);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " N=" << config.workers << " node="
                                      << config.node_workers << " c=" << config.coalesce);
    const Plan direct = MakePlan(lengths, config);
    // The planner's pass: the direct plan relayed at the configured network ratio.
    config.node_relays = true;
    const Plan planned = MakePlan(lengths, config);
    EXPECT_EQ(planned, MakePlan(lengths, config)) << "not deterministic";
    Plan expected = direct;
    Relay(expected, config.node_workers, config.network_flops_per_byte);
    expected.planner_options = planned.planner_options;  // records node_relays
    EXPECT_EQ(planned, expected);
    // Every owner hot: every crossing that can be relayed is.
    Plan relayed = direct;
    Relay(relayed, config.node_workers);
    ASSERT_NO_THROW(ValidatePlan(relayed, {.forbid_redundant_transfers = true}));
    // Same blocks, stages and computes; only transfer ends differ.
    ASSERT_EQ(relayed.blocks, direct.blocks);
    ASSERT_EQ(relayed.forward.size(), direct.forward.size());
    ASSERT_EQ(relayed.backward.size(), direct.backward.size());
    for (size_t s = 0; s < direct.forward.size(); ++s) {
      EXPECT_EQ(relayed.forward[s].compute, direct.forward[s].compute);
      EXPECT_EQ(relayed.forward[s].send.size(), direct.forward[s].send.size());
    }
    for (size_t s = 0; s < direct.backward.size(); ++s) {
      EXPECT_EQ(relayed.backward[s].compute, direct.backward[s].compute);
      EXPECT_EQ(relayed.backward[s].send_kv.size(), direct.backward[s].send_kv.size());
      EXPECT_EQ(relayed.backward[s].send_dkv.size(), direct.backward[s].send_dkv.size());
    }
    const Crossings before = CountCrossings(direct, config.node_workers);
    const Crossings after = CountCrossings(relayed, config.node_workers);
    EXPECT_LE(after.kv, before.kv);
    EXPECT_LE(after.dkv, before.dkv);
    relayed_total += before.kv - after.kv + before.dkv - after.dkv;
    std::vector<std::vector<Transfer>> forward, backward_kv;
    for (const ForwardStage& s : relayed.forward) forward.push_back(s.send);
    for (const BackwardStage& s : relayed.backward) backward_kv.push_back(s.send_kv);
    ExpectCrossingsOnlyWhereNoRoom(relayed, forward, config.node_workers, "forward");
    ExpectCrossingsOnlyWhereNoRoom(relayed, backward_kv, config.node_workers, "backward");
  }
  EXPECT_GT(relayed_total, 0) << "no workload relayed anything: the test checks nothing";
}

}  // namespace
}  // namespace fcp
