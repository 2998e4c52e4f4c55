// The assignment's greedy starts (src/plan/assignment_greedy.h): a worked
// LPT placement, the need hulls' marginal traffic, and over random batches
// that every start places every item whole within its slots and the token
// cap, deterministically.
#include "assignment_greedy.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "assignment_batch.h"

namespace fcp::detail {
namespace {

// Full mask, two workers of three slots, six whole sequences of 4, 3, 2, 2,
// 1, 1 tokens (works 16, 9, 4, 4, 1, 1; no traffic), dataloader workers 0,
// 0, 1, 1, 1, 1 (T = 13: worker 0 holds tokens 0-5). LPT, worked by hand
// (C* = 17.5; every start agrees, as no item has traffic):
//   16 -> a tie at 0: its dataloader worker, 0.   9 -> 1 (9 < 25).
//   4 -> 1 (13 < 20).   4 -> 1 (17 < 20); worker 1's slots are full.
//   1 -> 0 (the only one with room), 1 -> 0: computes 18, 17.
TEST(GreedyStartsTest, WorkedLptPlacement) {
  const auto batch = OneBlockPerSequence({4, 3, 2, 2, 1, 1}, 2, 3, Mask{MaskKind::kFull, 0});
  EXPECT_EQ(batch->in.dataloader, (std::vector<int32_t>{0, 0, 1, 1, 1, 1}));
  AssignmentContext context(batch->in);
  context.EstimateTraffic();
  const GreedyStarts greedy(context);
  for (const Start start : {Start::kCompute, Start::kVector, Start::kAffinity}) {
    const std::vector<int32_t> owner = greedy.Build(start);
    EXPECT_EQ(owner, (std::vector<int32_t>{0, 1, 1, 1, 0, 0}));
    EXPECT_EQ(context.Count(owner).compute, (std::vector<double>{18, 17}));
  }
}

// One causal sequence of 8 tokens, as hulls: keys [0, 8) attended by
// queries owning [4, 8) need the 4 keys before them; a second item of the
// same sequence owning [0, 4) on the same worker adds none, elsewhere all
// it attends beyond what it owns (0). (A marginal is the hull's growth
// minus what the joining item owns.)
TEST(NeedHullsTest, MarginalCountsOnlyTheKeysNotAlreadyReceived) {
  NeedHulls hulls(/*sequences=*/2, /*capacity=*/4);
  const SequenceNeed late{0, 0, 8, 4}, early{0, 0, 4, 4}, other{1, 2, 6, 1};
  EXPECT_EQ(hulls.Marginal(0, {&late, 1}), 4);
  hulls.Add(0, {&late, 1});
  EXPECT_EQ(hulls.Marginal(0, {&early, 1}), -4);  // together they own every key they attend
  EXPECT_EQ(hulls.Marginal(1, {&early, 1}), 0);
  EXPECT_EQ(hulls.Marginal(0, {&other, 1}), 3);  // another sequence: its own hull
  hulls.Add(1, {&other, 1});
  hulls.Add(1, {&early, 1});
  std::vector<int32_t> latest;
  hulls.ForLatestWorkers(0, 8, [&](int32_t w) { latest.push_back(w); });
  EXPECT_EQ(latest, (std::vector<int32_t>{1, 0}));
  // Worker 1's hull of sequence 0 grows to [0, 8): a need of all of it,
  // owning nothing, adds no key.
  hulls.Add(1, {&late, 1});
  const SequenceNeed all{0, 0, 8, 0};
  EXPECT_EQ(hulls.Marginal(1, {&all, 1}), 0);
  EXPECT_EQ(hulls.Marginal(0, {&all, 1}), 0);
}

TEST(GreedyStartsTest, EveryStartPlacesEveryItemWithinItsSlotsOnRandomBatches) {
  for (uint32_t seed = 0; seed < 80; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const auto batch = RandomBatch(rng);
    AssignmentContext context(batch->in);
    context.EstimateTraffic();
    const GreedyStarts greedy(context);
    for (const Start start : {Start::kCompute, Start::kVector, Start::kAffinity}) {
      const std::vector<int32_t> owner = greedy.Build(start);
      ASSERT_EQ(owner.size(), batch->sharding.blocks.size());
      for (int32_t w : owner) ASSERT_TRUE(w >= 0 && w < batch->in.workers);
      EXPECT_TRUE(batch->KeepsSlots(owner));
      EXPECT_EQ(greedy.Build(start), owner);
    }
  }
}

}  // namespace
}  // namespace fcp::detail
