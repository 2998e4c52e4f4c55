#include "piece_sizing.h"
#include "planner_constants.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

namespace fcp::detail {

namespace {

// A split whose pieces can move: its sub-items sit on at least two workers
// and its bounds leave room.
struct Movable {
  SplitItem* split = nullptr;
  double rate = 0;                 // work per piece token
  int64_t lo = 0, hi = 0;          // piece tokens, in granules
  std::vector<int32_t> workers;    // distinct, ascending
  std::vector<int32_t> count;      // sub-items on each
  std::vector<int32_t> worker_of;  // per sub-item: index into workers
  std::vector<double> size;        // per sub-item, tokens
};

// Water-filling: the piece tokens t[k] each worker takes, summing to
// `total`, with t[k] = clamp((level - others[k]) / rate, count[k] lo,
// count[k] hi) for one level. The sum is piecewise linear and increasing in
// the level, with kinks where a worker's clamp starts or ends.
void Level(const std::vector<double>& others, const std::vector<int32_t>& count, double rate,
           double lo, double hi, double total, std::vector<double>& kinks,
           std::vector<double>& take) {
  const size_t n = others.size();
  const auto sum_at = [&](double level) {
    double sum = 0;
    for (size_t k = 0; k < n; ++k)
      sum += std::clamp((level - others[k]) / rate, count[k] * lo, count[k] * hi);
    return sum;
  };
  kinks.clear();
  for (size_t k = 0; k < n; ++k) {
    kinks.push_back(others[k] + rate * count[k] * lo);
    kinks.push_back(others[k] + rate * count[k] * hi);
  }
  std::sort(kinks.begin(), kinks.end());
  double level = kinks.back();
  double below = kinks.front(), below_sum = sum_at(below);
  for (double kink : kinks) {
    const double sum = sum_at(kink);
    if (sum >= total) {
      level =
          sum > below_sum ? below + (total - below_sum) * (kink - below) / (sum - below_sum) : kink;
      break;
    }
    below = kink;
    below_sum = sum;
  }
  take.resize(n);
  for (size_t k = 0; k < n; ++k)
    take[k] = std::clamp((level - others[k]) / rate, count[k] * lo, count[k] * hi);
}

// Whole granules summing to `total`, each in [lo, hi]: floors, then the
// largest remainders (ties: the lower index) take one more.
std::vector<int64_t> Round(const std::vector<double>& granules, int64_t total, int64_t lo,
                           int64_t hi) {
  const size_t p = granules.size();
  std::vector<int64_t> out(p);
  int64_t sum = 0;
  for (size_t x = 0; x < p; ++x) {
    out[x] = std::clamp(static_cast<int64_t>(std::floor(granules[x])), lo, hi);
    sum += out[x];
  }
  std::vector<size_t> order(p);
  std::iota(order.begin(), order.end(), 0);
  const auto excess = [&](size_t x) { return granules[x] - static_cast<double>(out[x]); };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return excess(a) > excess(b); });
  while (sum != total) {
    const bool up = sum < total;
    for (size_t k = 0; k < p && sum != total; ++k) {
      const size_t x = order[up ? k : p - 1 - k];
      if (up ? out[x] < hi : out[x] > lo) {
        out[x] += up ? 1 : -1;
        sum += up ? 1 : -1;
      }
    }
  }
  return out;
}

}  // namespace

