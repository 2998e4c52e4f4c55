// The assignment's context (src/plan/assignment_context.h): the dependency
// graphs and the traffic estimate of a worked batch, a self-check that
// catches wrong loads, and over random batches the dataloader homes against
// a brute-force count.
#include "assignment_context.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "assignment_batch.h"
#include "fcp/error.h"

namespace fcp::detail {
namespace {

TEST(AssignmentContextTest, GraphsListDependenciesAndUsersAscending) {
  // q0 needs 0; q1 needs 0, 1; q2 needs 1, 2 (sorted by (q, kv)).
  const std::vector<RequiredPair> pairs{{0, 0, 1}, {1, 0, 1}, {1, 1, 1}, {2, 1, 1}, {2, 2, 1}};
  Csr deps, users;
  BuildGraphs(pairs, 3, deps, users);
  EXPECT_EQ(deps.offset, (std::vector<int32_t>{0, 1, 3, 5}));
  EXPECT_EQ(deps.items, (std::vector<int32_t>{0, 0, 1, 1, 2}));
  EXPECT_EQ(users.offset, (std::vector<int32_t>{0, 2, 4, 5}));
  EXPECT_EQ(users.items, (std::vector<int32_t>{0, 1, 1, 2, 2}));
}

// Full mask, one 8-token sequence in blocks of 4 on two workers (cap 4):
// two one-slot items, each block needing both. Item 0 sends its block to
// its one outside user (4 tokens) and receives block 1 (4): 8 each, the
// traffic target their mean, 8; the compute target 64 / 2.
TEST(AssignmentContextTest, WorkedTrafficEstimate) {
  const auto batch = ShardedBatch({8}, 4, 4, 2, Mask{MaskKind::kFull, 0});
  ASSERT_EQ(batch->sharding.items.size(), 2u);
  AssignmentContext context(batch->in);
  EXPECT_EQ(context.item_work, (std::vector<double>{32, 32}));
  EXPECT_EQ(context.targets.compute, 32);
  context.EstimateTraffic();
  EXPECT_EQ(context.item_send, (std::vector<double>{4, 4}));
  EXPECT_EQ(context.item_traffic, (std::vector<double>{8, 8}));
  EXPECT_EQ(context.targets.traffic, 8);
  // Apart, each worker sends and receives one block: 8 tokens each.
  const Loads apart = context.Count({0, 1});
  EXPECT_EQ(apart.traffic, (std::vector<double>{8, 8}));
  EXPECT_EQ(context.Result(apart, "test").compute, (std::vector<double>{32, 32}));
}

TEST(AssignmentContextTest, SelfCheckRejectsLoadsThatDifferFromARecount) {
  const auto batch = ShardedBatch({8}, 4, 4, 2, Mask{MaskKind::kFull, 0});
  batch->in.self_check = true;
  AssignmentContext context(batch->in);
  Loads wrong = context.Count({0, 1});
  EXPECT_NO_THROW(context.Result(wrong, "test"));
  wrong.traffic[1] += 1;
  EXPECT_THROW(context.Result(wrong, "test"), Error);
}

// HomesOf against a count of every token's dataloader worker, renamed.
TEST(AssignmentContextTest, HomesAreTheTwoLargestDataloaderSharesOnRandomBatches) {
  for (uint32_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const auto batch = RandomBatch(rng);
    const int32_t n = batch->in.workers;
    std::vector<int32_t> original(n);  // a rotation: home h is worker (h + seed) mod n
    for (int32_t h = 0; h < n; ++h) original[h] = static_cast<int32_t>((h + seed) % n);
    AssignmentContext context(batch->in);
    const std::vector<HomeTokens> homes = context.HomesOf(original);
    const std::vector<int64_t> offsets = SequenceOffsets(batch->lengths);
    int64_t total = 0;
    for (int64_t length : batch->lengths) total += length;
    for (size_t i = 0; i < batch->sharding.items.size(); ++i) {
      std::map<int32_t, int64_t> at;  // worker -> tokens, one token at a time
      for (int32_t b : batch->sharding.items[i].blocks)
        for (const Segment& s : batch->sharding.blocks[b].segments)
          for (int64_t t = 0; t < s.length; ++t)
            ++at[original[DataloaderWorker(total, n, offsets[s.seq] + s.start + t)]];
      // The largest, ties by the lower id; then the next.
      int32_t first = -1, second = -1;
      for (const auto& [w, tokens] : at)
        if (first < 0 || tokens > at[first]) first = w;
      for (const auto& [w, tokens] : at)
        if (w != first && (second < 0 || tokens > at[second])) second = w;
      EXPECT_EQ(homes[i].worker[0], first);
      EXPECT_EQ(homes[i].tokens[0], at[first]);
      EXPECT_EQ(homes[i].worker[1], second);
      EXPECT_EQ(homes[i].tokens[1], second < 0 ? 0 : at[second]);
    }
  }
}

}  // namespace
}  // namespace fcp::detail
