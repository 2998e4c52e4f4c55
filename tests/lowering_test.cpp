// The per-rank program of a plan (fcp/lowering.h): exact tables for a plan
// drawn by hand, and properties over random plans (hand-built greedy and ring
// plans with relays, every registered planner): every pair of a rank's query
// blocks is one call, in plan order; calls and relays read only K/V received
// in an earlier stage into rows no later receipt has overwritten; partials
// are read by their own block only; the reshuffle tables of all ranks agree,
// as one all-to-all and as messages per (block, dataloader rank) in need
// order;
// the calls' segments cover every allowed token pair exactly once.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/lowering.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/required_pairs.h"
#include "hand_plans.h"
#include "test_plans.h"

namespace fcp {
namespace {

// RemoteComputePlan (tests/hand_plans.h): B0 on rank 0, B1 and B2 on rank 1
// (local rows 0-3 and 4-7). Rank 0 receives B2's queries in stage 0 (query
// pool rows 0-3), computes (B2, B0) against its own B0 in stage 1, and
// returns the partial in stage 2, which is when B2's output is final.
TEST(Lowering, RemoteComputeRankZero) {
  const Plan plan = testing::RemoteComputePlan();
  const RankProgram p = LowerPlan(plan, 0);
  for (const PassProgram* pass : {&p.forward, &p.backward}) {
    const bool backward = pass == &p.backward;
    SCOPED_TRACE(backward ? "backward" : "forward");
    ASSERT_EQ(pass->stages.size(), 3u);
    EXPECT_EQ(pass->query_rows, 4);
    const auto& st = pass->stages;
    EXPECT_EQ(st[0].q_recv, (std::vector<QueryMessage>{{2, 1, 0, 4}}));
    EXPECT_TRUE(st[0].q_send.empty());
    ASSERT_EQ(st[0].compute.size(), 1u);  // (B0, B0)
    EXPECT_FALSE(st[0].compute[0].q_in_pool);
    ASSERT_EQ(st[1].compute.size(), 1u);
    const ComputeCall& c = st[1].compute[0];
    EXPECT_EQ(std::tuple(c.q_block, c.kv_block, c.q_in_pool, c.q_row, c.q_rows),
              std::tuple(2, 0, true, int64_t{0}, int64_t{4}));
    EXPECT_EQ(std::tuple(c.kv_in_pool, c.kv_row, c.dkv_in_partial, c.dkv_row),
              std::tuple(false, int64_t{0}, false, int64_t{0}));  // its own B0
    EXPECT_EQ(st[2].out_send, (std::vector<QueryMessage>{{2, 1, 0, 4}}));
    for (const StageProgram& sp : st) EXPECT_TRUE(sp.out_recv.empty());
  }
  EXPECT_EQ(p.forward.stages[0].kv_send, (std::vector<KvSend>{{0, 1, false, 0, 4, 0, 4}}));
  EXPECT_EQ(p.forward_final_stage, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.backward_dq_final_stage, (std::vector<int32_t>{0, 1, 2}));
  // B0's dk, dv: its own calls in stages 0 and 1, rank 1's partial in stage 2.
  EXPECT_EQ(p.backward_dkv_final_stage, (std::vector<int32_t>{2, 0, 0}));
  EXPECT_EQ(p.backward.stages[2].dkv_recv, (std::vector<DkvRecv>{{0, 1, false, 0, 4, 0, 4}}));
}

// Rank 1 sends B2's queries (local rows 4-7) and merges rank 0's partial
// into them in stage 2; its own (B1, B0) reads B0 from the pool, backward
// into a partial it returns in stage 2.
TEST(Lowering, RemoteComputeRankOne) {
  const Plan plan = testing::RemoteComputePlan();
  const RankProgram p = LowerPlan(plan, 1);
  for (const PassProgram* pass : {&p.forward, &p.backward}) {
    SCOPED_TRACE(pass == &p.backward ? "backward" : "forward");
    EXPECT_EQ(pass->query_rows, 0);
    const auto& st = pass->stages;
    ASSERT_EQ(st.size(), 3u);
    EXPECT_EQ(st[0].q_send, (std::vector<QueryMessage>{{2, 0, 4, 4}}));
    EXPECT_EQ(st[0].compute.size(), 3u);  // (B1, B1), (B2, B1), (B2, B2)
    ASSERT_EQ(st[1].compute.size(), 1u);
    const ComputeCall& c = st[1].compute[0];
    EXPECT_EQ(std::tuple(c.q_block, c.kv_block, c.q_in_pool, c.q_row, c.kv_in_pool),
              std::tuple(1, 0, false, int64_t{0}, true));
    EXPECT_EQ(st[2].out_recv, (std::vector<QueryMessage>{{2, 0, 4, 4}}));
    for (const StageProgram& sp : st) {
      EXPECT_TRUE(sp.q_recv.empty());
      EXPECT_TRUE(sp.out_send.empty());
    }
  }
  EXPECT_TRUE(p.backward.stages[1].compute[0].dkv_in_partial);
  EXPECT_EQ(p.backward.stages[2].dkv_send, (std::vector<DkvSend>{{0, 0, 0, 4, 0, 4}}));
  EXPECT_EQ(p.forward_final_stage, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.backward_dkv_final_stage, (std::vector<int32_t>{2, 0, 0}));
}

// The hand-drawn plan passes the property checks (CheckPlan, below), and the
// lowering refuses remote compute it cannot run, naming the rule.
void CheckPlan(const Plan& plan, const std::string& what);
TEST(Lowering, RemoteComputeProperties) { CheckPlan(testing::RemoteComputePlan(), "remote"); }

TEST(Lowering, RemoteComputeErrors) {
  using testing::ExpectedErrorMessage;
  const auto lower = [](const Plan& plan, int32_t rank) {
    return ExpectedErrorMessage(ErrorCode::kInvalidPlan, [&] { LowerPlan(plan, rank); });
  };
  Plan no_queries = testing::RemoteComputePlan();  // B2's queries never sent
  no_queries.forward[0].send_q.clear();
  EXPECT_EQ(lower(no_queries, 0),
            "lowering: forward stage 1: rank 0 computes with the queries of block 2, which it does "
            "not hold");
  Plan never_returned = testing::RemoteComputePlan();
  never_returned.backward[2].send_dq.clear();
  EXPECT_EQ(lower(never_returned, 0),
            "lowering: rank 0 never returns its partial output of block 2 in the backward");
  Plan early_return = testing::RemoteComputePlan();  // in the stage of its compute
  std::swap(early_return.forward[1].send_o, early_return.forward[2].send_o);
  EXPECT_EQ(lower(early_return, 0),
            "lowering: forward stage 1: rank 0 returns a partial output of block 2 it does not "
            "hold, or in the stage of a compute with it");
  Plan relay = testing::RemoteComputePlan();  // queries sent on by a non-owner
  relay.forward[1].send_q = {{2, 0, 1}};
  EXPECT_EQ(lower(relay, 1),
            "lowering: forward stage 1: send_q of block 2 from rank 0 to rank 1 (only its owner "
            "sends it, to another worker)");
  Plan rows = testing::RemoteComputePlan();
  rows.forward[2].send_o[0].row_count = 2;
  EXPECT_EQ(lower(rows, 1),
            "lowering: forward stage 2: send_o of block 2 carries a row range (only whole blocks)");
}

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
  EXPECT_EQ(f[0].kv_recv, (std::vector<KvRecv>{{1, 1, 0, 4, 0, 4}}));
  EXPECT_EQ(f[1].kv_recv, (std::vector<KvRecv>{{0, 0, 4, 4, 0, 4}}));
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
  EXPECT_EQ(b[2].dkv_send, (std::vector<DkvSend>{{1, 1, 0, 4, 0, 4}}));
  EXPECT_EQ(b[3].dkv_send, (std::vector<DkvSend>{{0, 0, 4, 4, 0, 4}}));
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
  EXPECT_EQ(f[0].kv_send, (std::vector<KvSend>{{1, 2, false, 0, 4, 0, 4}}));
  EXPECT_EQ(f[0].kv_recv, (std::vector<KvRecv>{{0, 0, 0, 4, 0, 4}}));
  EXPECT_EQ(p.forward.pool_rows, 4);
  const auto& b = p.backward.stages;
  EXPECT_EQ(b[2].dkv_send, (std::vector<DkvSend>{{0, 0, 0, 4, 0, 4}}));
  EXPECT_EQ(b[2].dkv_recv, (std::vector<DkvRecv>{{1, 2, false, 0, 4, 0, 4}}));
}

// RowRangePlan (tests/hand_plans.h): B0 (rows 0-1 s0, 2-3 s1) on rank 0
// goes to rank 1 as its rows [2, 4), and the partial comes back as them.
// Every message says which rows of its block it moves; the receive slot
// still spans the whole block (4 pool rows), and the call reads all 4.
TEST(Lowering, RowRangeMessages) {
  const Plan plan = testing::RowRangePlan();
  const RankProgram r0 = LowerPlan(plan, 0), r1 = LowerPlan(plan, 1);
  EXPECT_EQ(r0.forward.stages[0].kv_send, (std::vector<KvSend>{{0, 1, false, 0, 2, 2, 4}}));
  EXPECT_EQ(r1.forward.stages[0].kv_recv, (std::vector<KvRecv>{{0, 0, 0, 2, 2, 4}}));
  EXPECT_EQ(r1.forward.pool_rows, 4);
  ASSERT_EQ(r1.forward.stages[1].compute.size(), 1u);
  EXPECT_EQ(r1.forward.stages[1].compute[0].kv_rows, 4);
  EXPECT_TRUE(r1.forward.stages[1].compute[0].kv_in_pool);
  EXPECT_EQ(r1.backward.stages[2].dkv_send, (std::vector<DkvSend>{{0, 0, 0, 2, 2, 4}}));
  EXPECT_EQ(r0.backward.stages[2].dkv_recv, (std::vector<DkvRecv>{{0, 1, false, 0, 2, 2, 4}}));
}

// Two workers, sequences {4, 4} (tokens 0-3 at rank 0, 4-7 at rank 1),
// block size 4: B0 = tokens 0-1 and 6-7 on w1, B1 = tokens 2-3 on w0, B2 =
// tokens 4-5 on w0. B0 and B2 are exchanged in stage 0, w0 lists (B2, B2)
// before (B1, B1).
// A hand plan's header: one head of dimension 2, coalesce 1; blocks and
// stages to be filled in.
Plan HandPlan(int32_t workers, MaskKind mask, int64_t block_size, int64_t token_cap,
              std::vector<int64_t> sequences) {
  Plan p;
  p.planner = "hand";
  p.workers = workers;
  p.mask = {mask, 0};
  p.attention = {1, 1, 2, 4};
  p.block_size = block_size;
  p.coalesce = 1;
  p.token_cap = token_cap;
  p.sequences = std::move(sequences);
  return p;
}

Plan ReshufflePlan() {
  Plan p = HandPlan(2, MaskKind::kCausal, 4, 4, {4, 4});
  p.blocks = {{1, {{0, 0, 2}, {1, 2, 2}}}, {0, {{0, 2, 2}}}, {0, {{1, 0, 2}}}};
  p.forward = {{{{0, 1, 0}, {2, 0, 1}}, {{0, 0}, {2, 2}, {1, 1}}}, {{}, {{1, 0}, {0, 2}}}};
  p.backward = {{{{0, 1, 0}, {2, 0, 1}}, {}, {{0, 0}, {2, 2}, {1, 1}}},
                {{}, {}, {{1, 0}, {0, 2}}},
                {{}, {{0, 0, 1}, {2, 1, 0}}, {}}};
  return p;
}

// Worked by hand. Needs (stage, position): forward, B0 and B2 are sent by
// their owners first thing in stage 0, (0, 0); w0's calls come after its one
// send, so (B2, B2) is (0, 1) and (B1, B1) (0, 2). Backward: the first call
// with the block as query: B0 (0, 0) on w1, B2 (0, 0) and B1 (0, 1) on w0.
TEST(Lowering, ReshufflePiecesAndTheirOrder) {
  const Plan plan = ReshufflePlan();
  ValidatePlan(plan);
  using Need = std::pair<int64_t, int64_t>;
  EXPECT_EQ(ReshuffleNeed(plan, false), (std::vector<Need>{{0, 0}, {0, 2}, {0, 0}}));
  EXPECT_EQ(ReshuffleNeed(plan, true), (std::vector<Need>{{0, 0}, {0, 1}, {0, 0}}));

  // Rank 0 owns B1 (local rows 0-1) and B2 (rows 2-3); its share is tokens 0-3.
  const RankProgram p0 = LowerPlan(plan, 0);
  const InputReshuffle& in0 = p0.reshuffle_in;
  EXPECT_EQ(in0.self, (std::vector<ReshufflePiece>{{1, 0, 0, {2, 3}, {0, 1}}}));
  EXPECT_EQ(in0.recv, (std::vector<ReshufflePiece>{{2, 1, 0, {}, {2, 3}}}));
  EXPECT_EQ(in0.send, (std::vector<ReshufflePiece>{{0, 0, 1, {0, 1}, {}}}));
  EXPECT_EQ(in0.recv_begin, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(in0.recv_end, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(p0.do_in, in0);  // one piece each way: the order cannot differ
  // (B1, B1) holds only rank 0's tokens: early, and first in stage 0.
  const auto& c0 = p0.forward.stages[0].compute;
  ASSERT_EQ(c0.size(), 2u);
  EXPECT_EQ(c0[0].q_block, 1);
  EXPECT_TRUE(c0[0].early);
  EXPECT_EQ(c0[1].q_block, 2);
  EXPECT_FALSE(c0[1].early);
  EXPECT_FALSE(p0.backward.stages[0].compute[1].early);  // backward: plan order, no flag
  EXPECT_EQ(p0.backward.stages[0].compute[0].q_block, 2);

  // Rank 1 owns B0 (rows 0-3 = tokens 0, 1, 6, 7); its share is tokens 4-7.
  const RankProgram p1 = LowerPlan(plan, 1);
  const InputReshuffle& in1 = p1.reshuffle_in;
  EXPECT_EQ(in1.recv, (std::vector<ReshufflePiece>{{0, 0, 1, {}, {0, 1}}}));
  EXPECT_EQ(in1.self, (std::vector<ReshufflePiece>{{0, 1, 1, {2, 3}, {2, 3}}}));
  EXPECT_EQ(in1.send, (std::vector<ReshufflePiece>{{2, 1, 0, {0, 1}, {}}}));
  EXPECT_EQ(in1.recv_begin, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(in1.recv_end, (std::vector<int64_t>{1, 0, 0}));
  EXPECT_FALSE(p1.forward.stages[0].compute[0].early);  // B0 needs rank 0's tokens
}

// Rank 2 of a 3-rank plan receives pieces of three blocks from rank 0 and
// one more from rank 1; they are posted by need, not by block id, and rank
// 0 sends them in the same order. Sequences {1, 1, 3, 1, 3}: tokens 0, 1,
// 2-4, 5, 6-8; shares 0-2, 3-5, 6-8. B0 = token 0, B1 = token 1, B2 =
// tokens 2-4, all on w2, which computes B2, B1, B0 in that order (full
// mask: each block attends itself only); B3 = token 5 on w1, B4 = tokens
// 6-8 on w0.
TEST(Lowering, PiecesArePostedByNeed) {
  Plan p = HandPlan(3, MaskKind::kFull, 3, 5, {1, 1, 3, 1, 3});
  p.blocks = {
      {2, {{0, 0, 1}}}, {2, {{1, 0, 1}}}, {2, {{2, 0, 3}}}, {1, {{3, 0, 1}}}, {0, {{4, 0, 3}}}};
  p.forward = {{{}, {{2, 2}, {1, 1}, {0, 0}, {3, 3}, {4, 4}}}};
  p.backward = {{{}, {}, {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}}}};
  ValidatePlan(p);
  const RankProgram p2 = LowerPlan(p, 2);
  std::vector<std::pair<int32_t, int32_t>> order;  // (block, src)
  for (const ReshufflePiece& x : p2.reshuffle_in.recv) order.push_back({x.block, x.src});
  EXPECT_EQ(order, (std::vector<std::pair<int32_t, int32_t>>{{2, 0}, {2, 1}, {1, 0}, {0, 0}}));
  order.clear();
  for (const ReshufflePiece& x : p2.do_in.recv) order.push_back({x.block, x.src});
  EXPECT_EQ(order, (std::vector<std::pair<int32_t, int32_t>>{{0, 0}, {1, 0}, {2, 0}, {2, 1}}));
  EXPECT_EQ(p2.reshuffle_in.recv_begin[2], 0);
  EXPECT_EQ(p2.reshuffle_in.recv_end[2], 2);
  const RankProgram p0 = LowerPlan(p, 0);
  std::vector<int32_t> sent;
  for (const ReshufflePiece& x : p0.reshuffle_in.send) sent.push_back(x.block);
  EXPECT_EQ(sent, (std::vector<int32_t>{2, 1, 0}));
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

// Block b is p.rank's and all its tokens are in p.rank's dataloader share.
bool SelfSourced(const Plan& plan, const RankProgram& p, int32_t b) {
  if (plan.blocks[b].worker != p.rank) return false;
  const std::vector<int64_t> offsets = SequenceOffsets(plan.sequences);
  for (const Segment& s : plan.blocks[b].segments) {
    const int64_t g = offsets[s.seq] + s.start;
    if (g < p.dataloader_begin || g + s.length > p.dataloader_end) return false;
  }
  return true;
}

// Symbolic run of one pass of one rank's program over its pool: every row
// carries the (block, row in block) it holds; reads must see the block they
// name (a call: the rows its query block attends, which is all a call needs
// of a slot that a row-range receipt filled in part; a send: the rows it
// sends), and no receipt may land on rows read in the same stage. A partial
// row is written by the calls that attend it and sent by a message that
// covers it.
template <typename Stages>
void CheckPass(const Plan& plan, const Stages& stages, const PassProgram& pass,
               const RankProgram& p, bool backward, const std::string& what) {
  ASSERT_EQ(pass.stages.size(), stages.size()) << what;
  std::vector<std::pair<int32_t, int64_t>> pool(static_cast<size_t>(pass.pool_rows), {-1, 0});
  std::vector<int32_t> partial(static_cast<size_t>(pass.partial_rows), -1);  // -1: zero
  std::vector<int32_t> query(static_cast<size_t>(pass.query_rows), -1);      // -1: free
  // Rows [lo, hi) of `block`, whose first row is `row` of local rows or the pool.
  auto read = [&](int32_t block, bool in_pool, int64_t row, int64_t lo, int64_t hi,
                  std::vector<char>& busy, const std::string& where) {
    if (!in_pool) {
      ASSERT_EQ(plan.blocks[block].worker, p.rank) << where;
      ASSERT_EQ(row, p.block_row[block]) << where;
      return;
    }
    ASSERT_LE(row + plan.blocks[block].tokens(), pass.pool_rows) << where;
    for (int64_t i = lo; i < hi; ++i) {
      ASSERT_EQ(pool[row + i], (std::pair<int32_t, int64_t>{block, i})) << where;
      busy[row + i] = 1;
    }
  };
  for (size_t t = 0; t < stages.size(); ++t) {
    const StageProgram& sp = pass.stages[t];
    const std::string where = what + " stage " + std::to_string(t);
    std::vector<char> busy(pool.size(), 0);
    // Remote compute: query rows received into free query-pool rows (read
    // by the stage's calls only from the next stage on, as the plan says).
    std::vector<int32_t> query_before = query;
    for (const QueryMessage& m : sp.q_recv) {
      ASSERT_EQ(m.rows, plan.blocks[m.block].tokens()) << where;
      ASSERT_LE(m.row + m.rows, pass.query_rows) << where;
      for (int64_t i = m.row; i < m.row + m.rows; ++i) {
        ASSERT_EQ(query[i], -1) << where << ": a query receipt on live rows";
        query[i] = m.block;
      }
    }
    for (const QueryMessage& m : sp.q_send) ASSERT_EQ(m.row, p.block_row[m.block]) << where;
    for (const QueryMessage& m : sp.out_recv) ASSERT_EQ(m.row, p.block_row[m.block]) << where;
    // Calls: the plan's pairs this rank computes, in order.
    std::vector<BlockPair> mine;
    for (const BlockPair& pr : stages[t].compute)
      if (ComputeWorker(plan.blocks, pr) == p.rank) mine.push_back(pr);
    ASSERT_EQ(sp.compute.size(), mine.size()) << where;
    if (!backward && t == 0) {  // early calls first, each part in plan order
      std::vector<BlockPair> early, late;
      for (size_t i = 0; i < mine.size(); ++i)
        (SelfSourced(plan, p, mine[i].q_block) && SelfSourced(plan, p, mine[i].kv_block) ? early
                                                                                         : late)
            .push_back(mine[i]);
      mine = early;
      mine.insert(mine.end(), late.begin(), late.end());
      for (size_t i = 0; i < mine.size(); ++i)
        ASSERT_EQ(sp.compute[i].early, i < early.size()) << where;
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      const ComputeCall& c = sp.compute[i];
      ASSERT_EQ(c.q_block, mine[i].q_block) << where;
      ASSERT_EQ(c.kv_block, mine[i].kv_block) << where;
      ASSERT_EQ(c.q_in_pool, plan.blocks[c.q_block].worker != p.rank) << where;
      if (c.q_in_pool)
        for (int64_t r = c.q_row; r < c.q_row + c.q_rows; ++r)
          ASSERT_EQ(query_before[r], c.q_block) << where << ": a call reads foreign queries";
      else
        ASSERT_EQ(c.q_row, p.block_row[c.q_block]) << where;
      ASSERT_EQ(c.kv_rows, plan.blocks[c.kv_block].tokens()) << where;
      const TokenRange attended =
          AttendedRows(plan.sequences, plan.blocks[c.q_block], plan.blocks[c.kv_block], plan.mask);
      read(c.kv_block, c.kv_in_pool, c.kv_row, attended.begin, attended.end, busy,
           where + " call " + std::to_string(i));
      if (backward) {
        ASSERT_EQ(c.dkv_in_partial, plan.blocks[c.kv_block].worker != p.rank) << where;
        if (c.dkv_in_partial)
          for (int64_t r = attended.begin; r < attended.end; ++r) {
            ASSERT_TRUE(partial[c.dkv_row + r] == -1 || partial[c.dkv_row + r] == c.kv_block)
                << where;
            partial[c.dkv_row + r] = c.kv_block;
          }
        else
          ASSERT_EQ(c.dkv_row, p.block_row[c.kv_block]) << where;
      }
    }
    for (const KvSend& s : sp.kv_send) {
      ASSERT_EQ(s.block_rows, plan.blocks[s.block].tokens()) << where;
      read(s.block, s.from_pool, s.row, s.row_begin, s.row_begin + s.rows, busy, where + " send");
    }
    for (const KvRecv& r : sp.kv_recv) {
      ASSERT_EQ(r.block_rows, plan.blocks[r.block].tokens()) << where;
      ASSERT_LE(r.row_begin + r.rows, r.block_rows) << where;
      for (int64_t i = r.row_begin; i < r.row_begin + r.rows; ++i) {
        ASSERT_FALSE(busy[r.pool_row + i])
            << where << ": a receipt overwrites rows read in its stage";
        pool[r.pool_row + i] = {r.block, i};
      }
    }
    for (const DkvSend& s : sp.dkv_send) {
      bool written = false;
      for (int64_t r = s.row_begin; r < s.row_begin + s.rows; ++r) {
        ASSERT_TRUE(partial[s.partial_row + r] == s.block || partial[s.partial_row + r] == -1)
            << where << ": dkv send of a foreign partial";
        written = written || partial[s.partial_row + r] == s.block;
        partial[s.partial_row + r] = -1;
      }
      ASSERT_TRUE(written) << where << ": dkv send of an empty partial";
    }
    for (const QueryMessage& m : sp.out_send)
      for (int64_t i = m.row; i < m.row + m.rows; ++i) {
        ASSERT_EQ(query[i], m.block) << where << ": a partial output of foreign rows";
        query[i] = -1;
      }
    for (const DkvRecv& r : sp.dkv_recv) {
      ASSERT_EQ(r.into_partial, plan.blocks[r.block].worker != p.rank) << where;
      if (!r.into_partial) continue;
      for (int64_t i = r.row_begin; i < r.row_begin + r.rows; ++i) {
        ASSERT_TRUE(partial[r.row + i] == -1 || partial[r.row + i] == r.block) << where;
        partial[r.row + i] = r.block;
      }
    }
  }
  for (int32_t b : partial) ASSERT_EQ(b, -1) << what << ": a partial never sent";
  for (int32_t b : query) ASSERT_EQ(b, -1) << what << ": a partial output never returned";
}

// Remote compute: what r sends w (query rows, partial outputs), stage by
// stage and in order, is what w receives from r.
void CheckQueryMessages(const std::vector<RankProgram>& programs, bool backward,
                        const std::string& what) {
  for (const RankProgram& src : programs)
    for (const RankProgram& dst : programs) {
      const PassProgram& a = backward ? src.backward : src.forward;
      const PassProgram& b = backward ? dst.backward : dst.forward;
      for (size_t t = 0; t < a.stages.size(); ++t)
        for (const auto list : {&StageProgram::q_send, &StageProgram::out_send}) {
          const auto recv_list =
              list == &StageProgram::q_send ? &StageProgram::q_recv : &StageProgram::out_recv;
          std::vector<std::pair<int32_t, int64_t>> sent, got;
          for (const QueryMessage& m : a.stages[t].*list)
            if (m.peer == dst.rank) sent.push_back({m.block, m.rows});
          for (const QueryMessage& m : b.stages[t].*recv_list)
            if (m.peer == src.rank) got.push_back({m.block, m.rows});
          ASSERT_EQ(sent, got) << what << " stage " << t << ": query messages would not match";
        }
    }
}

// The input reshuffle as messages (reshuffle_in, or do_in): every local row
// of a rank is in one piece it receives or keeps, every dataloader row in
// one it sends or keeps; what r sends w is, piece by piece and in order,
// what w receives from r, row for row the same tokens; receives are in
// (need, block) order with each block's pieces adjacent as recv_begin/end
// say, sends in (need, owner, block) order.
void CheckPieces(const Plan& plan, const std::vector<RankProgram>& programs, bool backward,
                 const std::string& what) {
  using Need = std::pair<int64_t, int64_t>;
  const std::vector<Need> need = ReshuffleNeed(plan, backward);
  const std::string w0 = what + (backward ? " do_in" : " reshuffle_in");
  for (const RankProgram& p : programs) {
    const InputReshuffle& in = backward ? p.do_in : p.reshuffle_in;
    const std::string w = w0 + " rank " + std::to_string(p.rank);
    std::vector<int> local(static_cast<size_t>(p.local_rows), 0);
    std::vector<int> dl(static_cast<size_t>(p.dataloader_end - p.dataloader_begin), 0);
    for (const ReshufflePiece& x : in.self) {
      ASSERT_EQ(x.src, p.rank) << w;
      ASSERT_EQ(x.dst, p.rank) << w;
      ASSERT_EQ(x.local_rows.size(), x.dataloader_rows.size()) << w;
      for (size_t i = 0; i < x.local_rows.size(); ++i)
        ASSERT_EQ(p.local_token[x.local_rows[i]], p.dataloader_begin + x.dataloader_rows[i]) << w;
    }
    for (const auto* list : {&in.self, &in.recv})
      for (const ReshufflePiece& x : *list) {
        ASSERT_EQ(plan.blocks[x.block].worker, p.rank) << w;
        for (int64_t r : x.local_rows) ++local[r];
      }
    for (const auto* list : {&in.self, &in.send})
      for (const ReshufflePiece& x : *list)
        for (int64_t r : x.dataloader_rows) ++dl[r];
    for (int n : local) ASSERT_EQ(n, 1) << w << ": a local row in no piece, or in two";
    for (int n : dl) ASSERT_EQ(n, 1) << w << ": a dataloader row in no piece, or in two";
    for (size_t i = 0; i < in.recv.size(); ++i) {
      const ReshufflePiece& x = in.recv[i];
      ASSERT_NE(x.src, p.rank) << w;
      ASSERT_GE(static_cast<int64_t>(i), in.recv_begin[x.block]) << w;
      ASSERT_LT(static_cast<int64_t>(i), in.recv_end[x.block]) << w;
      if (i > 0) {
        ASSERT_LE(std::pair(need[in.recv[i - 1].block], in.recv[i - 1].block),
                  std::pair(need[x.block], x.block))
            << w << ": receives not in need order";
      }
    }
    for (size_t i = 1; i < in.send.size(); ++i) {
      const ReshufflePiece &a = in.send[i - 1], &b = in.send[i];
      ASSERT_LT(std::tuple(need[a.block], a.dst, a.block),
                std::tuple(need[b.block], b.dst, b.block))
          << w << ": sends not in need order";
    }
  }
  for (const RankProgram& src : programs)
    for (const RankProgram& dst : programs) {
      if (src.rank == dst.rank) continue;
      const InputReshuffle& s = backward ? src.do_in : src.reshuffle_in;
      const InputReshuffle& d = backward ? dst.do_in : dst.reshuffle_in;
      std::vector<const ReshufflePiece*> sent, got;
      for (const ReshufflePiece& x : s.send)
        if (x.dst == dst.rank) sent.push_back(&x);
      for (const ReshufflePiece& x : d.recv)
        if (x.src == src.rank) got.push_back(&x);
      ASSERT_EQ(sent.size(), got.size()) << w0;
      for (size_t i = 0; i < sent.size(); ++i) {
        ASSERT_EQ(sent[i]->block, got[i]->block) << w0 << ": messages would not match in order";
        ASSERT_EQ(sent[i]->dataloader_rows.size(), got[i]->local_rows.size()) << w0;
        for (size_t r = 0; r < got[i]->local_rows.size(); ++r)
          ASSERT_EQ(src.dataloader_begin + sent[i]->dataloader_rows[r],
                    dst.local_token[got[i]->local_rows[r]])
              << w0;
      }
    }
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
  for (bool backward : {false, true}) {
    CheckPieces(plan, programs, backward, what);
    CheckQueryMessages(programs, backward, what);
  }
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
      const Plan plan = MakePlan(lengths, config);
      CheckPlan(plan, info.name + " trial " + std::to_string(trial));
    }
}

}  // namespace
}  // namespace fcp
