#include "thread_runner.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <random>
#include <thread>

#include "fcp/communicator.h"
#include "fcp/reference_attention.h"

namespace fcp::testing {
namespace {

std::vector<float> Random(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

}  // namespace

PlanRunErrors RunPlanOnThreads(const Plan& plan, const ExecutorOptions& options, double timeout_s,
                               uint64_t seed, std::vector<Trace>* traces) {
  const int32_t n = plan.workers;
  const int64_t T = plan.total_tokens();
  const bool backward = options.backward;
  const AttentionDims dims{plan.attention.heads_q, plan.attention.heads_kv, plan.attention.head_dim,
                           1.0f / std::sqrt(static_cast<float>(plan.attention.head_dim))};
  std::mt19937_64 rng(seed);
  const auto q = Random(T * dims.q_row_floats(), rng), k = Random(T * dims.kv_row_floats(), rng);
  const auto v = Random(T * dims.kv_row_floats(), rng), d_o = Random(T * dims.q_row_floats(), rng);
  auto comms = MakeLocalCommunicators(n, {timeout_s});
  std::vector<RankOutputs> outs(n);
  std::vector<ExecutorStats> stats(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  if (traces) traces->assign(n, Trace{});
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        const int64_t r0 = DataloaderBegin(T, n, r), r1 = DataloaderBegin(T, n, r + 1);
        auto slice = [&](const std::vector<float>& x, int64_t w) {
          return std::vector<float>(x.begin() + r0 * w, x.begin() + r1 * w);
        };
        RankInputs in{slice(q, dims.q_row_floats()), slice(k, dims.kv_row_floats()),
                      slice(v, dims.kv_row_floats()),
                      backward ? slice(d_o, dims.q_row_floats()) : std::vector<float>{}};
        outs[r] =
            ExecutePlan(plan, *comms[r], in, options, traces ? &(*traces)[r] : nullptr, &stats[r]);
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
    if (got.size() != want.size()) return double{INFINITY};
    return RelativeError(got.data(), want.data(), static_cast<int64_t>(want.size()));
  };
  PlanRunErrors e;
  e.outputs = {gather(&RankOutputs::o), gather(&RankOutputs::lse)};
  e.o = err(e.outputs[0], ref.o);
  e.lse = err(e.outputs[1], ref.lse);
  if (backward) {
    for (auto member : {&RankOutputs::dq, &RankOutputs::dk, &RankOutputs::dv})
      e.outputs.push_back(gather(member));
    e.dq = err(e.outputs[2], ref.dq);
    e.dk = err(e.outputs[3], ref.dk);
    e.dv = err(e.outputs[4], ref.dv);
  }
  for (const ExecutorStats& s : stats) {
    e.peak_received_blocks = std::max(e.peak_received_blocks, s.peak_received_blocks);
    e.carried_calls += s.carried_calls;
    e.partials_sent_early += s.partials_sent_early;
  }
  return e;
}

}  // namespace fcp::testing
