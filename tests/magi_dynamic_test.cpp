// The magi-dynamic baseline (fcp/baselines.h): MagiAttention's dynamic
// solver's rules on hand-drawn grids, its plans on random batches, and its
// per-rank work on the benchmark's lognormal batches.
#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "fcp/baselines.h"
#include "fcp/error.h"
#include "fcp/plan_json.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/required_pairs.h"
#include "fcp/simulator.h"
#include "fcp/workload.h"

namespace fcp {
namespace {

using Cells = std::vector<std::pair<int32_t, int32_t>>;

double MaxOverMean(const std::vector<int64_t>& work) {
  const double total = static_cast<double>(std::accumulate(work.begin(), work.end(), int64_t{0}));
  return static_cast<double>(*std::max_element(work.begin(), work.end())) /
         (total / static_cast<double>(work.size()));
}

// Their KD split: queries halved first, then keys, alternately; one side
// once the other is a single row or column.
TEST(MagiDynamicTest, GridOrderIsTheirKdSplit) {
  EXPECT_EQ(MagiDynamicGridOrder(2, 2), (Cells{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  EXPECT_EQ(MagiDynamicGridOrder(4, 4), (Cells{{0, 0},
                                               {0, 1},
                                               {1, 0},
                                               {1, 1},
                                               {0, 2},
                                               {0, 3},
                                               {1, 2},
                                               {1, 3},
                                               {2, 0},
                                               {2, 1},
                                               {3, 0},
                                               {3, 1},
                                               {2, 2},
                                               {2, 3},
                                               {3, 2},
                                               {3, 3}}));
  // 3 x 1: only queries can be split (1 | 2, then 2 -> 1 | 1).
  EXPECT_EQ(MagiDynamicGridOrder(3, 1), (Cells{{0, 0}, {1, 0}, {2, 0}}));
  EXPECT_EQ(MagiDynamicGridOrder(1, 3), (Cells{{0, 0}, {0, 1}, {0, 2}}));
  EXPECT_EQ(MagiDynamicGridOrder(5, 5).size(), 25u);
}

// `ranks` ranks, one grid range of 4 tokens each, one head; no cells yet.
MagiDynamicProblem RangesOf4(int32_t ranks) {
  MagiDynamicProblem p;
  p.workers = ranks;
  p.heads_q = p.heads_kv = 1;
  for (int32_t r = 0; r < ranks; ++r) {
    p.range_owner.push_back(r);
    p.range_tokens.push_back(4);
  }
  return p;
}

// One causal sequence of 8 tokens on 2 ranks, shards [0,4) and [4,8), one
// head each. Cells (in grid order): (0,0) area 10, (1,0) 16, (1,1) 10; mean
// 18, cap 19.8. Every step keeps all edges (the threshold never binds), so
// every step places the same way: (1,0) (largest, 2 choices) to its query
// owner 1 (load 0 < 18), (0,0) and (1,1) to their owners: loads 10 / 26.
// Refinement: (1,0) cannot move (10 + 16 is not < 26); (1,1) moves to rank 0
// (10 + 10 < 26): loads 20 / 16. Rank 0 is still above the cap and nothing
// moves, so no step is feasible; the search stops when high - low <= 1% of
// high: low = 16, 24, 28, 30, 31, 31.5, 31.75 (7 steps, threshold 32).
TEST(MagiDynamicTest, HandDrawnRefinementMovesALocalCell) {
  MagiDynamicProblem p = RangesOf4(2);
  p.cells = {{0, 0, 10}, {1, 0, 16}, {1, 1, 10}};
  const MagiDynamicResult r = SolveMagiDynamic(p);
  EXPECT_FALSE(r.feasible);
  EXPECT_EQ(r.iterations, 7);
  EXPECT_EQ(r.rank, (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(r.work, (std::vector<int64_t>{20, 16}));
}

// Two sequences of 4 on 2 ranks: only the two diagonal cells, each local.
// Every step is feasible, so low stays 0 and all 20 steps run.
TEST(MagiDynamicTest, HandDrawnLocalCellsStayHome) {
  MagiDynamicProblem p = RangesOf4(2);
  p.cells = {{0, 0, 10}, {1, 1, 10}};
  const MagiDynamicResult r = SolveMagiDynamic(p);
  EXPECT_TRUE(r.feasible);
  EXPECT_EQ(r.iterations, 20);
  EXPECT_EQ(r.rank, (std::vector<int32_t>{0, 1}));
}

// Three ranks, one causal sequence of 12 (shards of 4): cells (0,0) 10,
// (1,0) 16, (1,1) 10, (2,0) 16, (2,1) 16, (2,2) 10; mean 26, cap 28.6.
// Step 1 (all edges): by (choices, area desc) then grid order: (1,0), (2,0),
// (2,1), (0,0), (1,1), (2,2). (1,0) -> its query owner 1 (0 < 26), (2,0) ->
// 2, (2,1) -> 2 (16 < 26), then the diagonals: loads 10 / 26 / 42. Refine:
// (2,0) leaves rank 2 for rank 0 (10 + 16 = 26 < 42): 26 / 26 / 26, feasible.
TEST(MagiDynamicTest, HandDrawnThreeRanksBalanceExactly) {
  MagiDynamicProblem p = RangesOf4(3);
  std::map<std::pair<int32_t, int32_t>, int64_t> area = {{{0, 0}, 10}, {{1, 0}, 16}, {{1, 1}, 10},
                                                         {{2, 0}, 16}, {{2, 1}, 16}, {{2, 2}, 10}};
  for (const auto& [q, k] : MagiDynamicGridOrder(3, 3))
    if (area.count({q, k})) p.cells.push_back({q, k, area[{q, k}]});
  const MagiDynamicResult r = SolveMagiDynamic(p);
  EXPECT_TRUE(r.feasible);
  EXPECT_EQ(r.work, (std::vector<int64_t>{26, 26, 26}));
  for (size_t c = 0; c < p.cells.size(); ++c)
    if (p.cells[c].q == 2 && p.cells[c].k == 0) {
      EXPECT_EQ(r.rank[c], 0);
    }
}

// Random grids (random owners, sizes and cells): every cell placed on a
// worker, the work is the sum of its cells, a feasible result is within the
// 1.10 x mean cap, and the same problem gives the same answer.
TEST(MagiDynamicTest, RandomGridsRespectTheCap) {
  std::mt19937_64 rng(7);
  int feasible = 0;
  for (int trial = 0; trial < 200; ++trial) {
    MagiDynamicProblem p;
    p.workers = 1 + static_cast<int32_t>(rng() % 70);  // past 64: two mask words
    p.heads_q = 1 + static_cast<int32_t>(rng() % 8);
    p.heads_kv = 1 + static_cast<int32_t>(rng() % 2);
    const int32_t ranges = 1 + static_cast<int32_t>(rng() % 40);
    for (int32_t i = 0; i < ranges; ++i) {
      p.range_owner.push_back(static_cast<int32_t>(rng() % p.workers));
      p.range_tokens.push_back(1 + static_cast<int64_t>(rng() % 1000));
    }
    for (const auto& [q, k] : MagiDynamicGridOrder(ranges, ranges))
      if (rng() % 3 == 0) p.cells.push_back({q, k, 1 + static_cast<int64_t>(rng() % 100000)});
    if (p.cells.empty()) continue;
    const MagiDynamicResult r = SolveMagiDynamic(p);
    ASSERT_EQ(r.rank.size(), p.cells.size());
    std::vector<int64_t> work(p.workers, 0);
    for (size_t c = 0; c < p.cells.size(); ++c) {
      ASSERT_GE(r.rank[c], 0);
      ASSERT_LT(r.rank[c], p.workers);
      work[r.rank[c]] += p.cells[c].area;
    }
    EXPECT_EQ(work, r.work);
    EXPECT_LE(r.iterations, 20);
    if (r.feasible) {
      ++feasible;
      const double total =
          static_cast<double>(std::accumulate(work.begin(), work.end(), int64_t{0}));
      EXPECT_LE(static_cast<double>(*std::max_element(work.begin(), work.end())),
                1.1 * total / p.workers + 1e-6);
    }
    const MagiDynamicResult again = SolveMagiDynamic(p);
    EXPECT_EQ(again.rank, r.rank);
  }
  EXPECT_GT(feasible, 20);  // the cap is met often enough for the check to mean something
}

TEST(MagiDynamicTest, BadProblemsAreRefused) {
  MagiDynamicProblem p;
  p.workers = 2;
  p.range_owner = {0, 2};
  p.range_tokens = {4, 4};
  EXPECT_THROW(SolveMagiDynamic(p), Error);
  p.range_owner = {0, 1};
  p.cells = {{0, 2, 5}};
  EXPECT_THROW(SolveMagiDynamic(p), Error);
  p.cells = {{0, 1, 0}};
  EXPECT_THROW(SolveMagiDynamic(p), Error);
}

PlannerConfig Config(int32_t n, MaskKind kind) {
  PlannerConfig pc;
  pc.planner = "magi-dynamic";
  pc.workers = n;
  pc.mask.kind = kind;
  pc.mask.window = kind == MaskKind::kSlidingWindow ? 300 : 0;
  return pc;
}

std::vector<int64_t> Batch(LengthDistribution dist, int32_t n, int64_t per_worker, uint64_t seed) {
  WorkloadConfig wc;
  wc.dist = dist;
  wc.workers = n;
  wc.tokens_per_worker = per_worker;
  wc.max_len = std::min<int64_t>(per_worker * n, 16 * per_worker);
  wc.min_len = 1;
  wc.seed = seed;
  return GenerateWorkload(wc);
}

// Per worker, the token pairs the plan's forward computes there.
std::vector<int64_t> PlanWork(const Plan& plan) {
  std::map<std::pair<int32_t, int32_t>, int64_t> area;
  for (const RequiredPair& r : RequiredPairs(plan.sequences, plan.blocks, plan.mask))
    area[{r.q_block, r.kv_block}] = r.token_pairs;
  std::vector<int64_t> work(plan.workers, 0);
  for (const ForwardStage& s : plan.forward)
    for (const BlockPair& p : s.compute)
      work[ComputeWorker(plan.blocks, p)] += area.at({p.q_block, p.kv_block});
  return work;
}

// The plan keeps the dataloader layout (8 chunks per worker), is valid, computes each cell where
// the solver put it, and both passes compute the same pairs on the same
// workers; JSON round trips byte-identically; planning is deterministic.
TEST(MagiDynamicTest, PlansAreValidOnRandomBatches) {
  uint64_t seed = 11;
  for (int32_t n : {1, 2, 3, 5, 8, 16})
    for (LengthDistribution dist : {LengthDistribution::kLognormal, LengthDistribution::kUniform,
                                    LengthDistribution::kBimodal})
      for (MaskKind kind : {MaskKind::kCausal, MaskKind::kFull, MaskKind::kSlidingWindow}) {
        const std::vector<int64_t> lengths = Batch(dist, n, 1024, seed++);
        SCOPED_TRACE("N=" + std::to_string(n) + " " + LengthDistributionName(dist) + " " +
                     MaskKindName(kind));
        const Plan plan = MakePlan(lengths, Config(n, kind));
        ASSERT_NO_THROW(ValidatePlan(plan));
        // Blocks are consecutive chunks of the token stream, each inside its
        // owner's dataloader share, at most 8 per worker.
        const int64_t total = plan.total_tokens();
        const std::vector<int64_t> offsets = SequenceOffsets(plan.sequences);
        int64_t cursor = 0;
        std::vector<int32_t> chunks(n, 0);
        for (const Block& b : plan.blocks) {
          EXPECT_EQ(offsets[b.segments.front().seq] + b.segments.front().start, cursor);
          EXPECT_GE(cursor, DataloaderBegin(total, n, b.worker));
          cursor += b.tokens();
          EXPECT_LE(cursor, DataloaderBegin(total, n, b.worker + 1));
          EXPECT_LE(++chunks[b.worker], 8);
        }
        EXPECT_EQ(cursor, total);
        std::vector<std::tuple<int32_t, int32_t, int32_t>> fwd, bwd;
        for (const ForwardStage& s : plan.forward)
          for (const BlockPair& p : s.compute)
            fwd.push_back({p.q_block, p.kv_block, ComputeWorker(plan.blocks, p)});
        for (const BackwardStage& s : plan.backward)
          for (const BlockPair& p : s.compute)
            bwd.push_back({p.q_block, p.kv_block, ComputeWorker(plan.blocks, p)});
        std::sort(fwd.begin(), fwd.end());
        std::sort(bwd.begin(), bwd.end());
        EXPECT_EQ(fwd, bwd);
        const std::string text = WritePlanJson(plan);
        EXPECT_EQ(WritePlanJson(ReadPlanJson(text)), text);
        EXPECT_EQ(WritePlanJson(MakePlan(lengths, Config(n, kind))), text);
        const std::vector<int64_t> work = PlanWork(plan);
        const double mean =
            static_cast<double>(std::accumulate(work.begin(), work.end(), int64_t{0})) / n;
        // The solver's cap when it met it; never worse than all work at the query owners.
        std::vector<int64_t> owner_work(n, 0);
        for (const RequiredPair& r : RequiredPairs(plan.sequences, plan.blocks, plan.mask))
          owner_work[plan.blocks[r.q_block].worker] += r.token_pairs;
        if (static_cast<double>(*std::max_element(work.begin(), work.end())) > 1.1 * mean + 1e-6) {
          EXPECT_LE(*std::max_element(work.begin(), work.end()),
                    *std::max_element(owner_work.begin(), owner_work.end()));
        }
        EXPECT_NO_THROW(Simulate(plan, BuiltinProfile("gpu-x"), SimConfig{}));
      }
}

// The benchmark's lognormal batches (fcp workload --dist lognormal, 32K
// tokens per worker, seeds 0-2) at N = 64 and 256: the solver meets its own
// cap, max/mean <= 1.10 (their code on seed 0: 1.09 / 1.10, PEERS.md).
TEST(MagiDynamicTest, LognormalBatchesMeetTheCap) {
  for (int32_t n : {64, 256})
    for (uint64_t seed : {0, 1, 2}) {
      if (n == 256 && seed > 0) continue;  // one N = 256 batch keeps the test short
      WorkloadConfig wc;
      wc.dist = LengthDistribution::kLognormal;
      wc.workers = n;
      wc.seed = seed;
      const Plan plan = MakePlan(GenerateWorkload(wc), Config(n, MaskKind::kCausal));
      const double ratio = MaxOverMean(PlanWork(plan));
      SCOPED_TRACE("N=" + std::to_string(n) + " seed " + std::to_string(seed));
      EXPECT_LE(ratio, 1.10 + 1e-9);
      EXPECT_GE(ratio, 1.0);
    }
}

}  // namespace
}  // namespace fcp
