// attention_math.h — the per-thread arithmetic of the CUDA attention backend,
// written once as __host__ __device__ code so that the host test suite runs
// exactly the code the GPU runs (this repository's CI has no GPU).
//
// Work unit: one thread owns one (query row, query head) of one segment pair
// (see fcp/attention_kernel.h for pairs, layout, masks and the LSE rule).
// Inputs q, k, v, d_o are bf16 (raw bits, round-to-nearest-even from float32);
// everything is accumulated in float32. Forward computes the pair's partial
// (o', lse') with an online softmax and merges it into the float32 (o, lse)
// it owns; backward (FlashAttention's rule, P = exp(S - lse)) runs one pass
// per query row for dq and one per key row for dk, dv, each accumulating in
// registers and adding its total once (atomically on the device, plain on
// the host), so pairs sharing rows can share a launch.
// Invariant the launcher keeps: within one launch no two threads own the same
// (query row, head) in the forward (pairs are split into waves whose query
// rows are disjoint, ForwardWaves below); the backward needs no waves.
// Cost per thread: O(allowed keys * head_dim) (the key pass: O(attending
// queries * group * head_dim)); registers hold a few head_dim <= kMaxHeadDim
// float vectors.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__CUDACC__)
#define FCP_HD __host__ __device__ inline
#else
#define FCP_HD inline
#endif

