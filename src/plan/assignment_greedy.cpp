#include "assignment_greedy.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "fcp/error.h"
#include "planner_constants.h"

namespace fcp::detail {
namespace {

// Collects up to `limit` workers from `index` on which `item` fits.
void Collect(const AscendingIndex& index, const Slots& slots, const Item& item, int limit,
             std::vector<int32_t>& out) {
  int found = 0, scanned = 0;
  index.Visit([&](int32_t w, double) {
    if (slots.Fits(item, w) && std::find(out.begin(), out.end(), w) == out.end()) {
      out.push_back(w);
      ++found;
    }
    return found < limit && ++scanned < kScanLimit;
  });
}

}  // namespace

NeedHulls::NeedHulls(size_t sequences, size_t capacity) : latest_(sequences, -1) {
  int bits = 4;
  while ((size_t{1} << bits) < 2 * capacity) ++bits;  // load factor <= 1/2
  table_.assign(size_t{1} << bits, Hull{});
  mask_ = (size_t{1} << bits) - 1;
  shift_ = 64 - bits;
}

double NeedHulls::Marginal(int32_t w, std::span<const SequenceNeed> needs) const {
  double added = 0;
  for (const SequenceNeed& n : needs) {
    const Hull& h = table_[Find(Key(w, n.seq))];
    if (h.key == kEmpty) {
      added += static_cast<double>(n.hi - n.lo - n.own);
      continue;
    }
    const int64_t growth = std::max(h.hi, n.hi) - std::min(h.lo, n.lo) - (h.hi - h.lo);
    added += static_cast<double>(growth - n.own);
  }
  return added;
}

void NeedHulls::Add(int32_t w, std::span<const SequenceNeed> needs) {
  for (const SequenceNeed& n : needs) {
    const uint64_t key = Key(w, n.seq);
    const size_t slot = Find(key);
    Hull& h = table_[slot];
    if (h.key == kEmpty) {
      h = Hull{key, n.lo, n.hi, w, latest_[n.seq]};
      latest_[n.seq] = static_cast<int32_t>(slot);
      continue;
    }
    h.lo = std::min(h.lo, n.lo);
    h.hi = std::max(h.hi, n.hi);
  }
}

GreedyStarts::GreedyStarts(const AssignmentContext& context) : ctx_(context) {
  const AssignmentInput& in = ctx_.in;
  const std::vector<Item>& items = ctx_.items;
  const std::vector<int64_t>& lengths = *in.lengths;
  needs_.offset.assign(1, 0);
  std::vector<Segment> segments;
  for (size_t i = 0; i < items.size(); ++i) {
    segments.clear();
    for (int32_t b : items[i].blocks)
      for (const Segment& x : in.sharding->blocks[b].segments)
        if (x.length < lengths[x.seq]) segments.push_back(x);
    std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
      return a.seq != b.seq ? a.seq < b.seq : a.start < b.start;
    });
    for (const Segment& x : segments) {
      const TokenRange keys = AttendedKeys(in.mask, {x.start, x.start + x.length}, lengths[x.seq]);
      std::vector<SequenceNeed>& needs = needs_.items;  // row i is the tail
      const bool in_row = needs.size() > static_cast<size_t>(needs_.offset.back());
      if (in_row && needs.back().seq == x.seq) {
        needs.back().lo = std::min(needs.back().lo, keys.begin);
        needs.back().hi = std::max(needs.back().hi, keys.end);
        needs.back().own += x.length;
      } else {
        needs.push_back({x.seq, keys.begin, keys.end, x.length});
      }
    }
    needs_.offset.push_back(static_cast<int32_t>(needs_.items.size()));
  }
  // LPT orders: by work, and by the larger normalised share (vector LPT).
  std::vector<double> size(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    size[i] = ctx_.targets.Load(ctx_.item_work[i], ctx_.item_traffic[i]);
  compute_order_.resize(items.size());
  std::iota(compute_order_.begin(), compute_order_.end(), 0);
  vector_order_ = compute_order_;
  std::stable_sort(compute_order_.begin(), compute_order_.end(),
                   [&](int32_t a, int32_t b) { return ctx_.item_work[a] > ctx_.item_work[b]; });
  std::stable_sort(vector_order_.begin(), vector_order_.end(),
                   [&](int32_t a, int32_t b) { return size[a] > size[b]; });
}

