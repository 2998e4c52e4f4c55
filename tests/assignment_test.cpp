// The assignment's shed layout (src/plan/assignment.h, AssignmentSearch::
// Shed) on a batch with a worked answer, and on random batches from a
// shed-only input.
#include "assignment.h"

#include <gtest/gtest.h>

#include <random>

#include "assignment_batch.h"
#include "fcp/error.h"

namespace fcp::detail {
namespace {

// Full mask, block 4, four workers of two slots (cap 8), nodes of two
// workers ({0, 1} and {2, 3}). One 16-token sequence, blocks A0..A3 of
// 4 x 16 = 64 pairs each, then eight 2-token sequences packed two to a
// block (S0..S3, 2 x 2 x 2 = 8 pairs each). Every block is its own
// one-slot item. At home: A0 A1 on worker 0, A2 A3 on 1, S0 S1 on 2, S2
// S3 on 3: compute 128, 128, 16, 16; mean 72, slack 2% -> limit 73.44.
// Shed, worked by hand:
//  1. The most loaded is worker 1 (ties: the higher id). Its densest item
//     A2 (ties: the first). Own node: worker 0's lightest item is A0, not
//     lighter than A2. Other nodes, least loaded first: worker 2 (16) and
//     3 (16) both end at 16 + 64 - 8 = 72 <= limit with no reshuffle yet
//     across nodes; the first, 2, takes A2 and gives S0 back.
//     Now 128, 72, 72, 16.
//  2. Worker 0 gives A0: worker 1 would end at 72 + 64 - 8 = 128 > limit;
//     worker 3 ends at 72 (worker 2 at 128): A0 to 3, S2 to 0.
//     Now 72, 72, 72, 72: every worker within the limit, done.
TEST(AssignmentShedTest, OverloadedHomesShedTheirDensestBlocksWithinTheSlack) {
  std::vector<int64_t> lengths{16};
  lengths.insert(lengths.end(), 8, 2);
  const auto batch = ShardedBatch(lengths, 4, 8, 4, Mask{MaskKind::kFull, 0}, 0);
  ASSERT_EQ(batch->sharding.blocks.size(), 8u);
  ASSERT_EQ(batch->sharding.items.size(), 8u);
  const AssignmentInput& in = batch->in;
  // Blocks in token order: A0..A3, then S0..S3.
  for (int32_t b = 0; b < 4; ++b) ASSERT_EQ(in.block_work[b], 64);
  for (int32_t b = 4; b < 8; ++b) ASSERT_EQ(in.block_work[b], 8);
  AssignmentSearch search(in);
  const Assignment shed = search.Shed(/*node_workers=*/2);
  EXPECT_EQ(shed.owner, (std::vector<int32_t>{3, 0, 2, 1, 1, 2, 0, 3}));
  EXPECT_EQ(shed.compute, (std::vector<double>{72, 72, 72, 72}));
  // Deterministic, and the search is left as it was.
  EXPECT_EQ(search.Shed(2).owner, shed.owner);
}

// A shed-only input (no dependency rows, no load model) sheds exactly as a
// full one, loads included (its users graph counts the traffic), and
// refuses every other search; under the self-check every offer Shed reuses
// from its cache equals one computed afresh.
TEST(AssignmentShedTest, ShedOnlyInputShedsAsAFullOneAndRefusesTheOtherSearches) {
  for (uint32_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const auto batch = RandomBatch(rng);
    const int32_t node_workers = 1 + static_cast<int32_t>(seed % 4);
    batch->in.self_check = true;  // every cached offer checked against a fresh one
    const Assignment full = AssignmentSearch(batch->in).Shed(node_workers);
    AssignmentInput light = batch->in;
    light.shed_only = true;
    AssignmentSearch search(light);
    const Assignment shed = search.Shed(node_workers);
    EXPECT_TRUE(batch->KeepsSlots(shed.owner));
    EXPECT_EQ(shed.owner, full.owner);
    EXPECT_EQ(shed.compute, full.compute);
    EXPECT_EQ(shed.traffic, full.traffic);
    EXPECT_EQ(shed.send, full.send);
    EXPECT_THROW(search.Assign(), Error);
    EXPECT_THROW(search.Refine(shed.owner), Error);
  }
}

}  // namespace
}  // namespace fcp::detail
