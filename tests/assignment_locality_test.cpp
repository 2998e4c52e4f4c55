// The assignment's passes on the chosen plan (src/plan/assignment_
// locality.cpp): a worked renaming and locality exchange, and over random
// batches that the renaming is a permutation, the locality exchanges never
// raise the largest compute or traffic nor lose by Better, and leveling
// never raises the traffic imbalance or the largest traffic.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "assignment_batch.h"
#include "assignment_context.h"
#include "fcp/plan_metrics.h"

namespace fcp::detail {
namespace {

double Largest(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// Sequences of 4, 3, 2, 2, 1, 1 tokens, each its own block, on two
// workers; T = 13, dataloader worker 0 holds tokens 0-5. With blocks 0-1 on
// worker 1 and 2-5 on worker 0, worker 0 shares 6 tokens with dataloader
// worker 1 and worker 1 shares 4 + 2 with dataloader worker 0 (and 1 with
// dataloader worker 1): the heaviest pairs, (0, 1) first by id, rename
// 0 -> 1 and 1 -> 0.
TEST(LocalityRenamingTest, WorkedRenamingMatchesTheHeaviestSharesFirst) {
  const auto batch = OneBlockPerSequence({4, 3, 2, 2, 1, 1}, 2, 3, Mask{MaskKind::kFull, 0});
  EXPECT_EQ(LocalityRenaming(batch->sharding.blocks, {1, 1, 0, 0, 0, 0}, batch->lengths, 2),
            (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(LocalityRenaming(batch->sharding.blocks, {0, 1, 1, 1, 0, 0}, batch->lengths, 2),
            (std::vector<int32_t>{0, 1}));
}

// Four 2-token sequences (work 4 each, no traffic) on two workers of two
// slots; sequences 0, 1 start on dataloader worker 0, 2, 3 on 1. From
// owner {0, 1, 0, 1} (renaming: the identity), item 1 is away from home:
// worker 0's offer bringing most tokens home is item 2 (2 + 2 tokens; item
// 0 would bring none), equal work: exchanged. Then every item is home.
TEST(LocalizeTest, WorkedExchangeBringsBothItemsHome) {
  const auto batch = OneBlockPerSequence({2, 2, 2, 2}, 2, 2, Mask{MaskKind::kFull, 0});
  AssignmentSearch search(batch->in);
  const std::vector<int32_t> owner{0, 1, 0, 1};
  const std::vector<int32_t> rename =
      LocalityRenaming(batch->sharding.blocks, owner, batch->lengths, 2);
  ASSERT_EQ(rename, (std::vector<int32_t>{0, 1}));
  const Assignment start = search.Refine(owner);
  ASSERT_EQ(start.owner, owner);  // balanced already: the search keeps it
  const Assignment local = search.Localize(start, rename);
  EXPECT_EQ(local.owner, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(local.compute, (std::vector<double>{8, 8}));
}

// Localize from `owner` (its loads as they are), under its LocalityRenaming.
Assignment Localized(const TestBatch& batch, const std::vector<int32_t>& owner) {
  AssignmentContext context(batch.in);
  const Loads loads = context.Count(owner);
  const std::vector<int32_t> rename =
      LocalityRenaming(batch.sharding.blocks, owner, batch.lengths, batch.in.workers);
  EXPECT_EQ(rename, (std::vector<int32_t>{0, 1}));
  AssignmentSearch search(batch.in);
  return search.Localize(Assignment{loads.owner, loads.compute, loads.traffic, loads.send}, rename);
}

// Sequences x = 1, p = 3 (dataloader worker 0), c2 = 1, c1 = 2, d = 1
// (worker 1) tokens, works 1, 9, 1, 4, 1; x and d on worker 1 (2), p, c2,
// c1 on worker 0 (14; the renaming: the identity). x is away from home:
// of worker 0's offers, p would bring 1 - 3 tokens home, c2 1 + 1, c1
// 1 + 2, within the largest compute (2 + 3, 14 - 3): x for c1 (computes
// 11, 5). Then c2 is away, but neither c1 (1 - 2) nor d (1 - 1) gains.
TEST(LocalizeTest, WorkedExchangeTakesTheOfferBringingMostTokensHome) {
  const auto batch = OneBlockPerSequence({1, 3, 1, 2, 1}, 2, 3, Mask{MaskKind::kFull, 0});
  const Assignment local = Localized(*batch, {1, 0, 0, 0, 1});
  EXPECT_EQ(local.owner, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(local.compute, (std::vector<double>{11, 5}));
}

// Sequences x = 2, six of 1 (dataloader worker 0), c2 = 1, c1 = 3, d = 4
// (worker 1), works 4, 1 x 6, 1, 9, 16; x and d on worker 1 (20, the
// largest), the rest on worker 0 (16), eight slots each. x's offers: a 1
// brings 2 - 1 tokens home, c2 2 + 1, c1 2 + 3 but would lift worker 1 to
// 20 - 4 + 9 = 25: x for c2 (19, 17). Then c1 is away: c2 would bring
// 3 - 1 home but lift worker 1 to 17 + 8 = 25, d 3 - 4: kept.
TEST(LocalizeTest, WorkedExchangeSkipsAnOfferAboveTheLargestCompute) {
  const auto batch =
      OneBlockPerSequence({2, 1, 1, 1, 1, 1, 1, 1, 3, 4}, 2, 8, Mask{MaskKind::kFull, 0});
  const Assignment local = Localized(*batch, {1, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  EXPECT_EQ(local.owner, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 1, 0, 1}));
  EXPECT_EQ(local.compute, (std::vector<double>{19, 17}));
}

TEST(LocalityTest, RenamingLocalizeAndLevelKeepTheirBoundsOnRandomBatches) {
  int leveled = 0;
  for (uint32_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const auto batch = RandomBatch(rng);
    batch->in.judge.pairs_per_traffic_token = seed % 2 ? 0.0 : 0.5;
    batch->in.self_check = true;  // Level's caps and every search's loads, checked inside
    AssignmentSearch search(batch->in);
    const Assignment start = search.Assign();
    const int32_t n = batch->in.workers;
    std::vector<int32_t> rename =
        LocalityRenaming(batch->sharding.blocks, start.owner, batch->lengths, n);
    std::vector<int32_t> sorted = rename;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    EXPECT_EQ(sorted, ids);  // a permutation
    const Assignment local = search.Localize(start, rename);
    EXPECT_TRUE(batch->KeepsSlots(local.owner));
    EXPECT_LE(Largest(local.compute), Largest(start.compute));
    EXPECT_LE(Largest(local.traffic), Largest(start.traffic));
    EXPECT_FALSE(Better(start, local, batch->in.judge));
    EXPECT_EQ(search.Localize(start, rename).owner, local.owner);
    const Assignment level = search.Level(start);
    EXPECT_TRUE(batch->KeepsSlots(level.owner));
    EXPECT_LE(Imbalance(level.traffic), Imbalance(start.traffic));
    EXPECT_LE(Largest(level.traffic), Largest(start.traffic));
    leveled += level.owner != start.owner;
  }
  EXPECT_GE(leveled, 5);  // leveling moved items on some batches
}

}  // namespace
}  // namespace fcp::detail
