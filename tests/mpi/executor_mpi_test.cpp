// The executor under mpirun (2-4 ranks): plans from the hand-built test
// planners (greedy direct transfers with coalesce 1 and 2; a ring with relays)
// and from every registered planner (fcp, ring, ... via MakePlan) are
// executed forward and backward, and each rank compares its dataloader rows
// of o, lse, dq, dk, dv with the float64 reference of the whole batch. Ranks
// agree on every verdict (AllreduceMin), so all ranks pass or fail together.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../hand_plans.h"
#include "fcp/communicator.h"
#include "fcp/error.h"
#include "fcp/executor.h"
#include "fcp/lowering.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/reference_attention.h"
#include "test_plans.h"

namespace fcp {
namespace {

Communicator* g_comm = nullptr;

struct Case {
  std::string name;
  Mask mask;
  int32_t heads_q;
  int32_t heads_kv;
};

std::vector<float> Random(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

// Lengths with 1-token sequences, exact block multiples and odd sizes.
std::vector<int64_t> Lengths() { return {1, 16, 37, 5, 32, 60, 9, 1, 23}; }

// Runs `plan` on all ranks and checks this rank's rows; returns the worst
// relative error over all ranks and outputs.
double RunAndCompare(const Plan& plan) {
  Communicator& comm = *g_comm;
  const int64_t T = plan.total_tokens();
  const AttentionDims dims{plan.attention.heads_q, plan.attention.heads_kv, plan.attention.head_dim,
                           1.0f / std::sqrt(static_cast<float>(plan.attention.head_dim))};
  std::mt19937_64 rng(99);
  const auto q = Random(T * dims.q_row_floats(), rng);
  const auto k = Random(T * dims.kv_row_floats(), rng);
  const auto v = Random(T * dims.kv_row_floats(), rng);
  const auto d_o = Random(T * dims.q_row_floats(), rng);
  const int64_t r0 = DataloaderBegin(T, plan.workers, comm.rank());
  const int64_t r1 = DataloaderBegin(T, plan.workers, comm.rank() + 1);
  auto slice = [&](const std::vector<float>& x, int64_t width) {
    return std::vector<float>(x.begin() + r0 * width, x.begin() + r1 * width);
  };
  RankInputs in{slice(q, dims.q_row_floats()), slice(k, dims.kv_row_floats()),
                slice(v, dims.kv_row_floats()), slice(d_o, dims.q_row_floats())};
  ExecutorOptions options;
  options.backward = true;
  options.kernel.q_tile_rows = 8;
  options.kernel.kv_tile_rows = 8;
  ExecutorStats stats;
  const RankOutputs out = ExecutePlan(plan, comm, in, options, nullptr, &stats);
  const auto ref =
      ReferenceAttention(plan.sequences, plan.mask, dims, q.data(), k.data(), v.data(), d_o.data());
  // The worst per-rank relative error bounds the relative error of the
  // whole array (a weighted mean of the per-rank squared ratios).
  const std::vector<
      std::pair<const std::vector<float>*, std::pair<const std::vector<double>*, int64_t>>>
      arrays = {{&out.o, {&ref.o, dims.q_row_floats()}},
                {&out.lse, {&ref.lse, dims.heads_q}},
                {&out.dq, {&ref.dq, dims.q_row_floats()}},
                {&out.dk, {&ref.dk, dims.kv_row_floats()}},
                {&out.dv, {&ref.dv, dims.kv_row_floats()}}};
  double worst = 0;
  for (const auto& [got, want] : arrays) {
    const int64_t width = want.second;
    const double err =
        RelativeError(got->data(), want.first->data() + r0 * width, (r1 - r0) * width);
    worst = std::max(worst, std::isfinite(err) ? err : 1.0);
  }
  std::vector<int64_t> scaled = {static_cast<int64_t>(std::ceil(worst * 1e12))};
  comm.AllreduceMax(scaled);
  worst = static_cast<double>(scaled[0]) * 1e-12;
  // The memory bound: a rank never holds more than 2c received blocks for
  // plans that use each received block in the next stage (all these do).
  std::vector<int64_t> peak = {stats.peak_received_blocks};
  comm.AllreduceMax(peak);
  EXPECT_LE(peak[0], 2 * plan.coalesce) << plan.planner;
  return worst;
}

class ExecutorMpi : public ::testing::TestWithParam<Case> {
 protected:
  testing::TestPlanSpec Spec(int32_t coalesce) const {
    testing::TestPlanSpec spec;
    spec.sequences = Lengths();
    spec.workers = g_comm->size();
    spec.block_size = 16;
    spec.coalesce = coalesce;
    spec.mask = GetParam().mask;
    spec.attention = {GetParam().heads_q, GetParam().heads_kv, 8, 4};
    spec.seed = 7;
    return spec;
  }
};

TEST_P(ExecutorMpi, GreedyCoalesce1) {
  const Plan plan = testing::MakeGreedyTestPlan(Spec(1));
  ValidatePlan(plan);
  EXPECT_LT(RunAndCompare(plan), 1e-4);
}

TEST_P(ExecutorMpi, GreedyCoalesce2) {
  const Plan plan = testing::MakeGreedyTestPlan(Spec(2));
  ValidatePlan(plan);
  EXPECT_LT(RunAndCompare(plan), 1e-4);
}

// Each backward stage's partials listed in reverse, so some become final out
// of list order and go ahead of earlier-listed ones to the same rank: each
// still meets its own receive (one tag per partial; executor_local_test
// checks that such pairs occur).
TEST_P(ExecutorMpi, PartialsFinalOutOfListOrder) {
  const Plan plan = testing::WithPartialsReversed(testing::MakeGreedyTestPlan(Spec(2)));
  ValidatePlan(plan);
  EXPECT_LT(RunAndCompare(plan), 1e-4);
}

TEST_P(ExecutorMpi, RingWithRelays) {
  const Plan plan = testing::MakeRingTestPlan(Spec(1));
  ValidatePlan(plan);
  EXPECT_LT(RunAndCompare(plan), 1e-4);
}

// Every registered planner (fcp always; ring and others once merged), but
// magi-dynamic, which has cases of its own (MagiDynamic, below).
TEST_P(ExecutorMpi, RegisteredPlanners) {
  for (const PlannerInfo& info : Planners()) {
    if (info.name == "magi-dynamic") continue;
    for (int32_t coalesce : {1, 2}) {
      PlannerConfig config;
      config.planner = info.name;
      config.workers = g_comm->size();
      config.block_size = 16;
      config.coalesce = coalesce;
      config.mask = GetParam().mask;
      config.attention = {GetParam().heads_q, GetParam().heads_kv, 8, 4};
      const Plan plan = MakePlan(Lengths(), config);
      ValidatePlan(plan);
      EXPECT_LT(RunAndCompare(plan), 1e-4) << info.name << " coalesce " << coalesce;
    }
  }
}

// MagiAttention's dynamic solver (the magi-dynamic baseline) computes some
// pairs away from their query block's owner: queries go out (send_q) and
// partial outputs come home (send_o, send_dq) to be merged. The causal and
// full cases' batches must include such pairs.
TEST_P(ExecutorMpi, MagiDynamic) {
  int32_t remote = 0;
  for (const std::vector<int64_t>& lengths :
       {Lengths(), std::vector<int64_t>{120, 7, 33}, std::vector<int64_t>{200}}) {
    PlannerConfig config;
    config.planner = "magi-dynamic";
    config.workers = g_comm->size();
    config.block_size = 16;
    config.coalesce = 2;
    config.mask = GetParam().mask;
    config.attention = {GetParam().heads_q, GetParam().heads_kv, 8, 4};
    const Plan plan = MakePlan(lengths, config);
    ValidatePlan(plan);
    remote += UsesRemoteCompute(plan);
    EXPECT_LT(RunAndCompare(plan), 1e-4) << lengths.size() << " sequences";
  }
  // (Under the sliding window every rank's work is near its own tokens: at
  // 2 and 3 ranks the solver keeps every pair home for these batches.)
  if (GetParam().mask.kind != MaskKind::kSlidingWindow) {
    EXPECT_GT(remote, 0) << "no batch computes a pair remotely";
  }
}

// The hand-drawn remote-compute plan (tests/hand_plans.h: rank 0 computes
// (B2, B0) for rank 1, forward and backward), on 2 ranks.
TEST(ExecutorMpiRemoteCompute, HandDrawnPlan) {
  if (g_comm->size() != 2) GTEST_SKIP() << "a plan for 2 ranks";
  const Plan plan = testing::RemoteComputePlan();
  ValidatePlan(plan);
  EXPECT_LT(RunAndCompare(plan), 1e-4);
}

// ---- the input reshuffle's rule (docs/runtime.md, step 1) ----------------

// A stage-0 call on rank `dst` that reads neither block `late` (as query or
// local key) nor a query block an earlier call waits on `late` for, and that
// needs some piece from another rank (not early): under the one rule it
// starts as soon as its own pieces are in, whatever `late` does. -1: none.
int64_t CallNotWaitingFor(const RankProgram& p, int32_t late) {
  if (p.forward.stages.empty()) return -1;
  const auto& calls = p.forward.stages[0].compute;
  std::vector<int32_t> blocked_q;
  for (size_t i = 0; i < calls.size(); ++i) {
    const ComputeCall& c = calls[i];
    const bool reads_late = c.q_block == late || (!c.kv_in_pool && c.kv_block == late);
    if (reads_late) blocked_q.push_back(c.q_block);
    if (reads_late || c.early ||
        std::find(blocked_q.begin(), blocked_q.end(), c.q_block) != blocked_q.end())
      continue;
    return static_cast<int64_t>(i);
  }
  return -1;
}

// Rank 0 holds back its last input-reshuffle message for 0.5 s. Its
// receiver must start a stage-0 call that does not need that message before
// the message arrives, and every rank's outputs, forward and backward, must
// be bitwise those of a run without the delay. The old rule (one all-to-all; only `early` calls
// before it completes) fails this: every non-early call waited for all of
// it. Row sizes are tiny, so rank 0's other messages go out eagerly and do
// not need its progress while it sleeps.
TEST(ExecutorMpiReshuffle, CallsStartAsTheirBlocksArrive) {
  Communicator& comm = *g_comm;
  int checked = 0;
  for (const PlannerInfo& info : Planners())
    for (const Mask& mask : {Mask{MaskKind::kCausal, 0}, Mask{MaskKind::kFull, 0}}) {
      PlannerConfig config;
      config.planner = info.name;
      config.workers = comm.size();
      config.block_size = 16;
      config.coalesce = 2;
      config.mask = mask;
      config.attention = {1, 1, 2, 4};
      const Plan plan = MakePlan(Lengths(), config);
      ValidatePlan(plan);
      const RankProgram p0 = LowerPlan(plan, 0);
      if (p0.reshuffle_in.send.empty()) continue;
      const ReshufflePiece late = p0.reshuffle_in.send.back();
      const RankProgram receiver = LowerPlan(plan, late.dst);
      const int64_t call = CallNotWaitingFor(receiver, late.block);
      if (call < 0) continue;
      ++checked;
      const std::string what = info.name + " " + MaskKindName(mask.kind);
      const int64_t T = plan.total_tokens();
      const int64_t rows = DataloaderBegin(T, plan.workers, comm.rank() + 1) -
                           DataloaderBegin(T, plan.workers, comm.rank());
      std::mt19937_64 rng(17 + comm.rank());
      const RankInputs in{Random(rows * 2, rng), Random(rows * 2, rng), Random(rows * 2, rng),
                          Random(rows * 2, rng)};
      ExecutorOptions options;
      options.backward = true;
      const RankOutputs undelayed = ExecutePlan(plan, comm, in, options, nullptr, nullptr);
      if (comm.rank() == 0)
        options.before_reshuffle_send = [&](int32_t block, int32_t dst) {
          if (block == late.block && dst == late.dst) usleep(500000);
        };
      Trace trace;
      const RankOutputs out = ExecutePlan(plan, comm, in, options, &trace, nullptr);
      // Calls ran in another order, yet every output row took its calls in
      // the same order: bitwise the same results.
      int64_t ok = out.o == undelayed.o && out.lse == undelayed.lse && out.dq == undelayed.dq &&
                   out.dk == undelayed.dk && out.dv == undelayed.dv;
      EXPECT_TRUE(ok) << what << ": outputs depend on arrival times (rank " << comm.rank() << ")";
      if (comm.rank() == late.dst) {
        const ComputeCall& c = receiver.forward.stages[0].compute[call];
        const std::string compute =
            "fwd s0 q" + std::to_string(c.q_block) + " kv" + std::to_string(c.kv_block);
        const std::string arrival = "reshuffle in b" + std::to_string(late.block) + " from 0";
        double compute_start = -1, arrived = -1;
        for (const TraceEvent& e : trace.events()) {
          if (e.name == compute && compute_start < 0) compute_start = e.start_s;
          if (e.name == arrival) arrived = e.end_s;
        }
        EXPECT_GE(compute_start, 0) << what << ": no event " << compute;
        EXPECT_GE(arrived, 0) << what << ": no event " << arrival;
        EXPECT_LT(compute_start, arrived) << what << ": " << compute << " waited for " << arrival;
        ok = ok && compute_start >= 0 && arrived >= 0 && compute_start < arrived;
      }
      std::vector<int64_t> verdict = {ok};
      comm.AllreduceMin(verdict);
      EXPECT_EQ(verdict[0], 1) << what << " (reported by rank " << late.dst << ")";
    }
  EXPECT_GT(checked, 0) << "no plan has a call that need not wait for rank 0's last message";
}

// ---- the communicator itself --------------------------------------------

TEST(MpiCommunicator, CollectivesAndAlltoallv) {
  Communicator& c = *g_comm;
  const int64_t n = c.size(), me = c.rank();
  std::vector<int64_t> v = {me, me + 10, 1};
  std::vector<int64_t> lo = v, hi = v, sum = v;
  c.AllreduceMin(lo);
  c.AllreduceMax(hi);
  c.AllreduceSum(sum);
  EXPECT_EQ(lo, (std::vector<int64_t>{0, 10, 1}));
  EXPECT_EQ(hi, (std::vector<int64_t>{n - 1, n + 9, 1}));
  EXPECT_EQ(sum, (std::vector<int64_t>{n * (n - 1) / 2, n * (n - 1) / 2 + 10 * n, n}));
  // Rank r sends r + 1 elements of 3 ints to every peer p, values 100r + p.
  std::vector<int64_t> send_counts(n, me + 1), recv_counts(n);
  std::vector<int32_t> send;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < 3 * (me + 1); ++i) send.push_back(static_cast<int32_t>(100 * me + p));
  for (int64_t p = 0; p < n; ++p) recv_counts[p] = p + 1;
  std::vector<int32_t> recv(3 * n * (n + 1) / 2, -1);
  c.Wait(c.Ialltoallv(send.data(), send_counts, recv.data(), recv_counts, 12));
  size_t at = 0;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < 3 * (p + 1); ++i) EXPECT_EQ(recv[at++], 100 * p + me);
}

// A wait on a message nobody sends gives up after the timeout with an error
// naming the problem, and the request stays usable.
TEST(MpiCommunicator, WaitGivesUpAfterTimeout) {
  int argc = 0;
  char** argv = nullptr;
  auto quick = MakeMpiCommunicator(&argc, &argv, {0.3});
  int32_t value = 0;
  if (quick->rank() == 0) {
    const auto request = quick->Irecv(&value, 4, 1, 5);
    try {
      quick->Wait(request);
      ADD_FAILURE() << "Wait returned without a message";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBackend);
      EXPECT_NE(std::string(e.what()).find("no progress"), std::string::npos) << e.what();
    }
    g_comm->Barrier();
    quick->Wait(request);
    EXPECT_EQ(value, 42);
  } else {
    g_comm->Barrier();
    value = 42;
    if (quick->rank() == 1) quick->Wait(quick->Isend(&value, 4, 0, 5));
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, ExecutorMpi,
                         ::testing::Values(Case{"causal_gqa", {MaskKind::kCausal, 0}, 4, 2},
                                           Case{"full_mha", {MaskKind::kFull, 0}, 2, 2},
                                           Case{
                                               "window_gqa", {MaskKind::kSlidingWindow, 20}, 4, 1}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fcp

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto comm = fcp::MakeMpiCommunicator(&argc, &argv, {60.0});
  fcp::g_comm = comm.get();
  fcp::SetBlasThreads(1);
  if (comm->rank() != 0) {
    // One report per job: the verdicts are agreed, rank 0 prints them.
    delete ::testing::UnitTest::GetInstance()->listeners().Release(
        ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  std::vector<int64_t> worst = {rc};
  comm->AllreduceMax(worst);
  return static_cast<int>(worst[0]);
}
