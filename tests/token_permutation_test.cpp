#include "fcp/token_permutation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "fcp/error.h"

namespace fcp {
namespace {

using ::testing::ElementsAre;

// Sequences [4, 2, 1, 1] (global tokens 0-3 | 4-5 | 6 | 7) on 2 workers:
//
//   block 0  worker 1  seq 0 [0, 2)                  -> tokens 0 1
//   block 1  worker 0  seq 0 [2, 4)                  -> tokens 2 3
//   block 2  worker 0  seq 3 [0, 1), seq 1 [0, 1)    -> tokens 7 4  (segment order, not token
//   order) block 3  worker 1  seq 1 [1, 2), seq 2 [0, 1)    -> tokens 5 6
//
// Only the token layout matters here, so the plan has no stages.
Plan HandPlan() {
  Plan plan;
  plan.workers = 2;
  plan.sequences = {4, 2, 1, 1};
  plan.token_cap = 4;
  plan.blocks = {
      {1, {{0, 0, 2}}}, {0, {{0, 2, 2}}}, {0, {{3, 0, 1}, {1, 0, 1}}}, {1, {{1, 1, 1}, {2, 0, 1}}}};
  return plan;
}

TEST(TokenLayoutTest, HandPlanOrderIsBlocksThenSegments) {
  const TokenLayout layout(HandPlan());
  EXPECT_EQ(layout.workers(), 2);
  EXPECT_EQ(layout.total_tokens(), 8);
  EXPECT_THAT(layout.worker_offsets(), ElementsAre(0, 4, 8));
  EXPECT_THAT(layout.WorkerOrder(0), ElementsAre(2, 3, 7, 4));
  EXPECT_THAT(layout.WorkerOrder(1), ElementsAre(0, 1, 5, 6));
  EXPECT_THAT(layout.Order(), ElementsAre(2, 3, 7, 4, 0, 1, 5, 6));
}

TEST(TokenLayoutTest, HandPlanPositionsAndPlacement) {
  const TokenLayout layout(HandPlan());
  EXPECT_THAT(layout.PlannedPositions(0, 8), ElementsAre(4, 5, 0, 1, 3, 6, 7, 2));
  // Worker 1's dataloader share: tokens 4..7.
  EXPECT_THAT(layout.PlannedPositions(4, 8), ElementsAre(3, 6, 7, 2));
  // Tokens 3, 4, 5: a range cutting through segments.
  const TokenLayout::Placement p = layout.Place(3, 6);
  EXPECT_THAT(p.owner, ElementsAre(0, 0, 1));
  EXPECT_THAT(p.index, ElementsAre(1, 3, 2));
  EXPECT_TRUE(layout.PlannedPositions(8, 8).empty());
  EXPECT_TRUE(layout.Place(0, 0).owner.empty());
}

TEST(TokenLayoutTest, WorkerWithoutBlocksHasNoTokens) {
  Plan plan = HandPlan();
  plan.workers = 3;  // worker 2 owns nothing
  const TokenLayout layout(plan);
  EXPECT_THAT(layout.worker_offsets(), ElementsAre(0, 4, 8, 8));
  EXPECT_TRUE(layout.WorkerOrder(2).empty());
}

TEST(TokenLayoutTest, RejectsBadWorkersAndRanges) {
  const TokenLayout layout(HandPlan());
  EXPECT_THROW(layout.WorkerOrder(2), Error);
  EXPECT_THROW(layout.WorkerOrder(-1), Error);
  EXPECT_THROW(layout.PlannedPositions(-1, 2), Error);
  EXPECT_THROW(layout.PlannedPositions(3, 2), Error);
  EXPECT_THROW(layout.Place(0, 9), Error);
}

// Random tilings: cut each sequence into random pieces, pack pieces into
// blocks in random order, assign blocks to random workers. Order() must be a
// permutation, PlannedPositions its inverse on every sub-range, WorkerOrder
// and Place consistent with both.
TEST(TokenLayoutTest, RandomTilingsAreConsistent) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Plan plan;
    plan.workers = 1 + static_cast<int32_t>(rng() % 6);
    std::vector<Segment> pieces;
    const int sequences = 1 + static_cast<int>(rng() % 8);
    for (int s = 0; s < sequences; ++s) {
      const int64_t length = 1 + static_cast<int64_t>(rng() % 40);
      plan.sequences.push_back(length);
      for (int64_t start = 0; start < length;) {
        const int64_t piece = std::min<int64_t>(length - start, 1 + rng() % 9);
        pieces.push_back({s, start, piece});
        start += piece;
      }
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    for (size_t i = 0; i < pieces.size();) {
      Block b;
      b.worker = static_cast<int32_t>(rng() % plan.workers);
      const size_t take = std::min<size_t>(pieces.size() - i, 1 + rng() % 3);
      b.segments.assign(pieces.begin() + i, pieces.begin() + i + take);
      plan.blocks.push_back(b);
      i += take;
    }
    const TokenLayout layout(plan);
    const int64_t t = plan.total_tokens();
    const std::vector<int64_t> order = layout.Order();
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t g = 0; g < t; ++g) ASSERT_EQ(sorted[g], g);
    const std::vector<int64_t> inverse = layout.PlannedPositions(0, t);
    for (int64_t p = 0; p < t; ++p) ASSERT_EQ(inverse[order[p]], p);
    for (int32_t w = 0; w < plan.workers; ++w) {
      const std::vector<int64_t> mine = layout.WorkerOrder(w);
      ASSERT_TRUE(std::equal(mine.begin(), mine.end(), order.begin() + layout.worker_offsets()[w],
                             order.begin() + layout.worker_offsets()[w + 1]));
    }
    const int64_t begin = static_cast<int64_t>(rng() % (t + 1));
    const int64_t end = begin + static_cast<int64_t>(rng() % (t - begin + 1));
    const std::vector<int64_t> part = layout.PlannedPositions(begin, end);
    const TokenLayout::Placement place = layout.Place(begin, end);
    for (int64_t g = begin; g < end; ++g) {
      ASSERT_EQ(part[g - begin], inverse[g]);
      const int32_t owner = place.owner[g - begin];
      ASSERT_EQ(layout.worker_offsets()[owner] + place.index[g - begin], inverse[g]);
    }
  }
}

}  // namespace
}  // namespace fcp
