// libFuzzer target, structure-aware: the input bytes choose a small batch, a
// blocking and owners, from which a valid plan is built (one transfer per
// stage, the simplest schedule the format allows); then the bytes apply a
// few mutations (drop, duplicate, move or retarget a send or compute, change
// an id or a header field). The result goes through the same check as the
// reader fuzzer (plan_reader_check.h): JSON round trip, ValidatePlan, and
// ComputePlanMetrics when valid. Random bytes rarely form a plan that gets
// past the reader, so this target is the one that exercises the validator's
// stage rules and the metrics.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fcp/plan_json.h"
#include "fcp/required_pairs.h"
#include "plan_reader_check.h"

namespace fcp::fuzz {
namespace {

Plan BuildPlan(FuzzedDataProvider& in) {
  Plan plan;
  plan.planner = "fuzz";
  plan.workers = in.ConsumeIntegralInRange<int32_t>(1, 6);
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0:
      plan.mask = {MaskKind::kCausal, 0};
      break;
    case 1:
      plan.mask = {MaskKind::kFull, 0};
      break;
    default:
      plan.mask = {MaskKind::kSlidingWindow, in.ConsumeIntegralInRange<int64_t>(1, 20)};
  }
  plan.coalesce = in.ConsumeIntegralInRange<int32_t>(1, 3);
  plan.block_size = 8;
  const int n_seq = in.ConsumeIntegralInRange(1, 4);
  for (int s = 0; s < n_seq; ++s)
    plan.sequences.push_back(in.ConsumeIntegralInRange<int64_t>(1, 24));
  // Cut every sequence into pieces and deal them to K blocks.
  const int32_t n_blocks = in.ConsumeIntegralInRange<int32_t>(1, 8);
  plan.blocks.resize(n_blocks);
  for (int32_t s = 0; s < n_seq; ++s)
    for (int64_t start = 0; start < plan.sequences[s];) {
      const int64_t len =
          std::min(plan.sequences[s] - start, in.ConsumeIntegralInRange<int64_t>(1, 8));
      plan.blocks[in.ConsumeIntegralInRange<int32_t>(0, n_blocks - 1)].segments.push_back(
          {s, start, len});
      start += len;
    }
  std::vector<int64_t> owned(plan.workers, 0);
  for (Block& b : plan.blocks) {
    if (b.segments.empty()) b.segments.push_back({0, 0, 0});  // left for the validator to reject
    b.worker = in.ConsumeIntegralInRange<int32_t>(0, plan.workers - 1);
    owned[b.worker] += b.tokens();
  }
  plan.token_cap = std::max<int64_t>(1, *std::max_element(owned.begin(), owned.end()));

