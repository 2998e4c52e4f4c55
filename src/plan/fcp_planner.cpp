#include <algorithm>
#include <utility>

#include "assignment.h"
#include "fcp/error.h"
#include "fcp/planner.h"
#include "fcp/required_pairs.h"
#include "fcp/schedule.h"
#include "sharding.h"

namespace fcp {

namespace {

// Moving one K/V token (2 Hkv D dtype bytes) costs network_flops_per_byte
// FLOPs per byte; a token pair costs 4 Hq D FLOPs (head_dim cancels).
double PairsPerTrafficToken(const PlannerConfig& config) {
  const AttentionShape& a = config.attention;
  return config.network_flops_per_byte * 2.0 * a.heads_kv * a.dtype_bytes / (4.0 * a.heads_q);
}

// Balance mode judges by imbalance alone: no slack for small traffic excess.
detail::Judge JudgeOf(const PlannerConfig& config, int64_t block_size) {
  const double ratio = PairsPerTrafficToken(config);
  return {ratio, config.max_imbalance, ratio > 0 ? static_cast<double>(block_size) : 0.0};
}

// One sharding and assignment of the batch.
struct Candidate {
  detail::Sharding sharding;
  std::vector<RequiredPair> pairs;
  detail::Assignment assignment;
};

// Sharding steps 1-3 (shared by the candidates) and the sequences' first tokens.
struct Common {
  detail::ShardBase base;
  std::vector<int64_t> offsets;
};

// A lower bound on the compute imbalance, (max - mean) / max, of every
// assignment of `sharding`'s items: the worker holding the heaviest item
// computes at least that item.
double ComputeImbalanceLowerBound(const detail::Sharding& sharding,
                                  const std::vector<int64_t>& lengths, const Mask& mask,
                                  int32_t workers) {
  int64_t total = 0, heaviest = 0;
  for (const detail::Item& item : sharding.items) {
    int64_t work = 0;
    for (int32_t b : item.blocks) work += detail::QueryWork(sharding.blocks[b], lengths, mask);
    total += work;
    heaviest = std::max(heaviest, work);
  }
  if (heaviest == 0) return 0;
  const double mean = static_cast<double>(total) / workers;
  return (static_cast<double>(heaviest) - mean) / static_cast<double>(heaviest);
}

// Assigns an already sharded candidate.
Candidate Assign(detail::Sharding sharding, const std::vector<int64_t>& lengths,
                 const PlannerConfig& config, const Plan& header, const Common& common) {
  Candidate c;
  c.sharding = std::move(sharding);
  c.pairs = RequiredPairs(lengths, c.sharding.blocks, header.mask);
  detail::AssignmentInput input;
  input.workers = config.workers;
  input.sharding = &c.sharding;
  input.pairs = &c.pairs;
  input.lengths = &lengths;
  input.mask = header.mask;
  input.local_search_rounds = config.local_search_rounds;
  input.self_check = config.self_check;
  input.judge = JudgeOf(config, c.sharding.block_size);
  input.block_work.assign(c.sharding.blocks.size(), 0);
  for (const RequiredPair& p : c.pairs) input.block_work[p.q_block] += p.token_pairs;
  const std::vector<int64_t>& offsets = common.offsets;
  input.dataloader.reserve(c.sharding.items.size());
  for (const detail::Item& item : c.sharding.items) {
    const Segment& first = c.sharding.blocks[item.blocks.front()].segments.front();
    input.dataloader.push_back(
        DataloaderWorker(offsets.back(), config.workers, offsets[first.seq] + first.start));
  }
  c.assignment = detail::AssignBlocks(input);
  return c;
}

}  // namespace

Plan MakeFcpPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  config.validate(lengths);
  Plan plan = PlanHeader(lengths, config, "fcp");
  plan.planner_options = RecordedPlannerOptions(config);

  // 1-2. Shard and assign; with a network ratio, also with heavy blocks cut
  // in at most two pieces (less traffic, coarser balance), keeping the
  // detail::Better candidate (ties: the configured one).
  const Common common{detail::ShardSteps123(lengths, config.block_size, plan.token_cap,
                                            config.workers, config.mask),
                      SequenceOffsets(lengths)};
  const auto shard = [&](int32_t max_split) {
    return detail::FinishSharding(common.base, lengths, config.mask, config.heavy_fraction,
                                  max_split);
  };
  Candidate best = Assign(shard(config.max_split), lengths, config, plan, common);
  if (config.network_flops_per_byte > 0 && config.heavy_fraction > 0 && config.max_split > 2) {
    detail::Sharding coarse_sharding = shard(2);
    const detail::Judge judge = JudgeOf(config, coarse_sharding.block_size);
    // Exact pruning: a coarse plan outside the imbalance bound cannot be
    // Better than a best within it, and every plan is outside it when the
    // lower bound on the compute imbalance is (8 of 10 paper batches at
    // N = 256: heavy blocks in two pieces cannot be balanced).
    const bool cannot_win =
        detail::WithinBound(best.assignment, judge) &&
        ComputeImbalanceLowerBound(coarse_sharding, lengths, config.mask, config.workers) >
            config.max_imbalance + 1e-12;  // margin: Imbalance() rounds
    // The self-check assigns it anyway and checks that it loses.
    if (!cannot_win || config.self_check) {
      Candidate coarse = Assign(std::move(coarse_sharding), lengths, config, plan, common);
      const bool better = detail::Better(coarse.assignment, best.assignment, judge);
      FCP_CHECK(!(better && cannot_win), "planner: a pruned candidate would have won");
      if (better) best = std::move(coarse);
    }
  }
  plan.block_size = best.sharding.block_size;
  plan.blocks = std::move(best.sharding.blocks);
  const std::vector<int32_t>& owner = best.assignment.owner;
  // Workers are interchangeable for balance; renaming them so that each keeps
  // as many of its dataloader tokens as possible shrinks the reshuffle.
  const std::vector<int32_t> rename =
      detail::LocalityRenaming(plan.blocks, owner, lengths, config.workers);
  for (size_t b = 0; b < plan.blocks.size(); ++b) plan.blocks[b].worker = rename[owner[b]];

  // 3-5. Transfer graph, colouring, coalesced forward and backward stages.
  BuildStages(plan, best.pairs, config.self_check);
  return plan;
}

}  // namespace fcp
