// Short-sequence rehoming (src/plan/short_rehoming.h): hand-worked re-deals
// and a property test over random batches and layouts.
#include "short_rehoming.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_message.h"
#include "fcp/error.h"

namespace fcp::detail {
namespace {

using ::testing::HasSubstr;

Mask Causal() { return Mask{}; }

// Per worker: tokens held and allowed token pairs of its queries.
struct Held {
  std::vector<int64_t> tokens;
  std::vector<int64_t> compute;
};
Held HeldBy(const std::vector<Block>& blocks, const std::vector<int64_t>& lengths, int32_t n,
            const Mask& mask) {
  Held h{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
  for (const Block& b : blocks)
    for (const Segment& s : b.segments) {
      h.tokens[b.worker] += s.length;
      h.compute[b.worker] += AllowedPairs(mask, {s.start, s.start + s.length}, {0, lengths[s.seq]});
    }
  return h;
}

// Two workers, blocks of 4 tokens, shares [0, 6) and [6, 12):
//   s0 = [0, 4) and s1 = [4, 6) at worker 0, s2 = [6, 8) and s3 = [8, 12) at 1,
// dealt the other way round (each worker 6 tokens, 13 causal pairs). Every
// sequence fits its home whole within the home's own compute (10 + 3), so
// each goes back: worker 0's blocks s0 (a full block), then s1.
TEST(ShortRehomingTest, SequencesDealtAwayGoBackHome) {
  const std::vector<int64_t> lengths = {4, 2, 2, 4};
  const std::vector<Block> away = {
      {1, {{0, 0, 4}}}, {1, {{1, 0, 2}}}, {0, {{2, 0, 2}}}, {0, {{3, 0, 4}}}};
  const std::vector<Block> out = *RehomeShortSequences(lengths, Causal(), away, 2, 4, 8);
  const std::vector<Block> expected = {
      {0, {{0, 0, 4}}}, {0, {{1, 0, 2}}}, {1, {{2, 0, 2}}}, {1, {{3, 0, 4}}}};
  EXPECT_EQ(out, expected);
}

// Two workers, each its own node, blocks of 4 tokens, shares [0, 6) and
// [6, 12): s0 = [0, 4) at 0; s1 = [4, 8) half at 0, half at 1 (its home is
// the first: ties go to the first run); s2..s5, one token each, at 1.
// Dealt as worker 0: s0, s2, s3; worker 1: s1, s4, s5 (12 pairs each).
// Step 1: s0 home (10 pairs), s1 no longer fits worker 0's 2 tokens of room,
// s2..s5 home to worker 1 (4 pairs, room 2 left). Step 2: s1 fits no room
// whole, so it is cut in token order across the most room, ties to the
// lowest id: [0, 2) on worker 0 (rows 0, 1: 3 pairs), [2, 4) on worker 1
// (rows 2, 3: 7 pairs). Worker 0 then computes 13, above the 12 the input's
// busiest did, and the repair finds no pair of worker 1's sequences as long
// as s0 (one token each): the result shows it, and the planner, which
// keeps a re-deal only when no maximum rises, keeps its input there.
TEST(ShortRehomingTest, ASequenceWithoutRoomIsCutAcrossTheMostRoom) {
  const std::vector<int64_t> lengths = {4, 4, 1, 1, 1, 1};
  const std::vector<Block> dealt = {
      {0, {{0, 0, 4}}}, {0, {{2, 0, 1}, {3, 0, 1}}}, {1, {{1, 0, 4}}}, {1, {{4, 0, 1}, {5, 0, 1}}}};
  const std::vector<Block> out = *RehomeShortSequences(lengths, Causal(), dealt, 2, 4, 1);
  const std::vector<Block> expected = {{0, {{0, 0, 4}}},
                                       {1, {{2, 0, 1}, {3, 0, 1}, {4, 0, 1}, {5, 0, 1}}},
                                       {0, {{1, 0, 2}}},
                                       {1, {{1, 2, 2}}}};
  EXPECT_EQ(out, expected);
  const Held held = HeldBy(out, lengths, 2, Causal());
  EXPECT_EQ(held.tokens, (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(held.compute, (std::vector<int64_t>{13, 11}));
}

// The home's own compute bounds what it takes back. Shares [0, 5) and
// [5, 10), each worker its own node, blocks of 4: s0 = [0, 1) and
// s1 = [1, 4) at worker 0; s2 = [4, 8), three of its tokens at worker 1
// (its home); s3 = [8, 10) at 1. Dealt as worker 0: s0, s2 (1 + 10 = 11
// pairs); worker 1: s1, s3 (6 + 3 = 9). Step 1: s0, s1 home (7 pairs);
// s2 would lift worker 1 from nothing to 10 pairs, above the 9 it had, so
// it waits; s3 home. Step 2: s2 fits no room whole (1 and 3 tokens left):
// cut in token order across the most room, [0, 3) on worker 1 (6 pairs,
// 9 in all) and [3, 4) on worker 0 (4 pairs, 11): no worker above the 11
// the busiest had, and 2 tokens away from home instead of 9.
TEST(ShortRehomingTest, AHomeTakesBackNoMoreThanItsOwnCompute) {
  const std::vector<int64_t> lengths = {1, 3, 4, 2};
  const std::vector<Block> in = {
      {0, {{0, 0, 1}}}, {1, {{1, 0, 3}}}, {0, {{2, 0, 4}}}, {1, {{3, 0, 2}}}};
  const std::vector<Block> out = *RehomeShortSequences(lengths, Causal(), in, 2, 4, 1);
  const std::vector<Block> expected = {
      {0, {{0, 0, 1}, {1, 0, 3}}}, {1, {{3, 0, 2}}}, {1, {{2, 0, 3}}}, {0, {{2, 3, 1}}}};
  EXPECT_EQ(out, expected);
  EXPECT_EQ(HeldBy(out, lengths, 2, Causal()).compute, (std::vector<int64_t>{11, 9}));
}

// The repair. Shares [0, 8) and [8, 16), each worker its own node, blocks
// of 4: s0..s3 (2, 3, 2, 1 tokens) at worker 0, s4, s5 (4 each) at 1.
// Dealt as worker 0: s1, s3, s5 (6 + 1 + 10 = 17 pairs); worker 1: s0, s2,
// s4 (3 + 3 + 10 = 16). Step 1: s0..s3 home to worker 0 (13 pairs), s4
// home to worker 1 (10); s5 would lift worker 1 to 20, above its 16, so it
// waits. Step 2: only worker 1 has room for it, and not within the 17 the
// busiest had: it goes there anyway (20 pairs). Step 3: worker 1 gives its
// longest sequence with a match, s4 (10 pairs), for worker 0's s1 and s3
// (3 + 1 tokens, 7 pairs): 17 and 16.
TEST(ShortRehomingTest, TheRepairTradesALongSequenceForTwoShorter) {
  const std::vector<int64_t> lengths = {2, 3, 2, 1, 4, 4};
  const std::vector<Block> in = {{1, {{0, 0, 2}}}, {0, {{1, 0, 3}}}, {1, {{2, 0, 2}}},
                                 {0, {{3, 0, 1}}}, {1, {{4, 0, 4}}}, {0, {{5, 0, 4}}}};
  const std::vector<Block> out = *RehomeShortSequences(lengths, Causal(), in, 2, 4, 1);
  const std::vector<Block> expected = {
      {0, {{4, 0, 4}}}, {0, {{0, 0, 2}, {2, 0, 2}}}, {1, {{1, 0, 3}, {3, 0, 1}}}, {1, {{5, 0, 4}}}};
  EXPECT_EQ(out, expected);
  EXPECT_EQ(HeldBy(out, lengths, 2, Causal()).compute, (std::vector<int64_t>{16, 17}));
}

// A sequence longer than a block stays where it was, segment for segment,
// and short ones go home only where there is room. Shares [0, 8) and
// [8, 16), blocks of 4: s0 = [0, 10) is long, its pieces [0, 6) on worker
// 1 (21 pairs) and [6, 10) on worker 0 (34); s1 = [10, 13) and
// s2 = [13, 16), homed at 1, sit on 0 (6 pairs each), so worker 1 has no
// room for them: both stay on worker 0, the only room, within its 46
// pairs. Blocks: the long pieces first, as they were, then worker 0's
// sequences away from home, one block each (3 + 3 > 4).
TEST(ShortRehomingTest, LongSequencesStayPut) {
  const std::vector<int64_t> lengths = {10, 3, 3};
  const std::vector<Block> in = {{1, {{0, 0, 6}}}, {0, {{0, 6, 4}, {1, 0, 3}, {2, 0, 3}}}};
  const std::vector<Block> out = *RehomeShortSequences(lengths, Causal(), in, 2, 4, 8);
  const std::vector<Block> expected = {
      {1, {{0, 0, 6}}}, {0, {{0, 6, 4}}}, {0, {{1, 0, 3}}}, {0, {{2, 0, 3}}}};
  EXPECT_EQ(out, expected);
  EXPECT_EQ(HeldBy(out, lengths, 2, Causal()).compute, (std::vector<int64_t>{46, 21}));
}

// Random batches of short and long sequences on random layouts: every token
// once, every worker's token count kept, long segments unchanged on the
// same workers, blocks of whole sequences within block_size, and the same
// result twice.
TEST(ShortRehomingTest, PropertiesOnRandomLayouts) {
  std::mt19937_64 rng(20261205);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 12);
    const int64_t block_size = 4 + static_cast<int64_t>(rng() % 60);
    const int32_t node = 1 + static_cast<int32_t>(rng() % 4);
    std::vector<int64_t> lengths(1 + rng() % 40);
    for (int64_t& len : lengths)
      len = rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % (4 * block_size))
                           : 1 + static_cast<int64_t>(rng() % block_size);
    const Mask mask = trial % 3 == 0   ? Mask{MaskKind::kFull, 0}
                      : trial % 3 == 1 ? Mask{}
                                       : Mask{MaskKind::kSlidingWindow, 5};
    // A layout: every sequence cut at random points, pieces on random workers.
    std::vector<Block> in;
    for (int32_t s = 0; s < static_cast<int32_t>(lengths.size()); ++s)
      for (int64_t start = 0; start < lengths[s];) {
        const int64_t len = std::min(lengths[s] - start, 1 + static_cast<int64_t>(rng() % 8));
        in.push_back(Block{static_cast<int32_t>(rng() % n), {{s, start, len}}});
        start += len;
      }
    SCOPED_TRACE("trial " + std::to_string(trial));
    const std::optional<std::vector<Block>> dealt =
        RehomeShortSequences(lengths, mask, in, n, block_size, node);
    EXPECT_EQ(dealt, RehomeShortSequences(lengths, mask, in, n, block_size, node));
    const bool any_short =
        std::any_of(lengths.begin(), lengths.end(), [&](int64_t len) { return len <= block_size; });
    ASSERT_EQ(dealt.has_value(), any_short);
    if (!dealt) continue;
    const std::vector<Block>& out = *dealt;
    EXPECT_EQ(HeldBy(out, lengths, n, mask).tokens, HeldBy(in, lengths, n, mask).tokens);
    std::map<std::pair<int32_t, int64_t>, std::pair<int32_t, int64_t>> long_in, long_out;
    std::vector<int64_t> covered(lengths.size(), 0);
    for (const Block& b : in)
      for (const Segment& s : b.segments)
        if (lengths[s.seq] > block_size) long_in[{s.seq, s.start}] = {b.worker, s.length};
    for (const Block& b : out) {
      ASSERT_FALSE(b.segments.empty());
      ASSERT_GE(b.worker, 0);
      ASSERT_LT(b.worker, n);
      for (const Segment& s : b.segments) {
        covered[s.seq] += s.length;
        if (lengths[s.seq] > block_size) {
          long_out[{s.seq, s.start}] = {b.worker, s.length};
        } else {
          EXPECT_LE(b.tokens(), block_size);
          if (b.segments.size() > 1) {
            EXPECT_EQ(s.length, lengths[s.seq]) << "a cut piece shares its block";
          }
        }
      }
    }
    EXPECT_EQ(long_out, long_in);
    EXPECT_EQ(covered, lengths);
  }
}

// A batch with no sequence that fits one block has nothing to deal.
TEST(ShortRehomingTest, NothingToDealWithoutShortSequences) {
  const std::vector<Block> blocks = {{0, {{0, 0, 4}}}, {1, {{0, 4, 4}}}};
  EXPECT_FALSE(RehomeShortSequences({8}, Causal(), blocks, 2, 4, 8).has_value());
  EXPECT_TRUE(RehomeShortSequences({4, 4}, Causal(), {{0, {{0, 0, 4}}}, {1, {{1, 0, 4}}}}, 2, 4, 8)
                  .has_value());
}

TEST(ShortRehomingTest, BadInputIsRefused) {
  const std::vector<int64_t> lengths = {4, 4};
  const std::vector<Block> blocks = {{0, {{0, 0, 4}}}, {1, {{1, 0, 4}}}};
  EXPECT_THAT(testing::ExpectedErrorMessage(
                  ErrorCode::kInvalidArgument,
                  [&] { RehomeShortSequences(lengths, Causal(), blocks, 1, 4, 8); }),
              HasSubstr("block worker 1 outside [0, 1)"));
  EXPECT_THAT(testing::ExpectedErrorMessage(
                  ErrorCode::kInvalidArgument,
                  [&] {
                    RehomeShortSequences(lengths, Causal(), {{0, {{0, 0, 4}}}}, 2, 4, 8);
                  }),
              HasSubstr("hold 0 tokens of sequence 1, which has 4"));
  EXPECT_THAT(
      testing::ExpectedErrorMessage(
          ErrorCode::kInvalidArgument,
          [&] {
            RehomeShortSequences(lengths, Causal(), {{0, {{0, 2, 4}}}, {1, {{1, 0, 4}}}}, 2, 4, 8);
          }),
      HasSubstr("segment [0, 2, 4] is outside its sequence"));
  EXPECT_THAT(
      testing::ExpectedErrorMessage(ErrorCode::kInvalidArgument,
                                    [&] {
                                      RehomeShortSequences({4, 0}, Causal(), blocks, 2, 4, 8);
                                    }),
      HasSubstr("sequence 1 has length 0"));
  EXPECT_THAT(testing::ExpectedErrorMessage(
                  ErrorCode::kInvalidArgument,
                  [&] { RehomeShortSequences(lengths, Causal(), blocks, 2, 0, 8); }),
              HasSubstr("block_size >= 1"));
}

}  // namespace
}  // namespace fcp::detail
