#include "assignment_exchange.h"

#include <algorithm>
#include <array>

namespace fcp::detail {
namespace {

// With a network ratio, small clusters get at least this many steps a
// round: a step is cheap there, and N steps stopped short of the cheapest
// balanced plan at N = 16. (Balance mode keeps N: longer searches lower the
// largest load but not always (max - mean) / max.)
constexpr int64_t kMinStepsPerRound = 32;

}  // namespace

template <ExchangeObjective Objective, typename Model>
Assignment ExchangeEngine::Improve(Model& model, Partners policy, Objective objective) {
  const AssignmentContext& c = ctx_;
  const int32_t n = c.n;
  std::vector<std::vector<int32_t>>& owned = ctx_.Owned(model.loads());
  double mean_traffic = 0;
  for (int32_t w = 0; w < n; ++w) mean_traffic += model.traffic(w) / n;
  objective.Begin(mean_traffic);
  // A reshuffle weighed in (by cost only): its tokens in + out per worker.
  ReshuffleLoad* const reshuffle = objective.Reshuffle();
  const auto moved_of = [&](int32_t w) { return reshuffle ? reshuffle->moved[w] : 0.0; };
  // The traffic as the objective counts it (the busiest port, or the sum).
  const auto traffic_of = [&](int32_t w) {
    return objective.Traffic(model.traffic(w), model.send(w));
  };
  const auto traffic_after = [&](int32_t w) {
    return objective.Traffic(model.traffic_after(w), model.send_after(w));
  };
  const auto load = [&](int32_t w) {
    return objective.Load(model.compute(w), traffic_of(w), moved_of(w));
  };
  const bool raising = objective.Raising();
  // Partners are the lightest by compute and by this.
  const auto partner_key = [&](int32_t w) {
    if constexpr (Objective::kLeveled)
      return load(w);
    else
      return traffic_of(w);
  };
  double total_traffic = 0;
  DescendingIndex by_load(n);
  AscendingIndex by_compute(n), by_traffic(n);
  for (int32_t w = 0; w < n; ++w) {
    total_traffic += model.traffic(w);
    by_load.Insert(w, load(w));
    by_compute.Insert(w, model.compute(w));
    by_traffic.Insert(w, partner_key(w));
  }
  offers_.resize(static_cast<size_t>(n) * kOfferClasses);
  for (Offers& o : offers_) o.valid = false;
  int64_t budget = static_cast<int64_t>(c.in.local_search_rounds) *
                   std::max<int64_t>(static_cast<int64_t>(c.items.size()), n) * 2;
  const int64_t min_steps = c.in.judge.pairs_per_traffic_token > 0 ? kMinStepsPerRound : 0;
  const int64_t max_steps =
      static_cast<int64_t>(c.in.local_search_rounds) * std::max<int64_t>(n, min_steps);
  std::vector<int32_t> partners;
  for (int64_t step = 0; step < max_steps && budget > 0; ++step) {
    if (objective.Stop(total_traffic / n)) break;
    // Plain variables, not a structured binding: lambdas below capture
    // them, which Clang before 16 rejects for bindings.
    const double max_load = by_load.first_key();
    const int32_t heavy = by_load.first_id();
    const double limit = max_load * (1 - 1e-9);
    partners.clear();
    // The heavy worker's binding dimension must come down.
    const bool compute_bound = objective.ComputeBound(model.compute(heavy), traffic_of(heavy));
    for (const AscendingIndex* index : {&by_compute, &by_traffic}) {
      const bool binding = (index == &by_compute) == compute_bound;
      const int swap_partners = Objective::kLeveled ? kLevelPartners : kSwapPartners;
      const int quota = policy == Partners::kMixed ? swap_partners / 2
                        : binding                  ? swap_partners
                                                   : 0;
      if (quota == 0) continue;
      int taken = 0;
      index->Visit([&](int32_t w, double) {
        if (w != heavy && std::find(partners.begin(), partners.end(), w) == partners.end()) {
          partners.push_back(w);
          ++taken;
        }
        return taken < quota;
      });
    }
    // Dependency counts of heavy, and of partner p (on demand).
    model.BeginStep();
    const int heavy_table = model.Table(heavy, owned[heavy]);
    std::array<int, std::max(kSwapPartners, kLevelPartners)> partner_table;
    partner_table.fill(-1);
    // Whether the evaluated exchange leaves every worker it involves below
    // the limit: those whose traffic changes by their new loads, any other
    // by its (unchanged) load.
    double heavy_moved = 0, light_moved = 0;  // after the evaluated exchange
    const auto below_limit = [&](double heavy_compute, double light_compute, int32_t light) {
      for (int32_t w : model.changed()) {
        const double cw =
            w == heavy ? heavy_compute : (w == light ? light_compute : model.compute(w));
        const double t = traffic_after(w);
        const double m = w == heavy ? heavy_moved : w == light ? light_moved : moved_of(w);
        if (objective.Load(cw, t, m) >= limit) return false;
        if (!objective.Admits(cw, t)) return false;
      }
      bool involved = false;
      by_load.Visit([&](int32_t w, double key) {
        if (key < limit) return false;
        involved = !model.in_changed(w) && model.Involves(w);
        return !involved;
      });
      return !involved;
    };
    bool improved = false;
    for (size_t x = 0; x < owned[heavy].size() && !improved && budget > 0; ++x) {
      const int32_t a = owned[heavy][x];
      // Locals: the offer loop would otherwise reload them for every offer
      // (it calls Evaluate, which could write them as far as the compiler knows).
      const double give_work = c.item_work[a], give_traffic = c.item_traffic[a];
      for (size_t p = 0; p < partners.size(); ++p) {
        const int32_t light = partners[p];
        const std::vector<Offer>& offers = OffersOf(light, c.items[a], owned[light]);
        // Unchanged until an exchange is applied, which ends the loop.
        const double light_now = model.compute(light), heavy_now = model.compute(heavy);
        for (const Offer& o : offers) {
          // Traffic-bound: only offers estimated to carry less traffic
          // (more when raising the least). (Tested first: it costs no
          // division and rejects most offers of a traffic-bound step.)
          if (!compute_bound && (raising ? give_traffic >= o.traffic : give_traffic <= o.traffic))
            continue;
          // Compute moves by exactly the works exchanged: skip what would
          // leave either side at the limit.
          const double shift = give_work - o.work;
          if (objective.ComputeBlocked(light_now + shift, heavy_now - shift, max_load)) continue;
          if (budget-- <= 0) break;
          if (partner_table[p] < 0) partner_table[p] = model.Table(light, owned[light]);
          model.Evaluate(a, heavy, heavy_table, {o.first, o.second}, light, partner_table[p]);
          const double heavy_compute = heavy_now - shift;
          const double light_compute = light_now + shift;
          if (reshuffle) {
            const ReshuffleLoad& r = *reshuffle;
            heavy_moved = r.moved[heavy] + r.Leave(a, heavy) + r.Join(o.first, heavy);
            light_moved = r.moved[light] + r.Leave(o.first, light) + r.Join(a, light);
            if (o.second >= 0) {
              heavy_moved += r.Join(o.second, heavy);
              light_moved += r.Leave(o.second, light);
            }
          }
          if (!below_limit(heavy_compute, light_compute, light)) continue;
          if (reshuffle) {
            reshuffle->moved[heavy] = heavy_moved;
            reshuffle->moved[light] = light_moved;
          }
          if constexpr (Objective::kLeveled)
            for (int32_t w : model.changed())
              total_traffic += model.traffic_after(w) - model.traffic(w);
          model.Apply(heavy_compute, light_compute);
          for (int32_t w : model.changed()) {
            by_load.Update(w, load(w));
            by_compute.Update(w, model.compute(w));
            by_traffic.Update(w, partner_key(w));
          }
          std::vector<int32_t>& h = owned[heavy];
          std::vector<int32_t>& l = owned[light];
          h[x] = o.first;
          if (o.second >= 0) h.push_back(o.second);
          *std::find(l.begin(), l.end(), o.first) = a;
          if (o.second >= 0) l.erase(std::find(l.begin(), l.end(), o.second));
          ForgetOffers(heavy);  // last: `o` lives in light's offers
          ForgetOffers(light);
          improved = true;
          break;
        }
        if (improved) break;
      }
    }
    if (!improved) break;
  }
  return c.Result(model.loads(), "local search");
}

const std::vector<ExchangeEngine::Offer>& ExchangeEngine::OffersOf(
    int32_t w, const Item& give, const std::vector<int32_t>& mine) {
  Offers& offers =
      offers_[static_cast<size_t>(w) * kOfferClasses + 2 * (give.slots - 1) + give.small];
  if (offers.valid) return offers.list;
  offers.valid = true;
  offers.list.clear();
  const std::vector<double>& work = ctx_.item_work;
  const std::vector<double>& traffic = ctx_.item_traffic;
  const auto add = [&](int32_t first, int32_t second) {
    offers.list.push_back({first, second, work[first] + (second >= 0 ? work[second] : 0.0),
                           traffic[first] + (second >= 0 ? traffic[second] : 0.0)});
  };
  for (size_t y = 0; y < mine.size(); ++y) {
    const Item& b = ctx_.items[mine[y]];
    if (b.small != give.small) continue;
    if (b.slots == give.slots) add(mine[y], -1);
    if (give.slots == 2 && b.slots == 1)
      for (size_t z = y + 1; z < mine.size(); ++z)
        if (!ctx_.items[mine[z]].small && ctx_.items[mine[z]].slots == 1) add(mine[y], mine[z]);
  }
  return offers.list;
}

void ExchangeEngine::ForgetOffers(int32_t w) {
  for (int c = 0; c < kOfferClasses; ++c)
    offers_[static_cast<size_t>(w) * kOfferClasses + c].valid = false;
}

// Every objective over every load model's counter width.
#define FCP_EXCHANGE_INSTANTIATE(Objective, Counter)                                              \
  template Assignment ExchangeEngine::Improve<Objective, LoadModel<Counter>>(LoadModel<Counter>&, \
                                                                             Partners, Objective);
#define FCP_EXCHANGE_INSTANTIATE_ALL(Objective) \
  FCP_EXCHANGE_INSTANTIATE(Objective, uint8_t)  \
  FCP_EXCHANGE_INSTANTIATE(Objective, uint16_t) \
  FCP_EXCHANGE_INSTANTIATE(Objective, int32_t)
FCP_EXCHANGE_INSTANTIATE_ALL(BalanceObjective)
FCP_EXCHANGE_INSTANTIATE_ALL(CostObjective)
FCP_EXCHANGE_INSTANTIATE_ALL(LevelObjective)
#undef FCP_EXCHANGE_INSTANTIATE_ALL
#undef FCP_EXCHANGE_INSTANTIATE

}  // namespace fcp::detail