std::optional<double> SizePieces(const ShardBase& base, HeavySplit& split, const Mask& mask,
                                 const std::vector<int32_t>& sub_item_worker,
                                 std::vector<double> compute) {
  const int64_t b = base.block_size;
  const int64_t granule = std::gcd(b, kGranuleTokens);
  const int64_t granules = b / granule;
  std::vector<Movable> movable;
  size_t first = 0;  // the split's sub-item 0 in split.added
  for (SplitItem& s : split.splits) {
    const size_t p = s.piece_tokens.size();
    const int64_t blocks = static_cast<int64_t>(base.items[s.item].blocks.size());
    Movable m;
    m.split = &s;
    // A piece token displaces a filler token: the filler's mean work per
    // token comes off.
    double filler_work = 0;
    for (size_t f : s.fillers) filler_work += static_cast<double>(base.items[f].work);
    const double filler_density =
        s.fillers.empty() ? 0.0 : filler_work / static_cast<double>(s.fillers.size() * b);
    const double piece_work = static_cast<double>(base.items[s.item].work) -
                              filler_density * static_cast<double>(blocks * b);
    m.rate = piece_work / static_cast<double>(b);
    const int64_t smallest = *std::min_element(s.piece_tokens.begin(), s.piece_tokens.end());
    m.lo = (std::min(kMinPieceTokens, smallest) + granule - 1) / granule;
    m.hi = b / blocks / granule;
    const auto own = sub_item_worker.begin() + static_cast<std::ptrdiff_t>(first);
    m.workers.assign(own, own + static_cast<std::ptrdiff_t>(p));
    std::sort(m.workers.begin(), m.workers.end());
    m.workers.erase(std::unique(m.workers.begin(), m.workers.end()), m.workers.end());
    m.count.assign(m.workers.size(), 0);
    for (size_t x = 0; x < p; ++x) {
      const auto k =
          std::lower_bound(m.workers.begin(), m.workers.end(), own[x]) - m.workers.begin();
      m.worker_of.push_back(static_cast<int32_t>(k));
      ++m.count[k];
      m.size.push_back(static_cast<double>(s.piece_tokens[x]));
    }
    first += p;
    const int64_t pieces = static_cast<int64_t>(p);
    // Only where a piece's work is linear in its size: a causal pair (zig-zag)
    // or any piece under a full mask. (A causal single's piece work grows with
    // its offset, which every earlier piece's size moves.)
    const bool linear =
        mask.kind == MaskKind::kFull || (mask.kind == MaskKind::kCausal && blocks == 2);
    if (linear && m.workers.size() >= 2 && m.rate > 0 && pieces * m.lo < granules &&
        pieces * m.hi > granules)
      movable.push_back(std::move(m));
  }
  if (movable.empty()) return std::nullopt;

  std::vector<double> others, take, kinks;
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    double moved = 0;
    for (Movable& m : movable) {
      others.assign(m.workers.size(), 0);
      for (size_t k = 0; k < m.workers.size(); ++k) others[k] = compute[m.workers[k]];
      for (size_t x = 0; x < m.size.size(); ++x) others[m.worker_of[x]] -= m.rate * m.size[x];
      Level(others, m.count, m.rate, static_cast<double>(m.lo * granule),
            static_cast<double>(m.hi * granule), static_cast<double>(b), kinks, take);
      for (size_t x = 0; x < m.size.size(); ++x) {
        const size_t k = m.worker_of[x];
        const double size = take[k] / m.count[k];
        moved = std::max(moved, std::abs(size - m.size[x]));
        m.size[x] = size;
      }
      for (size_t k = 0; k < m.workers.size(); ++k)
        compute[m.workers[k]] = others[k] + m.rate * take[k];
    }
    if (moved <= kSettledTokens) break;
  }

  bool changed = false;
  std::vector<double> in_granules;
  for (Movable& m : movable) {
    in_granules.clear();
    for (double size : m.size) in_granules.push_back(size / static_cast<double>(granule));
    const std::vector<int64_t> rounded = Round(in_granules, granules, m.lo, m.hi);
    SplitItem& s = *m.split;
    const size_t p = rounded.size();
    for (size_t x = 0; x < p; ++x) {
      const int64_t tokens = rounded[x] * granule;
      changed |= tokens != s.piece_tokens[x] ||
                 (!s.second_tokens.empty() && tokens != s.second_tokens[p - 1 - x]);
      s.piece_tokens[x] = tokens;
      if (!s.second_tokens.empty()) s.second_tokens[p - 1 - x] = tokens;  // mirrored
    }
  }
  if (!changed) return std::nullopt;
  return *std::max_element(compute.begin(), compute.end());
}

}  // namespace fcp::detail
