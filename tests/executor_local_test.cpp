// The executor on threads with the in-process communicator: the same plans
// as the mpirun tests (hand-built greedy and ring plans, the FCP planner),
// every mask, GQA, 1-4 ranks, forward and backward, compared with the
// float64 reference; plus the communicator's own matching rules. Runs in
// the plain unit suite, so sanitizer builds check the executor's memory
// use with leak checks on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fcp/communicator.h"
#include "fcp/error.h"
#include "fcp/executor.h"
#include "fcp/lowering.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/reference_attention.h"
#include "hand_plans.h"
#include "test_plans.h"
#include "thread_runner.h"

namespace fcp {
namespace {

void ExpectExact(const Plan& plan, bool backward, ExecutorOptions options = {}) {
  ValidatePlan(plan);
  options.backward = backward;
  options.kernel.q_tile_rows = 8;
  options.kernel.kv_tile_rows = 16;
  const testing::PlanRunErrors e = testing::RunPlanOnThreads(plan, options);
  const std::string what = plan.planner + " workers " + std::to_string(plan.workers) + " mask " +
                           MaskKindName(plan.mask.kind) + " coalesce " +
                           std::to_string(plan.coalesce);
  EXPECT_LT(e.o, 1e-5) << what;
  EXPECT_LT(e.lse, 1e-6) << what;
  EXPECT_LT(e.dq, 1e-5) << what;
  EXPECT_LT(e.dk, 1e-5) << what;
  EXPECT_LT(e.dv, 1e-5) << what;
  EXPECT_LE(e.peak_received_blocks, 2 * plan.coalesce) << what;
}

const Mask kMasks[] = {{MaskKind::kCausal, 0}, {MaskKind::kFull, 0}, {MaskKind::kSlidingWindow, 9}};

testing::TestPlanSpec Spec(int32_t workers, const Mask& mask, int32_t coalesce) {
  testing::TestPlanSpec spec;
  spec.sequences = {3, 16, 1, 29, 40, 7, 1};
  spec.workers = workers;
  spec.block_size = 8;
  spec.coalesce = coalesce;
  spec.mask = mask;
  spec.attention = {4, 2, 8, 4};
  spec.seed = 11;
  return spec;
}

// FCP's plan of Spec's batch, coalesce 2.
Plan FcpPlan(int32_t workers, const Mask& mask) {
  PlannerConfig config;
  config.workers = workers;
  config.block_size = 8;
  config.coalesce = 2;
  config.mask = mask;
  config.attention = {4, 2, 8, 4};
  return MakePlan(Spec(workers, mask, 2).sequences, config);
}

TEST(ExecutorLocal, HandBuiltPlansAllMasksAndRankCounts) {
  for (int32_t workers = 1; workers <= 4; ++workers)
    for (const Mask& mask : kMasks) {
      for (int32_t c : {1, 2})
        ExpectExact(testing::MakeGreedyTestPlan(Spec(workers, mask, c)), /*backward=*/true);
      ExpectExact(testing::MakeRingTestPlan(Spec(workers, mask, 1)), /*backward=*/true);
    }
}

TEST(ExecutorLocal, ForwardOnly) {
  ExpectExact(testing::MakeGreedyTestPlan(Spec(3, kMasks[0], 2)), /*backward=*/false);
}

TEST(ExecutorLocal, RegisteredPlanners) {
  for (const PlannerInfo& info : Planners())
    for (const Mask& mask : kMasks) {
      PlannerConfig config;
      config.planner = info.name;
      config.workers = 3;
      config.block_size = 8;
      config.coalesce = 2;
      config.mask = mask;
      config.attention = {4, 2, 8, 4};
      const Plan plan = MakePlan(Spec(3, mask, 2).sequences, config);
      ExpectExact(plan, /*backward=*/true);
    }
}

// Transfers that carry part of their block (docs/plan-format.md, "Row
// ranges"): MagiAttention-like plans send each rank only the key rows its
// chunks attend and take back dK/dV for those rows; every mask, 2-4 ranks,
// exact against the reference. The hand-drawn RowRangePlan as well.
TEST(ExecutorLocal, RowRangeTransfers) {
  int32_t plans_with_ranges = 0;
  for (int32_t workers = 2; workers <= 4; ++workers)
    for (const Mask& mask : kMasks) {
      PlannerConfig config;
      config.planner = "magi";
      config.workers = workers;
      config.mask = mask;
      config.attention = {4, 2, 8, 4};
      const Plan plan = MakePlan(Spec(workers, mask, 2).sequences, config);
      bool ranges = false;
      for (const BackwardStage& st : plan.backward)
        for (const Transfer& t : st.send_dkv) ranges = ranges || !t.all_rows();
      plans_with_ranges += ranges;
      ExpectExact(plan, /*backward=*/true);
    }
  EXPECT_GE(plans_with_ranges, 6);  // the test exercises partial messages both ways
  ExpectExact(testing::RowRangePlan(), /*backward=*/true);
}

// The remote-compute extension (docs/plan-format.md): magi-dynamic plans
// compute some pairs away from their query block's owner, which merges the
// partial outputs sent home; every mask, 2-4 ranks, exact against the
// reference. The hand-drawn RemoteComputePlan as well.
TEST(ExecutorLocal, RemoteCompute) {
  int32_t plans_with_remote = 0;
  for (int32_t workers = 2; workers <= 4; ++workers)
    for (const Mask& mask : kMasks) {
      PlannerConfig config;
      config.planner = "magi-dynamic";
      config.workers = workers;
      config.block_size = 8;
      config.coalesce = 2;
      config.mask = mask;
      config.attention = {4, 2, 8, 4};
      const Plan plan = MakePlan(Spec(workers, mask, 2).sequences, config);
      plans_with_remote += UsesRemoteCompute(plan);
      ExpectExact(plan, /*backward=*/true);
    }
  EXPECT_GE(plans_with_remote, 6);
  ExpectExact(testing::RemoteComputePlan(), /*backward=*/true);
  ExpectExact(testing::RemoteComputePlan(), /*backward=*/false);
}

// Every sender holds back its first input-reshuffle message for 30 ms, so
// calls run out of plan order (those whose blocks are in overtake) and the
// stage sends of late blocks are posted later; results stay exact.
TEST(ExecutorLocal, HeldBackReshuffleMessages) {
  ExecutorOptions options;
  options.before_reshuffle_send = [](int32_t, int32_t) {
    thread_local bool first = true;
    if (first) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    first = false;
  };
  for (const Mask& mask : kMasks) {
    ExpectExact(FcpPlan(4, mask), /*backward=*/true, options);
    ExpectExact(testing::MakeRingTestPlan(Spec(3, mask, 1)), /*backward=*/true, options);
  }
}

// A stage-0 call of rank `rank` (FCP's stage 0 computes with owned K/V
// only) whose query block waits for a piece from another rank: (the piece's
// block, its sender). {-1, -1}: none, or a single stage.
std::pair<int32_t, int32_t> LatePiece(const RankProgram& p, bool backward) {
  const auto& pass = backward ? p.backward : p.forward;
  const auto& recv = backward ? p.do_in.recv : p.reshuffle_in.recv;
  if (pass.stages.size() < 2) return {-1, -1};
  for (const ComputeCall& c : pass.stages[0].compute)
    for (const ReshufflePiece& x : recv)
      if (x.block == c.q_block) return {x.block, x.src};
  return {-1, -1};
}

// A call whose reshuffled rows are late is carried past its stage (the
// simulator's rule, docs/runtime.md step 1): with one piece of the Q|K|V (or
// dO) reshuffle held back for 50 ms, the receiver carries calls into the next
// stage, and every output is bitwise that of a run without the delay (each
// output row still takes its calls in plan order) and exact.
TEST(ExecutorLocal, CallsWaitingForReshuffledRowsAreCarriedPastTheirStage) {
  int held_back = 0;
  for (const Mask& mask : kMasks) {
    const Plan plan = FcpPlan(4, mask);
    ExecutorOptions options;
    options.backward = true;
    const testing::PlanRunErrors undelayed = testing::RunPlanOnThreads(plan, options);
    for (const bool backward : {false, true})
      for (int32_t rank = 0; rank < plan.workers; ++rank) {
        const std::string what = std::string(MaskKindName(mask.kind)) +
                                 (backward ? " dO" : " qkv") + " rank " + std::to_string(rank);
        const auto [block, sender] = LatePiece(LowerPlan(plan, rank), backward);
        if (block < 0) continue;
        ++held_back;
        ExecutorOptions held = options;
        auto hold = [block, rank](int32_t b, int32_t dst) {
          if (b == block && dst == rank) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        };
        (backward ? held.before_do_send : held.before_reshuffle_send) = hold;
        const testing::PlanRunErrors e = testing::RunPlanOnThreads(plan, held);
        EXPECT_GT(e.carried_calls, 0) << what << ": block " << block << " from rank " << sender;
        EXPECT_EQ(e.outputs, undelayed.outputs) << what << ": outputs depend on arrival times";
        EXPECT_LT(std::max({e.o, e.dq, e.dk, e.dv}), 1e-5) << what;
      }
  }
  EXPECT_GE(held_back, 6) << "too few stage-0 calls wait for another rank's rows";
}

// Pairs of dK/dV partials that rank p.rank sends one receiver in one stage
// and that become final out of list order: the later-listed one's last call
// in the stage before comes first. Under one tag the two would swap buffers.
int32_t CrossedPartials(const RankProgram& p) {
  int32_t crossed = 0;
  for (size_t t = 1; t < p.backward.stages.size(); ++t) {
    const std::vector<ComputeCall>& calls = p.backward.stages[t - 1].compute;
    auto last_call = [&](const DkvSend& s) {
      int64_t last = -1;
      for (size_t j = 0; j < calls.size(); ++j)
        if (calls[j].dkv_in_partial && calls[j].dkv_row == s.partial_row)
          last = static_cast<int64_t>(j);
      return last;
    };
    const std::vector<DkvSend>& sends = p.backward.stages[t].dkv_send;
    for (size_t i = 0; i < sends.size(); ++i)
      for (size_t j = i + 1; j < sends.size(); ++j)
        if (sends[i].dst == sends[j].dst && last_call(sends[j]) < last_call(sends[i])) ++crossed;
  }
  return crossed;
}

// A dK/dV partial leaves once final, during the stage before its own (the
// simulator's per-block return, docs/runtime.md step 2), with a tag of its
// own: partials to one rank that become final out of list order still meet
// their receives, and the results stay exact.
TEST(ExecutorLocal, PartialsLeaveOnceFinal) {
  int64_t crossed = 0;
  for (const Mask& mask : kMasks)
    for (const Plan& listed : {FcpPlan(4, mask), testing::MakeGreedyTestPlan(Spec(4, mask, 2)),
                               testing::MakeGreedyTestPlan(Spec(3, mask, 1))})
      for (const Plan& plan : {listed, testing::WithPartialsReversed(listed)}) {
        const std::string what = plan.planner + " " + MaskKindName(mask.kind);
        int64_t sends = 0;
        for (int32_t r = 0; r < plan.workers; ++r) {
          const RankProgram p = LowerPlan(plan, r);
          crossed += CrossedPartials(p);
          for (const StageProgram& sp : p.backward.stages)
            sends += static_cast<int64_t>(sp.dkv_send.size());
        }
        ExecutorOptions options;
        options.backward = true;
        const testing::PlanRunErrors e = testing::RunPlanOnThreads(plan, options);
        EXPECT_EQ(e.partials_sent_early > 0, sends > 0) << what;
        EXPECT_LE(e.partials_sent_early, sends) << what;
        EXPECT_LT(std::max({e.o, e.dq, e.dk, e.dv}), 1e-5) << what;
      }
  EXPECT_GT(crossed, 0) << "no test plan sends partials out of list order";
}

// Outputs go home one message at a time per destination rank (the
// simulator's rule): in every rank's trace, a return message to a rank
// starts only once the one before it to that rank has completed, though
// several become final together at a stage's end.
TEST(ExecutorLocal, OutputsGoHomeOneAtATimePerDestination) {
  for (const Mask& mask : kMasks) {
    const Plan plan = FcpPlan(4, mask);
    ExecutorOptions options;
    options.backward = true;
    std::vector<Trace> traces;
    testing::RunPlanOnThreads(plan, options, 10.0, 5, &traces);
    int64_t followed = 0;  // messages sent after an earlier one to the same rank
    for (int32_t r = 0; r < plan.workers; ++r) {
      std::vector<std::vector<std::pair<double, double>>> spans(plan.workers);
      for (const TraceEvent& e : traces[r].events()) {
        const size_t to = e.name.rfind(" to ");
        if (e.name.rfind("return ", 0) != 0 || to == std::string::npos) continue;
        spans[std::stoi(e.name.substr(to + 4))].push_back({e.start_s, e.end_s});
      }
      for (auto& s : spans) {
        std::sort(s.begin(), s.end());
        for (size_t i = 1; i < s.size(); ++i, ++followed)
          EXPECT_GE(s[i].first, s[i - 1].second) << "rank " << r << " " << MaskKindName(mask.kind);
      }
    }
    EXPECT_GT(followed, 0) << MaskKindName(mask.kind);
  }
}

TEST(ExecutorLocal, RankCountMismatchIsAnError) {
  auto comms = MakeLocalCommunicators(1);
  const Plan plan = testing::MakeGreedyTestPlan(Spec(2, kMasks[0], 1));
  EXPECT_THROW(ExecutePlan(plan, *comms[0], {}, {}, nullptr, nullptr), Error);
}

// Messages between two ranks with one tag match in posting order.
TEST(LocalCommunicator, NonOvertakingAndCollectives) {
  auto comms = MakeLocalCommunicators(2, {5.0});
  std::thread peer([&] {
    const int32_t a = 1, b = 2;
    comms[1]->Wait(comms[1]->Isend(&a, 4, 0, 7));
    comms[1]->Wait(comms[1]->Isend(&b, 4, 0, 7));
    std::vector<int64_t> x = {5, -1};
    comms[1]->AllreduceSum(x);
  });
  int32_t first = 0, second = 0;
  const auto r2 = comms[0]->Irecv(&second, 4, 1, 7);  // posted first ...
  const auto r1 = comms[0]->Irecv(&first, 4, 1, 7);
  comms[0]->Wait(r1);  // ... so it gets the first message even when waited on last
  comms[0]->Wait(r2);
  EXPECT_EQ(second, 1);
  EXPECT_EQ(first, 2);
  std::vector<int64_t> x = {1, 1};
  comms[0]->AllreduceSum(x);
  EXPECT_EQ(x, (std::vector<int64_t>{6, 0}));
  peer.join();
}

TEST(LocalCommunicator, WaitGivesUp) {
  auto comms = MakeLocalCommunicators(2, {0.05});
  int32_t x = 0;
  EXPECT_THROW(comms[0]->Wait(comms[0]->Irecv(&x, 4, 1, 3)), Error);
}

// Handles and ranks a caller gets wrong are fcp::Errors naming the value
// (never std::out_of_range from inside the library).
TEST(LocalCommunicator, UnknownRequestAndRootAreErrors) {
  auto comms = MakeLocalCommunicators(1, {1.0});
  try {
    comms[0]->Test(42);
    ADD_FAILURE() << "Test(42) did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("unknown request 42"));
  }
  int32_t x = 0;
  try {
    comms[0]->Broadcast(&x, 4, 3);
    ADD_FAILURE() << "Broadcast from root 3 of 1 rank did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("root 3 is not a rank (0..0)"));
  }
}

}  // namespace
}  // namespace fcp
