// CPU attention kernel: flash-attention style tiling over BLAS sgemm.
//
// For one segment pair and one query head, query tiles of Bq rows sweep key
// tiles of Bk rows: S = scale * Q K^T (sgemm), then an online softmax per row
// over the keys the mask allows (a contiguous column range per row for every
// supported mask, so no -inf sentinels are written), then acc += P V (sgemm).
// Tiles the mask leaves empty are skipped before any arithmetic. The partial
// (acc / l, m + log l) of a query tile is merged into (o, lse) once per
// segment pair. exp is a branch-free polynomial that the compiler vectorises;
// its relative error (~2e-7) is below float32 rounding of the sums.
//
// One implementation serves float32 and bfloat16 inputs (templated on the
// element type T): every tile is read through AsFloat, which for float32 is
// the caller's memory itself and for bfloat16 an exact float32 widening of
// the tile into scratch, so the arithmetic after it is the same for both.
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fcp/attention_kernel.h"
#include "fcp/error.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace fcp {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(x) for x <= 0 (all callers subtract a row maximum); 0 below -87.
inline float ExpNonPositive(float x) {
  const float clamped = x < -87.0f ? -87.0f : x;
  const float t = clamped * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest, |t| < 2^22
  // f = x - n ln2 in two parts for accuracy.
  const float f = (clamped - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * f + 1.3981999507e-3f;
  p = p * f + 8.3334519073e-3f;
  p = p * f + 4.1665795894e-2f;
  p = p * f + 1.6666665459e-1f;
  p = p * f + 5.0000001201e-1f;
  p = p * f * f + f + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  const float scale = std::bit_cast<float>(bits);
  return x < -87.0f ? 0.0f : p * scale;
}

// Rows [0, n) x [0, width) of a row-major matrix (stride ld) as float32: for
// float the matrix itself (no copy); for bfloat16 a widened copy in
// `scratch` (stride width). O(n * width) for bfloat16, O(1) for float.
struct FloatRows {
  const float* data;
  int64_t ld;
};
inline FloatRows AsFloat(const float* m, int64_t, int64_t ld, int64_t, std::vector<float>&) {
  return {m, ld};
}
inline FloatRows AsFloat(const BFloat16* m, int64_t n, int64_t ld, int64_t width,
                         std::vector<float>& scratch) {
  scratch.resize(static_cast<size_t>(n * width));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < width; ++d) scratch[r * width + d] = ToFloat(m[r * ld + d]);
  return {scratch.data(), width};
}

// The allowed key columns [lo, hi) of a tile for one query token.
struct ColumnRange {
  int64_t lo;
  int64_t hi;
};

inline ColumnRange AllowedColumns(const Mask& mask, int64_t q_pos, int64_t k_tile_pos,
                                  int64_t k_cols) {
  switch (mask.kind) {
    case MaskKind::kFull:
      return {0, k_cols};
    case MaskKind::kCausal:
      return {0, std::clamp<int64_t>(q_pos - k_tile_pos + 1, 0, k_cols)};
    case MaskKind::kSlidingWindow:
      return {std::clamp<int64_t>(q_pos - mask.window + 1 - k_tile_pos, 0, k_cols),
              std::clamp<int64_t>(q_pos - k_tile_pos + 1, 0, k_cols)};
  }
  return {0, 0};
}

// True when no (query, key) pair of the two tiles is allowed.
inline bool TileEmpty(const Mask& mask, int64_t q_pos, int64_t q_rows, int64_t k_pos,
                      int64_t k_rows) {
  return AllowedPairs(mask, {q_pos, q_pos + q_rows}, {k_pos, k_pos + k_rows}) == 0;
}

