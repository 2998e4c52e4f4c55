// The CUDA backend on a device (ctest label `gpu`): the kernel against the
// float64 reference for every mask and GQA, and whole plans (hand-built
// greedy and ring plans, the FCP planner) executed by N in-process workers
// sharing one GPU, all within bf16 tolerance (2e-2; 1e-3 for lse). Each test
// that needs a device skips where cudaGetDeviceCount finds none; the
// no-device error itself is checked everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fcp/communicator.h"
#include "fcp/cuda_attention.h"
#include "fcp/error.h"
#include "fcp/executor.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/reference_attention.h"
#include "test_plans.h"
#include "thread_runner.h"

namespace fcp {
namespace {

#define FCP_REQUIRE_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

constexpr double kTol = 2e-2, kLseTol = 1e-3;

std::vector<float> Random(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

double Err(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  return RelativeError(got.data(), want.data(), static_cast<int64_t>(want.size()));
}

TEST(CudaAttention, MissingDeviceIsAClearError) {
  CudaKernelOptions options;
  options.device = CudaDeviceCount();  // one past the last device
  try {
    MakeCudaAttentionKernel(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBackend);
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  options.device = 0;
  options.threads_per_block = 48;
  EXPECT_THROW(options.validate(), Error);
}

const Mask kMasks[] = {{MaskKind::kCausal, 0}, {MaskKind::kFull, 0}, {MaskKind::kSlidingWindow, 9}};

TEST(CudaAttention, KernelMatchesReferenceAllMasksGqa) {
  FCP_REQUIRE_GPU();
  auto kernel = MakeCudaAttentionKernel();
  std::mt19937_64 rng(21);
  const std::vector<int64_t> lengths = {1, 130, 64, 7, 300, 2};
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  for (const Mask& mask : kMasks)
    for (auto [hq, hkv, hd] : {std::tuple{8, 2, 128}, std::tuple{4, 4, 64}, std::tuple{6, 1, 32}}) {
      const AttentionDims dims{hq, hkv, hd, 1.0f / std::sqrt(float(hd))};
      const auto q = Random(total * dims.q_row_floats(), rng),
                 k = Random(total * dims.kv_row_floats(), rng);
      const auto v = Random(total * dims.kv_row_floats(), rng),
                 d_o = Random(total * dims.q_row_floats(), rng);
      // Every sequence split in two query and three key chunks: merges run.
      std::vector<SegmentPair> pairs;
      int64_t row = 0;
      for (int64_t len : lengths) {
        const int64_t qs[] = {0, len / 2, len}, ks[] = {0, len / 3, 2 * len / 3, len};
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 3; ++b)
            pairs.push_back(
                {row + qs[a], row + ks[b], qs[a], ks[b], qs[a + 1] - qs[a], ks[b + 1] - ks[b]});
        row += len;
      }
      std::vector<float> o(q.size()), lse(static_cast<size_t>(total * hq)), delta(lse.size());
      InitForwardOutput(dims, total, o.data(), lse.data());
      kernel->Forward(dims, mask, pairs, {q.data(), k.data(), v.data(), o.data(), lse.data()});
      ComputeDelta(dims, total, o.data(), d_o.data(), delta.data());
      std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
      kernel->Backward(dims, mask, pairs,
                       {q.data(), k.data(), v.data(), d_o.data(), lse.data(), delta.data(),
                        dq.data(), dk.data(), dv.data()});
      const auto ref =
          ReferenceAttention(lengths, mask, dims, q.data(), k.data(), v.data(), d_o.data());
      const std::string what = std::string(MaskKindName(mask.kind)) + " hq " + std::to_string(hq);
      EXPECT_LT(Err(o, ref.o), kTol) << what;
      EXPECT_LT(Err(lse, ref.lse), kLseTol) << what;
      EXPECT_LT(Err(dq, ref.dq), kTol) << what;
      EXPECT_LT(Err(dk, ref.dk), kTol) << what;
      EXPECT_LT(Err(dv, ref.dv), kTol) << what;
    }
}

// Runs `plan` on plan.workers threads sharing GPU 0 and checks the outputs.
void ExpectPlanMatches(const Plan& plan) {
  ValidatePlan(plan);
  ExecutorOptions options;
  options.backward = true;
  options.make_kernel = [](std::function<void()> progress) {
    CudaKernelOptions ko;
    ko.progress = std::move(progress);
    return MakeCudaAttentionKernel(ko);
  };
  const testing::PlanRunErrors e = testing::RunPlanOnThreads(plan, options, /*timeout_s=*/60.0);
  const std::string what = plan.planner + " workers " + std::to_string(plan.workers) + " mask " +
                           MaskKindName(plan.mask.kind);
  EXPECT_LT(e.o, kTol) << what;
  EXPECT_LT(e.lse, kLseTol) << what;
  EXPECT_LT(e.dq, kTol) << what;
  EXPECT_LT(e.dk, kTol) << what;
  EXPECT_LT(e.dv, kTol) << what;
}

TEST(CudaExecutor, GreedyRingAndFcpPlansOnOneGpu) {
  FCP_REQUIRE_GPU();
  for (const Mask& mask : kMasks) {
    testing::TestPlanSpec spec;
    spec.sequences = {3, 160, 1, 290, 400, 70, 1};
    spec.workers = 4;
    spec.block_size = 64;
    spec.coalesce = 2;
    spec.mask = mask;
    spec.attention = {8, 2, 64, 2};
    ExpectPlanMatches(testing::MakeGreedyTestPlan(spec));
    spec.coalesce = 1;
    ExpectPlanMatches(testing::MakeRingTestPlan(spec));
    PlannerConfig config;
    config.planner = "fcp";
    config.workers = 4;
    config.block_size = 64;
    config.coalesce = 2;
    config.mask = mask;
    config.attention = spec.attention;
    ExpectPlanMatches(MakePlan(spec.sequences, config));
  }
}

}  // namespace
}  // namespace fcp
