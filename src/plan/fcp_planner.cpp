#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>

#include "assignment.h"
#include "assignment_context.h"
#include "fcp/error.h"
#include "fcp/node_relays.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/required_pairs.h"
#include "fcp/schedule.h"
#include "fcp/step_estimate_input.h"
#include "home_packing.h"
#include "piece_sizing.h"
#include "sharding.h"
#include "short_rehoming.h"

namespace fcp {

namespace {

// Moving one K/V token (2 Hkv D dtype bytes) costs network_flops_per_byte
// FLOPs per byte; a token pair costs 4 Hq D FLOPs (head_dim cancels).
double PairsPerTrafficToken(const PlannerConfig& config) {
  const AttentionShape& a = config.attention;
  return config.network_flops_per_byte * 2.0 * a.heads_kv * a.dtype_bytes / (4.0 * a.heads_q);
}

// Balance mode judges by imbalance alone: no slack for small traffic excess.
detail::Judge JudgeOf(const PlannerConfig& config, int64_t block_size) {
  const PlannerObjective objective = config.Objective();
  const bool balance = objective == PlannerObjective::kBalance;
  return {objective, PairsPerTrafficToken(config), config.max_imbalance,
          balance ? 0.0 : static_cast<double>(block_size)};
}

// The transparent reshuffle moves, per token away from its dataloader
// worker, Q, K and V in and O out (forward), dO in and dQ, dK, dV out
// (backward): 4 (Hq + Hkv) D dtype bytes, 18 K/V tokens (2 Hkv D bytes each)
// for Llama-3-70B heads. The cost's traffic term is a forward load (the
// step is about 3.5 forwards of compute); a worker's reshuffle is counted
// as tokens in + out, on a full-duplex NIC (half); and the simulated step
// (gpu-x, gpu-y, N = 16 and 64, the measurement log (docs/planner.md)) exposed about 0.75
// of the busiest worker's port time, the rest overlapping its compute.
// So one token in or out weighs as this many forward K/V tokens.
constexpr double kReshuffleExposed = 0.75;
double ReshuffleTrafficTokens(const AttentionShape& a) {
  return 4.0 * (a.heads_q + a.heads_kv) / (2.0 * a.heads_kv) / 3.5 / 2.0 * kReshuffleExposed;
}

// Per worker (as `rename` names them), tokens it receives in the reshuffle
// (owned here, held by a dataloader worker of another node) plus tokens it
// sends (held here, owned on another node). Tokens that stay inside a node
// of `node_workers` consecutive workers move over its fast links and are
// not counted. O(S) for S segments.
std::vector<double> ReshuffleTokens(const std::vector<Block>& blocks,
                                    const std::vector<int32_t>& owner,
                                    const std::vector<int32_t>& rename,
                                    const std::vector<int64_t>& offsets, int32_t workers,
                                    int32_t node_workers) {
  std::vector<double> tokens(workers, 0);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const int32_t w = rename[owner[b]];
    for (const Segment& s : blocks[b].segments)
      ForEachDataloaderRun(s, offsets, workers, [&](int32_t home, int64_t n) {
        if (home / node_workers == w / node_workers) return;
        tokens[w] += static_cast<double>(n);
        tokens[home] += static_cast<double>(n);
      });
  }
  return tokens;
}

// The step proxy with the reshuffle overlapped, in token pairs: `base`,
// the worst worker's larger of compute and ratio x K/V traffic (transfers
// overlap the compute), plus `reshuffle`, the busiest reshuffle (ratio x
// tokens in + out x their weight), which waits at the start of the step
// for the inputs and at its end for the outputs. The reshuffle is indexed
// by renamed worker, the loads by assigned one.
struct StepCost {
  double base = 0, reshuffle = 0;
  double total() const { return base + reshuffle; }
};
StepCost StepCostOf(const detail::Assignment& a, const std::vector<Block>& blocks,
                    const std::vector<int32_t>& rename, const std::vector<int64_t>& offsets,
                    double pairs_per_traffic_token, double reshuffle_weight, int32_t node_workers) {
  const int32_t n = static_cast<int32_t>(a.compute.size());
  const std::vector<double> moved =
      ReshuffleTokens(blocks, a.owner, rename, offsets, n, node_workers);
  StepCost cost;
  for (int32_t w = 0; w < n; ++w)
    cost.base = std::max({cost.base, a.compute[w], pairs_per_traffic_token * a.traffic[w]});
  cost.reshuffle =
      pairs_per_traffic_token * reshuffle_weight * *std::max_element(moved.begin(), moved.end());
  return cost;
}

// One sharding and assignment of the batch. Its input points into it and
// its search at the input, so it stays where it was made.
struct Candidate {
  Candidate() = default;
  Candidate(const Candidate&) = delete;
  Candidate& operator=(const Candidate&) = delete;

