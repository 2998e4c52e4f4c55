// The CUDA backend's per-thread arithmetic (src/runtime/cuda/attention_math.h)
// run on the host, thread by thread, in the kernels' launch order (forward
// waves, one backward launch), against the float64 reference: every mask,
// GQA, varlen batches cut into chunk pairs so the LSE merge runs, with the
// bf16 tolerances the GPU must meet. Needs no GPU and no nvcc, so CI checks
// the GPU math on every build; the `gpu` tests check the launches on device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../src/runtime/cuda/attention_math.h"
#include "../src/runtime/cuda/footprint.h"
#include "fcp/attention_kernel.h"
#include "fcp/error.h"
#include "fcp/reference_attention.h"

namespace fcp::gpu {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);  // above half: up
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(INFINITY)), INFINITY);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (int t = 0; t < 1000; ++t) {
    const float x = dist(rng);
    EXPECT_LE(std::fabs(Bf16ToFloat(FloatToBf16(x)) - x), std::fabs(x) * (1.0f / 256)) << x;
  }
}

// The allowed key ranges agree with the closed-form pair counts of mask.h.
TEST(AllowedKeys, MatchesAllowedPairsAndAllowedQueriesIsItsTranspose) {
  std::mt19937_64 rng(9);
  for (const Mask& mask : {Mask{MaskKind::kCausal, 0}, Mask{MaskKind::kFull, 0},
                           Mask{MaskKind::kSlidingWindow, 1}, Mask{MaskKind::kSlidingWindow, 7}}) {
    KernelDims d;
    d.mask_kind = mask.kind == MaskKind::kCausal ? kMaskCausal
                  : mask.kind == MaskKind::kFull ? kMaskFull
                                                 : kMaskSlidingWindow;
    d.window = mask.window;
    for (int t = 0; t < 300; ++t) {
      const PairDesc p{0,
                       0,
                       static_cast<int64_t>(rng() % 40),
                       static_cast<int64_t>(rng() % 40),
                       static_cast<int64_t>(rng() % 20),
                       static_cast<int64_t>(rng() % 20)};
      int64_t count = 0;
      for (int64_t i = 0; i < p.q_len; ++i) {
        int64_t lo, hi;
        AllowedKeys(d, p, i, &lo, &hi);
        ASSERT_LE(0, lo);
        ASSERT_LE(lo, hi);
        ASSERT_LE(hi, std::max<int64_t>(p.k_len, lo));
        count += hi - lo;
      }
      EXPECT_EQ(count,
                AllowedPairs(mask, {p.q_pos, p.q_pos + p.q_len}, {p.k_pos, p.k_pos + p.k_len}));
      // AllowedQueries is the exact transpose: j in keys(i) <=> i in queries(j).
      for (int64_t j = 0; j < p.k_len; ++j) {
        int64_t qlo, qhi;
        AllowedQueries(d, p, j, &qlo, &qhi);
        for (int64_t i = 0; i < p.q_len; ++i) {
          int64_t lo, hi;
          AllowedKeys(d, p, i, &lo, &hi);
          ASSERT_EQ(lo <= j && j < hi, qlo <= i && i < qhi) << "i " << i << " j " << j;
        }
      }
    }
  }
}

