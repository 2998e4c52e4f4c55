// The planner's one row-index structure (src/plan/buckets.h): RowIndex built
// by counting, Rows, and the stable bucket sorts, on worked cases and on
// random keys against a brute-force grouping.
#include "plan/buckets.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace fcp::detail {
namespace {

TEST(RowIndexTest, CountingGivesPrefixSumsAndRowStarts) {
  RowIndex<int64_t> index;  // rows 0..3 of sizes 2, 0, 3, 1
  index.StartCounting(4);
  for (int r : {2, 0, 2, 3, 0, 2}) index.Count(r);
  index.FinishCounting();
  EXPECT_EQ(index.offset, (std::vector<int64_t>{0, 2, 2, 5, 6}));
  EXPECT_EQ(index.rows(), 4u);
  EXPECT_EQ(index.RowStarts(), (std::vector<int64_t>{0, 2, 2, 5}));
  // Slice lays out any array of the index's size, owned or not.
  std::vector<char> parallel{'a', 'b', 'c', 'd', 'e', 'f'};
  const auto row2 = index.Slice(std::span(parallel), 2);
  EXPECT_EQ(std::vector<char>(row2.begin(), row2.end()), (std::vector<char>{'c', 'd', 'e'}));
  EXPECT_TRUE(index.Slice(std::span(parallel), 1).empty());
  row2[0] = 'x';  // a mutable array gives mutable rows
  EXPECT_EQ(parallel[2], 'x');
}

TEST(RowIndexTest, EmptyIndexHasNoRows) {
  RowIndex<> index;
  EXPECT_EQ(index.rows(), 0u);
  index.StartCounting(0);
  index.FinishCounting();
  EXPECT_EQ(index.rows(), 0u);
  EXPECT_EQ(index.offset, (std::vector<int32_t>{0}));
}

TEST(BucketsTest, BucketByIsStableAndKeepsEmptyRows) {
  const std::vector<int32_t> key{2, 0, 2, 1, 0};
  const Buckets b = BucketBy(4, key.size(), [&](int32_t i) { return key[i]; });
  EXPECT_EQ(b.offset, (std::vector<int32_t>{0, 2, 3, 5, 5}));
  EXPECT_EQ(b.items, (std::vector<int32_t>{1, 4, 3, 0, 2}));
  const std::vector<int32_t> order{4, 3, 2, 1, 0};
  const Buckets reversed =
      BucketBy(4, std::span<const int32_t>(order), [&](int32_t i) { return key[i]; });
  EXPECT_EQ(reversed.items, (std::vector<int32_t>{4, 1, 3, 2, 0}));
  EXPECT_TRUE(reversed.row(3).empty());
}

TEST(BucketsTest, RandomKeysMatchABruteForceGrouping) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t rows = std::uniform_int_distribution<int32_t>(1, 12)(rng);
    const size_t n = std::uniform_int_distribution<size_t>(0, 60)(rng);
    std::vector<int32_t> key(n);
    for (int32_t& k : key) k = std::uniform_int_distribution<int32_t>(0, rows - 1)(rng);
    const Buckets b = BucketBy(rows, n, [&](int32_t i) { return key[i]; });
    ASSERT_EQ(b.rows(), static_cast<size_t>(rows));
    ASSERT_EQ(b.items.size(), n);
    for (int32_t r = 0; r < rows; ++r) {
      std::vector<int32_t> expected;
      for (size_t i = 0; i < n; ++i)
        if (key[i] == r) expected.push_back(static_cast<int32_t>(i));
      const auto row = b.row(r);
      EXPECT_EQ(std::vector<int32_t>(row.begin(), row.end()), expected) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace fcp::detail
