// Sharding step 4 (src/plan/sharding.h): which heavy items are split, into
// how many pieces, and with which fillers, on a batch with worked answers.
#include "sharding.h"

#include <numeric>

#include <gtest/gtest.h>

namespace fcp::detail {
namespace {

// One causal 4096-token sequence and 64 of 256 tokens, block 1024, four
// workers of five slots. The long one is two zig-zag pairs, (0, 3) and
// (1, 2), each of 1024 * 1024 * 3 + 2 * (1024 * 1025 / 2) = 4,195,328
// pairs; the short ones fill 16 packed blocks of 4 * (256 * 257 / 2) =
// 131,584. Mean work per worker: (2 * 4,195,328 + 16 * 131,584) / 4 =
// 2,624,000, so heavy_fraction 0.6 puts the heavy bound at 1,574,400:
// half a pair (2,097,664) is above it, a third (1,398,443) below.
struct Batch {
  std::vector<int64_t> lengths;
  ShardBase base;
  Batch() : lengths(1, 4096) {
    lengths.insert(lengths.end(), 64, 256);
    base = ShardSteps123(lengths, 1024, 5120, 4, Mask{});
  }
  // Sub-items carry exactly the work of the items they replace.
  void ExpectWorkKept(const HeavySplit& split) const {
    int64_t removed = 0;
    for (size_t i = 0; i < base.items.size(); ++i)
      if (split.removed[i]) removed += base.items[i].work;
    int64_t added = 0;
    for (const ProtoItem& sub : split.added) added += sub.work;
    EXPECT_EQ(added, removed);
  }
};

TEST(ShardingTest, TheBatchIsTwoPairsAndSixteenPackedBlocks) {
  const Batch b;
  ASSERT_EQ(b.base.items.size(), 18u);
  EXPECT_EQ(b.base.big_slots, 5);
  EXPECT_EQ(b.base.small_slots, 0);
  EXPECT_EQ(b.base.items[b.base.by_work[0]].work, 4195328);
  EXPECT_EQ(b.base.items[b.base.by_work[1]].work, 4195328);
  EXPECT_EQ(b.base.items[b.base.by_work[2]].work, 131584);
}

// Any count: the fewest pieces under the bound, three, each completed by
// one filler (three one-slot sub-items from a two-slot pair).
TEST(ShardingTest, AnyCountCutsAPairInThreePieces) {
  const Batch b;
  const HeavySplit split = SplitHeavy(b.base, b.lengths, Mask{}, 0.6, 8, PieceCounts::kAny);
  ASSERT_EQ(split.splits.size(), 2u);
  for (const SplitItem& s : split.splits) {
    EXPECT_EQ(s.piece_tokens, (std::vector<int64_t>{342, 342, 340}));  // ceil(1024 / 3)
    EXPECT_EQ(s.second_tokens, s.piece_tokens);
    EXPECT_EQ(s.fillers.size(), 1u);
  }
  EXPECT_EQ(split.added.size(), 6u);
  EXPECT_EQ(std::accumulate(split.removed.begin(), split.removed.end(), 0), 4);
  b.ExpectWorkKept(split);
}

// Powers of two: the fewest power of two under the bound is four (two
// fillers per pair); with at most three pieces allowed, two.
TEST(ShardingTest, PowersOfTwoCutAPairInFourOrTwoPieces) {
  const Batch b;
  const HeavySplit four = SplitHeavy(b.base, b.lengths, Mask{}, 0.6, 8);
  ASSERT_EQ(four.splits.size(), 2u);
  for (const SplitItem& s : four.splits) {
    EXPECT_EQ(s.piece_tokens, (std::vector<int64_t>{256, 256, 256, 256}));
    EXPECT_EQ(s.fillers.size(), 2u);
  }
  b.ExpectWorkKept(four);

  const HeavySplit two = SplitHeavy(b.base, b.lengths, Mask{}, 0.6, 3);
  ASSERT_EQ(two.splits.size(), 2u);
  for (const SplitItem& s : two.splits) {
    EXPECT_EQ(s.piece_tokens, (std::vector<int64_t>{512, 512}));
    EXPECT_TRUE(s.fillers.empty());
  }
  b.ExpectWorkKept(two);
}

// Pieces keep at least kMinPieceTokens: at block 1024 that is four, so any
// count up to 8 stops at four and powers of two at four too.
TEST(ShardingTest, PieceCountsStopAtTheSmallestPiece) {
  const Batch b;
  // heavy_fraction 0.25: the bound (656,000) needs seven pieces of a pair.
  const HeavySplit split = SplitHeavy(b.base, b.lengths, Mask{}, 0.25, 8, PieceCounts::kAny);
  ASSERT_FALSE(split.splits.empty());
  for (const SplitItem& s : split.splits) EXPECT_EQ(s.piece_tokens.size(), 4u);
  b.ExpectWorkKept(split);
}

}  // namespace
}  // namespace fcp::detail
