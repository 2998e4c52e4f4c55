// Sharding step 4 (src/plan/sharding.h): which heavy items are split, into
// how many pieces, and with which fillers, on a batch with worked answers.
#include "sharding.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

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

// Fillers by group (the shed layout's local fillers). The packed blocks
// are items 0..15, the pairs 16 and 17 (flushed with their sequence's run
// at the end), so light ends with 15. Without groups the pairs, in by_work
// order, take the lightest packed blocks of the batch: {14, 15}, then
// {12, 13}. With pair 16 and packed items 0..7 in group 0, pair 17 and
// items 8..15 in group 1, each takes the last two of its own group: {6, 7}
// and {14, 15}. No group (-1), or a group with no light item, falls back
// to the batch's lightest.
TEST(ShardingTest, FillersComeFromTheSplitItemsGroupFirst) {
  const Batch b;
  const auto fillers = [&](const HeavySplit& split) {
    std::vector<std::vector<size_t>> out;
    for (const SplitItem& s : split.splits) out.push_back(s.fillers);
    return out;
  };
  using Fillers = std::vector<std::vector<size_t>>;
  const HeavySplit plain = SplitHeavy(b.base, b.lengths, Mask{}, 0.6, 8);
  EXPECT_EQ(fillers(plain), (Fillers{{14, 15}, {12, 13}}));

  std::vector<int32_t> groups(18, 1);
  for (size_t i = 0; i < 8; ++i) groups[i] = 0;
  groups[16] = 0;
  const HeavySplit local =
      SplitHeavy(b.base, b.lengths, Mask{}, 0.6, 8, PieceCounts::kPowersOfTwo, &groups);
  EXPECT_EQ(fillers(local), (Fillers{{6, 7}, {14, 15}}));
  ASSERT_EQ(local.splits.size(), plain.splits.size());
  for (size_t k = 0; k < local.splits.size(); ++k) {
    EXPECT_EQ(local.splits[k].item, plain.splits[k].item);
    EXPECT_EQ(local.splits[k].piece_tokens, plain.splits[k].piece_tokens);
  }
  b.ExpectWorkKept(local);

  groups[16] = -1;
  groups[17] = 2;  // no light item in group 2
  const HeavySplit fallback =
      SplitHeavy(b.base, b.lengths, Mask{}, 0.6, 8, PieceCounts::kPowersOfTwo, &groups);
  EXPECT_EQ(fillers(fallback), (Fillers{{14, 15}, {12, 13}}));
}

// On random mixes with random groups: items are split in by_work order
// until one finds too few fillers, with and without groups, so one list of
// split items is a prefix of the other (other fillers taken earlier can
// leave a later item enough, or too few) and an item is cut into the same
// pieces in both; the sub-items keep the work; every filler is light
// enough, used once and not itself split; and a split item takes a filler
// from another group only when no light-enough item of its own group is
// left (own group first).
TEST(ShardingPropertyTest, GroupedFillersAreOwnGroupFirst) {
  std::mt19937_64 rng(20261201);
  int crossed = 0, local_total = 0, differ = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t workers = 4 << (rng() % 4);
    std::lognormal_distribution<double> len(std::log(3000.0), 1.6);
    std::vector<int64_t> lengths;
    int64_t total = 0;
    while (total < static_cast<int64_t>(workers) * 16384) {
      const int64_t l = std::clamp<int64_t>(static_cast<int64_t>(len(rng)), 1, 200000);
      lengths.push_back(l);
      total += l;
    }
    const int64_t cap = (total + workers - 1) / workers;
    const ShardBase base = ShardSteps123(lengths, 1024, cap, workers, Mask{});
    const int32_t group_count = 1 + static_cast<int32_t>(rng() % 4);
    std::vector<int32_t> groups(base.items.size());
    for (int32_t& g : groups) g = static_cast<int32_t>(rng() % (group_count + 1)) - 1;
    const HeavySplit plain = SplitHeavy(base, lengths, Mask{}, 0.1, 4);
    const HeavySplit local =
        SplitHeavy(base, lengths, Mask{}, 0.1, 4, PieceCounts::kPowersOfTwo, &groups);
    SCOPED_TRACE("trial " + std::to_string(trial));
    differ += local.splits.size() != plain.splits.size();
    std::vector<uint8_t> used(base.items.size(), 0);
    for (const SplitItem& s : local.splits) used[s.item] = 1;
    int64_t removed = 0, added = 0;
    for (size_t i = 0; i < base.items.size(); ++i)
      if (local.removed[i]) removed += base.items[i].work;
    for (const ProtoItem& sub : local.added) added += sub.work;
    EXPECT_EQ(added, removed);
    for (size_t k = 0; k < local.splits.size(); ++k) {
      const SplitItem& s = local.splits[k];
      if (k < plain.splits.size()) {
        EXPECT_EQ(s.item, plain.splits[k].item);
        EXPECT_EQ(s.piece_tokens, plain.splits[k].piece_tokens);
        EXPECT_EQ(s.fillers.size(), plain.splits[k].fillers.size());
      }
      const auto p = static_cast<int64_t>(s.piece_tokens.size());
      const int64_t item_work = base.items[s.item].work;
      const auto light_enough = [&](size_t f) { return base.items[f].work * p <= item_work; };
      bool other = false;
      for (size_t f : s.fillers) {
        EXPECT_FALSE(used[f]) << "filler " << f;
        used[f] = 1;
        EXPECT_TRUE(light_enough(f));
        other |= groups[f] != groups[s.item] || groups[f] < 0;
        local_total += groups[f] == groups[s.item] && groups[f] >= 0;
      }
      if (other && groups[s.item] >= 0) {
        ++crossed;
        for (size_t f : base.light) {
          if (groups[f] == groups[s.item] && light_enough(f)) {
            EXPECT_TRUE(used[f]) << f;
          }
        }
      }
    }
  }
  EXPECT_GT(crossed, 0);
  EXPECT_GT(local_total, 0);
  EXPECT_GT(differ, 0);  // the split lists differ on some mixes
}

}  // namespace
}  // namespace fcp::detail
