#include "fcp/reshuffle_floor.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "fcp/error.h"
#include "fcp/plan.h"

namespace fcp {
namespace {

ReshuffleFloorConfig Config(int32_t workers, int64_t token_cap = 0,
                            MaskKind kind = MaskKind::kCausal, int64_t window = 0) {
  ReshuffleFloorConfig c;
  c.workers = workers;
  c.token_cap = token_cap;
  c.mask = {kind, window};
  return c;
}

// A floor's fields in one order, to state a whole hand-worked floor: tokens,
// shed, pooled shed, spare, replacement tokens, overloaded workers, target
// and excess token pairs.
using FloorFields =
    std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, double, double>;
FloorFields Fields(const ReshuffleFloor& f) {
  return {f.tokens,
          f.shed_tokens,
          f.pooled_shed_tokens,
          f.spare_tokens,
          f.replacement_tokens,
          f.overloaded_workers,
          f.target_token_pairs,
          f.excess_token_pairs};
}

// One causal sequence of 8 tokens on 2 workers: w0's rows carry 1+2+3+4 = 10
// pairs, w1's 5+6+7+8 = 26; the target is 36 / 2 = 18. w1 sheds its densest
// row (8 >= 26 - 18); with the cap at 4, w0 has no room and must send one of
// its own tokens away: floor 2. With cap 5 it has room: floor 1 (and moving
// row 8 to w0 gives 18 and 18: the floor is reached).
TEST(ReshuffleFloorTest, OneSequenceTwoWorkers) {
  EXPECT_EQ(Fields(ComputeReshuffleFloor({8}, Config(2))), FloorFields(2, 1, 1, 0, 1, 1, 18, 8));
  const ReshuffleFloor roomy = ComputeReshuffleFloor({8}, Config(2, 5));
  EXPECT_EQ(roomy.spare_tokens, 1);
  EXPECT_EQ(roomy.tokens, 1);
  // Asking only for work <= 1.5 x the mean (27): nothing must move.
  ReshuffleFloorConfig loose = Config(2);
  loose.max_work_ratio = 1.5;
  EXPECT_EQ(ComputeReshuffleFloor({8}, loose).tokens, 0);
}

// One causal sequence of 16 on 2 workers: w1 = rows 9..16, 100 pairs; w0 = 36;
// target 68, excess 32: 16 + 15 = 31 < 32, so three rows.
TEST(ReshuffleFloorTest, DensestRowsFirst) {
  const ReshuffleFloor f = ComputeReshuffleFloor({16}, Config(2));
  EXPECT_EQ(f.target_token_pairs, 68);
  EXPECT_EQ(f.shed_tokens, 3);
  EXPECT_EQ(f.tokens, 6);
}

// Balanced homes move nothing: two equal sequences on two workers, or any
// batch on one worker.
TEST(ReshuffleFloorTest, BalancedHomesStay) {
  EXPECT_EQ(ComputeReshuffleFloor({4, 4}, Config(2)).tokens, 0);
  EXPECT_EQ(ComputeReshuffleFloor({100, 3, 7}, Config(1)).tokens, 0);
  EXPECT_EQ(ComputeReshuffleFloor({}, Config(4)).tokens, 0);
}

// Causal {5, 0, 3} on 8 workers, one token each (the empty sequence holds
// none): rows of work 1, 2, 3, 4, 5, 1, 2, 3, target 21 / 8 = 2. The four
// rows above 2 must all leave (4); their excess 1 + 2 + 3 + 1 = 7 needs the
// two densest pooled (5 + 4) on the others, who have no room: floor 6, though
// no plan reaches the target at all (a row of 5 is over it anywhere).
TEST(ReshuffleFloorTest, OneTokenPerWorker) {
  EXPECT_EQ(Fields(ComputeReshuffleFloor({5, 0, 3}, Config(8))),
            FloorFields(6, 4, 2, 0, 2, 4, 2, 7));
}

// Full mask, sequences {6, 2} on 2 workers: w0 = 4 rows of 6 = 24, w1 = 2 x 6
// + 2 x 2 = 16, target 20; one row of 6 covers w0's excess of 4, and w1 has no
// room: floor 2. A sliding window of 2 over one sequence of 8: rows 1, 2, 2,
// ... w0 = 7, w1 = 8, target 7; w1 sheds one row of 2 (excess 1).
TEST(ReshuffleFloorTest, FullAndSlidingWindowMasks) {
  const ReshuffleFloor full = ComputeReshuffleFloor({6, 2}, Config(2, 0, MaskKind::kFull));
  EXPECT_EQ(full.target_token_pairs, 20);
  EXPECT_EQ(full.shed_tokens, 1);
  EXPECT_EQ(full.tokens, 2);
  const ReshuffleFloor window =
      ComputeReshuffleFloor({8}, Config(2, 0, MaskKind::kSlidingWindow, 2));
  EXPECT_EQ(window.target_token_pairs, 7);
  EXPECT_EQ(window.excess_token_pairs, 1);
  EXPECT_EQ(window.tokens, 2);
}

// Causal {1, 1, 1, 6} on 3 workers (T = 9, shares of 3): w0 = 1+1+1 = 3,
// w1 = rows 1, 2, 3 = 6, w2 = rows 4, 5, 6 = 15; target 8; only w2 is over
// and sheds 6 + 5 >= 7; no spare room, so two replacements: floor 4.
// Causal {3} on 4 workers (shares 0, 1, 1, 1 tokens: rows 1 | 2 | 3 on w1..w3;
// cap 1): target 6 / 4 = 1, w2 and w3 each must shed their one row (2), but
// the excess 1 + 2 = 3 reaching the others needs only the row of 3, and w0's
// empty share has room for it: no replacement, floor 2.
TEST(ReshuffleFloorTest, PooledCoverCountsReplacements) {
  EXPECT_EQ(Fields(ComputeReshuffleFloor({1, 1, 1, 6}, Config(3))),
            FloorFields(4, 2, 2, 0, 2, 1, 8, 7));
  EXPECT_EQ(Fields(ComputeReshuffleFloor({3}, Config(4))), FloorFields(2, 2, 1, 1, 0, 2, 1, 3));
  // Causal {3, 3, 2} on 2 workers, shares of 4: w0 = 1+2+3 + 1 = 7, w1 = 2+3 +
  // 1+2 = 8; target 7; w1 sheds one row of 3 (excess 1): floor 2.
  EXPECT_EQ(ComputeReshuffleFloor({3, 3, 2}, Config(2)).tokens, 2);
}

// Two full-mask sequences of 2^31 tokens carry 2^63 token pairs, past int64:
// summed in 128 bits, balanced, floor 0. One causal sequence of 2^31 on two
// workers: w1's excess is about 2^59 pairs over rows of at most 2^31, so a
// little over 2^28 rows are shed, and as many replacements.
TEST(ReshuffleFloorTest, WorkPastInt64) {
  const int64_t big = int64_t{1} << 31;
  const ReshuffleFloor full = ComputeReshuffleFloor({big, big}, Config(2, 0, MaskKind::kFull));
  EXPECT_EQ(full.tokens, 0);
  EXPECT_EQ(full.target_token_pairs, 0x1p62);
  const ReshuffleFloor causal = ComputeReshuffleFloor({big}, Config(2));
  EXPECT_EQ(causal.overloaded_workers, 1);
  EXPECT_GT(causal.shed_tokens, big / 8);
  EXPECT_LT(causal.shed_tokens, big / 2);
  EXPECT_EQ(causal.tokens, 2 * causal.shed_tokens);
}

TEST(ReshuffleFloorTest, RejectsBadInput) {
  EXPECT_THROW(ComputeReshuffleFloor({8}, Config(0)), Error);
  EXPECT_THROW(ComputeReshuffleFloor({8}, Config(2, -1)), Error);
  EXPECT_THROW(ComputeReshuffleFloor({8}, Config(2, 3)), Error);  // below ceil(8/2)
  EXPECT_THROW(ComputeReshuffleFloor({-1}, Config(2)), Error);
  EXPECT_THROW(ComputeReshuffleFloor({INT64_MAX, 1}, Config(2)), Error);  // T past int64
  EXPECT_THROW(ComputeReshuffleFloor({8}, Config(2, 0, MaskKind::kSlidingWindow, 0)), Error);
  ReshuffleFloorConfig c = Config(2);
  c.max_work_ratio = 0;
  EXPECT_THROW(ComputeReshuffleFloor({8}, c), Error);
  try {
    ComputeReshuffleFloor({8}, Config(2, 3));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("token_cap 3"), std::string::npos) << e.what();
  }
}

// The fewest tokens moved by any assignment of tokens to workers within the
// cap and the work target, by enumerating all N^T of them; -1 if none fits.
int64_t FewestMoved(const std::vector<int64_t>& sequences, const ReshuffleFloorConfig& c,
                    int64_t target, int64_t cap) {
  std::vector<int64_t> row_work, home;
  const int64_t total = SequenceOffsets(sequences).back();
  for (int64_t length : sequences)
    for (int64_t i = 0; i < length; ++i) {
      row_work.push_back(AllowedPairs(c.mask, {i, i + 1}, {0, length}));
      home.push_back(DataloaderWorker(total, c.workers, static_cast<int64_t>(home.size())));
    }
  const size_t t = row_work.size();
  std::vector<int32_t> owner(t, 0);
  int64_t best = -1;
  for (;;) {
    std::vector<int64_t> tokens(c.workers, 0), work(c.workers, 0);
    int64_t moved = 0;
    for (size_t i = 0; i < t; ++i) {
      ++tokens[owner[i]];
      work[owner[i]] += row_work[i];
      moved += owner[i] != home[i];
    }
    if (*std::max_element(tokens.begin(), tokens.end()) <= cap &&
        *std::max_element(work.begin(), work.end()) <= target && (best < 0 || moved < best))
      best = moved;
    size_t i = 0;
    while (i < t && ++owner[i] == c.workers) owner[i++] = 0;
    if (i == t) return best;
  }
}

// The floor never exceeds what the best balanced plan moves, found by brute
// force on small random batches of every mask, cap and work target.
TEST(ReshuffleFloorTest, NeverAboveTheBestBalancedAssignment) {
  std::mt19937_64 rng(17);
  int checked = 0, reached = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 2 + static_cast<int32_t>(rng() % 2);
    const int64_t t =
        n == 2 ? 4 + static_cast<int64_t>(rng() % 7) : 3 + static_cast<int64_t>(rng() % 5);
    std::vector<int64_t> sequences;
    for (int64_t left = t; left > 0;) {
      sequences.push_back(std::min<int64_t>(left, 1 + static_cast<int64_t>(rng() % 6)));
      left -= sequences.back();
    }
    const MaskKind kind = static_cast<MaskKind>(rng() % 3);
    ReshuffleFloorConfig c = Config(n, 0, kind, kind == MaskKind::kSlidingWindow ? 2 : 0);
    c.token_cap = (t + n - 1) / n + static_cast<int64_t>(rng() % 2);
    c.max_work_ratio = rng() % 2 ? 1.0 : 1.2;
    const ReshuffleFloor f = ComputeReshuffleFloor(sequences, c);
    const int64_t best = FewestMoved(sequences, c, f.target_token_pairs, c.token_cap);
    SCOPED_TRACE("trial " + std::to_string(trial));
    if (best < 0) continue;  // no assignment reaches the target
    EXPECT_LE(f.tokens, best);
    ++checked;
    reached += f.tokens == best;
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(reached, checked / 2);  // the floor is tight on most small batches
}

// The floor by its definition, row by row: each home's row works sorted
// densest first, taken until they cover its excess; the same over all
// overloaded homes' rows pooled.
ReshuffleFloor FloorByRows(const std::vector<int64_t>& sequences, const ReshuffleFloorConfig& c) {
  const int64_t total = SequenceOffsets(sequences).back();
  const int64_t cap = std::max(c.token_cap, (total + c.workers - 1) / c.workers);
  std::vector<std::vector<int64_t>> rows(c.workers);
  int64_t token = 0;
  for (int64_t length : sequences)
    for (int64_t i = 0; i < length; ++i, ++token)
      rows[DataloaderWorker(total, c.workers, token)].push_back(
          AllowedPairs(c.mask, {i, i + 1}, {0, length}));
  int64_t total_work = 0;
  for (const auto& r : rows)
    for (int64_t w : r) total_work += w;
  const int64_t target =
      c.max_work_ratio == 1.0
          ? total_work / c.workers
          : static_cast<int64_t>(std::floor(static_cast<long double>(c.max_work_ratio) *
                                            static_cast<long double>(total_work) / c.workers));
  const auto cover = [](std::vector<int64_t> works, int64_t excess) {
    std::sort(works.rbegin(), works.rend());
    int64_t taken = 0;
    for (; excess > 0; ++taken) excess -= works[static_cast<size_t>(taken)];
    return taken;
  };
  ReshuffleFloor f;
  std::vector<int64_t> pooled;
  int64_t excess = 0;
  for (const auto& r : rows) {
    int64_t work = 0;
    for (int64_t w : r) work += w;
    if (work <= target) {
      f.spare_tokens += cap - static_cast<int64_t>(r.size());
      continue;
    }
    ++f.overloaded_workers;
    excess += work - target;
    f.shed_tokens += cover(r, work - target);
    pooled.insert(pooled.end(), r.begin(), r.end());
  }
  f.pooled_shed_tokens = cover(pooled, excess);
  f.target_token_pairs = static_cast<double>(target);
  f.excess_token_pairs = static_cast<double>(excess);
  f.replacement_tokens = std::max<int64_t>(0, f.pooled_shed_tokens - f.spare_tokens);
  f.tokens = f.shed_tokens + f.replacement_tokens;
  return f;
}

// The floor equals its definition row by row on random batches of every
// mask (windows below, inside and above the sequences), cap and ratio,
// with sequences long enough that runs are cut inside their ramps.
TEST(ReshuffleFloorTest, EqualsTheRowByRowDefinition) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 9);
    std::vector<int64_t> sequences(1 + rng() % 12);
    for (int64_t& length : sequences) length = static_cast<int64_t>(rng() % 90);
    const MaskKind kind = static_cast<MaskKind>(rng() % 3);
    ReshuffleFloorConfig c = Config(
        n, 0, kind, kind == MaskKind::kSlidingWindow ? 1 + static_cast<int64_t>(rng() % 100) : 0);
    const int64_t total = SequenceOffsets(sequences).back();
    c.token_cap = rng() % 2 ? 0 : (total + n - 1) / n + static_cast<int64_t>(rng() % 20);
    c.max_work_ratio = rng() % 3 ? 1.0 : 1.1;
    SCOPED_TRACE("trial " + std::to_string(trial));
    EXPECT_EQ(Fields(ComputeReshuffleFloor(sequences, c)), Fields(FloorByRows(sequences, c)));
  }
}

}  // namespace
}  // namespace fcp