// Merge of one row-head: partial (o2 over head_dim, lse2) into (o, lse).
inline void MergeRow(int32_t head_dim, const float* o2, float lse2, float* o, float* lse) {
  if (lse2 == kNegInf) return;
  const float old = *lse;
  if (old == kNegInf) {
    std::memcpy(o, o2, sizeof(float) * head_dim);
    *lse = lse2;
    return;
  }
  const float hi = std::max(old, lse2);
  const float merged = hi + std::log1p(std::exp(-std::fabs(old - lse2)));
  const float w_old = std::exp(old - merged);
  const float w_new = std::exp(lse2 - merged);
  for (int32_t d = 0; d < head_dim; ++d) o[d] = o[d] * w_old + o2[d] * w_new;
  *lse = merged;
}

class CpuAttentionKernel final : public AttentionKernel {
 public:
  explicit CpuAttentionKernel(const CpuKernelOptions& options) : options_(options) {
    options_.validate();
  }

  void Forward(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
               const ForwardBuffers& io) override {
    ForwardOf(dims, mask, pairs, io);
  }
  void Forward(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
               const ForwardBuffersOf<BFloat16>& io) override {
    ForwardOf(dims, mask, pairs, io);
  }
  void Backward(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
                const BackwardBuffers& io) override {
    BackwardOf(dims, mask, pairs, io);
  }
  void Backward(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
                const BackwardBuffersOf<BFloat16>& io) override {
    BackwardOf(dims, mask, pairs, io);
  }