TEST(ForwardWaves, DisjointQueryRowsWithinAWaveAndOrderKept) {
  // Hand case: pairs 0 and 2 share rows, 1 is disjoint from both.
  const std::vector<PairDesc> hand = {{0, 0, 0, 0, 4, 4}, {4, 0, 0, 0, 2, 4}, {2, 9, 0, 0, 3, 1}};
  const auto w = ForwardWaves(hand);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(w[1], (std::vector<int32_t>{2}));
  std::mt19937_64 rng(2);
  for (int t = 0; t < 50; ++t) {
    std::vector<PairDesc> pairs;
    for (int i = 0; i < 12; ++i)
      pairs.push_back(
          {static_cast<int64_t>(rng() % 30), 0, 0, 0, 1 + static_cast<int64_t>(rng() % 6), 1});
    const auto waves = ForwardWaves(pairs);
    std::vector<int32_t> wave_of(pairs.size(), -1);
    for (size_t x = 0; x < waves.size(); ++x) {
      EXPECT_FALSE(waves[x].empty());
      for (int32_t a : waves[x]) wave_of[static_cast<size_t>(a)] = static_cast<int32_t>(x);
    }
    for (size_t a = 0; a < pairs.size(); ++a)
      for (size_t b = 0; b < a; ++b) {
        const bool overlap = pairs[a].q_row < pairs[b].q_row + pairs[b].q_len &&
                             pairs[b].q_row < pairs[a].q_row + pairs[a].q_len;
        if (overlap) {
          EXPECT_GT(wave_of[a], wave_of[b]);  // a later pair merges later
        }
      }
  }
}

// The forward launches on the host: waves in order, every thread of a pair.
void EmulateForward(const KernelDims& d, const std::vector<PairDesc>& pairs, const uint16_t* q,
                    const uint16_t* k, const uint16_t* v, float* o, float* lse) {
  for (const auto& wave : ForwardWaves(pairs))
    for (int32_t a : wave) {
      const PairDesc& p = pairs[static_cast<size_t>(a)];
      int64_t i;
      int32_t h;
      for (int64_t t = 0; ThreadWork(d, p, t, &i, &h); ++t) ForwardRow(d, p, i, h, q, k, v, o, lse);
    }
}

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = FloatToBf16(x[i]);
  return out;
}

struct Case {
  std::string name;
  Mask mask;
  int32_t heads_q, heads_kv, head_dim;
};

class HostEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(HostEmulation, MatchesFloat64WithinBf16Tolerance) {
  const Case& c = GetParam();
  std::mt19937_64 rng(77);
  const std::vector<int64_t> lengths = {1, 33, 64, 5, 97, 2, 40};
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  const AttentionDims dims{c.heads_q, c.heads_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& e : x) e = normal(rng);
    return x;
  };
  const auto q = random(total * dims.q_row_floats()), k = random(total * dims.kv_row_floats());
  const auto v = random(total * dims.kv_row_floats()), d_o = random(total * dims.q_row_floats());
  const auto qb = ToBf16(q), kb = ToBf16(k), vb = ToBf16(v), dob = ToBf16(d_o);

  // Chunk pairs of each sequence, query chunks and key chunks cut differently.
  std::vector<PairDesc> pairs;
  int64_t row = 0;
  for (int64_t len : lengths) {
    std::vector<std::pair<int64_t, int64_t>> qc, kc;
    for (auto* chunks : {&qc, &kc})
      for (int64_t b = 0; b < len;) {
        const int64_t size = std::min<int64_t>(len - b, 1 + static_cast<int64_t>(rng() % 24));
        chunks->push_back({b, size});
        b += size;
      }
    for (auto [qb0, ql] : qc)
      for (auto [kb0, kl] : kc) pairs.push_back({row + qb0, row + kb0, qb0, kb0, ql, kl});
    row += len;
  }
  std::shuffle(pairs.begin(), pairs.end(), rng);

  KernelDims d{c.heads_q,
               c.heads_kv,
               c.head_dim,
               dims.scale,
               c.mask.kind == MaskKind::kCausal ? kMaskCausal
               : c.mask.kind == MaskKind::kFull ? kMaskFull
                                                : kMaskSlidingWindow,
               c.mask.window};
  std::vector<float> o(q.size()), lse(static_cast<size_t>(total * c.heads_q));
  InitForwardOutput(dims, total, o.data(), lse.data());
  EmulateForward(d, pairs, qb.data(), kb.data(), vb.data(), o.data(), lse.data());
  std::vector<float> delta(lse.size()), dq(q.size()), dk(k.size()), dv(v.size());
  ComputeDelta(dims, total, o.data(), d_o.data(), delta.data());
  for (const PairDesc& p : pairs) {
    int64_t i;
    int32_t h;
    for (int64_t t = 0; ThreadWork(d, p, t, &i, &h); ++t)
      BackwardQueryRow(d, p, i, h, qb.data(), kb.data(), vb.data(), dob.data(), lse.data(),
                       delta.data(), dq.data());
    for (int64_t t = 0; KeyThreadWork(d, p, t, &i, &h); ++t)
      BackwardKeyRow(d, p, i, h, qb.data(), kb.data(), vb.data(), dob.data(), lse.data(),
                     delta.data(), dk.data(), dv.data());
  }

  const auto ref =
      ReferenceAttention(lengths, c.mask, dims, q.data(), k.data(), v.data(), d_o.data());
  auto err = [](const std::vector<float>& got, const std::vector<double>& want) {
    return RelativeError(got.data(), want.data(), static_cast<int64_t>(want.size()));
  };
  std::printf("%s: relative errors o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", c.name.c_str(),
              err(o, ref.o), err(lse, ref.lse), err(dq, ref.dq), err(dk, ref.dk), err(dv, ref.dv));
  EXPECT_LT(err(o, ref.o), 2e-2);
  EXPECT_LT(err(dv, ref.dv), 2e-2);
  if (c.mask.kind == MaskKind::kSlidingWindow && c.mask.window == 1) {
    // Each query sees only itself: lse is one bf16 score (relative error up
    // to 2^-8, no averaging), and dq = dk = 0 exactly, so only the
    // absolute error of the gradients means anything.
    EXPECT_LT(err(lse, ref.lse), 4e-3);
    double max_abs = 0;
    for (size_t x = 0; x < dq.size(); ++x)
      max_abs = std::max(max_abs, std::fabs(dq[x] - ref.dq[x]));
    for (size_t x = 0; x < dk.size(); ++x)
      max_abs = std::max(max_abs, std::fabs(dk[x] - ref.dk[x]));
    EXPECT_LT(max_abs, 2e-2);
  } else {
    EXPECT_LT(err(lse, ref.lse), 1e-3);
    EXPECT_LT(err(dq, ref.dq), 2e-2);
    EXPECT_LT(err(dk, ref.dk), 2e-2);
  }
  // bf16 rounding must actually show: the emulation is not float32 in disguise.
  EXPECT_GT(err(o, ref.o), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(AllMasks, HostEmulation,
                         ::testing::Values(Case{"causal", {MaskKind::kCausal, 0}, 4, 4, 16},
                                           Case{"causal_gqa", {MaskKind::kCausal, 0}, 8, 2, 16},
                                           Case{"full_gqa", {MaskKind::kFull, 0}, 6, 1, 8},
                                           Case{"window", {MaskKind::kSlidingWindow, 13}, 4, 2, 32},
                                           Case{"window1", {MaskKind::kSlidingWindow, 1}, 2, 1, 8}),
                         [](const auto& info) { return info.param.name; });

// Scores near 1e4 do not overflow: the online softmax and the merge never
// exponentiate a positive number.
TEST(HostEmulation, LargeScoresStayFinite) {
  KernelDims d{1, 1, 4, 1.0f, kMaskFull, 0};
  const std::vector<uint16_t> q = ToBf16({100, 0, 0, 0}), k = ToBf16({100, 0, 0, 0, 99, 0, 0, 0});
  const std::vector<uint16_t> v = ToBf16({1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<float> o(4, 0.0f), lse(1, -INFINITY);
  ForwardRow(d, {0, 0, 0, 0, 1, 1}, 0, 0, q.data(), k.data(), v.data(), o.data(), lse.data());
  ForwardRow(d, {0, 1, 0, 1, 1, 1}, 0, 0, q.data(), k.data(), v.data(), o.data(), lse.data());
  // Scores 10000 and 9900: lse = 10000 + log(1 + e^-100) = 10000 in float.
  EXPECT_FLOAT_EQ(lse[0], 10000.0f);
  EXPECT_FLOAT_EQ(o[0], 1.0f);
  EXPECT_FLOAT_EQ(o[3], 4.0f);
}

TEST(Footprint, HandCase) {
  const std::vector<SegmentPair> pairs = {
      {10, 40, 0, 0, 5, 3}, {12, 30, 2, 0, 6, 2}, {0, 0, 0, 0, 0, 9}};
  const Footprint f = FootprintOf(pairs);
  EXPECT_EQ(f.q_begin, 10);
  EXPECT_EQ(f.q_rows, 8);  // rows 10..17
  EXPECT_EQ(f.k_begin, 30);
  EXPECT_EQ(f.k_rows, 13);        // rows 30..42
  ASSERT_EQ(f.pairs.size(), 2u);  // the empty pair is dropped
  EXPECT_EQ(f.pairs[1].q_row, 2);
  EXPECT_EQ(f.pairs[1].k_row, 0);
  EXPECT_EQ(f.pairs[1].q_pos, 2);
  EXPECT_TRUE(FootprintOf(std::vector<SegmentPair>{{3, 3, 0, 0, 0, 4}}).pairs.empty());
  EXPECT_THROW(FootprintOf(std::vector<SegmentPair>{{-1, 0, 0, 0, 1, 1}}), Error);
}

// Staging only the footprint's rows with rebased pairs computes exactly
// what the whole buffers would (what the CUDA kernel relies on).
TEST(Footprint, StagedRowsGiveIdenticalResults) {
  std::mt19937_64 rng(31);
  const KernelDims d{4, 2, 8, 0.35f, kMaskCausal, 0};
  const int64_t rows = 120;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<uint16_t> x(static_cast<size_t>(n));
    for (auto& e : x) e = FloatToBf16(u(rng));
    return x;
  };
  const auto q = random(rows * 4 * 8), k = random(rows * 2 * 8), v = random(rows * 2 * 8);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<SegmentPair> pairs;
    for (int n = 0; n < 5; ++n) {
      const int64_t ql = static_cast<int64_t>(rng() % 20), kl = static_cast<int64_t>(rng() % 20);
      const int64_t qr = 30 + static_cast<int64_t>(rng() % 60),
                    kr = 20 + static_cast<int64_t>(rng() % 80);
      pairs.push_back(
          {qr, kr, static_cast<int64_t>(rng() % 30), static_cast<int64_t>(rng() % 30), ql, kl});
    }
    std::vector<PairDesc> full;
    for (const SegmentPair& s : pairs)
      full.push_back({s.q_row, s.k_row, s.q_pos, s.k_pos, s.q_len, s.k_len});
    std::vector<float> o(q.size(), 0.0f), lse(static_cast<size_t>(rows * 4), -INFINITY);
    EmulateForward(d, full, q.data(), k.data(), v.data(), o.data(), lse.data());

    const Footprint f = FootprintOf(pairs);
    std::vector<float> so(static_cast<size_t>(f.q_rows * 32), 0.0f),
        slse(static_cast<size_t>(f.q_rows * 4), -INFINITY);
    if (f.q_rows > 0)
      EmulateForward(d, f.pairs, q.data() + f.q_begin * 32, k.data() + f.k_begin * 16,
                     v.data() + f.k_begin * 16, so.data(), slse.data());
    std::vector<float> staged_o(q.size(), 0.0f), staged_lse(lse.size(), -INFINITY);
    std::copy(so.begin(), so.end(), staged_o.begin() + f.q_begin * 32);
    std::copy(slse.begin(), slse.end(), staged_lse.begin() + f.q_begin * 4);
    EXPECT_EQ(staged_o, o) << "trial " << trial;
    EXPECT_EQ(staged_lse, lse) << "trial " << trial;
  }
}

}  // namespace
}  // namespace fcp::gpu
