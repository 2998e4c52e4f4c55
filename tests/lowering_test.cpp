// The per-rank program of a plan (fcp/lowering.h): exact tables for a plan
// drawn by hand, and properties over random plans (hand-built greedy and ring
// plans with relays, every registered planner): every pair of a rank's query
// blocks is one call, in plan order; calls and relays read only K/V received
// in an earlier stage into rows no later receipt has overwritten; partials
// are read by their own block only; the reshuffle tables of all ranks agree;
// the calls' segments cover every allowed token pair exactly once.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fcp/error.h"
#include "fcp/lowering.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "hand_plans.h"
#include "test_plans.h"

namespace fcp {
namespace {

// ThreeWorkerPlan (tests/hand_plans.h), rank 2: owns B2 (local rows 0-3),
// receives B1 in forward stage 0 and B0 in stage 1; both are alive in stage 1,
// so B0 gets pool rows 4-7.
TEST(Lowering, ThreeWorkerPlanRankTwo) {
  const Plan plan = testing::ThreeWorkerPlan();
  const RankProgram p = LowerPlan(plan, 2);
  EXPECT_EQ(p.local_rows, 4);
  EXPECT_EQ(p.owned_blocks, (std::vector<int32_t>{2}));
  EXPECT_EQ(p.block_row, (std::vector<int64_t>{-1, -1, 0}));
  EXPECT_EQ(p.local_position, (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(p.dataloader_begin, 8);
  EXPECT_EQ(p.in_send_counts, (std::vector<int64_t>{0, 0, 4}));
  EXPECT_EQ(p.in_recv_rows, (std::vector<int64_t>{0, 1, 2, 3}));

  ASSERT_EQ(p.forward.stages.size(), 3u);
  EXPECT_EQ(p.forward.pool_rows, 8);
  EXPECT_EQ(p.forward.peak_slots, 2);
  const auto& f = p.forward.stages;
  EXPECT_EQ(f[0].kv_recv, (std::vector<KvRecv>{{1, 1, 0, 4}}));
  EXPECT_EQ(f[1].kv_recv, (std::vector<KvRecv>{{0, 0, 4, 4}}));
  EXPECT_TRUE(f[2].kv_recv.empty());
  for (const auto& s : f) EXPECT_TRUE(s.kv_send.empty());
  ASSERT_EQ(f[0].compute.size(), 1u);
  ASSERT_EQ(f[1].compute.size(), 1u);
  ASSERT_EQ(f[2].compute.size(), 1u);
  const ComputeCall c22 = f[0].compute[0], c21 = f[1].compute[0], c20 = f[2].compute[0];
  EXPECT_EQ(c22.kv_block, 2);
  EXPECT_FALSE(c22.kv_in_pool);
  EXPECT_EQ(c22.kv_row, 0);
  EXPECT_TRUE(c22.early);  // B2 holds only rank 2's dataloader tokens
  EXPECT_EQ(c21.kv_block, 1);
  EXPECT_TRUE(c21.kv_in_pool);
  EXPECT_EQ(c21.kv_row, 0);
  EXPECT_EQ(c20.kv_block, 0);
  EXPECT_TRUE(c20.kv_in_pool);
  EXPECT_EQ(c20.kv_row, 4);
  // Causal (2,0): queries 8-11 against keys 0-3, one segment pair.
  ASSERT_EQ(c20.segment_end - c20.segment_begin, 1);
  EXPECT_EQ(p.segments[c20.segment_begin], (SegmentPair{0, 0, 8, 0, 4, 4}));

  // Backward: partial of B1 from stage 1 to its send in stage 2, of B0 from
  // stage 2 to stage 3: alive together in stage 2, so different rows.
  ASSERT_EQ(p.backward.stages.size(), 4u);
  EXPECT_EQ(p.backward.partial_rows, 8);
  const auto& b = p.backward.stages;
  EXPECT_TRUE(b[1].compute[0].dkv_in_partial);
  EXPECT_EQ(b[1].compute[0].dkv_row, 0);
  EXPECT_EQ(b[2].compute[0].dkv_row, 4);
  EXPECT_EQ(b[2].dkv_send, (std::vector<DkvSend>{{1, 1, 0, 4}}));
  EXPECT_EQ(b[3].dkv_send, (std::vector<DkvSend>{{0, 0, 4, 4}}));
  EXPECT_FALSE(b[0].compute[0].dkv_in_partial);  // its own block
  EXPECT_EQ(p.forward_final_stage, (std::vector<int32_t>{0, 1, 2}));
  // dq: each block's last query compute (B2's is (2,0) in stage 2); dk, dv:
  // B0 waits for the partials of stages 2 and 3, B1 for w2's in stage 2, B2
  // has only its diagonal (stage 0).
  EXPECT_EQ(p.backward_dq_final_stage, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.backward_dkv_final_stage, (std::vector<int32_t>{3, 2, 0}));
}

// Rank 1 of the same plan: sends its own B1, receives B0, gets B1's partial back.
TEST(Lowering, ThreeWorkerPlanRankOne) {
  const RankProgram p = LowerPlan(testing::ThreeWorkerPlan(), 1);
  const auto& f = p.forward.stages;
  EXPECT_EQ(f[0].kv_send, (std::vector<KvSend>{{1, 2, false, 0, 4}}));
  EXPECT_EQ(f[0].kv_recv, (std::vector<KvRecv>{{0, 0, 0, 4}}));
  EXPECT_EQ(p.forward.pool_rows, 4);
  const auto& b = p.backward.stages;
  EXPECT_EQ(b[2].dkv_send, (std::vector<DkvSend>{{0, 0, 0, 4}}));
  EXPECT_EQ(b[2].dkv_recv, (std::vector<DkvRecv>{{1, 2, false, 0, 4}}));
}

TEST(Lowering, RankOutsideTheWorkersIsAnError) {
  EXPECT_THROW(LowerPlan(testing::ThreeWorkerPlan(), 3), Error);
  EXPECT_THROW(LowerPlan(testing::ThreeWorkerPlan(), -1), Error);
}

TEST(Lowering, UsingABlockNotHeldIsAnInvalidPlan) {
  Plan plan = testing::ThreeWorkerPlan();
  plan.forward[0].compute.push_back({2, 0});  // B0 reaches w2 only in stage 1
  try {
    LowerPlan(plan, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidPlan);
    EXPECT_NE(std::string(e.what()).find("forward stage 0"), std::string::npos) << e.what();
  }
}

// Every index the lowering follows is checked before it follows it: an
// unvalidated plan with one index out of range is an Error(kInvalidPlan)
// naming the stage and the value, on every rank (never std::out_of_range).
TEST(Lowering, IndexOutOfRangeIsAnInvalidPlanNamingIt) {
  const std::vector<std::pair<std::function<void(Plan&)>, std::string>> cases = {
      {[](Plan& p) {
         p.forward[1].compute.push_back({7, 0});
       },
       "forward stage 1: block 7 is not in [0, 3)"},
      {[](Plan& p) {
         p.forward[0].compute.push_back({0, -1});
       },
       "forward stage 0: block -1 is not in [0, 3)"},
      {[](Plan& p) {
         p.forward[0].send.push_back({3, 0, 1});
       },
       "forward stage 0: block 3 is not in [0, 3)"},
      {[](Plan& p) {
         p.forward[0].send.push_back({0, 0, 5});
       },
       "forward stage 0: destination 5 is not in [0, 3)"},
      {[](Plan& p) {
         p.backward[0].send_dkv.push_back({9, 1, 0});
       },
       "backward stage 0: block 9 is not in [0, 3)"},
      {[](Plan& p) {
         p.backward[0].send_kv.push_back({0, -2, 1});
       },
       "backward stage 0: source -2 is not in [0, 3)"},
      {[](Plan& p) { p.blocks[1].worker = 3; }, "block 1: owner 3 is not in [0, 3)"},
      {[](Plan& p) { p.blocks[0].segments[0].seq = 4; }, "block 0: sequence 4 is not in [0, 1)"},
      {[](Plan& p) { p.blocks[2].segments[0].length += 1; },
       "block 2: segment [8, 13) is outside sequence 0 of 12 tokens"},
  };
  for (const auto& [breaks, message] : cases)
    for (int32_t rank = 0; rank < 3; ++rank) {
      Plan plan = testing::ThreeWorkerPlan();
      breaks(plan);
      try {
        LowerPlan(plan, rank);
        ADD_FAILURE() << "expected an error: " << message;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidPlan);
        EXPECT_EQ(std::string(e.what()), "lowering: " + message);
      }
    }
  EXPECT_THROW(BlockPairSegments(testing::ThreeWorkerPlan(), 0, 3), Error);
}

// Symbolic run of one pass of one rank's program over its pool: every row
// carries the (block, row in block) it holds; reads must see the block they
// name, and no receipt may land on rows read in the same stage.
template <typename Stages>
void CheckPass(const Plan& plan, const Stages& stages, const PassProgram& pass,
               const RankProgram& p, bool backward, const std::string& what) {
  ASSERT_EQ(pass.stages.size(), stages.size()) << what;
  std::vector<std::pair<int32_t, int64_t>> pool(static_cast<size_t>(pass.pool_rows), {-1, 0});
  std::vector<int32_t> partial(static_cast<size_t>(pass.partial_rows), -1);  // -1: zero
  auto read = [&](int32_t block, bool in_pool, int64_t row, int64_t rows, std::vector<char>& busy,
                  const std::string& where) {
    ASSERT_EQ(rows, plan.blocks[block].tokens()) << where;
    if (!in_pool) {
      ASSERT_EQ(plan.blocks[block].worker, p.rank) << where;
      ASSERT_EQ(row, p.block_row[block]) << where;
      return;
    }
    ASSERT_LE(row + rows, pass.pool_rows) << where;
    for (int64_t i = 0; i < rows; ++i) {
      ASSERT_EQ(pool[row + i], (std::pair<int32_t, int64_t>{block, i})) << where;
      busy[row + i] = 1;
    }
  };
  for (size_t t = 0; t < stages.size(); ++t) {
    const StageProgram& sp = pass.stages[t];
    const std::string where = what + " stage " + std::to_string(t);
    std::vector<char> busy(pool.size(), 0);
    // Calls: the plan's pairs of my query blocks, in order.
    std::vector<BlockPair> mine;
    for (const BlockPair& pr : stages[t].compute)
      if (plan.blocks[pr.q_block].worker == p.rank) mine.push_back(pr);
    ASSERT_EQ(sp.compute.size(), mine.size()) << where;
    for (size_t i = 0; i < mine.size(); ++i) {
      const ComputeCall& c = sp.compute[i];
      ASSERT_EQ(c.q_block, mine[i].q_block) << where;
      ASSERT_EQ(c.kv_block, mine[i].kv_block) << where;
      ASSERT_EQ(c.q_row, p.block_row[c.q_block]) << where;
      read(c.kv_block, c.kv_in_pool, c.kv_row, c.kv_rows, busy,
           where + " call " + std::to_string(i));
      if (backward) {
        ASSERT_EQ(c.dkv_in_partial, plan.blocks[c.kv_block].worker != p.rank) << where;
        if (c.dkv_in_partial)
          for (int64_t r = 0; r < c.kv_rows; ++r) {
            ASSERT_TRUE(partial[c.dkv_row + r] == -1 || partial[c.dkv_row + r] == c.kv_block)
                << where;
            partial[c.dkv_row + r] = c.kv_block;
          }
        else
          ASSERT_EQ(c.dkv_row, p.block_row[c.kv_block]) << where;
      }
    }
    for (const KvSend& s : sp.kv_send)
      read(s.block, s.from_pool, s.row, s.rows, busy, where + " send");
    for (const KvRecv& r : sp.kv_recv)
      for (int64_t i = 0; i < r.rows; ++i) {
        ASSERT_FALSE(busy[r.pool_row + i])
            << where << ": a receipt overwrites rows read in its stage";
        pool[r.pool_row + i] = {r.block, i};
      }
    for (const DkvSend& s : sp.dkv_send)
      for (int64_t r = 0; r < s.rows; ++r) {
        ASSERT_EQ(partial[s.partial_row + r], s.block)
            << where << ": dkv send of an empty or foreign partial";
        partial[s.partial_row + r] = -1;
      }
    for (const DkvRecv& r : sp.dkv_recv) {
      ASSERT_EQ(r.into_partial, plan.blocks[r.block].worker != p.rank) << where;
      if (!r.into_partial) continue;
      for (int64_t i = 0; i < r.rows; ++i) {
        ASSERT_TRUE(partial[r.row + i] == -1 || partial[r.row + i] == r.block) << where;
        partial[r.row + i] = r.block;
      }
    }
  }
  for (int32_t b : partial) ASSERT_EQ(b, -1) << what << ": a partial never sent";
}

void CheckPlan(const Plan& plan, const std::string& what) {
  ValidatePlan(plan);
  std::vector<RankProgram> programs;
  for (int32_t r = 0; r < plan.workers; ++r) programs.push_back(LowerPlan(plan, r));
  int64_t covered_pairs = 0;
  for (const RankProgram& p : programs) {
    const std::string w = what + " rank " + std::to_string(p.rank);
    CheckPass(plan, plan.forward, p.forward, p, false, w + " forward");
    CheckPass(plan, plan.backward, p.backward, p, true, w + " backward");
    for (const StageProgram& sp : p.forward.stages)
      for (const ComputeCall& c : sp.compute)
        for (int64_t i = c.segment_begin; i < c.segment_end; ++i) {
          const SegmentPair& s = p.segments[i];
          ASSERT_LE(s.q_row + s.q_len, c.q_rows) << w;
          ASSERT_LE(s.k_row + s.k_len, c.kv_rows) << w;
          covered_pairs +=
              AllowedPairs(plan.mask, {s.q_pos, s.q_pos + s.q_len}, {s.k_pos, s.k_pos + s.k_len});
        }
    EXPECT_EQ(LowerPlan(plan, p.rank), p) << w << ": not deterministic";
  }
  int64_t required = 0;
  for (int64_t len : plan.sequences) required += AllowedPairs(plan.mask, {0, len}, {0, len});
  EXPECT_EQ(covered_pairs, required) << what;
  // Reshuffle: what r sends to w, in order, is what w receives from r, in order.
  for (const RankProgram& src : programs) {
    int64_t sent = 0;
    for (int32_t w = 0; w < plan.workers; ++w) {
      const RankProgram& dst = programs[w];
      ASSERT_EQ(src.in_send_counts[w], dst.in_recv_counts[src.rank]) << what;
      int64_t recv_first = 0;
      for (int32_t r = 0; r < src.rank; ++r) recv_first += dst.in_recv_counts[r];
      for (int64_t i = 0; i < src.in_send_counts[w]; ++i)
        ASSERT_EQ(src.dataloader_begin + src.in_send_rows[sent + i],
                  dst.local_token[dst.in_recv_rows[recv_first + i]])
            << what;
      sent += src.in_send_counts[w];
    }
    ASSERT_EQ(sent, src.dataloader_end - src.dataloader_begin) << what;
  }
}

const Mask kMasks[] = {{MaskKind::kCausal, 0}, {MaskKind::kFull, 0}, {MaskKind::kSlidingWindow, 9}};

TEST(LoweringProperty, RandomHandBuiltPlansWithRelays) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 24; ++trial) {
    testing::TestPlanSpec spec;
    const int n = 1 + static_cast<int>(rng() % 9);
    for (int i = 0; i < n; ++i) spec.sequences.push_back(1 + static_cast<int64_t>(rng() % 70));
    spec.workers = 1 + static_cast<int32_t>(rng() % 5);
    spec.block_size = 4 + static_cast<int64_t>(rng() % 13);
    spec.coalesce = 1 + static_cast<int32_t>(rng() % 3);
    spec.mask = kMasks[trial % 3];
    spec.seed = rng();
    const std::string what = "trial " + std::to_string(trial);
    CheckPlan(testing::MakeGreedyTestPlan(spec), what + " greedy");
    CheckPlan(testing::MakeRingTestPlan(spec), what + " ring");
  }
}

TEST(LoweringProperty, RegisteredPlanners) {
  std::mt19937_64 rng(3);
  for (const PlannerInfo& info : Planners())
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int64_t> lengths;
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) lengths.push_back(1 + static_cast<int64_t>(rng() % 200));
      PlannerConfig config;
      config.planner = info.name;
      config.workers = 1 + static_cast<int32_t>(rng() % 6);
      config.block_size = 16;
      config.coalesce = 1 + static_cast<int32_t>(rng() % 4);
      config.mask = kMasks[trial % 3];
      config.attention = {4, 2, 8, 2};
      CheckPlan(MakePlan(lengths, config), info.name + " trial " + std::to_string(trial));
    }
}

}  // namespace
}  // namespace fcp