 private:
  template <class T>
  void ForwardOf(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
                 const ForwardBuffersOf<T>& io) {
    dims.validate();
    // The G query heads sharing one key/value head are stacked: a tile of
    // Bq tokens is a (Bq * G) x D matrix (row = token * G + head in group),
    // so each sgemm is G times taller and K/V tiles are read once per group.
    const int64_t group = dims.heads_q / dims.heads_kv;
    const int64_t bq = options_.q_tile_rows, bk = options_.kv_tile_rows, hd = dims.head_dim;
    scores_.resize(static_cast<size_t>(bq * group * bk));
    acc_.resize(static_cast<size_t>(bq * group * hd));
    qpack_.resize(static_cast<size_t>(bq * group * hd));
    row_max_.resize(static_cast<size_t>(bq * group));
    row_sum_.resize(static_cast<size_t>(bq * group));
    ranges_.resize(static_cast<size_t>(bq * group));
    const int64_t ldq = dims.q_row_floats(), ldk = dims.kv_row_floats();
    for (const SegmentPair& sp : pairs) {
      CheckPair(sp);
      for (int64_t q0 = 0; q0 < sp.q_len; q0 += bq) {
        const int64_t tokens = std::min(bq, sp.q_len - q0);
        const int64_t rows = tokens * group;
        for (int32_t g = 0; g < dims.heads_kv; ++g) {
          // The group's heads of a token are adjacent in a query row.
          for (int64_t t = 0; t < tokens; ++t) {
            const T* src = io.q + (sp.q_row + q0 + t) * ldq + g * group * hd;
            float* dst = qpack_.data() + t * group * hd;
            for (int64_t e = 0; e < group * hd; ++e) dst[e] = Widen(src[e]);
          }
          std::fill_n(acc_.begin(), rows * hd, 0.0f);
          std::fill_n(row_max_.begin(), rows, kNegInf);
          std::fill_n(row_sum_.begin(), rows, 0.0f);
          for (int64_t k0 = 0; k0 < sp.k_len; k0 += bk) {
            const int64_t cols = std::min(bk, sp.k_len - k0);
            if (TileEmpty(mask, sp.q_pos + q0, tokens, sp.k_pos + k0, cols)) continue;
            const int64_t kv_off = (sp.k_row + k0) * ldk + int64_t{g} * hd;
            const FloatRows k = AsFloat(io.k + kv_off, cols, ldk, hd, k_tile_);
            const FloatRows v = AsFloat(io.v + kv_off, cols, ldk, hd, v_tile_);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                        static_cast<int>(cols), static_cast<int>(hd), dims.scale, qpack_.data(),
                        static_cast<int>(hd), k.data, static_cast<int>(k.ld), 0.0f, scores_.data(),
                        static_cast<int>(cols));
            const bool masked =
                SoftmaxTile(mask, sp.q_pos + q0, sp.k_pos + k0, rows, group, cols, hd);
            // Masked entries of P are 0; with a non-finite V row, 0 x NaN
            // would reach rows that do not attend it: allowed columns only.
            if (masked && !AllFinite(v.data, cols, v.ld, hd))
              for (int64_t r = 0; r < rows; ++r)
                AddRowTimes(1.0f, scores_.data() + r * cols, ranges_[r], v.data, v.ld, hd,
                            acc_.data() + r * hd);
            else
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                          static_cast<int>(hd), static_cast<int>(cols), 1.0f, scores_.data(),
                          static_cast<int>(cols), v.data, static_cast<int>(v.ld), 1.0f, acc_.data(),
                          static_cast<int>(hd));
            if (options_.progress) options_.progress();
          }
          // Normalise and merge this tile's partial into the running output.
          for (int64_t i = 0; i < rows; ++i) {
            const float l = row_sum_[i];
            if (l == 0.0f) continue;  // no key of this pair is allowed for the row
            float* a = acc_.data() + i * hd;
            const float inv = 1.0f / l;
            for (int64_t d = 0; d < hd; ++d) a[d] *= inv;
            const int64_t row = sp.q_row + q0 + i / group;
            const int64_t head = g * group + i % group;
            MergeRow(dims.head_dim, a, row_max_[i] + std::log(l), io.o + row * ldq + head * hd,
                     io.lse + row * dims.heads_q + head);
          }
        }
      }
    }
  }

  template <class T>
  void BackwardOf(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
                  const BackwardBuffersOf<T>& io) {
    dims.validate();
    const int64_t bq = options_.q_tile_rows, bk = options_.kv_tile_rows, hd = dims.head_dim;
    scores_.resize(static_cast<size_t>(bq * bk));
    dscores_.resize(static_cast<size_t>(bq * bk));
    ranges_.resize(static_cast<size_t>(bq));
    const int64_t ldq = dims.q_row_floats(), ldk = dims.kv_row_floats();
    const int32_t group = dims.heads_q / dims.heads_kv;
    for (const SegmentPair& sp : pairs) {
      CheckPair(sp);
      for (int64_t k0 = 0; k0 < sp.k_len; k0 += bk) {
        const int64_t cols = std::min(bk, sp.k_len - k0);
        FloatRows k_in{}, v_in{};
        for (int32_t h = 0; h < dims.heads_q; ++h) {
          const int32_t g = h / group;
          const int64_t k_off = (sp.k_row + k0) * ldk + int64_t{g} * hd;
          if (h % group == 0 && !TileEmpty(mask, sp.q_pos, sp.q_len, sp.k_pos + k0, cols)) {
            // A key/value tile is read once per group of query heads (the
            // heads of a group are consecutive); masked-out tiles never.
            k_in = AsFloat(io.k + k_off, cols, ldk, hd, k_tile_);
            v_in = AsFloat(io.v + k_off, cols, ldk, hd, v_tile_);
          }
          for (int64_t q0 = 0; q0 < sp.q_len; q0 += bq) {
            const int64_t rows = std::min(bq, sp.q_len - q0);
            if (TileEmpty(mask, sp.q_pos + q0, rows, sp.k_pos + k0, cols)) continue;
            const int64_t q_off = (sp.q_row + q0) * ldq + int64_t{h} * hd;
            const int64_t lse_off = (sp.q_row + q0) * dims.heads_q + h;
            const FloatRows q_in = AsFloat(io.q + q_off, rows, ldq, hd, q_tile_);
            const FloatRows do_in = AsFloat(io.d_o + q_off, rows, ldq, hd, do_tile_);
            // S = scale Q K^T; P = exp(S - lse) on allowed columns, 0 elsewhere.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                        static_cast<int>(cols), static_cast<int>(hd), dims.scale, q_in.data,
                        static_cast<int>(q_in.ld), k_in.data, static_cast<int>(k_in.ld), 0.0f,
                        scores_.data(), static_cast<int>(cols));
            bool partial = false;  // some entry of the tile is masked
            for (int64_t r = 0; r < rows; ++r) {
              const ColumnRange c = AllowedColumns(mask, sp.q_pos + q0 + r, sp.k_pos + k0, cols);
              ranges_[r] = c;
              partial |= c.lo != 0 || c.hi != cols;
              float* s = scores_.data() + r * cols;
              const float lse = io.lse[lse_off + r * dims.heads_q];
              for (int64_t j = 0; j < c.lo; ++j) s[j] = 0.0f;
              for (int64_t j = c.lo; j < c.hi; ++j)
                s[j] = ExpNonPositive(std::min(s[j] - lse, 0.0f));
              for (int64_t j = std::max(c.hi, c.lo); j < cols; ++j) s[j] = 0.0f;
            }
            // Masked entries of P and dS are 0. When a row of dO, Q or K in
            // this tile is not finite, 0 x NaN would carry it into the
            // gradients of tokens it does not attend: the three products
            // below then run over the allowed entries only. Otherwise (full
            // tiles, finite data: the usual case) sgemm gives the same sums.
            const bool masked = partial && !(AllFinite(do_in.data, rows, do_in.ld, hd) &&
                                             AllFinite(q_in.data, rows, q_in.ld, hd) &&
                                             AllFinite(k_in.data, cols, k_in.ld, hd));
            // dV += P^T dO
            if (masked)
              for (int64_t r = 0; r < rows; ++r)
                AddColumnsTimesRow(1.0f, scores_.data() + r * cols, ranges_[r],
                                   do_in.data + r * do_in.ld, hd, io.dv + k_off, ldk);
            else
              cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(cols),
                          static_cast<int>(hd), static_cast<int>(rows), 1.0f, scores_.data(),
                          static_cast<int>(cols), do_in.data, static_cast<int>(do_in.ld), 1.0f,
                          io.dv + k_off, static_cast<int>(ldk));
            // dP = dO V^T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                        static_cast<int>(cols), static_cast<int>(hd), 1.0f, do_in.data,
                        static_cast<int>(do_in.ld), v_in.data, static_cast<int>(v_in.ld), 0.0f,
                        dscores_.data(), static_cast<int>(cols));
            // dS = P * (dP - delta)
            for (int64_t r = 0; r < rows; ++r) {
              const float delta = io.delta[lse_off + r * dims.heads_q];
              const float* p = scores_.data() + r * cols;
              float* ds = dscores_.data() + r * cols;
              // Masked entries are set to 0, not computed: dP - delta may be NaN there.
              const ColumnRange c = partial ? ranges_[r] : ColumnRange{0, cols};
              for (int64_t j = 0; j < c.lo; ++j) ds[j] = 0.0f;
              for (int64_t j = c.lo; j < c.hi; ++j) ds[j] = p[j] * (ds[j] - delta);
              for (int64_t j = std::max(c.hi, c.lo); j < cols; ++j) ds[j] = 0.0f;
            }
            // dQ += scale dS K ; dK += scale dS^T Q
            if (masked) {
              for (int64_t r = 0; r < rows; ++r) {
                AddRowTimes(dims.scale, dscores_.data() + r * cols, ranges_[r], k_in.data, k_in.ld,
                            hd, io.dq + q_off + r * ldq);
                AddColumnsTimesRow(dims.scale, dscores_.data() + r * cols, ranges_[r],
                                   q_in.data + r * q_in.ld, hd, io.dk + k_off, ldk);
              }
            } else {
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                          static_cast<int>(hd), static_cast<int>(cols), dims.scale, dscores_.data(),
                          static_cast<int>(cols), k_in.data, static_cast<int>(k_in.ld), 1.0f,
                          io.dq + q_off, static_cast<int>(ldq));
              cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(cols),
                          static_cast<int>(hd), static_cast<int>(rows), dims.scale, dscores_.data(),
                          static_cast<int>(cols), q_in.data, static_cast<int>(q_in.ld), 1.0f,
                          io.dk + k_off, static_cast<int>(ldk));
            }
            if (options_.progress) options_.progress();
          }
        }
      }
    }
  }

  static float Widen(float x) { return x; }
  static float Widen(BFloat16 x) { return ToFloat(x); }

  // Whether rows [0, n) of width `hd` (stride ld) hold only finite values.
  static bool AllFinite(const float* m, int64_t n, int64_t ld, int64_t hd) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t d = 0; d < hd; ++d)
        if (!std::isfinite(m[r * ld + d])) return false;
    return true;
  }

  // out[0, hd) += alpha * sum over j in c of w[j] * m[j * ld + (0, hd)].
  static void AddRowTimes(float alpha, const float* w, ColumnRange c, const float* m, int64_t ld,
                          int64_t hd, float* out) {
    for (int64_t j = c.lo; j < c.hi; ++j) {
      const float x = alpha * w[j];
      const float* mj = m + j * ld;
      for (int64_t d = 0; d < hd; ++d) out[d] += x * mj[d];
    }
  }
  // For j in c: out[j * ld + (0, hd)] += alpha * w[j] * row[0, hd).
  static void AddColumnsTimesRow(float alpha, const float* w, ColumnRange c, const float* row,
                                 int64_t hd, float* out, int64_t ld) {
    for (int64_t j = c.lo; j < c.hi; ++j) {
      const float x = alpha * w[j];
      float* oj = out + j * ld;
      for (int64_t d = 0; d < hd; ++d) oj[d] += x * row[d];
    }
  }

  static void CheckPair(const SegmentPair& sp) {
    if (sp.q_len < 0 || sp.k_len < 0 || sp.q_row < 0 || sp.k_row < 0 || sp.q_pos < 0 ||
        sp.k_pos < 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "attention kernel: segment pair with a negative row, position or length");
  }

  // Online-softmax update of the running (row_max_, row_sum_, acc_) with the
  // scores of one tile; leaves P (unnormalised) in scores_ and each row's
  // allowed columns in ranges_. Row r is token r / group of the tile.
  // Returns whether some entry of the tile is masked.
  bool SoftmaxTile(const Mask& mask, int64_t q_pos, int64_t k_pos, int64_t rows, int64_t group,
                   int64_t cols, int64_t hd) {
    bool masked = false;
    for (int64_t r = 0; r < rows; ++r) {
      const ColumnRange c = AllowedColumns(mask, q_pos + r / group, k_pos, cols);
      ranges_[r] = c.hi <= c.lo ? ColumnRange{0, 0} : c;
      masked |= c.lo != 0 || c.hi != cols;
      float* s = scores_.data() + r * cols;
      if (c.hi <= c.lo) {
        std::fill_n(s, cols, 0.0f);
        continue;
      }
      float tile_max = kNegInf;
      for (int64_t j = c.lo; j < c.hi; ++j) tile_max = std::max(tile_max, s[j]);
      const float old_max = row_max_[r];
      const float new_max = std::max(old_max, tile_max);
      float sum = 0.0f;
      for (int64_t j = 0; j < c.lo; ++j) s[j] = 0.0f;
      for (int64_t j = c.lo; j < c.hi; ++j) {
        const float p = ExpNonPositive(s[j] - new_max);
        s[j] = p;
        sum += p;
      }
      for (int64_t j = c.hi; j < cols; ++j) s[j] = 0.0f;
      if (old_max != new_max && old_max != kNegInf) {
        const float alpha = ExpNonPositive(old_max - new_max);
        row_sum_[r] *= alpha;
        float* a = acc_.data() + r * hd;
        for (int64_t d = 0; d < hd; ++d) a[d] *= alpha;
      }
      row_max_[r] = new_max;
      row_sum_[r] += sum;
    }
    return masked;
  }

  CpuKernelOptions options_;
  std::vector<float> scores_, dscores_, acc_, qpack_, row_max_, row_sum_;
  // Widened bfloat16 tiles (unused for float32 inputs).
  std::vector<float> k_tile_, v_tile_, q_tile_, do_tile_;
  std::vector<ColumnRange> ranges_;  // allowed columns of each row of the current tile
};

}  // namespace