std::vector<int32_t> GreedyStarts::Build(Start start) const {
  const AssignmentInput& in = ctx_.in;
  const int32_t n = ctx_.n;
  const std::vector<double>& item_work = ctx_.item_work;
  const bool affinity = start == Start::kAffinity;
  const Targets targets = {ctx_.targets.compute, start == Start::kCompute
                                                     ? std::numeric_limits<double>::infinity()
                                                     : ctx_.targets.traffic};
  const std::vector<int32_t>& order = start == Start::kCompute ? compute_order_ : vector_order_;
  Slots slots(*in.sharding, n);
  NeedHulls hulls(in.lengths->size(), affinity ? needs_.items.size() : 0);
  std::vector<double> compute(n, 0), traffic(n, 0);
  // Indexes of open workers (a free slot of the class) by compute and traffic.
  AscendingIndex by_compute[2] = {AscendingIndex(n), AscendingIndex(n)};
  AscendingIndex by_traffic[2] = {AscendingIndex(n), AscendingIndex(n)};
  for (int cls = 0; cls < 2; ++cls)
    for (int32_t w = 0; w < n; ++w)
      if (slots.Open(w, cls)) {
        by_compute[cls].Insert(w, 0);
        by_traffic[cls].Insert(w, 0);
      }
  std::vector<int32_t> owner(in.sharding->blocks.size(), kUnassigned);
  std::vector<int32_t> candidates;
  for (int32_t i : order) {
    const Item& item = ctx_.items[i];
    const std::span<const SequenceNeed> needs = needs_.row(i);
    const int cls = item.small ? 1 : 0;
    candidates.clear();
    Collect(by_compute[cls], slots, item, kComputeCandidates, candidates);
    Collect(by_traffic[cls], slots, item, kTrafficCandidates, candidates);
    const auto consider = [&](int32_t w) {
      if (slots.Fits(item, w) &&
          std::find(candidates.begin(), candidates.end(), w) == candidates.end())
        candidates.push_back(w);
    };
    const int32_t home = in.dataloader[i];
    consider(home);
    if (affinity)
      for (const SequenceNeed& need : needs)
        hulls.ForLatestWorkers(need.seq, kAffinityCandidates, consider);
    if (candidates.empty())  // every indexed candidate was infeasible: scan all
      for (int32_t w = 0; w < n && candidates.empty(); ++w) consider(w);
    FCP_CHECK(!candidates.empty(), "assignment: no worker has room for item " + std::to_string(i));

    const auto item_traffic = [&](int32_t w) {
      return affinity ? hulls.Marginal(w, needs) + ctx_.item_send[i] : ctx_.item_traffic[i];
    };
    int32_t best = -1;
    double best_load = 0, best_traffic = 0;
    for (int32_t w : candidates) {
      const double added = item_traffic(w);
      const double load = targets.Load(compute[w] + item_work[i], traffic[w] + added) +
                          (affinity ? kAffinityWeight * added / targets.traffic : 0.0);
      bool better = best < 0;
      if (!better) {
        const double tolerance = 1e-12 * std::max(load, best_load);
        if (load < best_load - tolerance)
          better = true;
        else if (load <= best_load + tolerance)  // ties: the dataloader worker, then the lower id
          better = (w == home) != (best == home) ? w == home : w < best;
      }
      if (better) {
        best = w;
        best_load = load;
        best_traffic = added;
      }
    }
    for (int32_t b : item.blocks) owner[b] = best;
    compute[best] += item_work[i];
    traffic[best] += best_traffic;
    if (affinity) hulls.Add(best, needs);
    slots.Take(item, best);
    for (int c = 0; c < 2; ++c) {
      if (!slots.Open(best, c)) {
        by_compute[c].Erase(best);
        by_traffic[c].Erase(best);
      }
      by_compute[c].Update(best, compute[best]);
      by_traffic[c].Update(best, traffic[best]);
    }
  }
  return owner;
}

}  // namespace fcp::detail
