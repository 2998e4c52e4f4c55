#include "fcp/token_permutation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "fcp/error.h"
#include "fcp/plan_metrics.h"

namespace fcp {
namespace {

using ::testing::ElementsAre;

// Sequences [4, 2, 1, 1] (global tokens 0-3 | 4-5 | 6 | 7) on 2 workers:
//
//   block 0  worker 1  seq 0 [0, 2)            -> tokens 0 1
//   block 1  worker 0  seq 0 [2, 4)            -> tokens 2 3
//   block 2  worker 0  seq 3 [0, 1), seq 1 [0, 1) -> tokens 7 4  (segment order, not token order)
//   block 3  worker 1  seq 1 [1, 2), seq 2 [0, 1) -> tokens 5 6
//
// Only the token layout matters here, so the plan has no stages.
Plan HandPlan() {
  Plan plan;
  plan.workers = 2;
  plan.sequences = {4, 2, 1, 1};
  plan.token_cap = 4;
  plan.blocks = {{1, {{0, 0, 2}}},
                 {0, {{0, 2, 2}}},
                 {0, {{3, 0, 1}, {1, 0, 1}}},
                 {1, {{1, 1, 1}, {2, 0, 1}}}};
  return plan;
}

TEST(TokenPermutationTest, HandPlanOrderIsBlocksThenSegments) {
  const TokenPermutation p = PlannedTokenOrder(HandPlan());
  EXPECT_THAT(p.worker_offsets, ElementsAre(0, 4, 8));
  EXPECT_THAT(p.order, ElementsAre(2, 3, 7, 4, 0, 1, 5, 6));
  EXPECT_THAT(InvertPermutation(p.order), ElementsAre(4, 5, 0, 1, 3, 6, 7, 2));
}

TEST(TokenPermutationTest, WorkerWithoutBlocksHasEmptyRange) {
  Plan plan = HandPlan();
  plan.workers = 3;  // worker 2 owns nothing
  const TokenPermutation p = PlannedTokenOrder(plan);
  EXPECT_THAT(p.worker_offsets, ElementsAre(0, 4, 8, 8));
}

TEST(TokenPermutationTest, InvertRejectsNonPermutations) {
  EXPECT_THROW(InvertPermutation({0, 2}), Error);     // out of range
  EXPECT_THROW(InvertPermutation({1, 1}), Error);     // repeated
  EXPECT_THROW(InvertPermutation({-1, 0}), Error);    // negative
  EXPECT_TRUE(InvertPermutation({}).empty());
}

// Random tilings: cut each sequence into random pieces, pack pieces into
// blocks in random order, assign blocks to random workers. The planned order
// must be a permutation whose per-worker counts match the metrics, and the
// inverse must undo it.
TEST(TokenPermutationTest, RandomTilingsGivePermutations) {
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
    const TokenPermutation p = PlannedTokenOrder(plan);
    ASSERT_EQ(static_cast<int64_t>(p.order.size()), plan.total_tokens());
    const std::vector<int64_t> inverse = InvertPermutation(p.order);  // throws if not a permutation
    for (size_t g = 0; g < inverse.size(); ++g) ASSERT_EQ(p.order[inverse[g]], static_cast<int64_t>(g));
    std::vector<int64_t> owned(plan.workers, 0);
    for (const Block& b : plan.blocks) owned[b.worker] += b.tokens();
    for (int32_t w = 0; w < plan.workers; ++w)
      ASSERT_EQ(p.worker_offsets[w + 1] - p.worker_offsets[w], owned[w]);
  }
}

}  // namespace
}  // namespace fcp
