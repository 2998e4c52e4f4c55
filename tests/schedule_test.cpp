// The schedule (src/plan/schedule.cpp): transfer edges and stages of small
// hand-drawn plans with worked answers, and the invariants of BuildStages
// (every stage congestion-free within c, exactly ceil(Delta/c) transfer
// stages whether the colours are grouped consecutively or round-robin, each pair computed once
// after its K/V arrives, the backward taking the forward's transfer stages in reverse order) over
// random small plans.
#include "fcp/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "fcp/plan.h"
#include "fcp/required_pairs.h"

namespace fcp {
namespace {

// One sequence of `owners.size()` blocks of `block_tokens` each, block b on
// worker owners[b]; block_size = block_tokens, so no block is a short
// sequence's piece and every local pair runs in stage 0.
Plan ChainPlan(int32_t workers, const std::vector<int32_t>& owners, int32_t coalesce,
               int64_t block_tokens = 4) {
  Plan plan;
  plan.workers = workers;
  plan.coalesce = coalesce;
  plan.block_size = block_tokens;
  plan.sequences = {block_tokens * static_cast<int64_t>(owners.size())};
  for (size_t b = 0; b < owners.size(); ++b)
    plan.blocks.push_back({owners[b], {{0, block_tokens * static_cast<int64_t>(b), block_tokens}}});
  return plan;
}

std::vector<RequiredPair> Pairs(const std::vector<std::pair<int32_t, int32_t>>& qk) {
  std::vector<RequiredPair> pairs;
  for (auto [q, k] : qk) pairs.push_back({q, k, 1});
  return pairs;
}

// Causal pairs of three blocks, one a worker: (0,0) (1,0) (1,1) (2,0) (2,1) (2,2).
std::vector<RequiredPair> CausalThree() {
  return Pairs({{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 2}});
}

TEST(ScheduleTest, TransferEdgesListEachNeededRemoteBlockOnceSorted) {
  const Plan plan = ChainPlan(3, {0, 1, 2}, 1);
  const std::vector<Transfer> edges = TransferEdges(plan, CausalThree());
  // Worker 1 needs block 0; worker 2 needs blocks 0 and 1. (src, dst, block) order.
  const std::vector<Transfer> expected{{0, 0, 1}, {0, 0, 2}, {1, 1, 2}};
  EXPECT_EQ(edges, expected);
}

TEST(ScheduleTest, TransferEdgesSkipLocalAndRepeatedNeeds) {
  // Blocks 0, 1 on worker 0, block 2 on worker 1: worker 1's block 2 needs
  // blocks 0 and 1 (two edges); worker 0 needs nothing. Block 3 on worker 1
  // needs block 0 again: no second edge 0 -> 1 for block 0.
  const Plan plan = ChainPlan(2, {0, 0, 1, 1}, 1);
  const std::vector<Transfer> edges =
      TransferEdges(plan, Pairs({{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {3, 0}, {3, 3}}));
  const std::vector<Transfer> expected{{0, 0, 1}, {1, 0, 1}};
  EXPECT_EQ(edges, expected);
}

TEST(ScheduleTest, OneSubStageAStageGivesWorkedStages) {
  Plan plan = ChainPlan(3, {0, 1, 2}, 1);
  const std::vector<RequiredPair> pairs = CausalThree();
  const std::vector<Transfer> edges = TransferEdges(plan, pairs);
  // Sub-stage 0: 0 -> 1 (block 0) and 1 -> 2 (block 1), a matching; sub-stage 1: 0 -> 2.
  BuildStagesFromSubStages(plan, pairs, edges, {0, 1, 0}, 2);
  ASSERT_EQ(plan.forward.size(), 3u);  // two transfer stages and a last compute
  EXPECT_EQ(plan.forward[0].send, (std::vector<Transfer>{{0, 0, 1}, {1, 1, 2}}));
  EXPECT_EQ(plan.forward[1].send, (std::vector<Transfer>{{0, 0, 2}}));
  EXPECT_TRUE(plan.forward[2].send.empty());
  EXPECT_EQ(plan.forward[0].compute, (std::vector<BlockPair>{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(plan.forward[1].compute, (std::vector<BlockPair>{{1, 0}, {2, 1}}));
  EXPECT_EQ(plan.forward[2].compute, (std::vector<BlockPair>{{2, 0}}));
  // Backward: same pulls and computes, then each dK/dV partial back over the
  // reversed edge two stages after its K/V went out.
  ASSERT_EQ(plan.backward.size(), 4u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(plan.backward[s].send_kv, plan.forward[s].send) << s;
    EXPECT_EQ(plan.backward[s].compute, plan.forward[s].compute) << s;
  }
  EXPECT_TRUE(plan.backward[3].send_kv.empty());
  EXPECT_TRUE(plan.backward[3].compute.empty());
  EXPECT_TRUE(plan.backward[0].send_dkv.empty());
  EXPECT_TRUE(plan.backward[1].send_dkv.empty());
  EXPECT_EQ(plan.backward[2].send_dkv, (std::vector<Transfer>{{0, 1, 0}, {1, 2, 1}}));
  EXPECT_EQ(plan.backward[3].send_dkv, (std::vector<Transfer>{{0, 2, 0}}));
}

// The worked plan above with its backward's two transfer stages reversed:
// block 0's K/V to worker 2 (forward stage 1) goes first and its partial
// returns in stage 2, the stage-0 group second, its partials last.
TEST(ScheduleTest, ReversedBackwardTakesTheLastTransferStageFirst) {
  Plan plan = ChainPlan(3, {0, 1, 2}, 1);
  const std::vector<RequiredPair> pairs = CausalThree();
  BuildStagesFromSubStages(plan, pairs, TransferEdges(plan, pairs), {0, 1, 0}, 2);
  const Plan mirrored = plan;
  ReverseBackwardTransferStages(plan);
  ASSERT_EQ(plan.backward.size(), 4u);
  EXPECT_EQ(plan.backward[0].send_kv, (std::vector<Transfer>{{0, 0, 2}}));
  EXPECT_EQ(plan.backward[1].send_kv, (std::vector<Transfer>{{0, 0, 1}, {1, 1, 2}}));
  EXPECT_EQ(plan.backward[0].compute, (std::vector<BlockPair>{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(plan.backward[1].compute, (std::vector<BlockPair>{{2, 0}}));
  EXPECT_EQ(plan.backward[2].compute, (std::vector<BlockPair>{{1, 0}, {2, 1}}));
  EXPECT_TRUE(plan.backward[3].compute.empty());
  EXPECT_TRUE(plan.backward[0].send_dkv.empty());
  EXPECT_TRUE(plan.backward[1].send_dkv.empty());
  EXPECT_EQ(plan.backward[2].send_dkv, (std::vector<Transfer>{{0, 2, 0}}));
  EXPECT_EQ(plan.backward[3].send_dkv, (std::vector<Transfer>{{0, 1, 0}, {1, 2, 1}}));
  EXPECT_EQ(plan.forward, mirrored.forward);
  ReverseBackwardTransferStages(plan);  // its own inverse
  EXPECT_EQ(plan.backward, mirrored.backward);
}

// BuildStages reverses the backward up to kReversedBackwardMaxWorkers
// workers and keeps the forward's order above: the three-block chain (two
// transfer stages, c = 1) on 256 and on 257 workers.
TEST(ScheduleTest, BackwardReversedUpTo256Workers) {
  for (const int32_t workers : {kReversedBackwardMaxWorkers, kReversedBackwardMaxWorkers + 1}) {
    Plan plan = ChainPlan(workers, {0, 1, 2}, 1);
    BuildStages(plan, CausalThree(), true);
    ASSERT_EQ(plan.forward.size(), 3u) << workers;
    Plan mirrored = plan;
    if (workers <= kReversedBackwardMaxWorkers) ReverseBackwardTransferStages(mirrored);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(mirrored.backward[s].send_kv, plan.forward[s].send) << workers << " stage " << s;
      EXPECT_EQ(mirrored.backward[s].compute, plan.forward[s].compute) << workers << " stage " << s;
    }
    EXPECT_EQ(plan.backward[0].send_kv == plan.forward[0].send,
              workers > kReversedBackwardMaxWorkers)
        << workers;
  }
}

TEST(ScheduleTest, CoalescingMergesSubStagesIntoOneStage) {
  Plan plan = ChainPlan(3, {0, 1, 2}, 2);
  const std::vector<RequiredPair> pairs = CausalThree();
  const std::vector<Transfer> edges = TransferEdges(plan, pairs);
  BuildStagesFromSubStages(plan, pairs, edges, {0, 1, 0}, 2);
  ASSERT_EQ(plan.forward.size(), 2u);  // ceil(2 / 2) = 1 transfer stage
  EXPECT_EQ(plan.forward[0].send, edges);
  EXPECT_EQ(plan.forward[0].compute, (std::vector<BlockPair>{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(plan.forward[1].compute, (std::vector<BlockPair>{{1, 0}, {2, 0}, {2, 1}}));
  ASSERT_EQ(plan.backward.size(), 3u);
  // Reversed, in (dst, src, block) order of the forward edges.
  EXPECT_EQ(plan.backward[2].send_dkv, (std::vector<Transfer>{{0, 1, 0}, {0, 2, 0}, {1, 2, 1}}));
}

// Worker 0 owns blocks 0..n-1 and worker 1 block n, whose query needs them
// all: n edges 0 -> 1, edge e carrying block e in colour e (Delta = n).
struct Star {
  Plan plan;
  std::vector<RequiredPair> pairs;
  std::vector<int32_t> colour;
  Star(int32_t n, int32_t coalesce) {
    std::vector<int32_t> owners(n, 0);
    owners.push_back(1);
    plan = ChainPlan(2, owners, coalesce);
    for (int32_t k = 0; k <= n; ++k) pairs.push_back({n, k, 1});
    for (int32_t e = 0; e < n; ++e) colour.push_back(e);
  }
  void Build(StageGrouping grouping) {
    BuildStagesFromSubStages(plan, pairs, TransferEdges(plan, pairs), colour,
                             static_cast<int32_t>(colour.size()), grouping);
  }
};

// Per forward stage: the blocks sent, and the K/V blocks of the pairs computed.
using Stages = std::vector<std::vector<int32_t>>;
template <typename List, typename Item>
Stages PerStage(const Plan& plan, List ForwardStage::*list, int32_t Item::*block) {
  Stages blocks;
  for (const ForwardStage& st : plan.forward) {
    blocks.emplace_back();
    for (const Item& item : st.*list) blocks.back().push_back(item.*block);
  }
  return blocks;
}
Stages SentBlocks(const Plan& plan) {
  return PerStage(plan, &ForwardStage::send, &Transfer::block);
}
Stages KvComputed(const Plan& plan) {
  return PerStage(plan, &ForwardStage::compute, &BlockPair::kv_block);
}

TEST(ScheduleTest, SpreadRunsAreTheLargestDivisorOfCUpToAQuarter) {
  EXPECT_EQ(SpreadRunColours(1), 1);
  EXPECT_EQ(SpreadRunColours(2), 1);
  EXPECT_EQ(SpreadRunColours(4), 1);
  EXPECT_EQ(SpreadRunColours(8), 2);
  EXPECT_EQ(SpreadRunColours(9), 1);   // 2 does not divide 9
  EXPECT_EQ(SpreadRunColours(14), 2);  // 3 does not divide 14
  EXPECT_EQ(SpreadRunColours(16), 4);
  EXPECT_EQ(SpreadRunColours(18), 3);  // 4 does not divide 18
  EXPECT_EQ(SpreadRunColours(32), 8);
}

// The star with n = 20, c = 8: three transfer stages either way.
// Consecutive: colours 0-7, 8-15, 16-19. Round-robin in runs of 2: runs 0,
// 3, 6, 9 (colours 0-1, 6-7, 12-13, 18-19), runs 1, 4, 7 and runs 2, 5, 8.
TEST(ScheduleTest, RoundRobinDealsRunsOfColoursOverTheStages) {
  Star consecutive(20, 8), dealt(20, 8);
  consecutive.Build(StageGrouping::kConsecutive);
  EXPECT_EQ(
      SentBlocks(consecutive.plan),
      (Stages{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}, {16, 17, 18, 19}, {}}));
  dealt.Build(StageGrouping::kRoundRobin);
  EXPECT_EQ(
      SentBlocks(dealt.plan),
      (Stages{{0, 1, 6, 7, 12, 13, 18, 19}, {2, 3, 8, 9, 14, 15}, {4, 5, 10, 11, 16, 17}, {}}));
}

// The star with n = 5, c = 2 (runs of one colour): three transfer stages
// either way. Consecutive: colours {0, 1}, {2, 3}, {4}; round-robin: {0, 3},
// {1, 4}, {2}; the computes and partials follow their K/V.
TEST(ScheduleTest, RoundRobinComputesAndReturnsFollowTheirKv) {
  Star consecutive(5, 2), dealt(5, 2);
  consecutive.Build(StageGrouping::kConsecutive);
  EXPECT_EQ(SentBlocks(consecutive.plan), (Stages{{0, 1}, {2, 3}, {4}, {}}));
  EXPECT_EQ(KvComputed(consecutive.plan), (Stages{{5}, {0, 1}, {2, 3}, {4}}));
  dealt.Build(StageGrouping::kRoundRobin);
  EXPECT_EQ(SentBlocks(dealt.plan), (Stages{{0, 3}, {1, 4}, {2}, {}}));
  EXPECT_EQ(KvComputed(dealt.plan), (Stages{{5}, {0, 3}, {1, 4}, {2}}));
  // The backward returns each partial two stages after its K/V, as before.
  ASSERT_EQ(dealt.plan.backward.size(), 5u);
  EXPECT_EQ(dealt.plan.backward[2].send_dkv, (std::vector<Transfer>{{0, 1, 0}, {3, 1, 0}}));
  EXPECT_EQ(dealt.plan.backward[4].send_dkv, (std::vector<Transfer>{{2, 1, 0}}));
}

TEST(ScheduleTest, NoTransfersIsOneComputeStage) {
  Plan plan = ChainPlan(2, {0, 0, 1}, 4);
  const std::vector<RequiredPair> pairs = Pairs({{0, 0}, {1, 0}, {1, 1}, {2, 2}});
  BuildStages(plan, pairs, true);
  ASSERT_EQ(plan.forward.size(), 1u);
  ASSERT_EQ(plan.backward.size(), 1u);
  EXPECT_TRUE(plan.forward[0].send.empty());
  EXPECT_EQ(plan.forward[0].compute, (std::vector<BlockPair>{{0, 0}, {1, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(plan.backward[0].compute, plan.forward[0].compute);
}

TEST(ScheduleTest, ShortSequencePieceComputesItsLocalPairWithItsLastRemote) {
  // One 4-token sequence (shorter than block_size 8) split in two 2-token
  // pieces on workers 0 and 1: block 1's local pair waits for block 0.
  Plan plan = ChainPlan(2, {0, 1}, 1, 2);
  plan.block_size = 8;
  const std::vector<RequiredPair> pairs = Pairs({{0, 0}, {1, 0}, {1, 1}});
  BuildStages(plan, pairs, true);
  ASSERT_EQ(plan.forward.size(), 2u);
  EXPECT_EQ(plan.forward[0].send, (std::vector<Transfer>{{0, 0, 1}}));
  EXPECT_EQ(plan.forward[0].compute, (std::vector<BlockPair>{{0, 0}}));
  EXPECT_EQ(plan.forward[1].compute, (std::vector<BlockPair>{{1, 0}, {1, 1}}));
}

// Random plans: up to 6 workers, 14 blocks, random owners and pairs, c in
// {1, 2, 3, 4, 8, 12},
// the colours grouped consecutively or round-robin (alternate trials).
TEST(ScheduleTest, RandomPlansKeepTheScheduleInvariants) {
  std::mt19937 rng(20);
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t workers = std::uniform_int_distribution<int32_t>(1, 6)(rng);
    const int32_t blocks = std::uniform_int_distribution<int32_t>(1, 14)(rng);
    const int32_t c = std::array{1, 2, 3, 4, 8, 12}[rng() % 6];  // runs of 1, 2 or 3 colours
    std::vector<int32_t> owners(blocks);
    for (int32_t& o : owners) o = std::uniform_int_distribution<int32_t>(0, workers - 1)(rng);
    Plan plan = ChainPlan(workers, owners, c);
    std::bernoulli_distribution keep(std::uniform_real_distribution<double>(0.05, 0.9)(rng));
    std::vector<RequiredPair> pairs;
    for (int32_t q = 0; q < blocks; ++q)
      for (int32_t k = 0; k < blocks; ++k)
        if (keep(rng)) pairs.push_back({q, k, 1});
    SCOPED_TRACE(testing::Message() << "trial " << trial << " workers " << workers << " blocks "
                                    << blocks << " c " << c << " pairs " << pairs.size());

    // Edges against a brute-force set of (src, dst, block).
    using Edge = std::tuple<int32_t, int32_t, int32_t>;
    std::set<Edge> want;
    for (const RequiredPair& p : pairs)
      if (owners[p.kv_block] != owners[p.q_block])
        want.insert({owners[p.kv_block], owners[p.q_block], p.kv_block});
    const std::vector<Transfer> edges = TransferEdges(plan, pairs);
    std::vector<Edge> got;
    for (const Transfer& t : edges) got.push_back({t.src, t.dst, t.block});
    ASSERT_EQ(got, std::vector<Edge>(want.begin(), want.end()));

    std::vector<int32_t> out(workers, 0), in(workers, 0);
    for (const Transfer& t : edges) ++out[t.src], ++in[t.dst];
    const int32_t delta = std::max(*std::max_element(out.begin(), out.end()),
                                   *std::max_element(in.begin(), in.end()));
    const StageGrouping grouping =
        trial % 2 == 0 ? StageGrouping::kConsecutive : StageGrouping::kRoundRobin;
    BuildStages(plan, pairs, true, grouping);
    const size_t transfer_stages = static_cast<size_t>((delta + c - 1) / c);
    ASSERT_EQ(plan.forward.size(), transfer_stages + 1);
    ASSERT_EQ(plan.backward.size(), transfer_stages > 0 ? transfer_stages + 2 : 1);

    // Every edge sent once; each stage sends and receives at most c per worker;
    // stage of arrival of each (block, dst).
    std::map<std::pair<int32_t, int32_t>, size_t> arrival;
    std::vector<Transfer> sent;
    for (size_t s = 0; s < plan.forward.size(); ++s) {
      std::vector<int32_t> s_out(workers, 0), s_in(workers, 0);
      for (const Transfer& t : plan.forward[s].send) {
        EXPECT_LE(++s_out[t.src], c) << "stage " << s;
        EXPECT_LE(++s_in[t.dst], c) << "stage " << s;
        arrival[{t.block, t.dst}] = s + 1;
        sent.push_back(t);
      }
    }
    std::sort(sent.begin(), sent.end(), [](const Transfer& a, const Transfer& b) {
      return std::tie(a.src, a.dst, a.block) < std::tie(b.src, b.dst, b.block);
    });
    EXPECT_EQ(sent, edges);

    // Every pair computed exactly once, no earlier than its K/V arrives.
    std::multiset<std::pair<int32_t, int32_t>> computed;
    for (size_t s = 0; s < plan.forward.size(); ++s)
      for (const BlockPair& bp : plan.forward[s].compute) {
        computed.insert({bp.q_block, bp.kv_block});
        const int32_t dst = owners[bp.q_block];
        if (owners[bp.kv_block] == dst) {
          EXPECT_EQ(s, 0u) << "local pair " << bp.q_block << "," << bp.kv_block;
        } else {
          EXPECT_EQ(s, arrival.at({bp.kv_block, dst}));
        }
      }
    std::multiset<std::pair<int32_t, int32_t>> required;
    for (const RequiredPair& p : pairs) required.insert({p.q_block, p.kv_block});
    EXPECT_EQ(computed, required);

    // The backward takes the forward's transfer stages in reverse order
    // (forward stage s of T is backward stage T-1-s; local pairs stay in
    // stage 0); each dK/dV returns two stages after its K/V went out.
    const size_t T = plan.forward.size() - 1;
    auto backward_stage = [&](size_t forward_stage) { return T - 1 - forward_stage; };
    for (size_t s = 0; s < plan.backward.size(); ++s) {
      EXPECT_EQ(plan.backward[s].send_kv,
                s < T ? plan.forward[backward_stage(s)].send : std::vector<Transfer>{});
      const std::vector<BlockPair> none;
      EXPECT_EQ(plan.backward[s].compute, s == 0   ? plan.forward[0].compute
                                          : s <= T ? plan.forward[T + 1 - s].compute
                                                   : none);
      for (const Transfer& t : plan.backward[s].send_dkv) {
        ASSERT_GE(s, 2u);
        const std::vector<Transfer>& out_s = plan.backward[s - 2].send_kv;
        EXPECT_NE(std::find(out_s.begin(), out_s.end(), Transfer{t.block, t.dst, t.src}),
                  out_s.end());
      }
    }
    size_t dkv = 0;
    for (const BackwardStage& b : plan.backward) dkv += b.send_dkv.size();
    EXPECT_EQ(dkv, edges.size());
  }
}

}  // namespace
}  // namespace fcp
