#include <algorithm>
#include <utility>

#include "assignment.h"
#include "fcp/planner.h"
#include "fcp/required_pairs.h"
#include "fcp/schedule.h"
#include "sharding.h"

namespace fcp {

Plan MakeFcpPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  config.validate(lengths);
  Plan plan = PlanHeader(lengths, config, "fcp");

  // 1. Shard.
  detail::Sharding sharding =
      detail::ShardBatch(lengths, config.block_size, plan.token_cap, config.workers, config.mask,
                         config.heavy_fraction, config.max_split);
  plan.block_size = sharding.block_size;
  const std::vector<RequiredPair> pairs = RequiredPairs(lengths, sharding.blocks, plan.mask);

  // 2. Assign.
  detail::AssignmentInput input;
  input.workers = config.workers;
  input.sharding = &sharding;
  input.pairs = &pairs;
  input.local_search_rounds = config.local_search_rounds;
  input.self_check = config.self_check;
  input.block_work.assign(sharding.blocks.size(), 0);
  for (const RequiredPair& p : pairs) input.block_work[p.q_block] += p.token_pairs;
  const std::vector<int64_t> offsets = SequenceOffsets(lengths);
  for (const detail::Item& item : sharding.items) {
    const Segment& first = sharding.blocks[item.blocks.front()].segments.front();
    input.dataloader.push_back(
        DataloaderWorker(offsets.back(), config.workers, offsets[first.seq] + first.start));
  }
  const std::vector<int32_t> owner = detail::AssignBlocks(input);
  plan.blocks = std::move(sharding.blocks);  // the sharding is not used after this
  // Workers are interchangeable for balance; renaming them so that each keeps
  // as many of its dataloader tokens as possible shrinks the reshuffle.
  const std::vector<int32_t> rename = detail::LocalityRenaming(plan.blocks, owner, lengths, config.workers);
  for (size_t b = 0; b < plan.blocks.size(); ++b) plan.blocks[b].worker = rename[owner[b]];

  // 3-5. Transfer graph, colouring, coalesced forward and backward stages.
  BuildStages(plan, pairs, config.self_check);
  return plan;
}

}  // namespace fcp
