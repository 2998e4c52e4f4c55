#include <algorithm>
#include <future>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>

#include "assignment.h"
#include "assignment_context.h"
#include "concurrently.h"
#include "fcp/error.h"
#include "fcp/node_relays.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/required_pairs.h"
#include "fcp/schedule.h"
#include "fcp/step_estimate_input.h"
#include "home_packing.h"
#include "piece_sizing.h"
#include "planner_constants.h"
#include "sharding.h"
#include "short_rehoming.h"

namespace fcp {

namespace {

// The tuning constants (planner_constants.h) this file uses.
using detail::kBoundItems;
using detail::kBoundMargin;
using detail::kHomeMaxImbalance;
using detail::kHomeReshuffleShare;
using detail::kMinResizeGain;
using detail::kRescueLimits;
using detail::kRescueMaxWorkers;
using detail::kReshuffleExposed;
using detail::kResizeAbove;
using detail::kResizeRounds;
using detail::kShedEstimateMargin;
using detail::kShedMaxWorkers;

using detail::Concurrently;

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

// `a` with its traffic and send counted as row ranges move them: each K/V
// block once from its owner to every other worker computing with it, the
// rows that worker attends (AttendedSpans), not the whole block. Equal to
// `a` where every receiver attends whole blocks (the causal mask).
detail::Assignment WithAttendedTraffic(detail::Assignment a, const std::vector<Block>& blocks,
                                       const std::vector<RequiredPair>& pairs,
                                       const std::vector<int64_t>& lengths, const Mask& mask) {
  std::fill(a.traffic.begin(), a.traffic.end(), 0.0);
  std::fill(a.send.begin(), a.send.end(), 0.0);
  if (a.send.empty()) a.send.assign(a.traffic.size(), 0.0);
  for (const AttendedSpan& s : AttendedSpans(lengths, blocks, a.owner, mask, pairs)) {
    const double rows = static_cast<double>(s.rows.size());
    a.traffic[s.worker] += rows;
    a.traffic[a.owner[s.kv_block]] += rows;
    a.send[a.owner[s.kv_block]] += rows;
  }
  return a;
}

template <typename Values>
auto Largest(const Values& v) {
  return *std::max_element(v.begin(), v.end());
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

// Shards and assigns a candidate (`spare_core`: AssignmentSearch::Assign's).
std::unique_ptr<Candidate> Assign(detail::HeavySplit split, const std::vector<int64_t>& lengths,
                                  const PlannerConfig& config, const Plan& header,
                                  const Common& common, bool spare_core) {
  std::unique_ptr<Candidate> c = Shard(std::move(split), lengths, config, header, common);
  c->assignment = c->search->Assign(spare_core);
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

// The pipeline's shared state (MakeFcpPlan): the batch, the settings, the
// sharding steps 1-3 every candidate starts from, and the measures that
// rank candidates.
struct Pipeline {
  Pipeline(const std::vector<int64_t>& lengths_in, const PlannerConfig& config_in,
           const Plan& header_in)
      : lengths(lengths_in),
        config(config_in),
        header(header_in),
        common{detail::ShardSteps123(lengths, config.block_size, header.token_cap, config.workers,
                                     config.mask),
               SequenceOffsets(lengths)},
        by_cost(config.Objective() != PlannerObjective::kBalance),
        transparent(config.reshuffle_locality && by_cost),
        judge(JudgeOf(config, common.base.block_size)),
        weight(ReshuffleTrafficTokens(config.attention)),
        identity(config.workers),
        costs(config.step_costs) {
    std::iota(identity.begin(), identity.end(), 0);
    costs.node_workers = config.node_workers;
    costs.reshuffle = config.reshuffle_locality;
  }

  // The heavy split at `max_split` pieces.
  detail::HeavySplit Split(int32_t max_split,
                           detail::PieceCounts counts = detail::PieceCounts::kPowersOfTwo) const {
    return detail::SplitHeavy(common.base, lengths, config.mask, config.heavy_fraction, max_split,
                              counts);
  }
  // A plan's step cost with the reshuffle charged, its workers named by
  // `names` (the dataloader's: identity; the balanced plan's: its renaming).
  StepCost StepCostOf(const std::vector<Block>& blocks, const detail::Assignment& a,
                      const std::vector<int32_t>& names) const {
    return fcp::StepCostOf(a, blocks, names, common.offsets, judge.pairs_per_traffic_token, weight,
                           config.node_workers);
  }
  // The step estimate (fcp/step_estimate.h) of `blocks` (required pairs
  // `pairs`) owned as `a` says, its workers named by `names`, for the
  // configured hardware, with the reshuffle where the plan is for the
  // dataloader's layout.
  double EstimateUs(const std::vector<Block>& blocks, const std::vector<RequiredPair>& pairs,
                    const detail::Assignment& a, const std::vector<int32_t>& names) const {
    std::vector<int32_t> owner(a.owner.size());
    for (size_t k = 0; k < owner.size(); ++k) owner[k] = names[a.owner[k]];
    const detail::StepEstimateInput in{&lengths,       &blocks,        &owner,
                                       &pairs,         config.mask,    config.attention,
                                       config.workers, config.coalesce};
    return detail::EstimateStep(in, costs).total_us;
  }

  const std::vector<int64_t>& lengths;
  const PlannerConfig& config;
  const Plan& header;
  const Common common;
  const bool by_cost;      // a network ratio: not balance mode
  const bool transparent;  // by cost, with the reshuffle charged
  const detail::Judge judge;
  const double weight;  // a reshuffle token in forward K/V tokens (ReshuffleTrafficTokens)
  std::vector<int32_t> identity;
  StepCosts costs;
};

// An assignment of blocks whose owners were placed by a packing, not a
// search.
detail::Assignment PackedAssignment(detail::HomePacking& packed) {
  detail::Assignment a;
  for (const Block& b : packed.blocks) a.owner.push_back(b.worker);
  a.compute = std::move(packed.compute);
  a.traffic = std::move(packed.traffic);
  a.send = std::move(packed.send);
  return a;
}

// Generator: the home layout (issue 17), with the reshuffle charged and a
// nearly balanced dataloader layout; else null. A sharding without zig-zag
// pairs (a sequence's blocks stay on their dataloader workers), its items
// at home, moved only where the search by cost with the reshuffle lowers
// the most loaded worker; or, where every sequence fits in a block and its
// step cost is lower, the sequences whole, at home, balanced by exchanges
// of sequences (home_packing.h; its search then reset).
std::unique_ptr<Candidate> HomeLayout(const Pipeline& p) {
  const PlannerConfig& config = p.config;
  if (!p.transparent || HomeImbalance(p.common.base, p.lengths, config.mask, p.common.offsets,
                                      config.workers) > kHomeMaxImbalance)
    return nullptr;
  // Its own shard steps 1-3 (no zig-zag pairs), needed only while it is
  // sharded: the candidate copies what its search reads.
  const Common home_common{detail::ShardSteps123(p.lengths, config.block_size, p.header.token_cap,
                                                 config.workers, config.mask, /*zigzag=*/false),
                           p.common.offsets};
  // No heavy split: its fillers are cut from light items anywhere in the
  // batch, which moves them (docs/planner.md, step 7, the home layout).
  std::unique_ptr<Candidate> home =
      Shard(detail::SplitHeavy(home_common.base, p.lengths, config.mask, 0, 0), p.lengths, config,
            p.header, home_common);
  home->assignment =
      home->search->Home(config.node_workers, p.judge.pairs_per_traffic_token * p.weight);
  if (std::optional<detail::HomePacking> packed =
          detail::PackAtHome(p.lengths, config.mask, config.workers, p.header.token_cap,
                             home_common.base.block_size, config.node_workers, config.self_check)) {
    detail::Assignment a = PackedAssignment(*packed);
    if (p.StepCostOf(packed->blocks, a, p.identity).total() <
        p.StepCostOf(home->sharding.blocks, home->assignment, p.identity).total()) {
      home->sharding.blocks = std::move(packed->blocks);
      home->pairs = std::move(packed->pairs);
      home->assignment = std::move(a);
      home->search.reset();  // it indexes the blocks just replaced: none to misuse
    }
  }
  return home;
}

// Generator: with no reshuffle charged (the dataloader adopts the plan), a
// batch whose sequences all fit in a block: its sequences whole, dealt and
// exchanged at sequence granularity (PackWhole). The balanced plan packs
// them into block slots in batch order and cuts those across a slot
// boundary, so its items are whole slots: a coarser balance, and a cut
// sequence computes its second piece a stage later.
struct Whole {
  detail::HomePacking packing;
  detail::Assignment assignment;
};
std::optional<Whole> WholeLayout(const Pipeline& p) {
  const PlannerConfig& config = p.config;
  if (!p.by_cost || config.reshuffle_locality) return std::nullopt;
  std::optional<detail::HomePacking> packed =
      detail::PackWhole(p.lengths, config.mask, config.workers, p.header.token_cap,
                        p.common.base.block_size, config.self_check);
  if (!packed) return std::nullopt;
  Whole whole{std::move(*packed), {}};
  whole.assignment = PackedAssignment(whole.packing);
  return whole;
}

// Generator: the balanced plan. The configured split, assigned; with a
// network ratio also heavy blocks in at most two pieces; piece sizing and
// the rescue limits where the plan is outside the bound; the Better kept
// at each step (ties: the incumbent). `first` keeps the first candidate
// alive when it is replaced and `sheds` (the shed layouts start from it;
// the local one is made on a second thread meanwhile, so the assignments
// here use a second core only without them).
struct Balanced {
  std::unique_ptr<Candidate> best, first;
  Candidate& First() { return first ? *first : *best; }
};
Balanced BalancedPlan(const Pipeline& p, bool sheds) {
  const PlannerConfig& config = p.config;
  const detail::Judge& judge = p.judge;
  Balanced out;
  out.best = Assign(p.Split(config.max_split), p.lengths, config, p.header, p.common, !sheds);
  const Candidate* const first = out.best.get();
  // slot = c, the first candidate kept alive in out.first if it was slot's.
  const auto replace = [&](std::unique_ptr<Candidate>& slot, std::unique_ptr<Candidate> c) {
    if (slot.get() == first && sheds) out.first = std::move(slot);
    slot = std::move(c);
  };
  std::unique_ptr<Candidate>& best = out.best;
  if (p.by_cost && config.heavy_fraction > 0 && config.max_split > 2) {
    detail::HeavySplit coarse_split = p.Split(2);
    // Exact pruning. When the lower bound on its compute imbalance breaks
    // the imbalance bound, every coarse plan is outside it, and Better
    // ranks it below a best within it, and below a best outside it that is
    // no less balanced (the larger imbalance decides). It prunes where heavy
    // blocks in two pieces cannot be balanced: most large batches
    // (docs/planner-benchmark.md, exact pruning).
    const double least_imbalance =
        ComputeImbalanceLowerBound(p.common.base, coarse_split, config.workers);
    const bool cannot_win = least_imbalance > config.max_imbalance + kBoundMargin &&
                            (detail::WithinBound(best->assignment, judge) ||
                             least_imbalance > detail::Cost(best->assignment, 0) + kBoundMargin);
    // The self-check assigns it anyway and checks that it loses.
    if (!cannot_win || config.self_check) {
      std::unique_ptr<Candidate> coarse =
          Assign(std::move(coarse_split), p.lengths, config, p.header, p.common, !sheds);
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
      std::unique_ptr<Candidate> resized = ResizePieces(*c, p.lengths, config, p.header, p.common);
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
      const bool pieces_too_small = p.common.base.block_size / limit < detail::kMinPieceTokens;
      if (limit > config.rescue_max_split || pieces_too_small) break;
      if (detail::WithinBound(best->assignment, judge)) break;
      detail::HeavySplit rescue_split = p.Split(limit, detail::PieceCounts::kAny);
      const bool hopeless =
          ComputeImbalanceLowerBound(p.common.base, rescue_split, config.workers) >
          config.max_imbalance + kBoundMargin;
      // The self-check assigns it anyway and checks the bound (before piece
      // sizing, which the lower bound does not cover).
      if (hopeless && !config.self_check) continue;
      std::unique_ptr<Candidate> rescue =
          Assign(std::move(rescue_split), p.lengths, config, p.header, p.common, !sheds);
      FCP_CHECK(!(hopeless && detail::WithinBound(rescue->assignment, judge)),
                "planner: a candidate beyond its compute lower bound is within the bound");
      if (hopeless) continue;
      rescue = resize(std::move(rescue));
      if (detail::Better(rescue->assignment, best->assignment, judge))
        replace(best, std::move(rescue));
    }
  }
  return out;
}

// Generator: the shed layouts (issue 17), items each at home, the
// overloaded homes shedding their densest items (Shed), each with its step
// estimate (identity names, the reshuffle charged). Two shardings: the
// first balanced candidate's (Shed leaves its search as it was), and the
// same split with each split item's fillers taken from its own dataloader
// node first, so that a sub-item's pieces and filler share a home node and
// less of it moves (LocalShed: built only where some filler differs; its
// search can only Shed, and `local` keeps it).
struct Layout {
  Candidate* source;  // its blocks and pairs
  detail::Assignment assignment;
  double estimate_us = 0;
};
struct Sheds {
  std::unique_ptr<Candidate> local;
  // The first candidate's layout, made and estimated on a thread of its
  // own while the balanced plan is improved and estimated; Rank puts it
  // before the local one in `layouts`.
  std::future<Layout> first;
  std::vector<Layout> layouts;
};
double LayoutEstimateUs(const Pipeline& p, const Layout& layout) {
  return p.EstimateUs(layout.source->sharding.blocks, layout.source->pairs, layout.assignment,
                      p.identity);
}
// The local shed layout, estimated; nothing where its fillers are the
// configured split's. It needs no balanced candidate: MakeFcpPlan builds
// it on a thread of its own while the balanced plan is assigned.
struct LocalShed {
  std::unique_ptr<Candidate> candidate;
  Layout layout;
};
std::optional<LocalShed> LocalShedLayout(const Pipeline& p) {
  const PlannerConfig& config = p.config;
  const detail::HeavySplit configured = p.Split(config.max_split);  // the first candidate's
  const std::vector<int32_t> nodes =
      DataloaderNodes(p.common.base, p.common.offsets, config.workers, config.node_workers);
  detail::HeavySplit local =
      detail::SplitHeavy(p.common.base, p.lengths, config.mask, config.heavy_fraction,
                         config.max_split, detail::PieceCounts::kPowersOfTwo, &nodes);
  const auto same_fillers = [&] {
    if (local.splits.size() != configured.splits.size()) return false;
    for (size_t k = 0; k < local.splits.size(); ++k)
      if (local.splits[k].fillers != configured.splits[k].fillers) return false;
    return true;
  };
  if (same_fillers()) return std::nullopt;
  LocalShed out;
  out.candidate =
      Shard(std::move(local), p.lengths, config, p.header, p.common, /*shed_only=*/true);
  out.layout = Layout{out.candidate.get(), out.candidate->search->Shed(config.node_workers)};
  out.layout.estimate_us = LayoutEstimateUs(p, out.layout);
  return out;
}
// The first candidate's shed layout, started on a thread of its own (Shed
// only reads the candidate's search context, the estimate its blocks and
// pairs; Improve writes the search's load model and engine and the
// candidate's assignment), and the local one.
Sheds ShedLayouts(const Pipeline& p, Candidate& first, std::optional<LocalShed> local) {
  Sheds sheds;
  sheds.first = Concurrently([&p, &first] {
    Layout layout{&first, first.search->Shed(p.config.node_workers)};
    layout.estimate_us = LayoutEstimateUs(p, layout);
    return layout;
  });
  if (local) {
    sheds.local = std::move(local->candidate);
    sheds.layouts.push_back(std::move(local->layout));
  }
  return sheds;
}

// The balanced plan improved in place: traffic leveling where it is within
// the bound on compute but not on traffic (the search may leave it there:
// its cost balanced, a traffic excess under one block's K/V, a few workers
// with little traffic lowering the mean; time mode has no bound to be
// outside of); its workers renamed so that each keeps as many of its
// dataloader tokens as possible (they are interchangeable for balance);
// with the reshuffle, exchanges that bring more blocks home under that
// renaming without raising any load's maximum (on the chosen plan only:
// run on every candidate they cost planning time and can steer piece
// sizing to a slower plan; docs/planner.md, open problem: the reshuffle).
// Also its step cost before the exchanges, where a home layout is to beat
// both (so that it is never chosen over a plan the exchanges made worse by
// this measure).
struct Improved {
  std::vector<int32_t> rename;
  StepCost unexchanged;
};
Improved Improve(const Pipeline& p, Candidate& best, bool home) {
  const PlannerConfig& config = p.config;
  // With row ranges leveling runs only where the traffic is outside the
  // bound counted both ways: in whole blocks, as its exchanges count it,
  // and in the rows that will move. It is kept only where, counted in
  // rows, it raises neither the largest traffic nor the largest cost
  // (compute + ratio x traffic; balance mode has no cost to keep) and
  // lowers the traffic imbalance: its promise in the bytes the plan moves.
  // (Run on the rows' imbalance alone, it also leveled plans whose blocks
  // are within the bound: pareto at N = 64 under a window of 4096, the
  // reshuffle overlapped, 2.0% slower, heavy-tailed sigma 2.0 at N = 16
  // 2.7% faster; docs/plan-format.md, "Who emits them".)
  const auto attended = [&](const detail::Assignment& a) {
    return WithAttendedTraffic(a, best.sharding.blocks, best.pairs, p.lengths, config.mask);
  };
  if (config.traffic_leveling && Imbalance(best.assignment.compute) <= p.judge.max_imbalance &&
      Imbalance(best.assignment.traffic) > p.judge.max_imbalance) {
    // Counted only here: most plans are within the bound in whole blocks.
    const std::optional<detail::Assignment> moved =
        config.row_ranges ? std::optional(attended(best.assignment)) : std::nullopt;
    if (!moved || Imbalance(moved->traffic) > p.judge.max_imbalance) {
      detail::Assignment leveled = best.search->Level(best.assignment);
      if (moved) {
        detail::Assignment after = attended(leveled), before = *moved;
        after.send.clear();  // the cost by sent + received, as leveling judges it
        before.send.clear();
        const double r = p.judge.pairs_per_traffic_token;
        const bool holds = Largest(after.traffic) <= Largest(before.traffic) &&
                           (r == 0 || detail::Cost(after, r) <= detail::Cost(before, r)) &&
                           Imbalance(after.traffic) < Imbalance(before.traffic);
        if (!holds) leveled = best.assignment;
      }
      best.assignment = std::move(leveled);
    }
  }
  Improved out;
  out.rename = detail::LocalityRenaming(best.sharding.blocks, best.assignment.owner, p.lengths,
                                        config.workers);
  if (home) out.unexchanged = p.StepCostOf(best.sharding.blocks, best.assignment, out.rename);
  if (config.reshuffle_locality)
    best.assignment = best.search->Localize(std::move(best.assignment), out.rename);
  return out;
}

// What the plan is built from: one complete candidate, its workers named
// as in the plan.
struct Choice {
  std::vector<Block>* blocks;
  std::vector<RequiredPair>* pairs;  // Place moves them out
  const detail::Assignment* assignment;
  int64_t block_size;
  std::vector<int32_t> names;
  bool home;  // the home layout: already at home
};

// Ranks the improved balanced plan against the layouts (built for one mode
// each: home or shed with the reshuffle charged, whole without). The home
// layout where its step cost is lower and its busiest reshuffle at most
// kHomeReshuffleShare of the balanced plan's: where the proxy's reshuffle
// term decides (closer calls it misjudges: a home layout that still moves
// much puts heavy blocks on few workers, which then wait longest for their
// inputs; docs/planner.md, step 7, the home layout). The shed layout whose
// step estimate with the reshuffle beats the least so far (the balanced
// plan's, then the sheds' in order) by kShedEstimateMargin. The whole
// packing where its step cost without the reshuffle is lower.
Choice Rank(const Pipeline& p, Candidate& best, const Improved& improved, Candidate* home,
            Sheds& sheds, std::optional<Whole>& whole) {
  Choice choice{&best.sharding.blocks,    &best.pairs,     &best.assignment,
                best.sharding.block_size, improved.rename, false};
  if (home) {
    StepCost balanced = p.StepCostOf(best.sharding.blocks, best.assignment, improved.rename);
    if (improved.unexchanged.total() < balanced.total()) balanced = improved.unexchanged;
    const StepCost at_home = p.StepCostOf(home->sharding.blocks, home->assignment, p.identity);
    if (at_home.total() < balanced.total() &&
        at_home.reshuffle <= balanced.reshuffle * kHomeReshuffleShare)
      choice = Choice{&home->sharding.blocks,    &home->pairs, &home->assignment,
                      home->sharding.block_size, p.identity,   true};
  }
  if (sheds.first.valid()) {
    // The balanced plan's estimate while the first shed layout's thread
    // finishes.
    double least = p.EstimateUs(best.sharding.blocks, best.pairs, best.assignment, improved.rename);
    sheds.layouts.insert(sheds.layouts.begin(), sheds.first.get());
    for (Layout& layout : sheds.layouts) {
      Candidate& source = *layout.source;
      const double us = layout.estimate_us;
      if (us < least * (1 - kShedEstimateMargin)) {
        least = us;
        choice = Choice{&source.sharding.blocks,  &source.pairs, &layout.assignment,
                        best.sharding.block_size, p.identity,    false};
      }
    }
  }
  if (whole && p.StepCostOf(whole->packing.blocks, whole->assignment, p.identity).base <
                   p.StepCostOf(*choice.blocks, *choice.assignment, choice.names).base)
    choice = Choice{&whole->packing.blocks,
                    &whole->packing.pairs,
                    &whole->assignment,
                    p.common.base.block_size,
                    p.identity,
                    false};
  return choice;
}

// The choice's blocks into `plan`, their workers named; then, with the
// reshuffle charged and on any plan but the home layout (already at home;
// its packing is balanced by exchanges this pass would undo), short
// sequences back to their dataloader workers where the compute allows
// (short_rehoming.h), kept only where fewer tokens are away from home, no
// maximum is higher, and the traffic is within the bound where it was
// (less traffic at the same maximum reads as more imbalance; where the
// plan was outside the bound, a shed layout, only the maximum counts).
// Returns the plan's required pairs (the choice's moved out, or the
// rehomed blocks'); the blocks re-dealt and not kept, or those the
// re-dealt replaced, go to `dropped` (for the caller to release).
std::vector<RequiredPair> Place(const Pipeline& p, Choice& choice, Plan& plan,
                                std::vector<Block>& dropped) {
  const PlannerConfig& config = p.config;
  plan.block_size = choice.block_size;
  plan.blocks = std::move(*choice.blocks);
  for (size_t b = 0; b < plan.blocks.size(); ++b)
    plan.blocks[b].worker = choice.names[choice.assignment->owner[b]];
  if (!config.reshuffle_locality || choice.home) return std::move(*choice.pairs);
  if (!detail::HasShortSequences(p.lengths, choice.block_size)) return std::move(*choice.pairs);
  // The plan's loads and tokens away as placed, measured on a thread of
  // their own while the short sequences are re-dealt (both only read the
  // blocks).
  struct Measures {
    detail::BlockLoads loads;
    int64_t away = 0;
  };
  const auto measure = [&p, &config](const std::vector<Block>& blocks,
                                     const std::vector<RequiredPair>& pairs) {
    return Measures{detail::CountBlockLoads(blocks, pairs, config.workers),
                    TokensAway(blocks, p.common.offsets, config.workers)};
  };
  std::future<Measures> placed =
      Concurrently(measure, std::cref(plan.blocks), std::cref(*choice.pairs));
  std::optional<std::vector<Block>> rehomed = detail::RehomeShortSequences(
      p.lengths, config.mask, plan.blocks, config.workers, choice.block_size, config.node_workers);
  FCP_CHECK(rehomed.has_value(), "planner: rehoming re-deals a batch with short sequences");
  // The measure of the placed blocks takes a fraction of the re-deal's time:
  // the second core is idle by now.
  std::vector<RequiredPair> rehomed_pairs =
      RequiredPairs(p.lengths, *rehomed, config.mask, /*spare_core=*/true);
  const Measures after = measure(*rehomed, rehomed_pairs);
  const Measures before = placed.get();
  if (config.self_check)
    FCP_CHECK(after.loads.tokens == before.loads.tokens,
              "planner: short-sequence rehoming changed a worker's token count");
  const bool traffic_held = Imbalance(after.loads.traffic) <= p.judge.max_imbalance ||
                            Imbalance(before.loads.traffic) > p.judge.max_imbalance;
  if (after.away < before.away && Largest(after.loads.compute) <= Largest(before.loads.compute) &&
      Largest(after.loads.traffic) <= Largest(before.loads.traffic) && traffic_held) {
    dropped = std::exchange(plan.blocks, std::move(*rehomed));
    return rehomed_pairs;
  }
  dropped = std::move(*rehomed);
  return std::move(*choice.pairs);
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
  // 1. Shard: steps 1-3, shared by every candidate.
  const Pipeline p(lengths, config, plan);
  // 2. Generate: the layouts (each complete), and the balanced plan (its
  // split variants assigned and kept by Better).
  std::unique_ptr<Candidate> home = HomeLayout(p);
  std::optional<Whole> whole = WholeLayout(p);
  // The local shed layout needs no balanced candidate: made and estimated
  // on a thread of its own meanwhile (the two only read the pipeline).
  const bool shed = p.transparent && !home && config.workers <= kShedMaxWorkers;
  std::future<std::optional<LocalShed>> local_shed;
  if (shed) local_shed = Concurrently([&p] { return LocalShedLayout(p); });
  Balanced balanced = BalancedPlan(p, /*sheds=*/shed);
  Sheds sheds = shed ? ShedLayouts(p, balanced.First(), local_shed.get()) : Sheds{};
  // 3. Improve the balanced plan: traffic leveling, renaming, locality.
  const Improved improved = Improve(p, *balanced.best, home != nullptr);
  // 4. Rank: the balanced plan or a layout.
  Choice choice = Rank(p, *balanced.best, improved, home.get(), sheds, whole);
  // 5. Improve the choice: short sequences re-dealt home.
  std::vector<Block> dropped;
  const std::vector<RequiredPair> pairs = Place(p, choice, plan, dropped);
  // The candidates are done with (the plan holds the chosen blocks, `pairs`
  // their pairs), and so are the blocks Place dropped: released as the
  // schedule starts, whose lists are the plan's largest (released before
  // it, N = 4096: 7,600 fewer pages touched, 14 MB less resident; released
  // meanwhile, the same peak), on the second core, idle by now (the
  // release: 4.5M instructions at N = 256). Moved into the arguments, they
  // are destroyed on that thread, when its call returns.
  std::future<void> released = Concurrently(
      [](Balanced, Sheds, std::unique_ptr<Candidate>, std::optional<Whole>, std::vector<Block>) {},
      std::move(balanced), std::move(sheds), std::move(home), std::move(whole), std::move(dropped));
  // 6. Schedule: transfer graph, colouring, coalesced forward and backward
  // stages (steps 8-10); relays through the node in the stages just built
  // (11); each direct K/V transfer cut to the rows its receiver attends, the
  // partial back to the same rows, relayed blocks whole (12; no stage
  // changes: congestion counts a transfer whatever its rows).
  BuildStages(plan, pairs, config.self_check,
              config.spread_stages ? StageGrouping::kRoundRobin : StageGrouping::kConsecutive);
  if (config.node_relays)
    RelayThroughNodes(plan, config.node_workers, pairs, config.network_flops_per_byte);
  if (config.row_ranges) TrimTransfersToAttendedRows(plan, pairs);
  released.get();
  return plan;
}

}  // namespace fcp
