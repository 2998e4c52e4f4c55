#include "fcp/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "fcp/error.h"

namespace fcp {
namespace {

bool Allowed(const Mask& mask, int64_t q, int64_t k) {
  switch (mask.kind) {
    case MaskKind::kFull:
      return true;
    case MaskKind::kCausal:
      return k <= q;
    case MaskKind::kSlidingWindow:
      return k <= q && q - mask.window < k;
  }
  return false;
}

}  // namespace

ReferenceAttentionResult ReferenceAttention(const std::vector<int64_t>& sequences, const Mask& mask,
                                            const AttentionDims& dims, const float* q,
                                            const float* k, const float* v, const float* d_o) {
  dims.validate();
  mask.validate();
  int64_t total = 0;
  for (int64_t len : sequences) {
    if (len < 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "reference attention: negative sequence length " + std::to_string(len));
    total += len;
  }
  const int64_t hq = dims.heads_q, hd = dims.head_dim, hkv = dims.heads_kv;
  const int64_t group = hq / hkv;
  ReferenceAttentionResult out;
  out.o.assign(static_cast<size_t>(total * hq * hd), 0.0);
  out.lse.assign(static_cast<size_t>(total * hq), 0.0);
  if (d_o) {
    out.dq.assign(out.o.size(), 0.0);
    out.dk.assign(static_cast<size_t>(total * hkv * hd), 0.0);
    out.dv.assign(out.dk.size(), 0.0);
  }
  std::vector<double> p, dp;
  int64_t base = 0;
  for (int64_t len : sequences) {
    p.resize(static_cast<size_t>(len));
    dp.resize(static_cast<size_t>(len));
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < len; ++i) {
        const float* qi = q + ((base + i) * hq + h) * hd;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < len; ++j) {
          if (!Allowed(mask, i, j)) continue;
          const float* kj = k + ((base + j) * hkv + g) * hd;
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) s += double{qi[d]} * kj[d];
          p[j] = s * dims.scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < len; ++j)
          if (Allowed(mask, i, j)) sum += std::exp(p[j] - mx);
        const double lse = mx + std::log(sum);
        out.lse[(base + i) * hq + h] = lse;
        double* oi = out.o.data() + ((base + i) * hq + h) * hd;
        for (int64_t j = 0; j < len; ++j) {
          if (!Allowed(mask, i, j)) continue;
          p[j] = std::exp(p[j] - lse);
          const float* vj = v + ((base + j) * hkv + g) * hd;
          for (int64_t d = 0; d < hd; ++d) oi[d] += p[j] * vj[d];
        }
        if (!d_o) continue;
        // dP_j = dO . v_j ; dS_j = P_j (dP_j - dO . o) ; dq += scale dS_j k_j ; dk_j += scale dS_j
        // q
        const float* doi = d_o + ((base + i) * hq + h) * hd;
        double delta = 0;
        for (int64_t d = 0; d < hd; ++d) delta += double{doi[d]} * oi[d];
        double* dqi = out.dq.data() + ((base + i) * hq + h) * hd;
        for (int64_t j = 0; j < len; ++j) {
          if (!Allowed(mask, i, j)) continue;
          const int64_t kv_off = ((base + j) * hkv + g) * hd;
          double dpj = 0;
          for (int64_t d = 0; d < hd; ++d) dpj += double{doi[d]} * v[kv_off + d];
          const double ds = p[j] * (dpj - delta) * dims.scale;
          for (int64_t d = 0; d < hd; ++d) {
            dqi[d] += ds * k[kv_off + d];
            out.dk[kv_off + d] += ds * qi[d];
            out.dv[kv_off + d] += p[j] * doi[d];
          }
        }
      }
    }
    base += len;
  }
  return out;
}

double RelativeError(const float* got, const double* want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double{got[i]} - want[i];
    diff += d * d;
    norm += want[i] * want[i];
  }
  // An all-zero reference (the gradients of a query that sees one key) has
  // no scale: the error is then absolute, the RMS of `got`.
  if (norm == 0) return n > 0 ? std::sqrt(diff / static_cast<double>(n)) : 0.0;
  return std::sqrt(diff / norm);
}

}  // namespace fcp