  detail::HeavySplit split;  // its split items (their blocks are in sharding)
  detail::Sharding sharding;
  std::vector<RequiredPair> pairs;
  detail::AssignmentInput input;
  // Kept for the locality exchanges, should the candidate be chosen.
  std::optional<detail::AssignmentSearch> search;
  detail::Assignment assignment;
};

// Sharding steps 1-3 (shared by the candidates) and the sequences' first tokens.
struct Common {
  detail::ShardBase base;
  std::vector<int64_t> offsets;
};

// Piece sizing rescues plans above this imbalance (or the configured bound,
// when lower).
constexpr double kResizeAbove = 0.05;
constexpr int kResizeRounds = 4;
// A round re-shards and searches again (a multiple of the planning time)
// only when the sizes promise to lower the largest compute by this much;
// smaller promises did not bring plans within the bound (docs/planner.md,
// the planner's constants).
constexpr double kMinResizeGain = 0.01;

// Rescue limits, in the order tried (docs/planner.md, step 6). Linear 4 is
// left out: beside the default's powers of two up to 4 it adds only the
// 3-piece cut, which the first limit tries (measured: docs/planner.md, the
// planner's constants).
constexpr int32_t kRescueLimits[] = {3, 5, 6, 8};
// Each rescue candidate costs about one planning of the batch, so beyond
// this many workers there is none: the rescue would take planning past its
// 1 s target (docs/planner.md, step 6).
constexpr int32_t kRescueMaxWorkers = 2048;

// The home layout is kept only where its busiest reshuffle is at most this
// share of the balanced plan's (MakeFcpPlan): home layouts that win
// reshuffle far less, those that still move most of the tokens are slower
// simulated (the shares measured: docs/planner.md, the planner's constants).
constexpr double kHomeReshuffleShare = 0.5;

// The home candidate is built only when the dataloader layout's compute
// imbalance is at most this: only all-short batches come below it, and the
// home layouts of the others never won (docs/planner.md, the home layout).
// It saves their planning time.
constexpr double kHomeMaxImbalance = 0.3;

// A shed layout (issue 17, part 2; built where the home candidate is not)
// replaces the balanced plan only where its step estimate (with the
// reshuffle) is lower by more than this share: the estimate ranks 84% of
// candidate pairs as the simulator does, and at no margin, or at 2-3%,
// it picked shed layouts that simulated up to 18% slower on the benchmark
// set (docs/planner.md, the planner's constants).
constexpr double kShedEstimateMargin = 0.01;
// The shed candidate is built up to this many workers: above it, it
// changed almost no plan for much more planning time (docs/planner.md,
// the shed layout).
constexpr int32_t kShedMaxWorkers = 256;

// Per item of `base`, the dataloader node (`node_workers` consecutive
// workers) of its first token: the groups of the shed layout's local
// fillers (SplitHeavy). O(I) for I items.
std::vector<int32_t> DataloaderNodes(const detail::ShardBase& base,
                                     const std::vector<int64_t>& offsets, int32_t workers,
                                     int32_t node_workers) {
  std::vector<int32_t> nodes;
  nodes.reserve(base.items.size());
  for (const detail::ProtoItem& item : base.items) {
    const Segment& first = item.blocks.front().segments.front();
    nodes.push_back(DataloaderWorker(offsets.back(), workers, offsets[first.seq] + first.start) /
                    std::max<int32_t>(node_workers, 1));
  }
  return nodes;
}

// Tokens of `blocks` (workers set) away from their dataloader worker.
int64_t TokensAway(const std::vector<Block>& blocks, const std::vector<int64_t>& offsets,
                   int32_t workers) {
  int64_t away = 0;
  for (const Block& b : blocks)
    for (const Segment& s : b.segments)
      ForEachDataloaderRun(s, offsets, workers, [&](int32_t home, int64_t n) {
        if (home != b.worker) away += n;
      });
  return away;
}

// The compute imbalance of the dataloader layout: each token's query work
// on its dataloader worker. O(S + N) for S segments.
double HomeImbalance(const detail::ShardBase& base, const std::vector<int64_t>& lengths,
                     const Mask& mask, const std::vector<int64_t>& offsets, int32_t workers) {
  std::vector<double> work(workers, 0);
  for (const detail::ProtoItem& item : base.items)
    for (const Block& block : item.blocks)
      for (const Segment& s : block.segments) {
        int64_t start = s.start;
        ForEachDataloaderRun(s, offsets, workers, [&](int32_t home, int64_t n) {
          // QueryWork of the run as a block of its own, without making one.
          work[home] +=
              static_cast<double>(AllowedPairs(mask, {start, start + n}, {0, lengths[s.seq]}));
          start += n;
        });
      }
  return Imbalance(work);
}

// Slack when a compute lower bound is compared with an imbalance: for
// Imbalance()'s rounding, so that the pruning stays exact.
constexpr double kBoundMargin = 1e-12;

// Heaviest items examined by ComputeImbalanceLowerBound (where it peaks:
// docs/planner.md, the planner's constants); a cap only weakens it.
constexpr size_t kBoundItems = 64;

// A lower bound on the compute imbalance, (max - mean) / max, of every
// assignment that respects the slots of `base` with `split` applied. Take
// the k heaviest big-slot items (W_k work, S_k slots) and the m workers
// holding them, ceil(S_k / s) <= m <= k for s big slots per worker. Their
// m * s slots hold, besides those items, other items in all but at most F
// of them (F: the big slots no item uses), which weigh at least the
// cheapest per slot of the rest (the LP relaxation). So one of them
// computes at least (W_k + fill(m * s - S_k - F)) / m, whichever m it is.
// O(I log I + K^2 s) for I items, K = min(I, N, kBoundItems).
double ComputeImbalanceLowerBound(const detail::ShardBase& base, const detail::HeavySplit& split,
                                  int32_t workers) {
  // The items of the split sharding: base's kept ones, then the sub-items.
  std::vector<const detail::ProtoItem*> items;
  for (size_t i = 0; i < base.items.size(); ++i)
    if (!split.removed[i]) items.push_back(&base.items[i]);
  for (const detail::ProtoItem& item : split.added) items.push_back(&item);
  double total = 0;
  int64_t used_slots = 0;
  std::vector<int32_t> big;  // big-slot items
  for (size_t i = 0; i < items.size(); ++i) {
    total += static_cast<double>(items[i]->work);
    if (items[i]->small) continue;
    used_slots += items[i]->slots;
    big.push_back(static_cast<int32_t>(i));
  }
  const double mean = total / workers;
  if (mean <= 0 || big.empty()) return 0;
  const int64_t slots = base.big_slots;
  const int64_t free_slots = static_cast<int64_t>(workers) * slots - used_slots;
  const auto work = [&](int32_t i) { return static_cast<double>(items[i]->work); };
  const auto per_slot = [&](int32_t i) { return work(i) / items[i]->slots; };
  const size_t k_max = std::min<size_t>({big.size(), kBoundItems, static_cast<size_t>(workers)});
  // The k_max heaviest, heaviest first, and enough of the cheapest per slot,
  // cheapest first, for k_max * s slots even without the heaviest (ties by
  // index: total orders, so the prefixes are those of a full sort).
  std::vector<int32_t> heavy = big, cheap = big;
  std::partial_sort(
      heavy.begin(), heavy.begin() + static_cast<std::ptrdiff_t>(k_max), heavy.end(),
      [&](int32_t a, int32_t b) { return work(a) != work(b) ? work(a) > work(b) : a < b; });
  heavy.resize(k_max);
  const size_t cheap_count = std::min(cheap.size(), k_max * static_cast<size_t>(slots) + k_max);
  std::partial_sort(cheap.begin(), cheap.begin() + static_cast<std::ptrdiff_t>(cheap_count),
                    cheap.end(), [&](int32_t a, int32_t b) {
                      return per_slot(a) != per_slot(b) ? per_slot(a) < per_slot(b) : a < b;
                    });
  cheap.resize(cheap_count);
  // fill[x]: least work of x slots of the items not among the k heaviest,
  // one slot at a time in cheap order. The heaviest are rarely cheap per
  // slot, so the prefix over all items serves until one of them falls in
  // the part a k uses; only then is it rebuilt without them.
  std::vector<uint8_t> in_top(items.size(), 0);
  std::vector<int32_t> cheap_rank(items.size(), std::numeric_limits<int32_t>::max());
  for (size_t c = 0; c < cheap.size(); ++c) cheap_rank[cheap[c]] = static_cast<int32_t>(c);
  std::vector<double> fill;
  std::vector<int32_t> fill_item;  // fill[x]'s item, x >= 1 (cheap order)
  const auto build_fill = [&](int64_t slots_wanted) {
    fill.assign(1, 0.0);
    fill_item.assign(1, -1);
    for (size_t c = 0; c < cheap.size() && static_cast<int64_t>(fill.size()) <= slots_wanted; ++c) {
      if (in_top[cheap[c]]) continue;
      for (int32_t x = 0; x < items[cheap[c]]->slots; ++x) {
        fill.push_back(fill.back() + per_slot(cheap[c]));
        fill_item.push_back(cheap[c]);
      }
    }
  };
  const int64_t fill_slots = static_cast<int64_t>(k_max) * slots;
  build_fill(fill_slots);
  // The cheapest rank of the top items still in fill (added since it was built).
  int32_t stale_rank = std::numeric_limits<int32_t>::max();
  double bound = 0, top_work = 0;
  int64_t top_slots = 0;
  for (size_t k = 1; k <= k_max; ++k) {
    const int32_t added = heavy[k - 1];
    in_top[added] = 1;
    stale_rank = std::min(stale_rank, cheap_rank[added]);
    top_work += work(added);
    top_slots += items[added]->slots;
    const int64_t m_min = std::max<int64_t>(1, (top_slots + slots - 1) / slots);
    const int64_t most_fill =
        std::max<int64_t>(0, static_cast<int64_t>(k) * slots - top_slots - free_slots);
    // A top item inside the prefix this k uses: rebuild fill without them.
    const int64_t used = std::min<int64_t>(most_fill, static_cast<int64_t>(fill.size()) - 1);
    if (used > 0 && stale_rank <= cheap_rank[fill_item[used]]) {
      build_fill(fill_slots);
      stale_rank = std::numeric_limits<int32_t>::max();
    }
    double least = std::numeric_limits<double>::infinity();
    for (int64_t m = m_min; m <= static_cast<int64_t>(k); ++m) {
      const int64_t needed = std::max<int64_t>(0, m * slots - top_slots - free_slots);
      // Fewer other items than slots to fill: no assignment has this m.
      if (needed >= static_cast<int64_t>(fill.size())) continue;
      least = std::min(least, (top_work + fill[needed]) / static_cast<double>(m));
    }
    if (least != std::numeric_limits<double>::infinity()) bound = std::max(bound, least);
  }
  return bound <= mean ? 0 : (bound - mean) / bound;
}

// The assignment's input for candidate `c` (its sharding and pairs).
detail::AssignmentInput InputOf(const Candidate& c, const std::vector<int64_t>& lengths,
                                const PlannerConfig& config, const Plan& header,
                                const Common& common) {
  detail::AssignmentInput input;
  input.workers = config.workers;
  input.sharding = &c.sharding;
  input.pairs = &c.pairs;
  input.lengths = &lengths;
  input.mask = header.mask;
  input.local_search_rounds = config.local_search_rounds;
  input.self_check = config.self_check;
  input.judge = JudgeOf(config, c.sharding.block_size);
  input.block_work.assign(c.sharding.blocks.size(), 0);
  for (const RequiredPair& p : c.pairs) input.block_work[p.q_block] += p.token_pairs;
  const std::vector<int64_t>& offsets = common.offsets;
  input.dataloader.reserve(c.sharding.items.size());
  for (const detail::Item& item : c.sharding.items) {
    const Segment& first = c.sharding.blocks[item.blocks.front()].segments.front();
    input.dataloader.push_back(
        DataloaderWorker(offsets.back(), config.workers, offsets[first.seq] + first.start));
  }
  return input;
}

// The candidate of `split`: its blocks, pairs, and the assignment's input
// and search (not run; with `shed_only`, one that can only Shed).
std::unique_ptr<Candidate> Shard(detail::HeavySplit split, const std::vector<int64_t>& lengths,
                                 const PlannerConfig& config, const Plan& header,
                                 const Common& common, bool shed_only = false) {
  auto c = std::make_unique<Candidate>();
  c->split = std::move(split);
  c->sharding = detail::FinishSharding(common.base, c->split, lengths);
  c->pairs = RequiredPairs(lengths, c->sharding.blocks, header.mask);
  c->input = InputOf(*c, lengths, config, header, common);
  c->input.shed_only = shed_only;
  c->search.emplace(c->input);
  return c;
}

// Shards and assigns a candidate.
std::unique_ptr<Candidate> Assign(detail::HeavySplit split, const std::vector<int64_t>& lengths,
                                  const PlannerConfig& config, const Plan& header,
                                  const Common& common) {
  std::unique_ptr<Candidate> c = Shard(std::move(split), lengths, config, header, common);
  c->assignment = c->search->Assign();
  return c;
}

// `c` with its pieces re-sized to level the workers that hold them
// (piece_sizing.h), the items kept on their workers and then refined by
// the local search; nothing when no size changes or the sizes promise
// less than kMinResizeGain.
std::unique_ptr<Candidate> ResizePieces(const Candidate& c, const std::vector<int64_t>& lengths,
                                        const PlannerConfig& config, const Plan& header,
                                        const Common& common) {
  const std::vector<detail::Item>& items = c.sharding.items;
  std::vector<int32_t> item_worker;
  item_worker.reserve(items.size());
  for (const detail::Item& item : items)
    item_worker.push_back(c.assignment.owner[item.blocks.front()]);
  // The sub-items come last, in the order of the splits (FinishSharding),
  // one per entry of split.added.
  const size_t sub_items = c.split.added.size();
  FCP_CHECK(sub_items <= items.size(), "planner: the sharding holds every sub-item");
  const std::vector<int32_t> sub_item_worker(
      item_worker.end() - static_cast<std::ptrdiff_t>(sub_items), item_worker.end());
  detail::HeavySplit split = c.split;
  const std::optional<double> predicted =
      detail::SizePieces(common.base, split, config.mask, sub_item_worker, c.assignment.compute);
  const double largest =
      *std::max_element(c.assignment.compute.begin(), c.assignment.compute.end());
  if (!predicted || *predicted > largest * (1 - kMinResizeGain)) return nullptr;
  detail::BuildSubItems(common.base, split, lengths, config.mask);
  std::unique_ptr<Candidate> out = Shard(std::move(split), lengths, config, header, common);
  FCP_CHECK(out->sharding.items.size() == items.size(), "planner: re-sizing keeps every item");
  std::vector<int32_t> owner(out->sharding.blocks.size());
  for (size_t i = 0; i < out->sharding.items.size(); ++i)
    for (int32_t block : out->sharding.items[i].blocks) owner[block] = item_worker[i];
  out->assignment = out->search->Refine(std::move(owner));
  return out;
}

}  // namespace