void AttentionDims::validate() const {
  if (heads_q <= 0 || heads_kv <= 0 || head_dim <= 0)
    throw Error(ErrorCode::kInvalidArgument,
                "attention dims: heads_q, heads_kv and head_dim must be > 0, got " +
                    std::to_string(heads_q) + ", " + std::to_string(heads_kv) + ", " +
                    std::to_string(head_dim));
  if (heads_q % heads_kv != 0)
    throw Error(ErrorCode::kInvalidArgument, "attention dims: heads_q " + std::to_string(heads_q) +
                                                 " is not a multiple of heads_kv " +
                                                 std::to_string(heads_kv));
  if (!(scale > 0.0f) || !std::isfinite(scale))
    throw Error(ErrorCode::kInvalidArgument, "attention dims: scale must be finite and > 0");
}

void AttentionKernel::Forward(const AttentionDims&, const Mask&, std::span<const SegmentPair>,
                              const ForwardBuffersOf<BFloat16>&) {
  throw Error(ErrorCode::kInvalidArgument,
              "attention kernel: Forward: this kernel takes float32 inputs, not bfloat16");
}

void AttentionKernel::Backward(const AttentionDims&, const Mask&, std::span<const SegmentPair>,
                               const BackwardBuffersOf<BFloat16>&) {
  throw Error(ErrorCode::kInvalidArgument,
              "attention kernel: Backward: this kernel takes float32 inputs, not bfloat16");
}

