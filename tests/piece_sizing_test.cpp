// Piece sizing (src/plan/piece_sizing.h) on hand-built splits with worked answers.
#include "piece_sizing.h"

#include <gtest/gtest.h>

namespace fcp::detail {
namespace {

constexpr int64_t kBlock = 2048;
constexpr double kRate = 1000;  // work per piece token

// A causal pair (item 0, two blocks, work kRate * kBlock) split in four
// 512-token pieces, completed by two work-free fillers (items 1 and 2).
struct PairSplit {
  ShardBase base;
  HeavySplit split;
  PairSplit() {
    base.block_size = kBlock;
    base.items.resize(3);
    base.items[0].blocks.resize(2);
    base.items[0].slots = 2;
    base.items[0].work = static_cast<int64_t>(kRate * kBlock);
    base.items[1].blocks.resize(1);
    base.items[2].blocks.resize(1);
    split.splits.push_back({0, {1, 2}, {512, 512, 512, 512}, {512, 512, 512, 512}});
  }
  const std::vector<int64_t>& pieces() const { return split.splits[0].piece_tokens; }
  const std::vector<int64_t>& second() const { return split.splits[0].second_tokens; }
};

// Workers 0 (sub-items 0 and 1), 1 (sub-item 2, plus 256 tokens' worth of
// other work) and 2 (sub-item 3, plus 512 tokens' worth). Levelled: t0 =
// L/rate, t1 = t0 - 256, t2 = t0 - 512 with t0 + t1 + t2 = 2048, so t0 =
// 938.67 (469.33 a piece), t1 = 682.67, t2 = 426.67. In 64-token granules:
// 7.33, 7.33, 10.67, 6.67 -> floors 7, 7, 10, 6 (30 of 32), the two largest
// remainders (sub-items 2, 3) take one more.
TEST(PieceSizingTest, LevelsTheWorkersOfASplitInWholeGranules) {
  PairSplit s;
  const std::vector<double> compute = {1024 * kRate, 768 * kRate, 1024 * kRate};
  ASSERT_TRUE(SizePieces(s.base, s.split, Mask{}, {0, 0, 1, 2}, compute));
  EXPECT_EQ(s.pieces(), (std::vector<int64_t>{448, 448, 704, 448}));
  // The second block's pieces mirror the first's: sub-item x takes its
  // piece 3 - x, of the same size.
  EXPECT_EQ(s.second(), (std::vector<int64_t>{448, 704, 448, 448}));
}

// Bounds: a piece keeps at least 256 tokens and, in a pair, at most half a
// block (its filler cannot go below zero). Worker 1 is far heavier, so its
// piece shrinks to 256 and the other three share the rest evenly (597.33
// -> 9.33 granules each: floors 9, 9, 9 + 4 = 31, one more to the first).
// A worker far lighter takes half a block; the others share the rest
// (341.33 -> 5.33 granules: 5, 5, 5 + 16 = 31, one more to the first).
TEST(PieceSizingTest, RespectsThePieceBounds) {
  PairSplit s;
  const std::vector<double> compute = {512 * kRate, 100000 * kRate, 512 * kRate, 512 * kRate};
  ASSERT_TRUE(SizePieces(s.base, s.split, Mask{}, {0, 1, 2, 3}, compute));
  EXPECT_EQ(s.pieces(), (std::vector<int64_t>{640, 256, 576, 576}));

  PairSplit t;
  const std::vector<double> light_one = {1e6 * kRate, 1e6 * kRate, 1e6 * kRate, 0};
  ASSERT_TRUE(SizePieces(t.base, t.split, Mask{}, {0, 1, 2, 3}, light_one));
  EXPECT_EQ(t.pieces(), (std::vector<int64_t>{384, 320, 320, kBlock / 2}));
}

// Nothing to level: all sub-items on one worker, already level workers, or
// pieces whose work is not linear in their size (a causal single block).
TEST(PieceSizingTest, LeavesPiecesWhenNothingMoves) {
  PairSplit one_worker;
  EXPECT_FALSE(SizePieces(one_worker.base, one_worker.split, Mask{}, {3, 3, 3, 3}, {0, 0, 0, 0}));
  EXPECT_EQ(one_worker.pieces(), (std::vector<int64_t>{512, 512, 512, 512}));

  PairSplit level;
  EXPECT_FALSE(SizePieces(level.base, level.split, Mask{}, {0, 1, 2, 3},
                          std::vector<double>(4, 512 * kRate)));

  PairSplit single;
  single.base.items[0].blocks.resize(1);
  single.base.items[0].slots = 1;
  single.split.splits[0].fillers = {1, 2, 1};
  single.split.splits[0].second_tokens.clear();
  EXPECT_FALSE(SizePieces(single.base, single.split, Mask{}, {0, 1, 2, 3}, {0, 0, 0, 1e9}));
}

}  // namespace
}  // namespace fcp::detail
