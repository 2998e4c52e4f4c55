// Batches for the assignment's unit tests (tests/assignment*_test.cpp): a
// sharding, made by the planner's sharding steps or by hand, its required
// pairs, and the AssignmentInput pointing into them, filled as the planner
// fills it (block work, each item's dataloader worker). A batch stays where
// it was made (the input points into it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "assignment.h"
#include "fcp/plan.h"
#include "fcp/required_pairs.h"
#include "sharding.h"

namespace fcp::detail {

struct TestBatch {
  TestBatch() = default;
  TestBatch(const TestBatch&) = delete;
  TestBatch& operator=(const TestBatch&) = delete;

  std::vector<int64_t> lengths;
  Sharding sharding;
  std::vector<RequiredPair> pairs;
  AssignmentInput in;
  int64_t token_cap = 0;

  // The pairs, the block work and the dataloader workers, from the sharding.
  void Finish(int32_t workers, const Mask& mask) {
    pairs = RequiredPairs(lengths, sharding.blocks, mask);
    in.workers = workers;
    in.sharding = &sharding;
    in.pairs = &pairs;
    in.lengths = &lengths;
    in.mask = mask;
    in.block_work.assign(sharding.blocks.size(), 0);
    for (const RequiredPair& p : pairs) in.block_work[p.q_block] += p.token_pairs;
    const std::vector<int64_t> offsets = SequenceOffsets(lengths);
    const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    in.dataloader.clear();
    for (const Item& item : sharding.items) {
      const Segment& first = sharding.blocks[item.blocks.front()].segments.front();
      in.dataloader.push_back(DataloaderWorker(total, workers, offsets[first.seq] + first.start));
    }
  }
  // Tokens and slots each worker uses under owner[block]: whether every
  // worker keeps to its slots and the token cap.
  bool KeepsSlots(const std::vector<int32_t>& owner) const {
    std::vector<int64_t> big(in.workers, 0), small(in.workers, 0), tokens(in.workers, 0);
    for (const Item& item : sharding.items) {
      const int32_t w = owner[item.blocks.front()];
      for (int32_t b : item.blocks) {
        if (owner[b] != w) return false;  // an item's blocks stay together
        tokens[w] += sharding.blocks[b].tokens();
      }
      (item.small ? small[w] : big[w]) += item.small ? 1 : item.slots;
    }
    for (int32_t w = 0; w < in.workers; ++w)
      if (big[w] > sharding.big_slots || small[w] > sharding.small_slots ||
          (token_cap > 0 && tokens[w] > token_cap))
        return false;
    return true;
  }
};

// `lengths` by the planner's sharding steps (block size, token cap), heavy
// items split as the planner's defaults do.
inline std::unique_ptr<TestBatch> ShardedBatch(std::vector<int64_t> lengths, int64_t block_size,
                                               int64_t token_cap, int32_t workers, const Mask& mask,
                                               double heavy_fraction = 0.1) {
  auto batch = std::make_unique<TestBatch>();
  batch->lengths = std::move(lengths);
  batch->token_cap = token_cap;
  const ShardBase base =
      ShardSteps123(batch->lengths, block_size, token_cap, workers, mask, /*zigzag=*/true);
  batch->sharding = FinishSharding(base, SplitHeavy(base, batch->lengths, mask, heavy_fraction, 4),
                                   batch->lengths);
  batch->Finish(workers, mask);
  return batch;
}

// Each sequence one block and one one-slot item, `slots` big slots per
// worker: sequences are whole on one worker, so no K/V moves (traffic 0)
// and an item's work is its sequence's pairs.
inline std::unique_ptr<TestBatch> OneBlockPerSequence(std::vector<int64_t> lengths, int32_t workers,
                                                      int32_t slots, const Mask& mask) {
  auto batch = std::make_unique<TestBatch>();
  batch->lengths = std::move(lengths);
  for (size_t s = 0; s < batch->lengths.size(); ++s) {
    batch->sharding.blocks.push_back(Block{0, {{static_cast<int32_t>(s), 0, batch->lengths[s]}}});
    batch->sharding.items.push_back(Item{{static_cast<int32_t>(s)}, 1, false});
  }
  batch->sharding.big_slots = slots;
  batch->sharding.block_size = *std::max_element(batch->lengths.begin(), batch->lengths.end());
  batch->Finish(workers, mask);
  return batch;
}

// A random batch for property tests: 2-12 workers, a mix of short and long
// sequences (up to 12 blocks of 64), causal, full or sliding-window, the
// token cap ceil(T/N) or a little above (small slots when it is not a
// multiple of the block).
inline std::unique_ptr<TestBatch> RandomBatch(std::mt19937& rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int32_t workers = static_cast<int32_t>(pick(2, 12));
  const int64_t block = 64;
  std::vector<int64_t> lengths;
  const int64_t target = workers * block * pick(2, 6);
  for (int64_t total = 0; total < target;) {
    const int64_t length = pick(0, 3) == 0 ? pick(block, 12 * block) : pick(1, block);
    lengths.push_back(length);
    total += length;
  }
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const int64_t cap = (total + workers - 1) / workers + pick(0, 1) * pick(1, block);
  const Mask masks[] = {
      {MaskKind::kCausal, 0}, {MaskKind::kFull, 0}, {MaskKind::kSlidingWindow, 100}};
  return ShardedBatch(std::move(lengths), block, cap, workers, masks[pick(0, 2)]);
}

}  // namespace fcp::detail
