// Workload generators and the lengths-file parser.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/lengths_file.h"
#include "fcp/workload.h"
#include "fuzz/text_readers_check.h"

namespace fcp {
namespace {

using ::testing::HasSubstr;

int64_t Sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

const LengthDistribution kAllDists[] = {LengthDistribution::kLognormal,
                                        LengthDistribution::kUniform, LengthDistribution::kFixed,
                                        LengthDistribution::kBimodal, LengthDistribution::kPareto};

TEST(WorkloadTest, ExactTotalAndLengthBoundsForEveryDistribution) {
  for (LengthDistribution dist : kAllDists)
    for (int32_t workers : {1, 3, 16})
      for (int64_t tokens_per_worker : {1, 1000, 32768})
        for (int64_t max_len : {1, 7, 4096, 524288})
          for (uint64_t seed : {0, 1}) {
            // A max_len far below the lognormal's bulk costs up to 100
            // rejected draws a sample: keep those batches small.
            if (max_len < 4096 && workers * tokens_per_worker > 20000) continue;
            const std::vector<int64_t> lengths =
                GenerateWorkload({.dist = dist,
                                  .workers = workers,
                                  .tokens_per_worker = tokens_per_worker,
                                  .max_len = max_len,
                                  .seed = seed});
            ASSERT_EQ(Sum(lengths), workers * tokens_per_worker)
                << LengthDistributionName(dist) << " N=" << workers << " max " << max_len;
            for (int64_t len : lengths) {
              ASSERT_GE(len, 1);
              ASSERT_LE(len, max_len);
            }
          }
}

TEST(WorkloadTest, FixedGivesMaxLenThenTheRemainder) {
  const WorkloadConfig c{
      .dist = LengthDistribution::kFixed, .workers = 2, .tokens_per_worker = 10, .max_len = 6};
  EXPECT_EQ(GenerateWorkload(c), (std::vector<int64_t>{6, 6, 6, 2}));
}

TEST(WorkloadTest, UniformRespectsMinLenExceptTheLast) {
  const WorkloadConfig c{.dist = LengthDistribution::kUniform,
                         .workers = 8,
                         .tokens_per_worker = 5000,
                         .max_len = 300,
                         .min_len = 100};
  const std::vector<int64_t> lengths = GenerateWorkload(c);
  for (size_t i = 0; i + 1 < lengths.size(); ++i) {
    EXPECT_GE(lengths[i], 100);
    EXPECT_LE(lengths[i], 300);
  }
  // ~200 samples uniform in [100, 300]: the mean is 200 within a few standard
  // errors (sd 58 / sqrt(200) = 4).
  const double mean = static_cast<double>(Sum(lengths)) / static_cast<double>(lengths.size());
  EXPECT_NEAR(mean, 200, 15);
}

TEST(WorkloadTest, DeterministicPerSeedAndSeedsDiffer) {
  for (LengthDistribution dist : {LengthDistribution::kLognormal, LengthDistribution::kUniform,
                                  LengthDistribution::kBimodal, LengthDistribution::kPareto}) {
    WorkloadConfig c;
    c.dist = dist;
    c.workers = 8;
    c.seed = 11;
    const std::vector<int64_t> a = GenerateWorkload(c);
    EXPECT_EQ(GenerateWorkload(c), a) << LengthDistributionName(dist);
    c.seed = 12;
    EXPECT_NE(GenerateWorkload(c), a) << LengthDistributionName(dist);
  }
}

// The paper's batches (Figure 2): about half the tokens sit in sequences
// under 4K, and a 256 x 32K batch reaches sequences beyond 128K. The
// distribution puts ~2% of tokens in sequences > 128K, about one such
// sequence per 8M-token batch, so a single batch misses it now and then (6 of
// the seeds 0..9 reach it); every batch reaches 64K.
TEST(WorkloadTest, LognormalShapeMatchesThePaper) {
  int reach_128k = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const WorkloadConfig c{
        .workers = 256, .tokens_per_worker = 32768, .max_len = 524288, .seed = seed};
    const std::vector<int64_t> lengths = GenerateWorkload(c);
    int64_t short_tokens = 0;
    for (int64_t len : lengths)
      if (len < 4096) short_tokens += len;
    const double short_share =
        static_cast<double>(short_tokens) / static_cast<double>(Sum(lengths));
    EXPECT_GT(short_share, 0.35) << "seed " << seed;
    EXPECT_LT(short_share, 0.65) << "seed " << seed;
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    EXPECT_GT(longest, 65536) << "seed " << seed;
    reach_128k += longest > 131072;
  }
  EXPECT_GE(reach_128k, 5);
}

// A range holding almost none of the lognormal mass must not make the
// generator spin (rejection sampling is bounded).
TEST(WorkloadTest, LognormalWithATinyRangeFinishesQuickly) {
  WorkloadConfig c{.workers = 4, .tokens_per_worker = 4096, .max_len = 1, .min_len = 1};
  const std::vector<int64_t> lengths = GenerateWorkload(c);
  EXPECT_EQ(lengths.size(), 4u * 4096u);
  c.min_len = 400000;
  c.max_len = 400001;
  for (int64_t len : GenerateWorkload(c)) EXPECT_LE(len, 400001);
}

TEST(WorkloadTest, BimodalHasShortDocumentsAndRareLongOnes) {
  const WorkloadConfig c{.dist = LengthDistribution::kBimodal, .workers = 64, .max_len = 262144};
  const std::vector<int64_t> lengths = GenerateWorkload(c);
  int64_t long_count = 0;
  for (size_t i = 0; i + 1 < lengths.size(); ++i) {
    const int64_t len = lengths[i];
    EXPECT_TRUE(len <= 4096 || len >= 131072) << len;
    long_count += len >= 131072;
  }
  EXPECT_GT(long_count, 0);
  EXPECT_LT(long_count * 50, static_cast<int64_t>(lengths.size()));
}

// P(length > x) = (scale / x)^alpha: with alpha = 1.2, (1/4)^1.2 = 18.9% of
// the sequences are at least 4 x scale and (1/64)^1.2 = 0.68% at least 64 x scale; none is
// shorter than the scale (but the last, which fills the batch).
TEST(WorkloadTest, ParetoHasAPowerLawTail) {
  const WorkloadConfig c{.dist = LengthDistribution::kPareto, .workers = 256, .seed = 3};
  const std::vector<int64_t> lengths = GenerateWorkload(c);
  ASSERT_GT(lengths.size(), 10000u);
  int64_t over_4x = 0, over_64x = 0;
  for (size_t i = 0; i + 1 < lengths.size(); ++i) {
    EXPECT_GE(lengths[i], c.pareto_scale);
    over_4x += lengths[i] >= 4 * c.pareto_scale;
    over_64x += lengths[i] >= 64 * c.pareto_scale;
  }
  const double samples = static_cast<double>(lengths.size() - 1);
  EXPECT_NEAR(static_cast<double>(over_4x) / samples, std::pow(0.25, 1.2), 0.01);
  EXPECT_NEAR(static_cast<double>(over_64x) / samples, std::pow(1.0 / 64, 1.2), 0.002);
}

std::string ConfigError(const WorkloadConfig& c) {
  return testing::ExpectedErrorMessage(ErrorCode::kInvalidArgument, [&] { GenerateWorkload(c); });
}

TEST(WorkloadTest, ConfigErrorsNameTheField) {
  EXPECT_THAT(ConfigError({.workers = 0}), HasSubstr("workers must be >= 1, got 0"));
  EXPECT_THAT(ConfigError({.tokens_per_worker = 0}), HasSubstr("tokens_per_worker must be >= 1"));
  EXPECT_THAT(ConfigError({.min_len = 0}), HasSubstr("min_len must be >= 1"));
  EXPECT_THAT(ConfigError({.max_len = 9, .min_len = 10}),
              HasSubstr("max_len (9) must be >= min_len (10)"));
  EXPECT_THAT(ConfigError({.lognormal_sigma = 0}), HasSubstr("sigma must be > 0"));
  EXPECT_THAT(ConfigError({.pareto_alpha = -1}), HasSubstr("pareto alpha must be > 0"));
  EXPECT_THAT(ConfigError({.pareto_scale = 0}), HasSubstr("pareto scale must be >= 1, got 0"));
  EXPECT_THAT(ConfigError({.workers = 1 << 20, .tokens_per_worker = int64_t{1} << 21}),
              HasSubstr("exceeds 2^40 tokens"));
}

TEST(WorkloadTest, DistributionNamesRoundTrip) {
  for (LengthDistribution dist : kAllDists)
    EXPECT_EQ(ParseLengthDistribution(LengthDistributionName(dist)), dist);
  EXPECT_EQ(
      testing::ExpectedErrorMessage(ErrorCode::kInvalidArgument,
                                    [] { ParseLengthDistribution("zipf"); }),
      "workload: unknown distribution 'zipf' (expected lognormal, uniform, fixed, bimodal or pareto)");
}

TEST(WorkloadTest, ParseLengthsReadsNumbersAndComments) {
  EXPECT_EQ(ParseLengths("1000 3096\n# a comment\n\n  7\t8 # trailing\n"),
            (std::vector<int64_t>{1000, 3096, 7, 8}));
  EXPECT_EQ(FormatLengths({5, 12}), "5\n12\n");
  EXPECT_EQ(ParseLengths(FormatLengths({5, 12, 1})), (std::vector<int64_t>{5, 12, 1}));
}

std::string LengthsError(const std::string& text) {
  return testing::ExpectedErrorMessage(ErrorCode::kParse, [&] { ParseLengths(text); });
}

TEST(WorkloadTest, ParseLengthsErrorsNameTheLine) {
  EXPECT_THAT(LengthsError("10\n20\nabc\n"), HasSubstr("line 3: 'abc' is not a positive integer"));
  EXPECT_THAT(LengthsError("10 0\n"), HasSubstr("line 1: '0' is not a positive integer"));
  EXPECT_THAT(LengthsError("# x\n-5\n"), HasSubstr("line 2: '-5'"));
  EXPECT_THAT(LengthsError("1.5\n"), HasSubstr("line 1: '1.5'"));
  EXPECT_THAT(LengthsError("12abc\n"), HasSubstr("line 1: '12abc'"));
  EXPECT_THAT(LengthsError("99999999999999999999\n"), HasSubstr("line 1"));
  EXPECT_THAT(LengthsError(""), HasSubstr("no sequence lengths found"));
  EXPECT_THAT(LengthsError("# only a comment\n\n"), HasSubstr("no sequence lengths found"));
}

// Issue 19: a BOM is skipped, a long word is quoted by a short prefix, and
// the seeds of the lengths fuzzer pass its check.
TEST(WorkloadTest, CarelessLengthsText) {
  EXPECT_EQ(ParseLengths("\xEF\xBB\xBF"
                         "100\n7\n"),
            (std::vector<int64_t>{100, 7}));
  const std::string message = LengthsError("1\n" + std::string(1'000'000, 'z') + "\n");
  EXPECT_THAT(message, HasSubstr("line 2: 'zzzz"));
  EXPECT_THAT(message, HasSubstr("(1000000 bytes)"));
  EXPECT_LT(message.size(), 200u);
  EXPECT_THAT(LengthsError(std::string("5 \x01\n")), HasSubstr("'?'"));
  fuzz::ForEachSavedInput(std::filesystem::path(FCP_TESTS_DIR) / "fuzz/lengths",
                          [](const std::filesystem::path& path, const std::string& text) {
                            EXPECT_TRUE(fuzz::CheckLengthsText(text)) << path;
                          });
  EXPECT_FALSE(fuzz::CheckLengthsText("12 abc"));
}

TEST(WorkloadTest, OversizeBatchesAreRefusedFromTheirSizes) {
  WorkloadConfig c;
  c.workers = 1 << 20;
  c.tokens_per_worker = 1 << 20;
  c.min_len = c.max_len = 1;
  EXPECT_THROW(c.validate(), Error);
}

TEST(WorkloadTest, ReadLengthsFileReportsPathAndIoErrors) {
  try {
    ReadLengthsFile(std::filesystem::temp_directory_path().string());
    ADD_FAILURE() << "read a directory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("is a directory"));
  }
  try {
    ReadLengthsFile("/nonexistent/lengths.txt");
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/lengths.txt"));
  }
}

}  // namespace
}  // namespace fcp
