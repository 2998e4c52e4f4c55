#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <utility>

#include "assignment_portfolio.h"
#include "buckets.h"
#include "fcp/error.h"
#include "fcp/plan_metrics.h"

namespace fcp::detail {
namespace {

// The locality exchanges and the leveling search keep the traffic
// imbalance this far inside the judge's bound.
constexpr double kLocalityMargin = 0.001;
// The leveling search's compute caps, as shares of the judge's bound on
// compute imbalance (Level).
constexpr std::array<double, 4> kLevelComputeAllowance = {0, 0.25, 0.5, 1};

// Localize (assignment.h) on one load model. Each item away from its home
// (the worker `rename` maps to its largest dataloader worker) is offered,
// in one pass, for the item of equal slot use on its home that brings the
// most tokens home (one try: docs/planner.md, the planner's constants); the
// exchange is kept when no worker's compute, traffic or cost rises above
// the largest, total traffic does not grow, and does not shrink below what
// keeps the traffic imbalance (max - mean) / max kLocalityMargin inside the
// judge's bound, or where it was if outside: less traffic at the same
// maximum is faster but reads as more imbalance. (Not the judge's slack for
// traffic under a block's K/V: docs/planner.md, the planner's constants.)
template <typename Model>
Assignment LocalizeOn(AssignmentContext& ctx, Model& model, Assignment start,
                      const std::vector<int32_t>& rename) {
  const int32_t n = ctx.n;
  std::vector<int32_t> original(n);  // dataloader worker -> the worker renamed to it
  for (int32_t w = 0; w < n; ++w) original[rename[w]] = w;
  const std::vector<HomeTokens> homes = ctx.HomesOf(original);
  model.Start(ctx.Count(start.owner));
  std::vector<std::vector<int32_t>>& owned = ctx.Owned(model.loads());
  const double ratio = ctx.in.judge.pairs_per_traffic_token;
  const auto cost = [&](double c, double t) { return c + ratio * t; };
  double max_compute = 0, max_traffic = 0, max_cost = 0, total_traffic = 0;
  for (int32_t w = 0; w < n; ++w) {
    max_compute = std::max(max_compute, model.compute(w));
    max_traffic = std::max(max_traffic, model.traffic(w));
    max_cost = std::max(max_cost, cost(model.compute(w), model.traffic(w)));
    total_traffic += model.traffic(w);
  }
  const double least_total =
      std::min(total_traffic, static_cast<double>(n) * max_traffic *
                                  std::max(0.0, 1 - ctx.in.judge.max_imbalance + kLocalityMargin));
  for (size_t x = 0; x < ctx.items.size(); ++x) {
    const int32_t a = model.loads().owner[ctx.items[x].blocks.front()], b = homes[x].worker[0];
    if (b < 0 || a == b) continue;
    // b's offer that brings most tokens home without lifting a compute
    // above the largest (ties: the first owned).
    int32_t y = -1;
    int64_t best_gain = 0;
    for (int32_t candidate : owned[b]) {
      if (ctx.items[candidate].slots != ctx.items[x].slots ||
          ctx.items[candidate].small != ctx.items[x].small)
        continue;
      const int64_t gain =
          homes[x].At(b) + homes[candidate].At(a) - homes[x].At(a) - homes[candidate].At(b);
      const double shift = ctx.item_work[x] - ctx.item_work[candidate];
      if (gain > best_gain && model.compute(a) - shift <= max_compute &&
          model.compute(b) + shift <= max_compute) {
        best_gain = gain;
        y = candidate;
      }
    }
    if (y < 0) continue;
    const double ca = model.compute(a) - ctx.item_work[x] + ctx.item_work[y];
    const double cb = model.compute(b) - ctx.item_work[y] + ctx.item_work[x];
    model.BeginStep();
    const int hs = model.Table(a, owned[a]), ls = model.Table(b, owned[b]);
    model.Evaluate(static_cast<int32_t>(x), a, hs, {y, -1}, b, ls);
    double traffic_change = 0;
    bool fits = true;
    for (int32_t w : model.changed()) {
      const double t = model.traffic_after(w);
      const double c = w == a ? ca : w == b ? cb : model.compute(w);
      traffic_change += t - model.traffic(w);
      fits &= t <= max_traffic && cost(c, t) <= max_cost;
    }
    if (!fits || traffic_change > 0 || total_traffic + traffic_change < least_total) continue;
    total_traffic += traffic_change;
    model.Apply(ca, cb);
    *std::find(owned[a].begin(), owned[a].end(), static_cast<int32_t>(x)) = y;
    *std::find(owned[b].begin(), owned[b].end(), y) = static_cast<int32_t>(x);
  }
  Assignment local = ctx.Result(model.loads(), "locality exchanges");
  // Judged by sent + received, as its caps are.
  return Better(BySums(start), BySums(local), ctx.in.judge) ? start : local;
}

}  // namespace

Assignment AssignmentSearch::Localize(Assignment assignment, const std::vector<int32_t>& rename) {
  AssignmentContext& c = impl_->context;
  return c.WithModel(
      [&](auto& model) { return LocalizeOn(c, model, std::move(assignment), rename); });
}

// Leveling for a plan whose cost is balanced while its traffic imbalance is
// outside the judge's bound (a few workers with little traffic lower the
// mean): exchanges that lower the largest traffic, then, while still
// outside, exchanges that raise the least, none lifting any worker's cost
// or traffic above the largest of `start`, nor its compute above a cap (the
// exchange engine under a LevelObjective). The cap starts at `start`'s
// largest compute and widens in kLevelComputeAllowance steps of the judge's
// bound until a result is within it. Raising adds traffic only on workers
// below the largest, and stops at the bound. The result with the least
// traffic imbalance; `start` itself unless that falls.
Assignment AssignmentSearch::Level(Assignment start) {
  AssignmentContext& c = impl_->context;
  const int32_t n = c.n;
  return c.WithModel([&](auto& model) {
    Leveling caps;
    caps.ratio = c.in.judge.pairs_per_traffic_token;
    caps.stop_imbalance = c.in.judge.max_imbalance - kLocalityMargin;
    // Balance mode has no cost to keep. The cost of sent + received, as
    // the leveling objective counts traffic.
    caps.max_cost =
        caps.ratio > 0 ? Cost(BySums(start), caps.ratio) : std::numeric_limits<double>::infinity();
    double largest_compute = 0, largest_traffic = 0, total_compute = 0;
    for (int32_t w = 0; w < n; ++w) {
      largest_compute = std::max(largest_compute, start.compute[w]);
      largest_traffic = std::max(largest_traffic, start.traffic[w]);
      total_compute += start.compute[w];
    }
    Assignment best = start;
    for (const double allowance : kLevelComputeAllowance) {
      caps.max_compute =
          std::max(largest_compute, total_compute / n / (1 - allowance * c.in.judge.max_imbalance));
      caps.max_traffic = largest_traffic;
      caps.raise_least = false;
      model.Start(c.Count(start.owner));
      Assignment leveled = impl_->engine.Improve(model, Partners::kBinding, LevelObjective{caps});
      if (Imbalance(leveled.traffic) > c.in.judge.max_imbalance) {
        caps.raise_least = true;
        caps.max_traffic = *std::max_element(leveled.traffic.begin(), leveled.traffic.end());
        leveled = impl_->engine.Improve(model, Partners::kBinding, LevelObjective{caps});
      }
      if (Imbalance(leveled.traffic) < Imbalance(best.traffic)) best = std::move(leveled);
      if (Imbalance(best.traffic) <= c.in.judge.max_imbalance) break;
    }
    if (c.in.self_check)
      for (int32_t w = 0; w < n; ++w)
        FCP_CHECK(best.traffic[w] <= largest_traffic && best.compute[w] <= caps.max_compute &&
                      best.compute[w] + caps.ratio * best.traffic[w] <= caps.max_cost,
                  "leveling: worker " + std::to_string(w) + " ends above its caps");
    return best;
  });
}

std::vector<int32_t> LocalityRenaming(const std::vector<Block>& blocks,
                                      const std::vector<int32_t>& owner,
                                      const std::vector<int64_t>& lengths, int32_t workers) {
  struct Shared {
    int64_t tokens;
    int32_t worker, home;
  };
  const std::vector<int64_t> offsets = SequenceOffsets(lengths);
  // Each of the workers - 1 dataloader boundaries cuts at most one segment.
  size_t segments = 0;
  for (const Block& block : blocks) segments += block.segments.size();
  std::vector<Shared> shared;
  shared.reserve(segments + static_cast<size_t>(workers));
  for (size_t b = 0; b < blocks.size(); ++b)
    for (const Segment& s : blocks[b].segments)
      ForEachDataloaderRun(s, offsets, workers, [&](int32_t home, int64_t tokens) {
        shared.push_back({tokens, owner[b], home});
      });
  // Sum per (worker, home), one worker at a time, then take pairs heaviest
  // first (a total order: the merge order does not matter).
  const Buckets by_worker =
      BucketBy(workers, shared.size(), [&](int32_t k) { return shared[k].worker; });
  std::vector<Shared> merged;
  std::vector<int32_t> slot(workers, -1);  // home -> its entry in merged, for this worker
  for (int32_t w = 0; w < workers; ++w) {
    const size_t first = merged.size();
    for (int32_t k : by_worker.row(w)) {
      const Shared& x = shared[k];
      if (slot[x.home] < 0) {
        slot[x.home] = static_cast<int32_t>(merged.size());
        merged.push_back(x);
      } else {
        merged[slot[x.home]].tokens += x.tokens;
      }
    }
    for (size_t m = first; m < merged.size(); ++m) slot[merged[m].home] = -1;
  }
  std::sort(merged.begin(), merged.end(), [](const Shared& a, const Shared& b) {
    if (a.tokens != b.tokens) return a.tokens > b.tokens;
    return a.worker != b.worker ? a.worker < b.worker : a.home < b.home;
  });
  std::vector<int32_t> rename(workers, -1);
  std::vector<uint8_t> taken(workers, 0);
  for (const Shared& x : merged)
    if (rename[x.worker] < 0 && !taken[x.home]) {
      rename[x.worker] = x.home;
      taken[x.home] = 1;
    }
  int32_t next = 0;
  for (int32_t w = 0; w < workers; ++w) {
    if (rename[w] >= 0) continue;
    while (taken[next]) ++next;
    rename[w] = next;
    taken[next] = 1;
  }
  return rename;
}

}  // namespace fcp::detail
