// CPU attention kernel throughput against this machine's sgemm rate, both
// single-threaded and measured in the same run. Rates use this thread's CPU
// time (CLOCK_THREAD_CPUTIME_ID), not wall time: the build machine is shared,
// and CPU time keeps other processes' load out of both numbers. Counters:
//   GFLOPS    attention FLOPs per second (PLAN_FORMAT cost: 4 * heads_q *
//             head_dim per allowed pair forward, 2.5x backward)
//   of_sgemm  GFLOPS / the best sgemm rate measured at the start of the run
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <random>
#include <vector>

#include "fcp/attention_kernel.h"
#include "fcp/cost_model.h"  // kBackwardFlopsFactor

namespace fcp {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best of several 1024^3 sgemm calls, GFLOP/s of thread CPU time.
double SgemmGflops() {
  static const double rate = [] {
    SetBlasThreads(1);
    const int n = 1024;
    const auto a = Random(size_t{n} * n, 1), b = Random(size_t{n} * n, 2);
    std::vector<float> c(size_t{n} * n);
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = ThreadCpuSeconds();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                  n, 0.0f, c.data(), n);
      const double s = ThreadCpuSeconds() - t0;
      best = std::max(best, 2.0 * n * n * n / s * 1e-9);
    }
    return best;
  }();
  return rate;
}

void BM_Sgemm(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(SgemmGflops());
  state.counters["GFLOPS"] = SgemmGflops();
}
BENCHMARK(BM_Sgemm)->Iterations(1)->Unit(benchmark::kMillisecond);

// One sequence of `len` tokens attending itself: args (len, mask 0 causal /
// 1 full, backward 0/1). Llama-70B-like heads scaled down: 8 query heads,
// 1 key/value head (the 8:1 GQA ratio), head_dim 128.
void BM_Attention(benchmark::State& state) {
  SetBlasThreads(1);
  const int64_t len = state.range(0);
  const Mask mask{state.range(1) == 0 ? MaskKind::kCausal : MaskKind::kFull, 0};
  const bool backward = state.range(2) != 0;
  const AttentionDims dims{8, 1, 128, 1.0f / std::sqrt(128.0f)};
  const auto q = Random(len * dims.q_row_floats(), 3), k = Random(len * dims.kv_row_floats(), 4);
  const auto v = Random(len * dims.kv_row_floats(), 5), d_o = Random(len * dims.q_row_floats(), 6);
  std::vector<float> o(q.size()), lse(len * dims.heads_q), delta(lse.size());
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  auto kernel = MakeCpuAttentionKernel();
  const SegmentPair sp{0, 0, 0, 0, len, len};
  InitForwardOutput(dims, len, o.data(), lse.data());
  kernel->Forward(dims, mask, std::span(&sp, 1),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  ComputeDelta(dims, len, o.data(), d_o.data(), delta.data());
  double cpu_s = 0;
  for (auto _ : state) {
    const double t0 = ThreadCpuSeconds();
    if (!backward) {
      InitForwardOutput(dims, len, o.data(), lse.data());
      kernel->Forward(dims, mask, std::span(&sp, 1),
                      {q.data(), k.data(), v.data(), o.data(), lse.data()});
    } else {
      kernel->Backward(dims, mask, std::span(&sp, 1),
                       {q.data(), k.data(), v.data(), d_o.data(), lse.data(), delta.data(),
                        dq.data(), dk.data(), dv.data()});
    }
    benchmark::ClobberMemory();
    cpu_s += ThreadCpuSeconds() - t0;
  }
  const double pairs = static_cast<double>(AllowedPairs(mask, {0, len}, {0, len}));
  const double flops =
      4.0 * dims.heads_q * dims.head_dim * pairs * (backward ? kBackwardFlopsFactor : 1.0);
  const double gflops = flops * static_cast<double>(state.iterations()) / cpu_s * 1e-9;
  state.counters["GFLOPS"] = gflops;
  state.counters["sgemm_GFLOPS"] = SgemmGflops();
  state.counters["of_sgemm"] = gflops / SgemmGflops();
}
BENCHMARK(BM_Attention)
    ->ArgNames({"len", "full", "bwd"})
    ->Args({1024, 0, 0})
    ->Args({4096, 0, 0})
    ->Args({4096, 1, 0})
    ->Args({1024, 0, 1})
    ->Args({4096, 0, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fcp

BENCHMARK_MAIN();