namespace fcp::gpu {

inline constexpr int32_t kMaxHeadDim = 256;
inline constexpr int32_t kMaskCausal = 0, kMaskFull = 1, kMaskSlidingWindow = 2;

// The device's view of AttentionDims + Mask (trivially copyable, by value).
struct KernelDims {
  int32_t heads_q = 1;
  int32_t heads_kv = 1;
  int32_t head_dim = 1;
  float scale = 1.0f;
  int32_t mask_kind = kMaskCausal;
  int64_t window = 0;
};

// SegmentPair (fcp/attention_kernel.h) with rows relative to the buffers the
// kernel was handed.
struct PairDesc {
  int64_t q_row, k_row, q_pos, k_pos, q_len, k_len;
};

FCP_HD uint32_t FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FCP_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// float32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN.
FCP_HD uint16_t FloatToBf16(float x) {
  const uint32_t u = FloatBits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

FCP_HD float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

FCP_HD float NegInf() { return -INFINITY; }

FCP_HD void AtomicAdd(float* target, float value) {
#if defined(__CUDA_ARCH__)
  atomicAdd(target, value);
#else
  *target += value;
#endif
}

// Keys [*lo, *hi) of pair p (indices relative to p.k_row) that query index i
// of the pair attends; every supported mask gives one contiguous range.
FCP_HD void AllowedKeys(const KernelDims& d, const PairDesc& p, int64_t i, int64_t* lo,
                        int64_t* hi) {
  const int64_t qpos = p.q_pos + i;
  int64_t begin = 0, end = p.k_len;
  if (d.mask_kind != kMaskFull) {
    const int64_t last = qpos - p.k_pos + 1;  // keys at positions <= qpos
    if (last < end) end = last;
  }
  if (d.mask_kind == kMaskSlidingWindow) {
    const int64_t first = qpos - d.window + 1 - p.k_pos;  // positions > qpos - W
    if (first > begin) begin = first;
  }
  *lo = begin;
  *hi = end < begin ? begin : end;
}

// Merges the partial (o2, lse2) of one row and head into (o, lse) with the
// LSE rule; never exponentiates a positive number.
FCP_HD void MergeRow(int32_t head_dim, const float* o2, float lse2, float* o, float* lse) {
  if (lse2 == NegInf()) return;
  const float lse1 = *lse;
  if (lse1 == NegInf()) {
    for (int32_t c = 0; c < head_dim; ++c) o[c] = o2[c];
    *lse = lse2;
    return;
  }
  const float hi = lse1 > lse2 ? lse1 : lse2;
  const float merged = hi + log1pf(expf(-fabsf(lse1 - lse2)));
  const float w1 = expf(lse1 - merged), w2 = expf(lse2 - merged);
  for (int32_t c = 0; c < head_dim; ++c) o[c] = o[c] * w1 + o2[c] * w2;
  *lse = merged;
}

// Forward of query index i, head h of pair p: merges into o, lse (float32,
// buffers indexed by the pair's rows).
FCP_HD void ForwardRow(const KernelDims& d, const PairDesc& p, int64_t i, int32_t h,
                       const uint16_t* q, const uint16_t* k, const uint16_t* v, float* o,
                       float* lse) {
  int64_t lo, hi;
  AllowedKeys(d, p, i, &lo, &hi);
  if (lo >= hi) return;
  const int32_t hd = d.head_dim, kvh = h / (d.heads_q / d.heads_kv);
  const int64_t q_off = ((p.q_row + i) * d.heads_q + h) * hd;
  float qf[kMaxHeadDim], acc[kMaxHeadDim];
  for (int32_t c = 0; c < hd; ++c) {
    qf[c] = Bf16ToFloat(q[q_off + c]) * d.scale;
    acc[c] = 0.0f;
  }
  float m = NegInf(), l = 0.0f;
  for (int64_t j = lo; j < hi; ++j) {
    const int64_t kv_off = ((p.k_row + j) * d.heads_kv + kvh) * hd;
    float s = 0.0f;
    for (int32_t c = 0; c < hd; ++c) s += qf[c] * Bf16ToFloat(k[kv_off + c]);
    // Online softmax: rescale what was accumulated when the maximum grows.
    if (s > m) {
      const float r = expf(m - s);  // m = -inf: r = 0
      l *= r;
      for (int32_t c = 0; c < hd; ++c) acc[c] *= r;
      m = s;
    }
    const float e = expf(s - m);
    l += e;
    for (int32_t c = 0; c < hd; ++c) acc[c] += e * Bf16ToFloat(v[kv_off + c]);
  }
  const float inv = 1.0f / l;
  for (int32_t c = 0; c < hd; ++c) acc[c] *= inv;
  MergeRow(hd, acc, m + logf(l), o + q_off, lse + (p.q_row + i) * d.heads_q + h);
}

// Queries [*lo, *hi) of pair p (indices relative to p.q_row) that attend key
// index j of the pair: the transpose of AllowedKeys, also contiguous.
FCP_HD void AllowedQueries(const KernelDims& d, const PairDesc& p, int64_t j, int64_t* lo,
                           int64_t* hi) {
  const int64_t kpos = p.k_pos + j;
  int64_t begin = 0, end = p.q_len;
  if (d.mask_kind != kMaskFull) {
    const int64_t first = kpos - p.q_pos;  // queries at positions >= kpos
    if (first > begin) begin = first;
  }
  if (d.mask_kind == kMaskSlidingWindow) {
    const int64_t last = kpos + d.window - p.q_pos;  // positions < kpos + W
    if (last < end) end = last;
  }
  *lo = begin;
  *hi = end < begin ? begin : end;
}

// The backward is two passes so that no two threads add into the same
// gradient row of one pair (atomics only merge pairs of one launch):
// BackwardQueryRow owns dq of (query i, head h); BackwardKeyRow owns dk, dv
// of (key j, key/value head g) and walks the group's query heads. Both
// recompute P = exp(scale q.k - lse) and dS = P (dO.v - delta) scale.
FCP_HD void BackwardQueryRow(const KernelDims& d, const PairDesc& p, int64_t i, int32_t h,
                             const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const uint16_t* d_o, const float* lse, const float* delta, float* dq) {
  int64_t lo, hi;
  AllowedKeys(d, p, i, &lo, &hi);
  if (lo >= hi) return;
  const int32_t hd = d.head_dim, kvh = h / (d.heads_q / d.heads_kv);
  const int64_t row = p.q_row + i;
  const int64_t q_off = (row * d.heads_q + h) * hd;
  const float row_lse = lse[row * d.heads_q + h], row_delta = delta[row * d.heads_q + h];
  float qf[kMaxHeadDim], dof[kMaxHeadDim], acc[kMaxHeadDim];
  for (int32_t c = 0; c < hd; ++c) {
    qf[c] = Bf16ToFloat(q[q_off + c]);
    dof[c] = Bf16ToFloat(d_o[q_off + c]);
    acc[c] = 0.0f;
  }
  for (int64_t j = lo; j < hi; ++j) {
    const int64_t kv_off = ((p.k_row + j) * d.heads_kv + kvh) * hd;
    float s = 0.0f, dp = 0.0f;
    for (int32_t c = 0; c < hd; ++c) {
      s += qf[c] * Bf16ToFloat(k[kv_off + c]);
      dp += dof[c] * Bf16ToFloat(v[kv_off + c]);
    }
    const float ds = expf(s * d.scale - row_lse) * (dp - row_delta) * d.scale;
    for (int32_t c = 0; c < hd; ++c) acc[c] += ds * Bf16ToFloat(k[kv_off + c]);
  }
  for (int32_t c = 0; c < hd; ++c) AtomicAdd(dq + q_off + c, acc[c]);
}

FCP_HD void BackwardKeyRow(const KernelDims& d, const PairDesc& p, int64_t j, int32_t g,
                           const uint16_t* q, const uint16_t* k, const uint16_t* v,
                           const uint16_t* d_o, const float* lse, const float* delta, float* dk,
                           float* dv) {
  int64_t lo, hi;
  AllowedQueries(d, p, j, &lo, &hi);
  if (lo >= hi) return;
  const int32_t hd = d.head_dim, group = d.heads_q / d.heads_kv;
  const int64_t kv_off = ((p.k_row + j) * d.heads_kv + g) * hd;
  float kf[kMaxHeadDim], vf[kMaxHeadDim], dk_acc[kMaxHeadDim], dv_acc[kMaxHeadDim];
  for (int32_t c = 0; c < hd; ++c) {
    kf[c] = Bf16ToFloat(k[kv_off + c]);
    vf[c] = Bf16ToFloat(v[kv_off + c]);
    dk_acc[c] = 0.0f;
    dv_acc[c] = 0.0f;
  }
  for (int64_t i = lo; i < hi; ++i)
    for (int32_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t row = p.q_row + i;
      const int64_t q_off = (row * d.heads_q + h) * hd;
      float s = 0.0f, dp = 0.0f;
      for (int32_t c = 0; c < hd; ++c) {
        s += Bf16ToFloat(q[q_off + c]) * kf[c];
        dp += Bf16ToFloat(d_o[q_off + c]) * vf[c];
      }
      const float prob = expf(s * d.scale - lse[row * d.heads_q + h]);
      const float ds = prob * (dp - delta[row * d.heads_q + h]) * d.scale;
      for (int32_t c = 0; c < hd; ++c) {
        dk_acc[c] += ds * Bf16ToFloat(q[q_off + c]);
        dv_acc[c] += prob * Bf16ToFloat(d_o[q_off + c]);
      }
    }
  for (int32_t c = 0; c < hd; ++c) {
    AtomicAdd(dk + kv_off + c, dk_acc[c]);
    AtomicAdd(dv + kv_off + c, dv_acc[c]);
  }
}

// delta[row][h] = sum_c o * d_o for one row and head (float32 o and d_o).
FCP_HD void DeltaRow(const KernelDims& d, int64_t row, int32_t h, const float* o, const float* d_o,
                     float* delta) {
  const int64_t off = (row * d.heads_q + h) * d.head_dim;
  float s = 0.0f;
  for (int32_t c = 0; c < d.head_dim; ++c) s += o[off + c] * d_o[off + c];
  delta[row * d.heads_q + h] = s;
}

// Thread `t` of a launch over pair p: its query index and head (false: idle).
// Adjacent threads take adjacent heads of one row, so GQA groups read the
// same key row together.
FCP_HD bool ThreadWork(const KernelDims& d, const PairDesc& p, int64_t t, int64_t* i, int32_t* h) {
  if (t >= p.q_len * d.heads_q) return false;
  *i = t / d.heads_q;
  *h = static_cast<int32_t>(t % d.heads_q);
  return true;
}

// The same for the key pass of the backward: key index and key/value head.
FCP_HD bool KeyThreadWork(const KernelDims& d, const PairDesc& p, int64_t t, int64_t* j,
                          int32_t* g) {
  if (t >= p.k_len * d.heads_kv) return false;
  *j = t / d.heads_kv;
  *g = static_cast<int32_t>(t % d.heads_kv);
  return true;
}

// Splits pairs into waves (consecutive runs after the returned order) such
// that no two pairs of a wave share a query row: wave[w] lists pair indices.
// A pair goes to the first wave after every earlier pair it overlaps, so the
// merge order of each row follows the pair order. O(P^2), P is small.
inline std::vector<std::vector<int32_t>> ForwardWaves(const std::vector<PairDesc>& pairs) {
  std::vector<int32_t> wave_of(pairs.size(), 0);
  std::vector<std::vector<int32_t>> waves;
  for (size_t a = 0; a < pairs.size(); ++a) {
    int32_t w = 0;
    for (size_t b = 0; b < a; ++b) {
      const bool overlap = pairs[a].q_row < pairs[b].q_row + pairs[b].q_len &&
                           pairs[b].q_row < pairs[a].q_row + pairs[a].q_len;
      if (overlap && wave_of[b] + 1 > w) w = wave_of[b] + 1;
    }
    wave_of[a] = w;
    if (static_cast<size_t>(w) >= waves.size()) waves.resize(static_cast<size_t>(w) + 1);
    waves[static_cast<size_t>(w)].push_back(static_cast<int32_t>(a));
  }
  return waves;
}

}  // namespace fcp::gpu
