#include "assignment_portfolio.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <future>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <utility>

#include "assignment_greedy.h"
#include "concurrently.h"
#include "fcp/error.h"
#include "fcp/plan_metrics.h"
#include "planner_constants.h"

namespace fcp::detail {
namespace {

// Shedding (Shed): the compute above the mean a worker may keep
// (relative), and the least loaded workers of other nodes examined as
// partners per exchange (its own node's are all examined).
constexpr double kShedSlack = 0.02;
constexpr size_t kShedPartners = 16;

// The exchange search by balance from `from` with each partner policy (one
// when refining), each result into `best` when Better. The binding policy
// levels traffic better on most paper batches, the mixed one on the rest
// (and on time); time mode runs the mixed one.
template <typename Model>
void Search(const AssignmentContext& c, ExchangeEngine& engine, Model& model, const Loads& from,
            Assignment& best, bool refining = false) {
  const std::vector<Partners> policies =
      c.TimeMode() ? std::vector<Partners>{Partners::kMixed}
      : refining   ? std::vector<Partners>{Partners::kBinding}
                   : std::vector<Partners>{Partners::kMixed, Partners::kBinding};
  for (const Partners policy : policies) {
    model.Start(from);
    KeepBetter(engine.Improve(model, policy, BalanceObjective{c.targets}), best, c.in.judge);
  }
}

std::vector<int32_t> Identity(int32_t n) {
  std::vector<int32_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  return identity;
}

}  // namespace

void KeepBetter(Assignment candidate, Assignment& best, const Judge& judge) {
  if (best.owner.empty() || Better(candidate, best, judge)) best = std::move(candidate);
}

bool WithinBound(const Assignment& x, const Judge& judge) {
  if (Imbalance(x.compute) > judge.max_imbalance) return false;
  if (Imbalance(x.traffic) <= judge.max_imbalance) return true;
  const double max_traffic = *std::max_element(x.traffic.begin(), x.traffic.end());
  const double mean_traffic = std::accumulate(x.traffic.begin(), x.traffic.end(), 0.0) /
                              static_cast<double>(x.traffic.size());
  return max_traffic - mean_traffic <= judge.traffic_slack_tokens;
}

bool Better(const Assignment& a, const Assignment& b, const Judge& judge) {
  const bool wa = WithinBound(a, judge), wb = WithinBound(b, judge);
  if (wa != wb) return wa;
  if (!wa) return Cost(a, 0) < Cost(b, 0);
  // Costs within kCostTie are a tie, broken by total traffic: the cost sees
  // only the worst worker, and fewer transfers also mean fewer pieces of a
  // sequence computed apart.
  const double ca = Cost(a, judge.pairs_per_traffic_token),
               cb = Cost(b, judge.pairs_per_traffic_token);
  if (std::abs(ca - cb) > kCostTie * std::max(ca, cb)) return ca < cb;
  return std::accumulate(a.traffic.begin(), a.traffic.end(), 0.0) <
         std::accumulate(b.traffic.begin(), b.traffic.end(), 0.0);
}

double Cost(const Assignment& a, double pairs_per_traffic_token) {
  if (pairs_per_traffic_token <= 0) return std::max(Imbalance(a.compute), Imbalance(a.traffic));
  double worst = 0;
  for (size_t w = 0; w < a.compute.size(); ++w) {
    const double t = a.send.empty() ? a.traffic[w] : PortTraffic(a.traffic[w], a.send[w]);
    worst = std::max(worst, a.compute[w] + pairs_per_traffic_token * t);
  }
  return worst;
}

AssignmentSearch::AssignmentSearch(const AssignmentInput& input)
    : impl_(std::make_unique<Impl>(input)) {}
AssignmentSearch::~AssignmentSearch() = default;

const Csr& AssignmentSearch::users() const { return impl_->context.users; }

// The greedy starts, each refined by the exchange search with both partner
// policies; the Better result wins (ties: the earlier). Time mode (a
// network ratio and no imbalance bound) runs only the affinity start with
// mixed partners (docs/planner.md, the planner's constants).
Assignment AssignmentSearch::Assign(bool spare_core) {
  AssignmentContext& c = impl_->context;
  const std::vector<Start> starts =
      c.TimeMode() ? std::vector<Start>{Start::kAffinity}
                   : std::vector<Start>{Start::kCompute, Start::kVector, Start::kAffinity};
  c.EstimateTraffic();
  const GreedyStarts greedy(c);
  const auto build = [&c, &greedy](Start start) { return c.Count(greedy.Build(start)); };
  // Building and counting a start read only the context; the searches
  // write only the engine and the load model. So with a core to spare the
  // later starts are built on it while the first is searched (at N = 4096
  // the three builds are about 12% of a planning).
  std::future<std::vector<Loads>> later;
  if (spare_core && starts.size() > 1)
    later = Concurrently([&build, &starts] {
      std::vector<Loads> built;
      for (size_t k = 1; k < starts.size(); ++k) built.push_back(build(starts[k]));
      return built;
    });
  Assignment best;
  const auto search = [&](const Loads& loads) {
    c.WithModel([&](auto& model) { Search(c, impl_->engine, model, loads, best); });
  };
  search(build(starts.front()));
  if (later.valid()) {
    for (const Loads& loads : later.get()) search(loads);
  } else {
    for (size_t k = 1; k < starts.size(); ++k) search(build(starts[k]));
  }
  return best;
}

// `owner` as it is, or refined by the exchange search: the Better. One
// policy (binding; mixed in time mode) for half the time (docs/planner.md,
// the planner's constants).
Assignment AssignmentSearch::Refine(std::vector<int32_t> owner) {
  AssignmentContext& c = impl_->context;
  c.EstimateTraffic();
  const Loads loads = c.Count(std::move(owner));
  Assignment best{loads.owner, loads.compute, loads.traffic, loads.send};
  c.WithModel(
      [&](auto& model) { Search(c, impl_->engine, model, loads, best, /*refining=*/true); });
  return best;
}

std::vector<int32_t> AtHome(const AssignmentContext& c, int32_t node_workers,
                            const std::vector<HomeTokens>& homes) {
  const int32_t n = c.n;
  Slots slots(*c.in.sharding, n);
  std::vector<int32_t> owner(c.in.sharding->blocks.size(), kUnassigned);
  const auto place = [&](size_t i) {
    const Item& item = c.items[i];
    const int32_t home = homes[i].worker[0] >= 0 ? homes[i].worker[0] : c.in.dataloader[i];
    int32_t to = -1;
    if (slots.Fits(item, home))
      to = home;
    else if (homes[i].worker[1] >= 0 && slots.Fits(item, homes[i].worker[1]))
      to = homes[i].worker[1];
    // Nearest by id, the home's node first (workers of a node are
    // consecutive ids), ties: the lower id. The first pass stays inside the
    // node: O(node_workers), not O(N).
    const int32_t node = node_workers > 0 ? home / node_workers : 0;
    const int32_t reach = node_workers > 0 ? node_workers : n;
    for (int pass = 0; pass < 2 && to < 0; ++pass)
      for (int32_t d = 1; d < (pass == 0 ? reach : n) && to < 0; ++d)
        for (const int32_t w : {home - d, home + d}) {
          if (w < 0 || w >= n || to >= 0) continue;
          const bool same_node = node_workers > 0 && w / node_workers == node;
          if ((pass == 0) == same_node && slots.Fits(item, w)) to = w;
        }
    FCP_CHECK(to >= 0, "assignment: no worker has room for item " + std::to_string(i));
    slots.Take(item, to);
    for (int32_t b : item.blocks) owner[b] = to;
  };
  for (size_t i = 0; i < c.items.size(); ++i)
    if (!c.items[i].small && c.items[i].slots >= 2) place(i);
  for (size_t i = 0; i < c.items.size(); ++i)
    if (!c.items[i].small && c.items[i].slots < 2) place(i);
  for (size_t i = 0; i < c.items.size(); ++i)
    if (c.items[i].small) place(i);
  return owner;
}

// Every item at home (AtHome), then the exchange search by cost with the
// reshuffle, which moves only what lowers the most loaded worker (an
// overloaded home sheds items, a light one takes them and gives back
// replacements). By the cost itself, not by loads normalised by their
// means: a home layout has little traffic, and normalised, one worker
// holding a sequence cut at a home boundary would look most loaded.
Assignment AssignmentSearch::Home(int32_t node_workers, double reshuffle_pairs_per_token) {
  AssignmentContext& c = impl_->context;
  const std::vector<HomeTokens> homes = c.HomesOf(Identity(c.n));
  std::vector<int32_t> owner = AtHome(c, node_workers, homes);
  c.EstimateTraffic();
  ReshuffleLoad reshuffle;
  reshuffle.moved.assign(c.n, 0);
  reshuffle.pairs_per_token = reshuffle_pairs_per_token;
  for (size_t i = 0; i < c.items.size(); ++i) {
    double tokens = 0;
    for (int32_t b : c.items[i].blocks) tokens += static_cast<double>(c.block_tokens[b]);
    reshuffle.item_tokens.push_back(tokens);
    for (int k = 0; k < 2; ++k) {
      reshuffle.home.push_back(homes[i].worker[k]);
      reshuffle.tokens.push_back(static_cast<double>(homes[i].tokens[k]));
    }
    const int32_t w = owner[c.items[i].blocks.front()];
    reshuffle.moved[w] += tokens - reshuffle.At(static_cast<int32_t>(i), w);
    // Its tokens at homes other than w go out from there.
    for (int k = 0; k < 2; ++k)
      if (homes[i].worker[k] >= 0 && homes[i].worker[k] != w)
        reshuffle.moved[homes[i].worker[k]] += static_cast<double>(homes[i].tokens[k]);
  }
  const double ratio = c.in.judge.pairs_per_traffic_token;
  return c.WithModel([&](auto& model) {
    model.Start(c.Count(std::move(owner)));
    // Balance mode has no cost: the search by balance (without the reshuffle).
    return ratio > 0
               ? impl_->engine.Improve(model, Partners::kMixed, CostObjective{ratio, &reshuffle})
               : impl_->engine.Improve(model, Partners::kMixed, BalanceObjective{c.targets});
  });
}

// Every item at home (AtHome), then, while the most loaded worker's compute
// is above the mean by more than kShedSlack, it gives its densest item
// (work per token, highest first) for the lightest item of equal slot use
// (or two one-slot items for a two-slot one) of a worker that stays within
// the slack after the exchange: a worker of its own node (consecutive ids
// of `node_workers`: the reshuffle stays on its fast links), the least
// loaded first; else, among the kShedPartners least loaded of other nodes,
// the one whose reshuffle across nodes (in + out) ends least. When no
// exchange stays within the slack, the one that lowers the larger of the
// two computes most; none: it stops. Traffic is not searched (docs/
// planner.md, the shed layout). O(M s (S + P s)) for M exchanges, s items
// per worker, S the node size and P = kShedPartners.
Assignment AssignmentSearch::Shed(int32_t node_workers) {
  const AssignmentContext& c = impl_->context;
  const int32_t n = c.n;
  const std::vector<HomeTokens> homes = c.HomesOf(Identity(n));
  std::vector<int32_t> owner = AtHome(c, node_workers, homes);
  std::vector<std::vector<int32_t>> owned(n);
  std::vector<double> compute(n, 0), tokens(c.items.size(), 0);
  for (size_t i = 0; i < c.items.size(); ++i) {
    owned[owner[c.items[i].blocks.front()]].push_back(static_cast<int32_t>(i));
    compute[owner[c.items[i].blocks.front()]] += c.item_work[i];
    for (int32_t b : c.items[i].blocks) tokens[i] += static_cast<double>(c.block_tokens[b]);
  }
  const double total = std::accumulate(compute.begin(), compute.end(), 0.0);
  const double limit = total / n * (1 + kShedSlack);
  std::set<std::pair<double, int32_t>> by_compute;  // (compute, worker), a total order
  for (int32_t w = 0; w < n; ++w) by_compute.insert({compute[w], w});
  const int32_t node = std::max(node_workers, 1);
  // Per worker, reshuffle tokens in + out across nodes; an item's tokens
  // beyond its two largest homes count as crossing (sums of integers).
  std::vector<double> cross(n, 0);
  const auto account = [&](int32_t x, int32_t w, double sign) {
    double in = tokens[x];
    for (int k = 0; k < 2; ++k) {
      const int32_t h = homes[x].worker[k];
      if (h < 0) continue;
      const double t = static_cast<double>(homes[x].tokens[k]);
      if (h / node == w / node)
        in -= t;
      else
        cross[h] += sign * t;
    }
    cross[w] += sign * in;
  };
  for (size_t i = 0; i < c.items.size(); ++i)
    account(static_cast<int32_t>(i), owner[c.items[i].blocks.front()], 1);
  const auto cross_after = [&](int32_t x, int32_t b) {  // b's, taking x
    double in = tokens[x];
    for (int k = 0; k < 2; ++k)
      if (homes[x].worker[k] >= 0 && homes[x].worker[k] / node == b / node)
        in -= static_cast<double>(homes[x].tokens[k]);
    return cross[b] + in;
  };
  // The lightest item, or pair of one-slot items, of b that x can take
  // the place of.
  struct Offer {
    double work = std::numeric_limits<double>::infinity();
    int32_t y[2] = {-1, -1};
  };
  const auto offer = [&](int32_t x, int32_t b) {
    Offer best, one, two;  // one, two: the two lightest one-slot big items
    for (int32_t y : owned[b]) {
      const Item& item = c.items[y];
      if (item.small != c.items[x].small) continue;
      const double w = c.item_work[y];
      if (item.slots == c.items[x].slots && w < best.work) best = {w, {y, -1}};
      if (!item.small && item.slots == 1 && c.items[x].slots == 2) {
        if (w < one.work) {
          two = one;
          one = {w, {y, -1}};
        } else if (w < two.work) {
          two = {w, {y, -1}};
        }
      }
    }
    if (two.y[0] >= 0 && one.work + two.work < best.work)
      best = {one.work + two.work, {one.y[0], two.y[0]}};
    return best;
  };
  // offer(x, b) depends on x only through its kind (small, slots) and on b
  // only through owned[b]: cached per (worker, kind), dropped when a move
  // changes the worker's items (the same value as computed afresh).
  struct CachedOffer {
    int32_t slots = -1;  // the kind's slots; -1: not cached
    Offer offer;
  };
  std::vector<std::array<CachedOffer, 3>> offers(n);
  const auto offer_of = [&](int32_t x, int32_t b) {
    const Item& item = c.items[x];
    CachedOffer& cached = offers[b][item.small ? 0 : item.slots == 1 ? 1 : 2];
    if (cached.slots != item.slots) {
      cached = {item.slots, offer(x, b)};
    } else if (c.in.self_check) {
      const Offer fresh = offer(x, b);
      FCP_CHECK(fresh.work == cached.offer.work && fresh.y[0] == cached.offer.y[0] &&
                    fresh.y[1] == cached.offer.y[1],
                "shed layout: worker " + std::to_string(b) + "'s cached offer is stale");
    }
    return cached.offer;
  };
  const auto move = [&](int32_t item, int32_t from, int32_t to) {
    offers[from] = {};
    offers[to] = {};
    account(item, from, -1);
    for (int32_t b : c.items[item].blocks) owner[b] = to;
    owned[from].erase(std::find(owned[from].begin(), owned[from].end(), item));
    owned[to].push_back(item);
    by_compute.erase({compute[from], from});
    by_compute.erase({compute[to], to});
    compute[from] -= c.item_work[item];
    compute[to] += c.item_work[item];
    by_compute.insert({compute[from], from});
    by_compute.insert({compute[to], to});
    account(item, to, 1);
  };
  std::vector<int32_t> order, partners;
  // Each exchange lowers the most loaded worker's compute or moves the
  // maximum to a worker below it; the cap only bounds pathological cases.
  const size_t max_steps = 4 * c.items.size() + static_cast<size_t>(n);
  for (size_t step = 0; step < max_steps; ++step) {
    const int32_t a = std::prev(by_compute.end())->second;
    if (compute[a] <= limit) break;
    order = owned[a];
    std::stable_sort(order.begin(), order.end(), [&](int32_t p, int32_t q) {
      return c.item_work[p] * tokens[q] > c.item_work[q] * tokens[p];
    });
    partners.clear();
    for (int32_t b = a / node * node; b < std::min(n, (a / node + 1) * node); ++b)
      if (b != a) partners.push_back(b);
    std::stable_sort(partners.begin(), partners.end(),
                     [&](int32_t p, int32_t q) { return compute[p] < compute[q]; });
    const size_t same_node = partners.size();
    for (auto it = by_compute.begin();
         it != by_compute.end() && partners.size() < same_node + kShedPartners; ++it)
      if (it->second / node != a / node) partners.push_back(it->second);
    int32_t best_x = -1, best_b = -1;
    Offer best_y;
    bool within = false;
    double best_peak = compute[a];
    for (int32_t x : order) {
      double least_cross = std::numeric_limits<double>::infinity();
      for (size_t k = 0; k < partners.size(); ++k) {
        const int32_t b = partners[k];
        const Offer y = offer_of(x, b);
        if (y.y[0] < 0 || y.work >= c.item_work[x]) continue;
        const double after_b = compute[b] + c.item_work[x] - y.work;
        const double after_a = compute[a] - c.item_work[x] + y.work;
        if (after_b <= limit) {
          if (k < same_node) {  // its own node: the least loaded that fits
            best_x = x, best_b = b, best_y = y, within = true;
            break;
          }
          const double c = cross_after(x, b);
          if (c < least_cross) {
            least_cross = c;
            best_x = x, best_b = b, best_y = y, within = true;
          }
        } else if (!within && std::max(after_a, after_b) < best_peak) {
          best_x = x, best_b = b, best_y = y, best_peak = std::max(after_a, after_b);
        }
      }
      if (within) break;
    }
    if (best_x < 0) break;
    move(best_x, a, best_b);
    for (int32_t y : best_y.y)
      if (y >= 0) move(y, best_b, a);
  }
  const Loads loads = c.Count(std::move(owner));
  return Assignment{loads.owner, loads.compute, loads.traffic, loads.send};
}

}  // namespace fcp::detail
