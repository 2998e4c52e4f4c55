// The executor on threads with the in-process communicator: the same plans
// as the mpirun tests (hand-built greedy and ring plans, the FCP planner),
// every mask, GQA, 1-4 ranks, forward and backward, compared with the
// float64 reference; plus the communicator's own matching rules. Runs in
// the plain unit suite, so sanitizer builds check the executor's memory
// use with leak checks on.
#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fcp/communicator.h"
#include "fcp/error.h"
#include "fcp/executor.h"
#include "fcp/planner.h"
#include "fcp/reference_attention.h"
#include "test_plans.h"

namespace fcp {
namespace {

std::vector<float> Random(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

struct Errors {
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  int64_t peak_received_blocks = 0;
};

// Runs `plan` on plan.workers threads; returns the relative errors of the
// assembled outputs against the float64 reference.
Errors RunOnThreads(const Plan& plan, bool backward) {
  const int32_t n = plan.workers;
  const int64_t T = plan.total_tokens();
  const AttentionDims dims{plan.attention.heads_q, plan.attention.heads_kv, plan.attention.head_dim,
                           1.0f / std::sqrt(static_cast<float>(plan.attention.head_dim))};
  std::mt19937_64 rng(5);
  const auto q = Random(T * dims.q_row_floats(), rng), k = Random(T * dims.kv_row_floats(), rng);
  const auto v = Random(T * dims.kv_row_floats(), rng), d_o = Random(T * dims.q_row_floats(), rng);
  auto comms = MakeLocalCommunicators(n, {10.0});
  std::vector<RankOutputs> outs(n);
  std::vector<ExecutorStats> stats(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        const int64_t r0 = DataloaderBegin(T, n, r), r1 = DataloaderBegin(T, n, r + 1);
        auto slice = [&](const std::vector<float>& x, int64_t w) {
          return std::vector<float>(x.begin() + r0 * w, x.begin() + r1 * w);
        };
        RankInputs in{slice(q, dims.q_row_floats()), slice(k, dims.kv_row_floats()),
                      slice(v, dims.kv_row_floats()), backward ? slice(d_o, dims.q_row_floats()) : std::vector<float>{}};
        ExecutorOptions options;
        options.backward = backward;
        options.kernel.q_tile_rows = 8;
        options.kernel.kv_tile_rows = 16;
        outs[r] = ExecutePlan(plan, *comms[r], in, options, nullptr, &stats[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  auto gather = [&](auto member) {
    std::vector<float> all;
    for (const RankOutputs& o : outs) all.insert(all.end(), (o.*member).begin(), (o.*member).end());
    return all;
  };
  const auto ref = ReferenceAttention(plan.sequences, plan.mask, dims, q.data(), k.data(), v.data(),
                                      backward ? d_o.data() : nullptr);
  auto err = [](const std::vector<float>& got, const std::vector<double>& want) {
    EXPECT_EQ(got.size(), want.size());
    return RelativeError(got.data(), want.data(), static_cast<int64_t>(want.size()));
  };
  Errors e;
  e.o = err(gather(&RankOutputs::o), ref.o);
  e.lse = err(gather(&RankOutputs::lse), ref.lse);
  if (backward) {
    e.dq = err(gather(&RankOutputs::dq), ref.dq);
    e.dk = err(gather(&RankOutputs::dk), ref.dk);
    e.dv = err(gather(&RankOutputs::dv), ref.dv);
  }
  for (const ExecutorStats& s : stats) e.peak_received_blocks = std::max(e.peak_received_blocks, s.peak_received_blocks);
  return e;
}

void ExpectExact(const Plan& plan, bool backward) {
  ValidatePlan(plan);
  const Errors e = RunOnThreads(plan, backward);
  const std::string what = plan.planner + " workers " + std::to_string(plan.workers) + " mask " +
                           MaskKindName(plan.mask.kind) + " coalesce " + std::to_string(plan.coalesce);
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

TEST(ExecutorLocal, HandBuiltPlansAllMasksAndRankCounts) {
  for (int32_t workers = 1; workers <= 4; ++workers)
    for (const Mask& mask : kMasks) {
      for (int32_t c : {1, 2}) ExpectExact(testing::MakeGreedyTestPlan(Spec(workers, mask, c)), /*backward=*/true);
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
      ExpectExact(MakePlan(Spec(3, mask, 2).sequences, config), /*backward=*/true);
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

}  // namespace
}  // namespace fcp
