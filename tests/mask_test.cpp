#include "fcp/mask.h"

#include <gtest/gtest.h>

#include "error_message.h"
#include "fcp/error.h"

namespace fcp {
namespace {

// Brute force over tokens: the reference the closed forms are checked against.
int64_t CountPairs(const Mask& mask, TokenRange q, TokenRange k) {
  int64_t n = 0;
  for (int64_t i = q.begin; i < q.end; ++i)
    for (int64_t j = k.begin; j < k.end; ++j) {
      const bool allowed = mask.kind == MaskKind::kFull ||
                           (mask.kind == MaskKind::kCausal && j <= i) ||
                           (mask.kind == MaskKind::kSlidingWindow && j <= i && j > i - mask.window);
      n += allowed;
    }
  return n;
}

TEST(MaskTest, HandCountedCausalPairs) {
  const Mask causal{MaskKind::kCausal, 0};
  // A 4x4 diagonal block of a causal mask: 1 + 2 + 3 + 4 = 10 pairs.
  EXPECT_EQ(AllowedPairs(causal, {0, 4}, {0, 4}), 10);
  // Queries [4, 8) against keys [0, 4): all 16.
  EXPECT_EQ(AllowedPairs(causal, {4, 8}, {0, 4}), 16);
  // Queries before keys: none.
  EXPECT_EQ(AllowedPairs(causal, {0, 4}, {4, 8}), 0);
}

TEST(MaskTest, HandCountedWindowPairs) {
  const Mask window{MaskKind::kSlidingWindow, 2};
  // Each query sees itself and one predecessor: q=0 -> 1, q=1..3 -> 2 each.
  EXPECT_EQ(AllowedPairs(window, {0, 4}, {0, 4}), 7);
  EXPECT_EQ(AllowedPairs(window, {4, 8}, {0, 4}), 1);  // only (4, 3)
}

TEST(MaskTest, ClosedFormsMatchBruteForce) {
  const Mask masks[] = {{MaskKind::kCausal, 0},
                        {MaskKind::kFull, 0},
                        {MaskKind::kSlidingWindow, 1},
                        {MaskKind::kSlidingWindow, 3},
                        {MaskKind::kSlidingWindow, 17}};
  for (const Mask& mask : masks)
    for (int64_t qb = 0; qb < 24; qb += 3)
      for (int64_t qe = qb; qe < 26; qe += 5)
        for (int64_t kb = 0; kb < 24; kb += 2)
          for (int64_t ke = kb; ke < 26; ke += 7) {
            const TokenRange q{qb, qe}, k{kb, ke};
            ASSERT_EQ(AllowedPairs(mask, q, k), CountPairs(mask, q, k))
                << MaskKindName(mask.kind) << " w=" << mask.window << " q=[" << qb << "," << qe
                << ") k=[" << kb << "," << ke << ")";
          }
}

TEST(MaskTest, AttendedKeysHoldEveryAttendedKey) {
  const Mask masks[] = {
      {MaskKind::kCausal, 0}, {MaskKind::kFull, 0}, {MaskKind::kSlidingWindow, 5}};
  const int64_t length = 30;
  for (const Mask& mask : masks)
    for (int64_t qb = 0; qb < length; qb += 4)
      for (int64_t qe = qb + 1; qe <= length; qe += 6) {
        const TokenRange keys = AttendedKeys(mask, {qb, qe}, length);
        EXPECT_EQ(AllowedPairs(mask, {qb, qe}, keys), AllowedPairs(mask, {qb, qe}, {0, length}));
        if (keys.begin > 0) {
          EXPECT_EQ(AllowedPairs(mask, {qb, qe}, {keys.begin - 1, keys.begin}), 0);
        }
        if (keys.end < length) {
          EXPECT_EQ(AllowedPairs(mask, {qb, qe}, {keys.end, keys.end + 1}), 0);
        }
      }
}

TEST(MaskTest, LargeCountsDoNotOverflow) {
  const int64_t len = 1 << 21;  // 2M tokens: 2^41 pairs
  EXPECT_EQ(AllowedPairs({MaskKind::kCausal, 0}, {0, len}, {0, len}), len * (len + 1) / 2);
}

TEST(MaskTest, RejectsBadWindows) {
  EXPECT_THROW((Mask{MaskKind::kSlidingWindow, 0}).validate(), Error);
  EXPECT_THROW((Mask{MaskKind::kCausal, 8}).validate(), Error);
  for (MaskKind kind : {MaskKind::kCausal, MaskKind::kFull, MaskKind::kSlidingWindow})
    EXPECT_EQ(ParseMaskKind(MaskKindName(kind)), kind);
  EXPECT_EQ(
      testing::ExpectedErrorMessage(ErrorCode::kInvalidArgument, [] { ParseMaskKind("diagonal"); }),
      "mask: unknown kind 'diagonal' (expected causal, full or sliding_window)");
  EXPECT_NO_THROW((Mask{MaskKind::kSlidingWindow, 1}).validate());
}

}  // namespace
}  // namespace fcp
