// ValidatePlan against hand-drawn plans: the valid ones pass, and one
// mutation per rule of PLAN_FORMAT.md fails with kInvalidPlan naming the rule.
#include <cstdint>
#include <functional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/plan.h"
#include "hand_plans.h"

namespace fcp {
namespace {

using ::testing::HasSubstr;
using testing::ThreeWorkerPlan;
using testing::TwoWorkerPlan;

// Runs ValidatePlan and returns its kInvalidPlan message ("" if it passed).
std::string Violation(const Plan& plan, const ValidateOptions& options = {}) {
  return testing::ErrorMessage(ErrorCode::kInvalidPlan, [&] { ValidatePlan(plan, options); });
}

TEST(PlanValidateTest, HandDrawnPlansAreValid) {
  EXPECT_EQ(Violation(TwoWorkerPlan()), "");
  EXPECT_EQ(Violation(ThreeWorkerPlan()), "");
  const ValidateOptions strict{.forbid_redundant_transfers = true};
  EXPECT_EQ(Violation(TwoWorkerPlan(), strict), "");
  EXPECT_EQ(Violation(ThreeWorkerPlan(), strict), "");
}

// The remote-compute extension (docs/plan-format.md): a pair computed away
// from its query block's owner needs the queries there and returns its
// partial exactly once, to the owner, after its last compute; each rule
// broken once.
TEST(PlanValidateTest, RemoteCompute) {
  EXPECT_EQ(Violation(testing::RemoteComputePlan()), "");
  const ValidateOptions strict{.forbid_redundant_transfers = true};
  EXPECT_EQ(Violation(testing::RemoteComputePlan(), strict), "");
  Plan no_q = testing::RemoteComputePlan();
  no_q.forward[0].send_q.clear();
  EXPECT_THAT(Violation(no_q), HasSubstr("forward stage 1 compute [2, 0]: worker 0 does not hold "
                                         "block 2's queries at this stage"));
  Plan q_late = testing::RemoteComputePlan();  // received in the stage it is used
  std::swap(q_late.backward[0].send_q, q_late.backward[1].send_q);
  EXPECT_THAT(Violation(q_late), HasSubstr("backward stage 1 compute [2, 0]: worker 0 does not "
                                           "hold block 2's queries"));
  Plan no_o = testing::RemoteComputePlan();
  no_o.forward[2].send_o.clear();
  EXPECT_THAT(Violation(no_o),
              HasSubstr("forward: worker 0 never returns its partial O of block 2 to the owner"));
  Plan no_dq = testing::RemoteComputePlan();
  no_dq.backward[2].send_dq.clear();
  EXPECT_THAT(Violation(no_dq),
              HasSubstr("backward: worker 0 never returns its partial dQ of block 2"));
  Plan o_early = testing::RemoteComputePlan();  // in the stage of the compute
  std::swap(o_early.forward[1].send_o, o_early.forward[2].send_o);
  EXPECT_THAT(Violation(o_early), HasSubstr("forward stage 1 send_o [2, 0, 1]: worker 0 holds no "
                                            "unreturned partial O of block 2"));
  Plan twice = testing::RemoteComputePlan();
  twice.forward.push_back({{}, {}, {}, {{2, 0, 1}}});
  EXPECT_THAT(Violation(twice), HasSubstr("forward stage 3 send_o [2, 0, 1]: worker 0 holds no "
                                          "unreturned partial O"));
  Plan not_owner = testing::RemoteComputePlan();
  not_owner.workers = 3;
  not_owner.backward[2].send_dq[0].dst = 2;
  EXPECT_THAT(Violation(not_owner), HasSubstr("backward stage 2 send_dq [2, 0, 2]: a partial dQ "
                                              "goes to the owner of block 2, worker 1"));
  Plan relay = testing::RemoteComputePlan();
  relay.workers = 3;
  relay.forward[0].send_q[0] = {2, 2, 0};
  EXPECT_THAT(Violation(relay), HasSubstr("forward stage 0 send_q [2, 2, 0]: only the owner of "
                                          "block 2, worker 1, sends its queries"));
  Plan spelled = testing::RemoteComputePlan();
  spelled.forward[0].compute[0].worker = 0;
  EXPECT_THAT(Violation(spelled), HasSubstr("forward stage 0 compute [0, 0]: names the owner of "
                                            "block 0 as its worker"));
  Plan no_worker = testing::RemoteComputePlan();
  no_worker.forward[1].compute[1].worker = 5;
  EXPECT_THAT(Violation(no_worker), HasSubstr("worker 5 is not a worker"));
  Plan no_kv = testing::RemoteComputePlan();  // w0 computes (2,1) without block 1's K/V
  no_kv.forward[0].compute = {{0, 0}, {1, 1}, {2, 2}};
  no_kv.forward[1].compute.push_back({2, 1, 0});
  EXPECT_THAT(Violation(no_kv), HasSubstr("forward stage 1 compute [2, 1]: worker 0 does not "
                                          "hold block 1's keys/values"));
  Plan after_return = testing::RemoteComputePlan();
  after_return.backward[2].compute.push_back(after_return.backward[1].compute[1]);
  after_return.backward[1].compute.pop_back();
  after_return.backward[1].send_dq = after_return.backward[2].send_dq;
  after_return.backward[2].send_dq.clear();
  EXPECT_THAT(Violation(after_return), HasSubstr("backward stage 1 send_dq [2, 0, 1]: worker 0 "
                                                 "holds no unreturned partial dQ"));
  Plan congested = testing::RemoteComputePlan();  // coalesce 1: two query sends from w1
  congested.forward[0].send_q.push_back({1, 1, 0});
  EXPECT_THAT(Violation(congested), HasSubstr("forward stage 0 send_q [1, 1, 0]: worker 1 sends "
                                              "more than coalesce = 1"));
}

// Transfers that carry part of their block (docs/plan-format.md, "Row
// ranges"): valid when every compute holds the rows it attends and every
// partial sent covers the rows that may be non-zero; each rule broken once.
TEST(PlanValidateTest, RowRanges) {
  EXPECT_EQ(Violation(testing::RowRangePlan()), "");
  const ValidateOptions strict{.forbid_redundant_transfers = true};
  EXPECT_EQ(Violation(testing::RowRangePlan(), strict), "");
  Plan wrong_rows = testing::RowRangePlan();  // s0's rows, which w1 does not attend
  wrong_rows.forward[0].send[0].row_begin = 0;
  EXPECT_THAT(Violation(wrong_rows),
              HasSubstr("forward stage 1 compute [1, 0]: worker 1 holds rows [0, 2) of block 0, "
                        "not every row block 1 attends [2, 4)"));
  Plan too_few = testing::RowRangePlan();
  too_few.backward[0].send_kv[0] = {0, 0, 1, 3, 1};
  EXPECT_THAT(Violation(too_few), HasSubstr("backward stage 1 compute [1, 0]: worker 1 holds rows "
                                            "[3, 4) of block 0, not every row block 1 attends"));
  Plan outside = testing::RowRangePlan();
  outside.forward[0].send[0].row_begin = 3;
  EXPECT_THAT(Violation(outside), HasSubstr("forward stage 0 send [0, 0, 1]: rows [3, +2) are not "
                                            "inside block 0's 4 rows"));
  Plan empty = testing::RowRangePlan();
  empty.forward[0].send[0].row_count = 0;
  EXPECT_THAT(Violation(empty), HasSubstr("rows [2, +0) are not inside block 0's 4 rows"));
  Plan partial_short = testing::RowRangePlan();
  partial_short.backward[2].send_dkv[0] = {0, 1, 0, 3, 1};
  EXPECT_THAT(Violation(partial_short),
              HasSubstr("backward stage 2 send_dkv [0, 1, 0]: it sends rows [3, 4) of the "
                        "partial, whose rows [2, 4) may be non-zero"));
  // A forwarder sends only rows it holds: ThreeWorkerPlan with w1 getting
  // rows [0, 2) of B0 and forwarding rows [2, 4) of it to w2 (its compute
  // (1, 0) moved to the last stage, so the send is what breaks).
  Plan forwarder = ThreeWorkerPlan();
  forwarder.forward[0].send[0] = {0, 0, 1, 0, 2};
  forwarder.forward[1].send[0] = {0, 1, 2, 2, 2};
  forwarder.forward[1].compute.erase(forwarder.forward[1].compute.begin());
  forwarder.forward[2].compute.push_back({1, 0});
  EXPECT_THAT(Violation(forwarder),
              HasSubstr("forward stage 1 send [0, 1, 2]: worker 1 holds rows [0, 2) of block 0, "
                        "not the rows [2, 4) it sends"));
  // Congestion counts transfers, not rows: two halves of B0 from w0 in one
  // stage are two sends, above coalesce 1.
  Plan halves = ThreeWorkerPlan();
  halves.forward[0].send = {{0, 0, 1, 0, 2}, {0, 0, 2, 2, 2}};
  EXPECT_THAT(Violation(halves),
              HasSubstr("forward stage 0 send [0, 0, 2]: worker 0 sends more than coalesce = 1"));
  // Whole-block transfers in place of the ranges are valid too (more bytes).
  Plan whole = testing::RowRangePlan();
  for (ForwardStage& st : whole.forward)
    for (Transfer& t : st.send) t = {t.block, t.src, t.dst};
  for (BackwardStage& st : whole.backward) {
    for (Transfer& t : st.send_kv) t = {t.block, t.src, t.dst};
    for (Transfer& t : st.send_dkv) t = {t.block, t.src, t.dst};
  }
  EXPECT_EQ(Violation(whole), "");
  // A relayed partial goes whole: ThreeWorkerPlan with w2 sending its
  // partial of B0 to w1 (not the owner) as a row range.
  Plan relay = ThreeWorkerPlan();
  relay.backward[3].send_dkv = {{0, 2, 1, 0, 4}};
  EXPECT_THAT(Violation(relay),
              HasSubstr("backward stage 3 send_dkv [0, 2, 1]: a relayed partial dK/dV carries "
                        "all of its block's rows"));
}

struct Mutation {
  const char* name;
  std::function<void(Plan&)> mutate;
  const char* expected;  // a substring of the message naming the rule
};

// Each mutation of ThreeWorkerPlan() breaks exactly one rule.
//   forward   0: send [0,0,1] [1,1,2] | compute (0,0) (1,1) (2,2)
//             1: send [0,0,2]         | compute (1,0) (2,1)
//             2:                      | compute (2,0)
//   backward  0: send_kv [0,0,1] [1,1,2]      | compute (0,0) (1,1) (2,2)
//             1: send_kv [0,0,2]              | compute (1,0) (2,1)
//             2: send_dkv [0,1,0] [1,2,1]     | compute (2,0)
//             3: send_dkv [0,2,0]
const Mutation kMutations[] = {
    {"TokenNotCovered", [](Plan& p) { p.blocks[2].segments[0].length = 3; },
     "tokens [11, 12) are in no block"},
    {"SegmentsOverlap", [](Plan& p) { p.blocks[1].segments[0].start = 3; },
     "lies in more than one segment"},
    {"SegmentOutsideSequence", [](Plan& p) { p.blocks[2].segments[0].start = 9; },
     "[seq, start, length] = [0, 9, 4] lies outside sequence 0 of length 12"},
    {"SegmentOfMissingSequence", [](Plan& p) { p.blocks[2].segments[0].seq = 1; },
     "sequence 1 does not exist"},
    {"EmptySegment",
     [](Plan& p) {
       p.blocks[2].segments.push_back({0, 12, 0});
     },
     "length must be > 0"},
    {"BlockWithoutSegments",
     [](Plan& p) {
       p.blocks.push_back({0, {}});
     },
     "has no segments"},
    {"OwnerOutOfRange", [](Plan& p) { p.blocks[2].worker = 3; }, "worker 3 is not in [0, 3)"},
    {"NegativeOwner", [](Plan& p) { p.blocks[0].worker = -1; }, "worker -1 is not in [0, 3)"},
    {"TokenCapExceeded", [](Plan& p) { p.blocks[2].worker = 0; },
     "worker 0 owns 8 tokens, above token_cap 4"},
    {"SendOfBlockNotHeld",
     [](Plan& p) {
       p.forward[1].send[0].src = 1;
       p.forward[1].send[0].block = 2;
     },
     "worker 1 does not hold block 2 at this stage"},
    {"SendSrcEqualsDst", [](Plan& p) { p.forward[1].send[0].dst = 0; }, "src == dst"},
    {"SendOfMissingBlock", [](Plan& p) { p.forward[1].send[0].block = 7; }, "block does not exist"},
    {"SendToMissingWorker", [](Plan& p) { p.forward[1].send[0].dst = 5; }, "dst is not a worker"},
    {"ComputeInTheStageTheBlockArrives",
     [](Plan& p) {  // (1,0) moved from stage 1 to stage 0, where B0 is still in flight
       p.forward[1].compute.erase(p.forward[1].compute.begin());
       p.forward[0].compute.push_back({1, 0});
     },
     "forward stage 0 compute [1, 0]: worker 1 does not hold block 0's keys/values"},
    {"ComputeOfMissingBlock",
     [](Plan& p) {
       p.forward[2].compute.push_back({2, 9});
     },
     "kv_block does not exist"},
    {"PairComputedTwice",
     [](Plan& p) {
       p.forward[2].compute.push_back({1, 1});
     },
     "forward: pair [1, 1] is computed more than once"},
    {"RequiredPairMissing", [](Plan& p) { p.forward[2].compute.clear(); },
     "forward: required pair [2, 0] is never computed"},
    {"UnrequiredPairComputed",
     [](Plan& p) {  // w0 receives B1 and computes the causally masked-out pair (0, 1)
       p.forward[1].send.push_back({1, 1, 0});
       p.forward[2].compute.push_back({0, 1});
     },
     "forward: pair [0, 1] is computed but not required by the mask"},
    {"TooManySends",
     [](Plan& p) {
       p.forward[0].send.push_back({0, 0, 2});
     },
     "worker 0 sends more than coalesce = 1 blocks in this stage"},
    {"TooManyReceives",
     [](Plan& p) {
       p.forward[1].send.push_back({1, 1, 2});
     },
     "worker 2 receives more than coalesce = 1 blocks in this stage"},
    {"TooManyDkvReceives",
     [](Plan& p) {  // w1 and w2 both return their partials of B0 to w0 in stage 2
       p.backward[2].send_dkv = {{0, 1, 0}, {0, 2, 0}};
       p.backward[3].send_dkv = {{1, 2, 1}};
     },
     "backward stage 2 send_dkv [0, 2, 0]: worker 0 receives more than coalesce"},
    {"BackwardMissingPair",
     [](Plan& p) {  // (2,1) dropped, and with it w2's partial of B1
       p.backward[1].compute.pop_back();
       p.backward[2].send_dkv.pop_back();
     },
     "backward: required pair [2, 1] is never computed"},
    {"BackwardComputeBeforeArrival",
     [](Plan& p) {
       p.backward[1].compute.erase(p.backward[1].compute.begin());
       p.backward[0].compute.push_back({1, 0});
     },
     "backward stage 0 compute [1, 0]: worker 1 does not hold block 0"},
    {"BackwardDoesNotKeepForwardKv",
     [](Plan& p) {  // the forward's K/V transfers do not carry into the backward
       p.backward[0].send_kv.clear();
       p.backward[1].send_kv.clear();
     },
     "backward stage 1 compute [1, 0]: worker 1 does not hold block 0"},
    {"DkvNeverReturned", [](Plan& p) { p.backward[3].send_dkv.clear(); },
     "backward: worker 2 never returns its partial dK/dV of block 0 to the owner"},
    {"DkvSentInTheStageOfTheCompute",
     [](Plan& p) {  // w2 returns B0's partial in stage 2, where it computes (2,0)
       p.backward[2].send_dkv = {{0, 2, 0}};
       p.backward[3].send_dkv = {{0, 1, 0}, {1, 2, 1}};
     },
     "backward stage 2 send_dkv [0, 2, 0]: worker 2 holds no unsent partial dK/dV of block 0 "
     "before this stage"},
    {"DkvSentTwice",
     [](Plan& p) {
       p.backward.push_back({{}, {{0, 2, 0}}, {}});
     },
     "backward stage 4 send_dkv [0, 2, 0]: worker 2 holds no unsent partial dK/dV of block 0"},
    {"DkvSentByOwner",
     [](Plan& p) {
       p.backward.push_back({{}, {{0, 0, 1}}, {}});
     },
     "the owner of a block never sends its dK/dV"},
    {"DkvSentByWorkerThatNeverComputed",
     [](Plan& p) {
       p.backward.push_back({{}, {{2, 0, 2}}, {}});
     },
     "worker 0 holds no unsent partial dK/dV of block 2"},
    {"ZeroWorkers", [](Plan& p) { p.workers = 0; }, "workers must be >= 1, got 0"},
    {"ZeroCoalesce", [](Plan& p) { p.coalesce = 0; }, "coalesce must be >= 1, got 0"},
    {"ZeroBlockSize", [](Plan& p) { p.block_size = 0; }, "block_size must be >= 1"},
    {"ZeroTokenCap", [](Plan& p) { p.token_cap = 0; }, "token_cap must be >= 1"},
    {"BadWindow",
     [](Plan& p) {
       p.mask = {MaskKind::kSlidingWindow, 0};
     },
     "sliding_window needs window >= 1"},
    {"BadAttentionShape", [](Plan& p) { p.attention.heads_kv = 3; },
     "must be a multiple of heads_kv"},
    {"NoSequences", [](Plan& p) { p.sequences.clear(); }, "sequences is empty"},
    {"EmptySequence", [](Plan& p) { p.sequences.push_back(0); }, "sequence 1 has length 0"},
    {"AbsurdWorkerCount", [](Plan& p) { p.workers = 2000000000; }, "workers must be <= 2^20"},
    {"AbsurdAttentionShape",
     [](Plan& p) {
       p.attention = {1 << 30, 1 << 30, 1 << 30, 1 << 30};
     },
     "must be <= 2^22 bytes per token"},
    {"SequenceLongerThan2To31", [](Plan& p) { p.sequences = {(int64_t{1} << 31) + 1}; },
     "sequence 0 has length 2147483649 (must be <= 2^31)"},
    {"TooManyTokenPairs",
     [](Plan& p) {
       p.sequences = {int64_t{1} << 31, int64_t{1} << 31};
     },
     "more than 2^62 token pairs"},
};

class PlanMutationTest : public ::testing::TestWithParam<Mutation> {};

TEST_P(PlanMutationTest, FailsNamingTheRule) {
  Plan plan = ThreeWorkerPlan();
  GetParam().mutate(plan);
  EXPECT_THAT(Violation(plan), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(AllRules, PlanMutationTest, ::testing::ValuesIn(kMutations),
                         [](const auto& info) { return std::string(info.param.name); });

// w1 returns its partial of B0 through w2 (a non-owner that also computed
// with B0), which forwards the sum to the owner w0: a relay, allowed.
//   backward 2: send_dkv [0,1,2] [1,2,1] | compute (2,0)
//            3: send_dkv [0,2,0]
TEST(PlanValidateTest, RelayThroughNonOwnerEndingAtOwnerIsAccepted) {
  Plan plan = ThreeWorkerPlan();
  plan.backward[2].send_dkv[0] = {0, 1, 2};
  EXPECT_EQ(Violation(plan), "");
}

TEST(PlanValidateTest, RelayThatNeverReachesTheOwnerIsRejected) {
  Plan plan = ThreeWorkerPlan();
  plan.backward[2].send_dkv[0] = {0, 1, 2};
  plan.backward[3].send_dkv.clear();
  EXPECT_THAT(Violation(plan), HasSubstr("worker 2 never returns its partial dK/dV of block 0"));
}

TEST(PlanValidateTest, RelayToAWorkerThatAlreadyReturnedIsRejected) {
  Plan plan = ThreeWorkerPlan();
  // w2 returns in stage 3; w1 relays to w2 only in stage 4.
  plan.backward[2].send_dkv = {{1, 2, 1}};
  plan.backward.push_back({{}, {{0, 1, 2}}, {}});
  EXPECT_THAT(Violation(plan), HasSubstr("relay target 2 already sent its partial dK/dV"));
}

// Two-worker plan, where w1 computes (1,0) and (2,0) in backward stages 1 and
// 2: returning the partial of B0 in stage 2 (before the second compute)
// breaks "after its last compute with j".
TEST(PlanValidateTest, DkvSentBeforeLastComputeIsRejected) {
  Plan plan = TwoWorkerPlan();
  plan.backward[2].send_dkv = {{0, 1, 0}};
  plan.backward[3].send_dkv.clear();
  EXPECT_THAT(Violation(plan),
              HasSubstr("backward stage 2 compute [2, 0]: worker 1 already sent its partial "
                        "dK/dV of block 0"));
}

// K/V and dK/dV sends are counted separately per stage: in backward stage 2
// w1 sends one K/V block and one dK/dV partial, w0 receives one of each,
// which fits coalesce 1.
TEST(PlanValidateTest, KvAndDkvSendsAreCountedSeparately) {
  Plan plan = ThreeWorkerPlan();
  plan.backward[2].send_kv = {{1, 1, 0}};
  EXPECT_EQ(Violation(plan), "");
  plan.backward[2].send_kv.push_back({2, 2, 0});  // a second K/V receive for w0
  EXPECT_THAT(Violation(plan),
              HasSubstr("backward stage 2 send_kv [2, 2, 0]: worker 0 receives more than"));
}

TEST(PlanValidateTest, RelayedKvTransfersAreAllowedUnlessRedundancyIsForbidden) {
  // w1 forwards B0, received in stage 0, to w2 in stage 1 (instead of w0).
  Plan plan = ThreeWorkerPlan();
  plan.forward[1].send[0] = {0, 1, 2};
  EXPECT_EQ(Violation(plan), "");
  EXPECT_EQ(Violation(plan, {.forbid_redundant_transfers = true}), "");
  // Sending B0 to w1 twice is redundant.
  plan.forward[2].send = {{0, 0, 1}};
  EXPECT_EQ(Violation(plan), "");
  EXPECT_THAT(Violation(plan, {.forbid_redundant_transfers = true}),
              HasSubstr("forward stage 2 send [0, 0, 1]: worker 1 already holds block 0"));
}

// Byte counts of the metrics stay in int64: forward traffic is capped at 2^40
// tokens moved (here 1025 redundant sends of a 2^30-token block).
TEST(PlanValidateTest, AbsurdTrafficIsRejected) {
  Plan plan;
  plan.workers = 2;
  plan.token_cap = int64_t{1} << 30;
  plan.sequences = {int64_t{1} << 31};
  plan.blocks = {{0, {{0, 0, int64_t{1} << 30}}}, {1, {{0, int64_t{1} << 30, int64_t{1} << 30}}}};
  plan.forward.assign(1025, ForwardStage{{{0, 0, 1}}, {}});
  EXPECT_THAT(Violation(plan),
              HasSubstr("forward stage 1024: forward transfers move more than 2^40"));
}

// Many empty stages on 2^20 workers: the per-stage checks cost O(transfers),
// not O(workers) (a 1 MB file must not take minutes).
TEST(PlanValidateTest, ManyEmptyStagesOnManyWorkersAreCheap) {
  Plan plan = testing::ThreeWorkerPlan();
  plan.workers = 1 << 20;
  plan.forward.resize(plan.forward.size() + 20000);
  plan.backward.resize(plan.backward.size() + 20000);
  EXPECT_EQ(Violation(plan), "");
}

TEST(PlanValidateTest, EmptyStagesAreAllowed) {
  Plan plan = ThreeWorkerPlan();
  plan.forward.insert(plan.forward.begin(), ForwardStage{});
  plan.backward.push_back(BackwardStage{});
  EXPECT_EQ(Violation(plan), "");
}

TEST(PlanValidateTest, PackedBlockWithTwoSequences) {
  // One worker, block 0 = seq0 [0,3) + seq1 [0,2), full mask: only (0,0).
  Plan plan;
  plan.workers = 1;
  plan.mask = {MaskKind::kFull, 0};
  plan.token_cap = 5;
  plan.sequences = {3, 2};
  plan.blocks = {{0, {{1, 0, 2}, {0, 0, 3}}}};
  plan.forward = {{{}, {{0, 0}}}};
  plan.backward = {{{}, {}, {{0, 0}}}};
  EXPECT_EQ(Violation(plan), "");
}

// A parsed plan reaches total_tokens() before validation (Python's
// Plan.total_tokens): an overflowing sum is an error, not undefined behaviour.
TEST(PlanValidateTest, TotalTokensRejectsAnOverflowingSum) {
  Plan plan = TwoWorkerPlan();
  EXPECT_EQ(plan.total_tokens(), 12);
  plan.sequences = {1, INT64_MAX, 1};
  try {
    plan.total_tokens();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("overflow int64 at sequence 1"));
  }
  EXPECT_NE(Violation(plan), "");
}

}  // namespace
}  // namespace fcp
