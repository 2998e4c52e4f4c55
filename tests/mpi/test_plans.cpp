#include "test_plans.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "fcp/planner.h"
#include "fcp/required_pairs.h"

namespace fcp::testing {
namespace {

Plan Header(const TestPlanSpec& spec, const char* planner) {
  PlannerConfig config;
  config.workers = spec.workers;
  config.mask = spec.mask;
  config.attention = spec.attention;
  config.block_size = spec.block_size;
  config.coalesce = spec.coalesce;
  return PlanHeader(spec.sequences, config, planner);  // token_cap: SetTokenCap
}

void SetTokenCap(Plan& plan) {
  std::vector<int64_t> tokens(plan.workers, 0);
  for (const Block& b : plan.blocks) tokens[b.worker] += b.tokens();
  plan.token_cap = std::max<int64_t>(1, *std::max_element(tokens.begin(), tokens.end()));
}

// Earliest stage >= first where src has < c sends and dst < c receives.
size_t PlaceTransfer(std::vector<std::map<int32_t, int32_t>>& sends,
                     std::vector<std::map<int32_t, int32_t>>& recvs, size_t first, int32_t src,
                     int32_t dst, int32_t c) {
  for (size_t t = first;; ++t) {
    if (sends.size() <= t) sends.resize(t + 1), recvs.resize(t + 1);
    if (sends[t][src] < c && recvs[t][dst] < c) {
      ++sends[t][src];
      ++recvs[t][dst];
      return t;
    }
  }
}

}  // namespace

Plan MakeGreedyTestPlan(const TestPlanSpec& spec) {
  Plan plan = Header(spec, "test-greedy");
  // Blocks of block_size tokens over the token stream; a block may hold
  // segments of several sequences.
  Block current;
  for (size_t s = 0; s < spec.sequences.size(); ++s) {
    for (int64_t start = 0; start < spec.sequences[s];) {
      const int64_t room = spec.block_size - current.tokens();
      const int64_t len = std::min(room, spec.sequences[s] - start);
      current.segments.push_back({static_cast<int32_t>(s), start, len});
      start += len;
      if (current.tokens() == spec.block_size) {
        plan.blocks.push_back(current);
        current = {};
      }
    }
  }
  if (!current.segments.empty()) plan.blocks.push_back(current);
  std::vector<int32_t> order(plan.blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(spec.seed);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i = 0; i < order.size(); ++i)
    plan.blocks[order[i]].worker = static_cast<int32_t>(i % spec.workers);
  SetTokenCap(plan);

  const auto required = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  // Forward: one direct transfer per (block, needing worker).
  std::set<std::pair<int32_t, int32_t>> needs;  // (kv block, worker)
  for (const RequiredPair& p : required) {
    const int32_t w = plan.blocks[p.q_block].worker;
    if (plan.blocks[p.kv_block].worker != w) needs.insert({p.kv_block, w});
  }
  std::vector<std::map<int32_t, int32_t>> sends, recvs;
  std::map<std::pair<int32_t, int32_t>, size_t> arrival;  // (block, worker) -> stage received
  for (const auto& [j, w] : needs)
    arrival[{j, w}] = PlaceTransfer(sends, recvs, 0, plan.blocks[j].worker, w, spec.coalesce);
  size_t stages = sends.size();
  std::vector<std::pair<size_t, BlockPair>> computes;
  for (const RequiredPair& p : required) {
    const int32_t w = plan.blocks[p.q_block].worker;
    const size_t t = plan.blocks[p.kv_block].worker == w ? 0 : arrival[{p.kv_block, w}] + 1;
    computes.push_back({t, {p.q_block, p.kv_block}});
    stages = std::max(stages, t + 1);
  }
  plan.forward.resize(std::max<size_t>(stages, 1));
  for (const auto& [key, t] : arrival)
    plan.forward[t].send.push_back({key.first, plan.blocks[key.first].worker, key.second});
  for (const auto& [t, p] : computes) plan.forward[t].compute.push_back(p);

  // Backward: the same K/V transfers and computes, then each partial home.
  plan.backward.resize(plan.forward.size());
  for (size_t t = 0; t < plan.forward.size(); ++t) {
    plan.backward[t].send_kv = plan.forward[t].send;
    plan.backward[t].compute = plan.forward[t].compute;
  }
  std::map<std::pair<int32_t, int32_t>, size_t> last_compute;
  for (const auto& [t, p] : computes) {
    const int32_t w = plan.blocks[p.q_block].worker;
    if (plan.blocks[p.kv_block].worker == w) continue;
    size_t& last = last_compute[{p.kv_block, w}];
    last = std::max(last, t);
  }
  std::vector<std::map<int32_t, int32_t>> dsends, drecvs;
  for (const auto& [key, last] : last_compute) {
    const int32_t owner = plan.blocks[key.first].worker;
    const size_t t = PlaceTransfer(dsends, drecvs, last + 1, key.second, owner, spec.coalesce);
    if (plan.backward.size() <= t) plan.backward.resize(t + 1);
    plan.backward[t].send_dkv.push_back({key.first, key.second, owner});
  }
  return plan;
}

Plan MakeRingTestPlan(const TestPlanSpec& spec) {
  Plan plan = Header(spec, "test-ring");
  plan.coalesce = 1;
  const int32_t n = spec.workers;
  int64_t total = 0;
  for (int64_t l : spec.sequences) total += l;
  const std::vector<int64_t> offsets = SequenceOffsets(spec.sequences);
  for (int32_t w = 0; w < n; ++w) {
    Block b;
    b.worker = w;
    const int64_t lo = DataloaderBegin(total, n, w), hi = DataloaderBegin(total, n, w + 1);
    for (size_t s = 0; s < spec.sequences.size(); ++s) {
      const int64_t a = std::max(lo, offsets[s]), e = std::min(hi, offsets[s + 1]);
      if (a < e) b.segments.push_back({static_cast<int32_t>(s), a - offsets[s], e - a});
    }
    plan.blocks.push_back(b);
  }
  SetTokenCap(plan);
  const auto required = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  std::set<std::pair<int32_t, int32_t>> is_required;
  for (const RequiredPair& p : required) is_required.insert({p.q_block, p.kv_block});
  auto block_at = [n](int32_t w, int32_t t) { return ((w - t) % n + n) % n; };
  plan.forward.resize(n);
  plan.backward.resize(n + 1);
  // has_partial[j]: some worker on the ring path of j so far computed with it.
  std::vector<std::vector<bool>> carries(n, std::vector<bool>(n, false));  // [w][j]
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t w = 0; w < n; ++w) {
      const int32_t j = block_at(w, t);
      if (t + 1 < n) {
        plan.forward[t].send.push_back({j, w, (w + 1) % n});
        plan.backward[t].send_kv.push_back({j, w, (w + 1) % n});
      }
      if (is_required.count({w, j})) {
        plan.forward[t].compute.push_back({w, j});
        plan.backward[t].compute.push_back({w, j});
      }
      // Worker w holds a partial of j (own compute or relayed) after stage t.
      const bool before = t > 0 && carries[(w + n - 1) % n][j];
      carries[w][j] = j != w && (before || is_required.count({w, j}) > 0);
      if (carries[w][j]) plan.backward[t + 1].send_dkv.push_back({j, w, (w + 1) % n});
    }
  }
  return plan;
}

Plan WithPartialsReversed(Plan plan) {
  for (BackwardStage& stage : plan.backward)
    std::reverse(stage.send_dkv.begin(), stage.send_dkv.end());
  return plan;
}

}  // namespace fcp::testing
