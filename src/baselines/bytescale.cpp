// ByteScale-like planner (fcp/baselines.h): sequences placed by length with
// memory (token) balance; long ones on a ring group sized by length.
#include <algorithm>
#include <numeric>
#include <set>

#include "baseline_common.h"
#include "fcp/baselines.h"
#include "fcp/required_pairs.h"

namespace fcp {

Plan MakeByteScalePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  Plan plan = PlanHeader(lengths, config, "bytescale");
  const int32_t n = config.workers;
  const int64_t share = config.EffectiveTokenCap(lengths);
  std::vector<int32_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return lengths[a] > lengths[b]; });

  // Workers by (tokens, id): the least loaded first.
  std::vector<int64_t> tokens(n, 0);
  std::set<std::pair<int64_t, int32_t>> by_load;
  for (int32_t w = 0; w < n; ++w) by_load.insert({0, w});
  const auto add_tokens = [&](int32_t w, int64_t t) {
    by_load.erase({tokens[w], w});
    tokens[w] += t;
    by_load.insert({tokens[w], w});
  };
  std::vector<int32_t> short_block(n, -1);  // each worker's block of whole short sequences
  std::vector<std::vector<int32_t>> rings;
  for (int32_t s : order) {
    const int64_t len = lengths[s];
    const int32_t group = static_cast<int32_t>(std::min<int64_t>(n, (len + share - 1) / share));
    if (group <= 1) {
      const int32_t w = by_load.begin()->second;
      if (short_block[w] < 0) {
        short_block[w] = static_cast<int32_t>(plan.blocks.size());
        plan.blocks.push_back({w, {}});
      }
      plan.blocks[short_block[w]].segments.push_back({s, 0, len});
      add_tokens(w, len);
      continue;
    }
    std::vector<int32_t> members;
    for (auto it = by_load.begin(); static_cast<int32_t>(members.size()) < group; ++it)
      members.push_back(it->second);
    std::sort(members.begin(), members.end());
    std::vector<int32_t> member_blocks;
    baselines::AddZigZagSequence(plan, s, members, member_blocks);
    std::vector<int32_t> ring;
    for (size_t m = 0; m < members.size(); ++m) {
      if (member_blocks[m] < 0) continue;
      add_tokens(members[m], plan.blocks[member_blocks[m]].tokens());
      ring.push_back(member_blocks[m]);
    }
    rings.push_back(std::move(ring));
  }

  // Which block pairs are required: blocks of different sequences never are,
  // and each ring holds one sequence, so a sorted list suffices.
  const std::vector<RequiredPair> required = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  const auto is_required = [&](int32_t q, int32_t kv) {
    return std::binary_search(required.begin(), required.end(), RequiredPair{q, kv, 0},
                              [](const RequiredPair& a, const RequiredPair& b) {
                                return a.q_block != b.q_block ? a.q_block < b.q_block
                                                              : a.kv_block < b.kv_block;
                              });
  };
  plan.forward.resize(1);
  plan.backward.resize(1);
  for (int32_t w = 0; w < n; ++w)
    if (short_block[w] >= 0) {
      plan.forward[0].compute.push_back({short_block[w], short_block[w]});
      plan.backward[0].compute.push_back({short_block[w], short_block[w]});
    }
  for (const std::vector<int32_t>& ring : rings) baselines::AddRing(plan, ring, is_required);
  baselines::FinishPlan(plan, 1);
  return plan;
}

}  // namespace fcp
