// CPU attention kernel against the naive float64 reference: packed batches of
// random lengths (1, tile multiples, odd sizes), every mask, GQA, forward and
// backward, with key ranges cut into chunks so the LSE merge is exercised.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "fcp/attention_kernel.h"
#include "fcp/error.h"
#include "fcp/reference_attention.h"

namespace fcp {
namespace {

std::vector<float> RandomVector(size_t n, std::mt19937_64& rng, float amplitude) {
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

// Cuts [0, len) into chunks of random sizes in [1, max_chunk].
std::vector<TokenRange> Chunks(int64_t len, int64_t max_chunk, std::mt19937_64& rng) {
  std::vector<TokenRange> out;
  for (int64_t b = 0; b < len;) {
    const int64_t size = std::min<int64_t>(len - b, 1 + static_cast<int64_t>(rng() % max_chunk));
    out.push_back({b, b + size});
    b += size;
  }
  return out;
}

// Relative Frobenius error, or the largest absolute error when the reference
// is exactly zero (window 1: every query sees only itself and dK = 0).
void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const char* what) {
  double norm = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    norm += want[i] * want[i];
    max_abs = std::max(max_abs, std::fabs(got[i] - want[i]));
  }
  if (norm == 0)
    EXPECT_LT(max_abs, tol) << what;
  else
    EXPECT_LT(RelativeError(got.data(), want.data(), static_cast<int64_t>(got.size())), tol)
        << what;
}

// Pairs of chunks of each packed sequence (including ones the mask empties), shuffled.
std::vector<SegmentPair> ChunkPairs(const std::vector<int64_t>& lengths, std::mt19937_64& rng) {
  std::vector<SegmentPair> pairs;
  int64_t base = 0;
  for (int64_t len : lengths) {
    const auto q_chunks = Chunks(len, 23, rng);
    const auto k_chunks = Chunks(len, 29, rng);
    for (TokenRange qc : q_chunks)
      for (TokenRange kc : k_chunks)
        pairs.push_back(
            {base + qc.begin, base + kc.begin, qc.begin, kc.begin, qc.size(), kc.size()});
    base += len;
  }
  std::shuffle(pairs.begin(), pairs.end(), rng);
  return pairs;
}

struct Case {
  std::string name;
  Mask mask;
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;
};

class KernelVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(KernelVsReference, ForwardAndBackwardMatchFloat64) {
  const Case& c = GetParam();
  std::mt19937_64 rng(1234);
  CpuKernelOptions options;
  options.q_tile_rows = 8;
  options.kv_tile_rows = 16;
  auto kernel = MakeCpuAttentionKernel(options);
  // Lengths: 1, exact tile multiples, and odd sizes around them.
  const std::vector<int64_t> lengths = {1, 16, 37, 64, 2, 48, 17, 1};
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  AttentionDims dims{c.heads_q, c.heads_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
  const auto q = RandomVector(total * dims.q_row_floats(), rng, 2.0f);
  const auto k = RandomVector(total * dims.kv_row_floats(), rng, 2.0f);
  const auto v = RandomVector(total * dims.kv_row_floats(), rng, 1.0f);
  const auto d_o = RandomVector(total * dims.q_row_floats(), rng, 1.0f);

  const std::vector<SegmentPair> pairs = ChunkPairs(lengths, rng);

  std::vector<float> o(q.size()), lse(total * dims.heads_q);
  InitForwardOutput(dims, total, o.data(), lse.data());
  // Two calls: the merge must not depend on how pairs are grouped into calls.
  const size_t half = pairs.size() / 2;
  kernel->Forward(dims, c.mask, std::span(pairs).first(half),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  kernel->Forward(dims, c.mask, std::span(pairs).subspan(half),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});

  const auto ref =
      ReferenceAttention(lengths, c.mask, dims, q.data(), k.data(), v.data(), d_o.data());
  ExpectClose(o, ref.o, 1e-5, "o");
  ExpectClose(lse, ref.lse, 1e-6, "lse");

  std::vector<float> delta(lse.size()), dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  ComputeDelta(dims, total, o.data(), d_o.data(), delta.data());
  kernel->Backward(dims, c.mask, pairs,
                   {q.data(), k.data(), v.data(), d_o.data(), lse.data(), delta.data(), dq.data(),
                    dk.data(), dv.data()});
  ExpectClose(dq, ref.dq, 1e-5, "dq");
  ExpectClose(dk, ref.dk, 1e-5, "dk");
  ExpectClose(dv, ref.dv, 1e-5, "dv");
}

const auto kCases = ::testing::Values(Case{"causal_mha", {MaskKind::kCausal, 0}, 2, 2, 8},
                                      Case{"causal_gqa", {MaskKind::kCausal, 0}, 4, 2, 16},
                                      Case{"full_gqa", {MaskKind::kFull, 0}, 6, 2, 8},
                                      Case{"full_mqa", {MaskKind::kFull, 0}, 3, 1, 4},
                                      Case{"window1", {MaskKind::kSlidingWindow, 1}, 2, 1, 8},
                                      Case{"window7_gqa", {MaskKind::kSlidingWindow, 7}, 4, 2, 8},
                                      Case{"window40", {MaskKind::kSlidingWindow, 40}, 2, 2, 16});
const auto kCaseName = [](const auto& info) { return info.param.name; };
INSTANTIATE_TEST_SUITE_P(Masks, KernelVsReference, kCases, kCaseName);

std::vector<BFloat16> RoundAll(const std::vector<float>& x) {
  std::vector<BFloat16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = ToBFloat16(x[i]);
  return out;
}
std::vector<float> WidenAll(const std::vector<BFloat16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = ToFloat(x[i]);
  return out;
}

// The bfloat16 kernel against the float32 kernel on the same inputs rounded
// to bfloat16. Widening is exact and the bfloat16 kernel then runs the
// float32 kernel's operations in the same order on the same values (only the
// tiles' strides differ, and sgemm's result does not depend on the stride),
// so the outputs must be equal bit for bit: the tolerance is 0. The inputs
// are random floats, so rounding them to bfloat16 (8 bits of mantissa) changes them.
class Bf16VsFloat32 : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16VsFloat32, SameBitsAsFloat32OnRoundedInputs) {
  const Case& c = GetParam();
  std::mt19937_64 rng(99);
  const CpuKernelOptions options{8, 16, {}};
  auto kernel = MakeCpuAttentionKernel(options);
  const std::vector<int64_t> lengths = {1, 16, 37, 64, 2, 48, 17, 1};
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  const AttentionDims dims{c.heads_q, c.heads_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
  const auto q = RoundAll(RandomVector(total * dims.q_row_floats(), rng, 2.0f));
  const auto k = RoundAll(RandomVector(total * dims.kv_row_floats(), rng, 2.0f));
  const auto v = RoundAll(RandomVector(total * dims.kv_row_floats(), rng, 1.0f));
  const auto d_o = RoundAll(RandomVector(total * dims.q_row_floats(), rng, 1.0f));
  const auto q32 = WidenAll(q), k32 = WidenAll(k), v32 = WidenAll(v), d_o32 = WidenAll(d_o);
  const std::vector<SegmentPair> pairs = ChunkPairs(lengths, rng);

  struct Result {
    std::vector<float> o, lse, dq, dk, dv;
  };
  auto run = [&](const auto& qi, const auto& ki, const auto& vi, const auto& doi) {
    Result r{std::vector<float>(q.size()), std::vector<float>(total * dims.heads_q),
             std::vector<float>(q.size()), std::vector<float>(k.size()),
             std::vector<float>(v.size())};
    InitForwardOutput(dims, total, r.o.data(), r.lse.data());
    const size_t half = pairs.size() / 2;
    using Elem = std::remove_cvref_t<decltype(qi[0])>;
    const ForwardBuffersOf<Elem> fwd{qi.data(), ki.data(), vi.data(), r.o.data(), r.lse.data()};
    kernel->Forward(dims, c.mask, std::span(pairs).first(half), fwd);
    kernel->Forward(dims, c.mask, std::span(pairs).subspan(half), fwd);
    std::vector<float> delta(r.lse.size());
    ComputeDelta(dims, total, r.o.data(), d_o32.data(), delta.data());
    kernel->Backward(
        dims, c.mask, pairs,
        BackwardBuffersOf<Elem>{qi.data(), ki.data(), vi.data(), doi.data(), r.lse.data(),
                                delta.data(), r.dq.data(), r.dk.data(), r.dv.data()});
    return r;
  };
  const Result want = run(q32, k32, v32, d_o32);
  const Result got = run(q, k, v, d_o);
  // Rounding changed the inputs (else the test would compare float32 with itself).
  const auto sample = RandomVector(8, rng, 2.0f);
  EXPECT_NE(sample, WidenAll(RoundAll(sample)));
  EXPECT_EQ(got.o, want.o);
  EXPECT_EQ(got.lse, want.lse);
  EXPECT_EQ(got.dq, want.dq);
  EXPECT_EQ(got.dk, want.dk);
  EXPECT_EQ(got.dv, want.dv);
  // And the bfloat16 path is close to float64 on its rounded inputs (as float32 is).
  const auto ref =
      ReferenceAttention(lengths, c.mask, dims, q32.data(), k32.data(), v32.data(), d_o32.data());
  ExpectClose(got.o, ref.o, 1e-5, "o");
  ExpectClose(got.dq, ref.dq, 1e-5, "dq");
}

INSTANTIATE_TEST_SUITE_P(Masks, Bf16VsFloat32, kCases, kCaseName);

// Round to nearest, ties to even; infinities kept; NaN stays NaN.
TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(ToBFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(ToFloat(ToBFloat16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa (1).
  EXPECT_EQ(ToBFloat16(1.0f + 0x1p-8f).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(ToBFloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  EXPECT_EQ(ToBFloat16(1.0f + 0x1p-8f + 0x1p-20f).bits, 0x3f81);  // above halfway: up
  EXPECT_EQ(ToBFloat16(-2.5f).bits, 0xc020);
  EXPECT_EQ(ToBFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(ToBFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds up to infinity
  EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(ToFloat(BFloat16{0x7f81})));
  EXPECT_TRUE(
      std::isnan(ToFloat(ToBFloat16(std::bit_cast<float>(0x7f800001u)))));  // would round to inf
}

// A kernel that implements only float32 refuses bfloat16 with an error, not a crash.
TEST(AttentionKernel, Float32OnlyKernelRefusesBfloat16) {
  struct Float32Only final : AttentionKernel {
    using AttentionKernel::Backward;
    using AttentionKernel::Forward;
    void Forward(const AttentionDims&, const Mask&, std::span<const SegmentPair>,
                 const ForwardBuffers&) override {}
    void Backward(const AttentionDims&, const Mask&, std::span<const SegmentPair>,
                  const BackwardBuffers&) override {}
  } kernel;
  const AttentionDims dims{1, 1, 1, 1.0f};
  EXPECT_THROW(kernel.Forward(dims, {MaskKind::kCausal, 0}, {}, ForwardBuffersOf<BFloat16>{}),
               Error);
  EXPECT_THROW(kernel.Backward(dims, {MaskKind::kCausal, 0}, {}, BackwardBuffersOf<BFloat16>{}),
               Error);
}

// One token: the output is its value row and lse the scaled score.
TEST(CpuAttentionKernel, SingleTokenIsItsValue) {
  auto kernel = MakeCpuAttentionKernel();
  AttentionDims dims{1, 1, 2, 0.5f};
  const std::vector<float> q = {1, 2}, k = {3, 4}, v = {5, -6};
  std::vector<float> o(2), lse(1);
  InitForwardOutput(dims, 1, o.data(), lse.data());
  const SegmentPair sp{0, 0, 0, 0, 1, 1};
  kernel->Forward(dims, {MaskKind::kCausal, 0}, std::span(&sp, 1),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  EXPECT_FLOAT_EQ(o[0], 5.0f);
  EXPECT_FLOAT_EQ(o[1], -6.0f);
  EXPECT_FLOAT_EQ(lse[0], 0.5f * 11.0f);
}

// Two tokens, full mask, scores 0 and log 3: weights 1/4 and 3/4.
TEST(CpuAttentionKernel, TwoKeysHandComputed) {
  auto kernel = MakeCpuAttentionKernel();
  AttentionDims dims{1, 1, 1, 1.0f};
  const std::vector<float> q = {1}, k = {0, std::log(3.0f)}, v = {4, 8};
  std::vector<float> o(1), lse(1);
  InitForwardOutput(dims, 1, o.data(), lse.data());
  const SegmentPair sp{0, 0, 1, 0, 1, 2};  // query is token 1: both keys allowed causally
  kernel->Forward(dims, {MaskKind::kCausal, 0}, std::span(&sp, 1),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  EXPECT_NEAR(o[0], 0.25f * 4 + 0.75f * 8, 1e-5);
  EXPECT_NEAR(lse[0], std::log(4.0f), 1e-6);
}

// Scores near 1e4 would overflow a naive exp; the merge stays finite and exact.
TEST(CpuAttentionKernel, LargeScoresStayFinite) {
  auto kernel = MakeCpuAttentionKernel({4, 4, {}});
  AttentionDims dims{1, 1, 1, 1.0f};
  const int64_t n = 37;
  std::vector<float> q(n, 100.0f), k(n), v(n), o(n), lse(n);
  for (int64_t i = 0; i < n; ++i) {
    k[i] = 100.0f + 0.01f * i;
    v[i] = static_cast<float>(i);
  }
  InitForwardOutput(dims, n, o.data(), lse.data());
  const SegmentPair sp{0, 0, 0, 0, n, n};
  kernel->Forward(dims, {MaskKind::kCausal, 0}, std::span(&sp, 1),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  const auto ref =
      ReferenceAttention({n}, {MaskKind::kCausal, 0}, dims, q.data(), k.data(), v.data(), nullptr);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(o[i]) && std::isfinite(lse[i]));
  EXPECT_LT(RelativeError(o.data(), ref.o.data(), n), 1e-5);
  EXPECT_LT(RelativeError(lse.data(), ref.lse.data(), n), 1e-6);
}

// Issue 19: a NaN in one token reaches only the outputs and gradients of the
// tokens that attend it (as in the reference), never others of the same
// tile through a masked entry (0 x NaN). Causal, 9 tokens, 4 x 4 tiles.
TEST(CpuAttentionKernel, NanStaysInTheTokensThatAttendIt) {
  auto kernel = MakeCpuAttentionKernel({4, 4, {}});
  AttentionDims dims{1, 1, 2, 0.5f};
  const int64_t n = 9;
  std::mt19937_64 rng(7);
  auto q = RandomVector(n * 2, rng, 1.0f), k = RandomVector(n * 2, rng, 1.0f);
  auto v = RandomVector(n * 2, rng, 1.0f), d_o = RandomVector(n * 2, rng, 1.0f);
  const float nan = std::nanf("");
  q[6 * 2] = nan;  // query token 6: its o, and dK/dV of keys 0..6 it attends
  v[2 * 2] = nan;  // value token 2: o of queries 2..8
  std::vector<float> o(n * 2), lse(n);
  InitForwardOutput(dims, n, o.data(), lse.data());
  const SegmentPair sp{0, 0, 0, 0, n, n};
  const Mask causal{MaskKind::kCausal, 0};
  kernel->Forward(dims, causal, std::span(&sp, 1),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  for (int64_t t = 0; t < 2; ++t)
    EXPECT_TRUE(std::isfinite(o[t * 2]) && std::isfinite(o[t * 2 + 1])) << t;
  for (int64_t t = 2; t < n; ++t) EXPECT_TRUE(std::isnan(o[t * 2])) << t;

  // Backward with V finite again, so that only the query NaN is in play.
  v[2 * 2] = 0.5f;
  InitForwardOutput(dims, n, o.data(), lse.data());
  kernel->Forward(dims, causal, std::span(&sp, 1),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  std::vector<float> delta(n), dq(n * 2, 0.0f), dk(n * 2, 0.0f), dv(n * 2, 0.0f);
  ComputeDelta(dims, n, o.data(), d_o.data(), delta.data());
  kernel->Backward(dims, causal, std::span(&sp, 1),
                   {q.data(), k.data(), v.data(), d_o.data(), lse.data(), delta.data(), dq.data(),
                    dk.data(), dv.data()});
  for (int64_t t = 7; t < n; ++t)
    for (int64_t d = 0; d < 2; ++d) {
      EXPECT_TRUE(std::isfinite(dk[t * 2 + d]))
          << "dk of key " << t << ", which query 6 does not attend";
      EXPECT_TRUE(std::isfinite(dv[t * 2 + d])) << "dv of key " << t;
    }
  for (int64_t t = 0; t < n; ++t)
    if (t != 6) {
      EXPECT_TRUE(std::isfinite(dq[t * 2]) && std::isfinite(dq[t * 2 + 1])) << "dq of query " << t;
    }

  // A NaN value row under a window of 1: delta of query 2 is NaN, and the
  // masked entry (2, 0) must not reach dK of key 0 (attended by query 0 only).
  const Mask window{MaskKind::kSlidingWindow, 1};
  v[2 * 2] = nan;
  q[6 * 2] = 0.25f;
  InitForwardOutput(dims, n, o.data(), lse.data());
  kernel->Forward(dims, window, std::span(&sp, 1),
                  {q.data(), k.data(), v.data(), o.data(), lse.data()});
  ComputeDelta(dims, n, o.data(), d_o.data(), delta.data());
  std::fill(dq.begin(), dq.end(), 0.0f);
  std::fill(dk.begin(), dk.end(), 0.0f);
  std::fill(dv.begin(), dv.end(), 0.0f);
  kernel->Backward(dims, window, std::span(&sp, 1),
                   {q.data(), k.data(), v.data(), d_o.data(), lse.data(), delta.data(), dq.data(),
                    dk.data(), dv.data()});
  EXPECT_TRUE(std::isfinite(dk[0]) && std::isfinite(dk[1])) << "dk of key 0 under a window of 1";
  EXPECT_TRUE(std::isfinite(dq[0]) && std::isfinite(dq[1])) << "dq of query 0 under a window of 1";
}

// Relative to the reference's norm; absolute (the RMS of got) when the
// reference is all zeros, as the gradients of a query that sees one key
// are, so float noise there is not an infinite error.
TEST(RelativeError, RelativeOrAbsoluteAgainstAZeroReference) {
  const std::vector<float> got = {3, 4, 0, 0};
  EXPECT_DOUBLE_EQ(RelativeError(got.data(), std::vector<double>{3, 4, 0, 0}.data(), 4), 0);
  EXPECT_DOUBLE_EQ(RelativeError(got.data(), std::vector<double>{0, 4, 0, 0}.data(), 4), 0.75);
  EXPECT_DOUBLE_EQ(RelativeError(got.data(), std::vector<double>{0, 0, 0, 0}.data(), 4), 2.5);
  EXPECT_DOUBLE_EQ(RelativeError(got.data(), std::vector<double>{}.data(), 0), 0);
}

TEST(MergeForwardPartial, EmptyPartialIsIdentity) {
  AttentionDims dims{1, 1, 2, 1.0f};
  std::vector<float> o = {1, 2}, lse = {3};
  std::vector<float> o2(2), lse2(1);
  InitForwardOutput(dims, 1, o2.data(), lse2.data());
  MergeForwardPartial(dims, 1, o2.data(), lse2.data(), o.data(), lse.data());
  EXPECT_EQ(o, (std::vector<float>{1, 2}));
  EXPECT_EQ(lse[0], 3.0f);
  // Equal lse: the average, and lse + log 2.
  const std::vector<float> o3 = {3, 4}, lse3 = {3};
  MergeForwardPartial(dims, 1, o3.data(), lse3.data(), o.data(), lse.data());
  EXPECT_FLOAT_EQ(o[0], 2.0f);
  EXPECT_FLOAT_EQ(o[1], 3.0f);
  EXPECT_FLOAT_EQ(lse[0], 3.0f + std::log(2.0f));
}

TEST(AttentionDims, RejectsBadGroups) {
  EXPECT_THROW((AttentionDims{6, 4, 8, 1.0f}.validate()), Error);
  EXPECT_THROW((AttentionDims{0, 1, 8, 1.0f}.validate()), Error);
}

}  // namespace
}  // namespace fcp