double FcpComputeImbalanceFloor(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  config.validate(lengths);
  const Plan header = PlanHeader(lengths, config, "fcp");
  const detail::ShardBase base = detail::ShardSteps123(lengths, config.block_size, header.token_cap,
                                                       config.workers, config.mask);
  return ComputeImbalanceLowerBound(
      base, detail::SplitHeavy(base, lengths, config.mask, config.heavy_fraction, config.max_split),
      config.workers);
}

Plan MakeFcpPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  config.validate(lengths);
  Plan plan = PlanHeader(lengths, config, "fcp");
  plan.planner_options = RecordedPlannerOptions(config);

  // 1-2. Shard and assign; with a network ratio, also with heavy blocks cut
  // in at most two pieces (less traffic, coarser balance), keeping the
  // detail::Better candidate (ties: the configured one).
  const Common common{detail::ShardSteps123(lengths, config.block_size, plan.token_cap,
                                            config.workers, config.mask),
                      SequenceOffsets(lengths)};
  const auto split = [&](int32_t max_split,
                         detail::PieceCounts counts = detail::PieceCounts::kPowersOfTwo) {
    return detail::SplitHeavy(common.base, lengths, config.mask, config.heavy_fraction, max_split,
                              counts);
  };
  const bool by_cost = config.Objective() != PlannerObjective::kBalance;
  const bool transparent = config.reshuffle_locality && by_cost;
  const detail::Judge judge = JudgeOf(config, common.base.block_size);
  // A plan's step cost with the reshuffle charged, its workers named by
  // `names` (the dataloader's: identity; the balanced plan's: its renaming).
  const double weight = ReshuffleTrafficTokens(config.attention);
  const auto step_cost = [&](const std::vector<Block>& blocks, const detail::Assignment& a,
                             const std::vector<int32_t>& names) {
    return StepCostOf(a, blocks, names, common.offsets, judge.pairs_per_traffic_token, weight,
                      config.node_workers);
  };
  std::vector<int32_t> identity(config.workers);
  std::iota(identity.begin(), identity.end(), 0);
  // The step estimate (fcp/step_estimate.h) of `blocks` (required pairs
  // `pairs`) owned as `a` says, its workers named by `names`, for the
  // configured hardware, with the reshuffle where the plan is for the
  // dataloader's layout.
  StepCosts costs = config.step_costs;
  costs.node_workers = config.node_workers;
  costs.reshuffle = config.reshuffle_locality;
  const auto estimate_us = [&](const std::vector<Block>& blocks,
                               const std::vector<RequiredPair>& pairs, const detail::Assignment& a,
                               const std::vector<int32_t>& names) {
    std::vector<int32_t> owner(a.owner.size());
    for (size_t k = 0; k < owner.size(); ++k) owner[k] = names[a.owner[k]];
    const detail::StepEstimateInput in{&lengths,       &blocks,        &owner,
                                       &pairs,         config.mask,    config.attention,
                                       config.workers, config.coalesce};
    return detail::EstimateStep(in, costs).total_us;
  };
  std::unique_ptr<Candidate> best = Assign(split(config.max_split), lengths, config, plan, common);
  // The home layout (issue 17): a sharding without zig-zag pairs (a
  // sequence's blocks stay on their dataloader workers), its items at home,
  // moved only where the search by cost with the reshuffle lowers the most
  // loaded worker. Compared with the balanced plan below, by the step cost
  // with the reshuffle charged.
  std::unique_ptr<Candidate> home;
  std::optional<Common> home_common;
  if (transparent && HomeImbalance(common.base, lengths, config.mask, common.offsets,
                                   config.workers) <= kHomeMaxImbalance) {
    home_common.emplace(Common{detail::ShardSteps123(lengths, config.block_size, plan.token_cap,
                                                     config.workers, config.mask,
                                                     /*zigzag=*/false),
                               common.offsets});
    // No heavy split: its fillers are cut from light items anywhere in the
    // batch, which moves them (docs/planner.md, step 7, the home layout).
    home = Shard(detail::SplitHeavy(home_common->base, lengths, config.mask, 0, 0), lengths, config,
                 plan, *home_common);
    home->assignment =
        home->search->Home(config.node_workers, judge.pairs_per_traffic_token * weight);
    // Sequences that each fit in a block: whole, at home, balanced by
    // exchanges of sequences (home_packing.h), where its step cost is lower.
    if (std::optional<detail::HomePacking> packed = detail::PackAtHome(
            lengths, config.mask, config.workers, plan.token_cap, home_common->base.block_size,
            config.node_workers, config.self_check)) {
      detail::Assignment a;
      for (const Block& b : packed->blocks) a.owner.push_back(b.worker);
      a.compute = std::move(packed->compute);
      a.traffic = std::move(packed->traffic);
      a.send = std::move(packed->send);
      if (step_cost(packed->blocks, a, identity).total() <
          step_cost(home->sharding.blocks, home->assignment, identity).total()) {
        home->sharding.blocks = std::move(packed->blocks);
        home->pairs = std::move(packed->pairs);
        home->assignment = std::move(a);
        home->search.reset();  // it indexes the blocks just replaced: none to misuse
      }
    }
  }
  // The shed layouts (issue 17): items each at home, the overloaded homes
  // shedding their densest items (Shed). Two shardings: the first
  // candidate's (Shed leaves its search as it was; the candidate is kept
  // alive should it be replaced below: Replace), and the same split with
  // each split item's fillers taken from its own dataloader node first, so
  // that a sub-item's pieces and filler share a home node and less of it
  // moves (built only where some filler differs; its search can only
  // Shed). Compared with the balanced plan below, by the step estimate.
  struct Layout {
    Candidate* source;  // its blocks and pairs
    detail::Assignment assignment;
  };
  std::vector<Layout> sheds;
  std::unique_ptr<Candidate> first_source, local_source;  // first_source: once replaced
  const Candidate* const first = best.get();
  // slot = c, the first candidate kept alive in first_source if it was slot's.
  const auto replace = [&](std::unique_ptr<Candidate>& slot, std::unique_ptr<Candidate> c) {
    if (slot.get() == first && !sheds.empty()) first_source = std::move(slot);
    slot = std::move(c);
  };
  if (transparent && !home && config.workers <= kShedMaxWorkers) {
    sheds.push_back(Layout{best.get(), best->search->Shed(config.node_workers)});
    const std::vector<int32_t> nodes =
        DataloaderNodes(common.base, common.offsets, config.workers, config.node_workers);
    detail::HeavySplit local =
        detail::SplitHeavy(common.base, lengths, config.mask, config.heavy_fraction,
                           config.max_split, detail::PieceCounts::kPowersOfTwo, &nodes);
    const auto same_fillers = [&] {
      if (local.splits.size() != best->split.splits.size()) return false;
      for (size_t k = 0; k < local.splits.size(); ++k)
        if (local.splits[k].fillers != best->split.splits[k].fillers) return false;
      return true;
    };
    if (!same_fillers()) {
      local_source = Shard(std::move(local), lengths, config, plan, common, /*shed_only=*/true);
      sheds.push_back(Layout{local_source.get(), local_source->search->Shed(config.node_workers)});
    }
  }
  const bool shed = !sheds.empty();
  if (by_cost && config.heavy_fraction > 0 && config.max_split > 2) {
    detail::HeavySplit coarse_split = split(2);
    // Exact pruning. When the lower bound on its compute imbalance breaks
    // the imbalance bound, every coarse plan is outside it, and Better
    // ranks it below a best within it, and below a best outside it that is
    // no less balanced (the larger imbalance decides). It prunes where heavy
    // blocks in two pieces cannot be balanced: most large batches
    // (docs/planner-benchmark.md, exact pruning).
    const double least_imbalance =
        ComputeImbalanceLowerBound(common.base, coarse_split, config.workers);
    const bool cannot_win = least_imbalance > config.max_imbalance + kBoundMargin &&
                            (detail::WithinBound(best->assignment, judge) ||
                             least_imbalance > detail::Cost(best->assignment, 0) + kBoundMargin);
    // The self-check assigns it anyway and checks that it loses.
    if (!cannot_win || config.self_check) {
      std::unique_ptr<Candidate> coarse =
          Assign(std::move(coarse_split), lengths, config, plan, common);
      const bool better = detail::Better(coarse->assignment, best->assignment, judge);
      FCP_CHECK(!(better && cannot_win), "planner: a pruned candidate would have won");
      if (better) replace(best, std::move(coarse));
    }
  }
  // A plan outside the imbalance bound (at most kResizeAbove): its split
  // items re-sized to level their workers, kept when Better, for up to
  // kResizeRounds rounds (each round starts from the sizes the last one
  // left). Plans within it are left alone: sizing every plan lowered their
  // imbalances but not their simulated time, for more planning time
  // (docs/planner.md, step 6).
  detail::Judge resize_judge = judge;
  resize_judge.max_imbalance = std::min(judge.max_imbalance, kResizeAbove);
  const auto resize = [&](std::unique_ptr<Candidate> c) {
    for (int round = 0; round < kResizeRounds && !detail::WithinBound(c->assignment, resize_judge);
         ++round) {
      std::unique_ptr<Candidate> resized = ResizePieces(*c, lengths, config, plan, common);
      if (!resized || !detail::Better(resized->assignment, c->assignment, judge)) break;
      replace(c, std::move(resized));
    }
    return c;
  };
  best = resize(std::move(best));
  // A plan still outside the configured bound: heavy items cut into any
  // number of pieces up to each rescue limit in turn, until one is within
  // it (the fewest pieces first: they move the least K/V). A limit whose
  // equal pieces cannot be balanced (compute lower bound) is skipped.
  if (config.workers <= kRescueMaxWorkers && config.heavy_fraction > 0 && config.max_split >= 2) {
    for (int32_t limit : kRescueLimits) {
      const bool pieces_too_small = common.base.block_size / limit < detail::kMinPieceTokens;
      if (limit > config.rescue_max_split || pieces_too_small) break;
      if (detail::WithinBound(best->assignment, judge)) break;
      detail::HeavySplit rescue_split = split(limit, detail::PieceCounts::kAny);
      const bool hopeless = ComputeImbalanceLowerBound(common.base, rescue_split, config.workers) >
                            config.max_imbalance + kBoundMargin;
      // The self-check assigns it anyway and checks the bound (before piece
      // sizing, which the lower bound does not cover).
      if (hopeless && !config.self_check) continue;
      std::unique_ptr<Candidate> rescue =
          Assign(std::move(rescue_split), lengths, config, plan, common);
      FCP_CHECK(!(hopeless && detail::WithinBound(rescue->assignment, judge)),
                "planner: a candidate beyond its compute lower bound is within the bound");
      if (hopeless) continue;
      rescue = resize(std::move(rescue));
      if (detail::Better(rescue->assignment, best->assignment, judge))
        replace(best, std::move(rescue));
    }
  }
  // A plan within the bound on compute but not on traffic (the search may
  // leave it there: its cost balanced, a traffic excess under one block's
  // K/V, a few workers with little traffic lowering the mean): traffic
  // leveling. (Time mode has no bound to be outside of.)
  if (config.traffic_leveling && Imbalance(best->assignment.compute) <= judge.max_imbalance &&
      Imbalance(best->assignment.traffic) > judge.max_imbalance)
    best->assignment = best->search->Level(std::move(best->assignment));
  // Workers are interchangeable for balance; renaming them so that each keeps
  // as many of its dataloader tokens as possible shrinks the reshuffle. Then
  // exchanges bring more blocks home under that renaming without raising
  // any load's maximum (on the chosen plan only: run on every candidate they
  // cost planning time and can steer piece sizing to a slower plan;
  // docs/planner.md, open problem: the reshuffle).
  std::vector<int32_t> rename = detail::LocalityRenaming(
      best->sharding.blocks, best->assignment.owner, lengths, config.workers);
  // The balanced plan's step cost before the exchanges too: the home layout
  // must beat both (so that it is never chosen over a plan the exchanges
  // made worse by this measure).
  const StepCost unexchanged =
      home ? step_cost(best->sharding.blocks, best->assignment, rename) : StepCost{};
  if (config.reshuffle_locality)
    best->assignment = best->search->Localize(std::move(best->assignment), rename);
  // The home layout instead where it is cheaper and its busiest reshuffle
  // at most kHomeReshuffleShare of the balanced plan's: where the proxy's
  // reshuffle term decides. Closer calls it misjudges: a home layout that
  // still moves much puts heavy blocks on few workers, which then wait
  // longest for their inputs (docs/planner.md, step 7, the home layout).
  // A shed layout (built where the home layout is not) instead where its
  // step estimate with the reshuffle is lower by kShedEstimateMargin.
  // What the plan is built from: the balanced plan, or a layout.
  std::vector<Block>* blocks = &best->sharding.blocks;
  const std::vector<RequiredPair>* pairs = &best->pairs;
  const detail::Assignment* chosen = &best->assignment;
  int64_t block_size = best->sharding.block_size;
  if (home || shed) {
    // The shed layout whose estimate beats the least so far (the balanced
    // plan's, renamed and exchanged, then the sheds' in order) by
    // kShedEstimateMargin, if any.
    size_t pick = 0;
    bool wins = false;
    if (shed) {
      double least = estimate_us(best->sharding.blocks, best->pairs, best->assignment, rename);
      for (size_t k = 0; k < sheds.size(); ++k) {
        const Candidate& source = *sheds[k].source;
        const double us =
            estimate_us(source.sharding.blocks, source.pairs, sheds[k].assignment, identity);
        if (us < least * (1 - kShedEstimateMargin)) {
          least = us;
          pick = k;
          wins = true;
        }
      }
    }
    std::vector<Block>& layout_blocks =
        home ? home->sharding.blocks : sheds[pick].source->sharding.blocks;
    const std::vector<RequiredPair>& layout_pairs = home ? home->pairs : sheds[pick].source->pairs;
    const detail::Assignment& layout = home ? home->assignment : sheds[pick].assignment;
    if (home) {
      StepCost balanced = step_cost(best->sharding.blocks, best->assignment, rename);
      if (unexchanged.total() < balanced.total()) balanced = unexchanged;
      const StepCost at_home = step_cost(layout_blocks, layout, identity);
      wins = at_home.total() < balanced.total() &&
             at_home.reshuffle <= balanced.reshuffle * kHomeReshuffleShare;
    }
    if (wins) {
      blocks = &layout_blocks;
      pairs = &layout_pairs;
      chosen = &layout;
      if (home) block_size = home->sharding.block_size;
      rename = identity;
    }
  }
  // With no reshuffle charged (the dataloader adopts the plan), a batch
  // whose sequences all fit in a block: its sequences whole, dealt and
  // exchanged at sequence granularity (PackWhole), instead where its step
  // cost is lower. The balanced plan packs them into block slots in batch
  // order and cuts those across a slot boundary, so its items are whole
  // slots: a coarser balance, and a cut sequence computes its second
  // piece a stage later.
  std::optional<detail::HomePacking> whole;
  detail::Assignment whole_assignment;
  if (by_cost && !config.reshuffle_locality &&
      (whole = detail::PackWhole(lengths, config.mask, config.workers, plan.token_cap,
                                 common.base.block_size, config.self_check))) {
    for (const Block& b : whole->blocks) whole_assignment.owner.push_back(b.worker);
    whole_assignment.compute = std::move(whole->compute);
    whole_assignment.traffic = std::move(whole->traffic);
    whole_assignment.send = std::move(whole->send);
    if (step_cost(whole->blocks, whole_assignment, identity).base <
        step_cost(*blocks, *chosen, rename).base) {
      blocks = &whole->blocks;
      pairs = &whole->pairs;
      chosen = &whole_assignment;
      block_size = common.base.block_size;
      rename = identity;
    }
  }
  plan.block_size = block_size;
  plan.blocks = std::move(*blocks);
  for (size_t b = 0; b < plan.blocks.size(); ++b) plan.blocks[b].worker = rename[chosen->owner[b]];
  // Short sequences back to their dataloader workers where the compute
  // allows (short_rehoming.h): the blocks change, so do their pairs.
  // The home layout is already at home; its packing is balanced by
  // exchanges this pass would undo. Kept only where it helps without
  // breaking the plan's balance promise (below).
  std::vector<RequiredPair> rehomed_pairs;
  std::optional<std::vector<Block>> rehomed;
  if (config.reshuffle_locality && !(home && chosen == &home->assignment))
    rehomed = detail::RehomeShortSequences(lengths, config.mask, plan.blocks, config.workers,
                                           block_size, config.node_workers);
  if (rehomed) {
    rehomed_pairs = RequiredPairs(lengths, *rehomed, config.mask);
    const detail::BlockLoads before = detail::CountBlockLoads(plan.blocks, *pairs, config.workers);
    const detail::BlockLoads after =
        detail::CountBlockLoads(*rehomed, rehomed_pairs, config.workers);
    if (config.self_check)
      FCP_CHECK(after.tokens == before.tokens,
                "planner: short-sequence rehoming changed a worker's token count");
    const auto largest = [](const auto& v) { return *std::max_element(v.begin(), v.end()); };
    // Fewer tokens away from home, no maximum higher, and the traffic
    // within the bound where it was (less traffic at the same maximum reads
    // as more imbalance; where the plan was outside the bound, a shed
    // layout, only the maximum counts).
    const bool traffic_held = Imbalance(after.traffic) <= judge.max_imbalance ||
                              Imbalance(before.traffic) > judge.max_imbalance;
    if (TokensAway(*rehomed, common.offsets, config.workers) <
            TokensAway(plan.blocks, common.offsets, config.workers) &&
        largest(after.compute) <= largest(before.compute) &&
        largest(after.traffic) <= largest(before.traffic) && traffic_held) {
      plan.blocks = std::move(*rehomed);
      pairs = &rehomed_pairs;
    }
  }

  // 3-5. Transfer graph, colouring, coalesced forward and backward stages.
  BuildStages(plan, *pairs, config.self_check);
  // 11. Relays through the node, in the stages just built.
  if (config.node_relays)
    RelayThroughNodes(plan, config.node_workers, *pairs, config.network_flops_per_byte);
  return plan;
}

}  // namespace fcp