  // A valid schedule: local pairs in stage 0; each remote pair's K/V moves
  // alone in its own stage and is used in the next; dK/dV goes back in the
  // stage after that.
  std::vector<RequiredPair> pairs;
  try {
    pairs = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  } catch (const Error&) {
    return plan;  // blocking already broken: the validator must say so
  }
  plan.forward.resize(1);
  plan.backward.resize(1);
  std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> remote;  // (worker, kv) -> q blocks
  for (const RequiredPair& p : pairs) {
    const int32_t q_owner = plan.blocks[p.q_block].worker;
    if (q_owner == plan.blocks[p.kv_block].worker) {
      plan.forward[0].compute.push_back({p.q_block, p.kv_block});
      plan.backward[0].compute.push_back({p.q_block, p.kv_block});
    } else {
      remote[{q_owner, p.kv_block}].push_back(p.q_block);
    }
  }
  for (const auto& [key, q_blocks] : remote) {
    const auto [worker, kv_block] = key;
    const Transfer kv{kv_block, plan.blocks[kv_block].worker, worker};
    ForwardStage use;
    BackwardStage use_backward;
    for (int32_t q : q_blocks) {
      use.compute.push_back({q, kv_block});
      use_backward.compute.push_back({q, kv_block});
    }
    plan.forward.push_back({{kv}, {}});
    plan.forward.push_back(use);
    plan.backward.push_back({{kv}, {}, {}});
    plan.backward.push_back(use_backward);
    plan.backward.push_back({{}, {{kv_block, worker, kv.src}}, {}});
  }
  return plan;
}

template <typename T>
void MutateList(FuzzedDataProvider& in, std::vector<T>& list, std::vector<T>& elsewhere) {
  if (list.empty()) return;
  const size_t i = in.ConsumeIntegralInRange<size_t>(0, list.size() - 1);
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0:
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1:
      list.push_back(list[i]);
      break;
    default:  // move it to another stage
      elsewhere.push_back(list[i]);
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

int32_t SmallId(FuzzedDataProvider& in) { return in.ConsumeIntegralInRange<int32_t>(-1, 9); }

void Mutate(FuzzedDataProvider& in, Plan& plan) {
  const int rounds = in.ConsumeIntegralInRange(0, 3);
  for (int r = 0; r < rounds && in.remaining_bytes() > 0; ++r) {
    const bool forward = in.ConsumeBool();
    const size_t n = forward ? plan.forward.size() : plan.backward.size();
    if (n == 0) continue;
    const size_t t = in.ConsumeIntegralInRange<size_t>(0, n - 1);
    const size_t u = in.ConsumeIntegralInRange<size_t>(0, n - 1);
    // Stage s's K/V sends and computes in the chosen pass.
    const auto kv_sends = [&](size_t s) -> std::vector<Transfer>& {
      return forward ? plan.forward[s].send : plan.backward[s].send_kv;
    };
    const auto computes = [&](size_t s) -> std::vector<BlockPair>& {
      return forward ? plan.forward[s].compute : plan.backward[s].compute;
    };
    switch (in.ConsumeIntegralInRange(0, 7)) {
      case 0:
        MutateList(in, kv_sends(t), kv_sends(u));
        break;
      case 1:
        MutateList(in, computes(t), computes(u));
        break;
      case 2:
        if (!forward) MutateList(in, plan.backward[t].send_dkv, plan.backward[u].send_dkv);
        break;
      case 3: {  // retarget a transfer
        auto& list = forward ? plan.forward[t].send : plan.backward[t].send_dkv;
        if (!list.empty()) {
          Transfer& x = list[in.ConsumeIntegralInRange<size_t>(0, list.size() - 1)];
          (in.ConsumeBool() ? x.src : in.ConsumeBool() ? x.dst : x.block) = SmallId(in);
        }
        break;
      }
      case 4: {  // change a pair
        auto& list = forward ? plan.forward[t].compute : plan.backward[t].compute;
        if (!list.empty()) {
          BlockPair& x = list[in.ConsumeIntegralInRange<size_t>(0, list.size() - 1)];
          (in.ConsumeBool() ? x.q_block : x.kv_block) = SmallId(in);
        }
        break;
      }
      case 5:  // an owner
        plan.blocks[in.ConsumeIntegralInRange<size_t>(0, plan.blocks.size() - 1)].worker =
            SmallId(in);
        break;
      case 6:  // a header field
        switch (in.ConsumeIntegralInRange(0, 3)) {
          case 0:
            plan.workers = SmallId(in);
            break;
          case 1:
            plan.coalesce = SmallId(in);
            break;
          case 2:
            plan.token_cap = SmallId(in);
            break;
          default:
            plan.mask.window = SmallId(in);
        }
        break;
      default: {  // a segment
        Block& b = plan.blocks[in.ConsumeIntegralInRange<size_t>(0, plan.blocks.size() - 1)];
        Segment& s = b.segments[in.ConsumeIntegralInRange<size_t>(0, b.segments.size() - 1)];
        (in.ConsumeBool() ? s.start : s.length) += in.ConsumeIntegralInRange<int64_t>(-2, 2);
      }
    }
  }
}

}  // namespace
}  // namespace fcp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  fcp::Plan plan = fcp::fuzz::BuildPlan(in);
  fcp::fuzz::Mutate(in, plan);
  // Through the text form, exactly as a file would arrive.
  fcp::fuzz::CheckPlanText(fcp::WritePlanJson(plan));
  return 0;
}