void CpuKernelOptions::validate() const {
  if (q_tile_rows < 1 || kv_tile_rows < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "cpu kernel: q_tile_rows and kv_tile_rows must be >= 1");
}

std::unique_ptr<AttentionKernel> MakeCpuAttentionKernel(const CpuKernelOptions& options) {
  return std::make_unique<CpuAttentionKernel>(options);
}

void InitForwardOutput(const AttentionDims& dims, int64_t rows, float* o, float* lse) {
  std::fill_n(o, rows * dims.q_row_floats(), 0.0f);
  std::fill_n(lse, rows * dims.heads_q, kNegInf);
}

void MergeForwardPartial(const AttentionDims& dims, int64_t rows, const float* o2,
                         const float* lse2, float* o, float* lse) {
  for (int64_t r = 0; r < rows; ++r)
    for (int32_t h = 0; h < dims.heads_q; ++h) {
      const int64_t idx = r * dims.heads_q + h;
      const int64_t off = idx * dims.head_dim;
      MergeRow(dims.head_dim, o2 + off, lse2[idx], o + off, lse + idx);
    }
}

void ComputeDelta(const AttentionDims& dims, int64_t rows, const float* o, const float* d_o,
                  float* delta) {
  for (int64_t idx = 0; idx < rows * dims.heads_q; ++idx) {
    const float* a = o + idx * dims.head_dim;
    const float* b = d_o + idx * dims.head_dim;
    float sum = 0.0f;
    for (int32_t d = 0; d < dims.head_dim; ++d) sum += a[d] * b[d];
    delta[idx] = sum;
  }
}

void SetBlasThreads(int32_t threads) { openblas_set_num_threads(std::max(1, threads)); }

}  // namespace fcp
