// The dataloader layout (include/fcp/plan.h): DataloaderBegin,
// DataloaderShareOf, DataloaderWorker and ForEachDataloaderRun against the
// definition, worker r holding global tokens [floor(rT/N), floor((r+1)T/N)),
// token by token, on hand-drawn and random layouts (empty shares included).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "fcp/plan.h"

namespace fcp {
namespace {

// The owner of each token by the definition, one share at a time.
std::vector<int32_t> OwnerOfEachToken(int64_t total, int32_t workers) {
  std::vector<int32_t> owner;
  for (int32_t r = 0; r < workers; ++r) {
    const int64_t begin = static_cast<int64_t>(r) * total / workers;
    const int64_t end = static_cast<int64_t>(r + 1) * total / workers;
    for (int64_t t = begin; t < end; ++t) owner.push_back(r);
  }
  return owner;
}

// 10 tokens on 4 workers: shares [0, 2), [2, 5), [5, 7), [7, 10).
TEST(DataloaderLayoutTest, HandDrawnShares) {
  EXPECT_EQ(DataloaderBegin(10, 4, 0), 0);
  EXPECT_EQ(DataloaderBegin(10, 4, 1), 2);
  EXPECT_EQ(DataloaderBegin(10, 4, 2), 5);
  EXPECT_EQ(DataloaderBegin(10, 4, 3), 7);
  EXPECT_EQ(DataloaderBegin(10, 4, 4), 10);
  EXPECT_EQ(DataloaderWorker(10, 4, 4), 1);
  EXPECT_EQ(DataloaderShareOf(10, 4, 5).worker, 2);
  EXPECT_EQ(DataloaderShareOf(10, 4, 5).next_begin, 7);
  EXPECT_EQ(DataloaderShareOf(10, 4, 9).next_begin, 10);
  // Sequences of 3 and 7 tokens; the second's segment [1, 7) is global
  // [4, 10): runs (1, 1 token), (2, 2), (3, 3).
  const std::vector<int64_t> offsets{0, 3, 10};
  std::vector<std::pair<int32_t, int64_t>> runs;
  ForEachDataloaderRun(Segment{1, 1, 6}, offsets, 4,
                       [&](int32_t w, int64_t n) { runs.emplace_back(w, n); });
  EXPECT_EQ(runs, (std::vector<std::pair<int32_t, int64_t>>{{1, 1}, {2, 2}, {3, 3}}));
  // 2 tokens on 5 workers: shares of 0, 0, 1, 0, 1 tokens (workers 2 and 4).
  runs.clear();
  ForEachDataloaderRun(Segment{0, 0, 2}, {0, 2}, 5,
                       [&](int32_t w, int64_t n) { runs.emplace_back(w, n); });
  EXPECT_EQ(runs, (std::vector<std::pair<int32_t, int64_t>>{{2, 1}, {4, 1}}));
}

TEST(DataloaderLayoutTest, RunsAndWorkersMatchTheDefinitionOnRandomLayouts) {
  std::mt19937 rng(7);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE(trial);
    const int32_t workers = static_cast<int32_t>(pick(1, 40));
    // Fewer tokens than workers (empty shares) in some trials.
    std::vector<int64_t> lengths(static_cast<size_t>(pick(1, 6)));
    for (int64_t& length : lengths) length = pick(1, trial % 3 == 0 ? 4 : 60);
    const std::vector<int64_t> offsets = SequenceOffsets(lengths);
    const int64_t total = offsets.back();
    const std::vector<int32_t> owner = OwnerOfEachToken(total, workers);
    ASSERT_EQ(static_cast<int64_t>(owner.size()), total);
    for (int64_t t = 0; t < total; ++t) {
      const DataloaderShare share = DataloaderShareOf(total, workers, t);
      ASSERT_EQ(share.worker, owner[t]);
      ASSERT_EQ(share.next_begin, DataloaderBegin(total, workers, owner[t] + 1));
      ASSERT_EQ(DataloaderWorker(total, workers, t), owner[t]);
    }
    for (int k = 0; k < 20; ++k) {
      const int32_t seq = static_cast<int32_t>(pick(0, static_cast<int64_t>(lengths.size()) - 1));
      const int64_t start = pick(0, lengths[seq] - 1);
      const Segment s{seq, start, pick(1, lengths[seq] - start)};
      // The expected runs: maximal runs of one owner, token by token.
      std::vector<std::pair<int32_t, int64_t>> expected, runs;
      for (int64_t t = offsets[seq] + start; t < offsets[seq] + start + s.length; ++t) {
        if (expected.empty() || expected.back().first != owner[t])
          expected.emplace_back(owner[t], 0);
        ++expected.back().second;
      }
      ForEachDataloaderRun(s, offsets, workers,
                           [&](int32_t w, int64_t n) { runs.emplace_back(w, n); });
      ASSERT_EQ(runs, expected);
    }
  }
}

// Products past 64 bits take the 128-bit path: T = 2^61 tokens on 8 workers.
TEST(DataloaderLayoutTest, LargeTotalsDoNotOverflow) {
  const int64_t total = int64_t{1} << 61;
  EXPECT_EQ(DataloaderBegin(total, 8, 5), 5 * (total / 8));
  EXPECT_EQ(DataloaderWorker(total, 8, total - 1), 7);
  EXPECT_EQ(DataloaderShareOf(total, 8, total / 2).next_begin, 5 * (total / 8));
}

}  // namespace
}  // namespace fcp
