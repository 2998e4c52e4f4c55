#include "assignment.h"
#include "assignment_parts.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <variant>

#include "buckets.h"
#include "fcp/error.h"
#include "fcp/plan_metrics.h"

namespace fcp::detail {
namespace {

constexpr int32_t kUnassigned = -1;
// Candidates examined per block: lightest by compute, lightest by traffic,
// and blocks' neighbours (owners of its K/V dependencies and users of its K/V).
constexpr int kComputeCandidates = 4;
constexpr int kScanLimit = 64;  // ordered entries examined for feasible candidates
constexpr int kTrafficCandidates = 4;
constexpr int64_t kMinStepsPerRound = 32;
// Costs this close (relative) are a tie in Better.
constexpr double kCostTie = 0.005;
// kAffinity start: workers already holding an item's sequence examined per
// sequence, and the weight of the item's added traffic in the score, which
// breaks the near-ties of a compute-bound choice toward less traffic.
constexpr size_t kAffinityCandidates = 8;
constexpr double kAffinityWeight = 0.25;
// The locality exchanges keep the traffic imbalance this far inside the
// judge's bound.
constexpr double kLocalityMargin = 0.001;
// The leveling search's compute caps, as shares of the judge's bound on
// compute imbalance (Assigner::Level).
constexpr std::array<double, 4> kLevelComputeAllowance = {0, 0.25, 0.5, 1};

// Shedding (Assigner::Shed): the compute above the mean a worker may keep
// (relative), and the least loaded workers of other nodes examined as
// partners per exchange (its own node's are all examined).
constexpr double kShedSlack = 0.02;
constexpr size_t kShedPartners = 16;

// deps: row q lists the K/V blocks q needs (ascending); users: row j lists the
// query blocks that need j (ascending).
void BuildGraphs(const std::vector<RequiredPair>& pairs, int32_t blocks, Csr& deps, Csr& users) {
  deps.offset.assign(blocks + 1, 0);
  users.offset.assign(blocks + 1, 0);
  for (const RequiredPair& p : pairs) {
    ++deps.offset[p.q_block + 1];
    ++users.offset[p.kv_block + 1];
  }
  for (int32_t b = 0; b < blocks; ++b) {
    deps.offset[b + 1] += deps.offset[b];
    users.offset[b + 1] += users.offset[b];
  }
  deps.items.resize(pairs.size());
  users.items.resize(pairs.size());
  std::vector<int32_t> fill(users.offset.begin(), users.offset.end() - 1);
  for (size_t k = 0; k < pairs.size(); ++k) {
    deps.items[k] = pairs[k].kv_block;  // pairs are sorted by (q, kv)
    users.items[fill[pairs[k].kv_block]++] = pairs[k].q_block;
  }
}

struct Targets {
  double compute = 1;  // mean compute per worker
  double traffic = 1;  // mean traffic per worker (estimated)
  double Load(double compute_load, double traffic_load) const {
    return std::max(compute_load / compute, traffic_load / traffic);
  }
};

// A leveling search (Assigner::Level): the local search with a worker's
// traffic as its load, lowering the largest or raising the least, under caps
// no worker's compute, cost (compute + ratio x traffic) or traffic may end
// above. Raising stops once the traffic imbalance is within `stop_imbalance`.
struct Leveling {
  bool raise_least = false;
  double max_compute = 0, max_cost = 0, max_traffic = 0, ratio = 0;
  double stop_imbalance = 0;
  // Lowered by the search: the traffic, or when raising its distance below
  // the cap.
  double Load(double traffic) const { return raise_least ? max_traffic - traffic : traffic; }
  bool Allows(double compute, double traffic) const {
    return compute <= max_compute && compute + ratio * traffic <= max_cost &&
           traffic <= max_traffic;
  }
};

// The reshuffle as a third load of a search by cost (Assigner::Home): per
// worker the tokens it receives plus sends to put the plan's layout in
// place. Moving item x from worker a to b changes only theirs: a's by
// 2 t_x(a) - tok(x), b's by tok(x) - 2 t_x(b), t_x(w) being x's tokens
// whose dataloader worker is w (known for x's two largest homes; an item
// of at most two blocks rarely has a third).
struct ReshuffleLoad {
  std::vector<double> moved;        // per worker, tokens in + out
  std::vector<double> item_tokens;  // tok(x)
  // t_x(w) for x's two largest homes: home[2x + k], tokens[2x + k].
  std::vector<int32_t> home;
  std::vector<double> tokens;
  double pairs_per_token = 0;  // the load of one token in + out, in token pairs
  double At(int32_t x, int32_t w) const {
    return home[2 * x] == w ? tokens[2 * x] : home[2 * x + 1] == w ? tokens[2 * x + 1] : 0.0;
  }
  double Leave(int32_t x, int32_t w) const { return 2 * At(x, w) - item_tokens[x]; }
  double Join(int32_t x, int32_t w) const { return item_tokens[x] - 2 * At(x, w); }
};

// The K/V one item's queries attend in one sequence it only partly holds:
// the hull [lo, hi) of those keys and how many of them the item owns.
struct SequenceNeed {
  int32_t seq;
  int64_t lo, hi, own;
};

// Per (worker, sequence), the hull of the keys the worker's queries attend
// and the tokens it owns: hull minus owned estimates the K/V tokens it must
// receive for that sequence (exact for causal and full masks, where every
// hull starts at the sequence start or covers it). Placing a block next to
// blocks of its own sequence then costs only the keys they do not share,
// which is what makes the greedy keep long sequences on few workers.
class NeedHulls {
 public:
  // At most `capacity` (worker, sequence) hulls will be added.
  NeedHulls(size_t sequences, size_t capacity) : latest_(sequences, -1) {
    int bits = 4;
    while ((size_t{1} << bits) < 2 * capacity) ++bits;  // load factor <= 1/2
    table_.assign(size_t{1} << bits, Hull{});
    mask_ = (size_t{1} << bits) - 1;
    shift_ = 64 - bits;
  }
  // Receive tokens added if `needs` joined worker w.
  double Marginal(int32_t w, std::span<const SequenceNeed> needs) const {
    double added = 0;
    for (const SequenceNeed& n : needs) {
      const Hull& h = table_[Find(Key(w, n.seq))];
      if (h.key == kEmpty) {
        added += static_cast<double>(n.hi - n.lo - n.own);
        continue;
      }
      const int64_t before = h.hi - h.lo - h.own;
      const int64_t after = std::max(h.hi, n.hi) - std::min(h.lo, n.lo) - h.own - n.own;
      added += static_cast<double>(after - before);
    }
    return added;
  }
  void Add(int32_t w, std::span<const SequenceNeed> needs) {
    for (const SequenceNeed& n : needs) {
      const uint64_t key = Key(w, n.seq);
      const size_t slot = Find(key);
      Hull& h = table_[slot];
      if (h.key == kEmpty) {
        h = Hull{key, n.lo, n.hi, n.own, w, latest_[n.seq]};
        latest_[n.seq] = static_cast<int32_t>(slot);
        continue;
      }
      h.lo = std::min(h.lo, n.lo);
      h.hi = std::max(h.hi, n.hi);
      h.own += n.own;
    }
  }
  // Calls f(w) for the last `limit` workers that got queries of `seq`, the
  // latest first.
  template <typename F>
  void ForLatestWorkers(int32_t seq, size_t limit, F f) const {
    for (int32_t slot = latest_[seq]; slot >= 0 && limit > 0; slot = table_[slot].previous, --limit)
      f(table_[slot].worker);
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Hull {
    uint64_t key = kEmpty;
    int64_t lo = 0, hi = 0, own = 0;
    int32_t worker = -1;
    int32_t previous = -1;  // the slot of the sequence's hull added before this one
  };
  static uint64_t Key(int32_t w, int32_t seq) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(seq)) << 32) | static_cast<uint32_t>(w);
  }
  // The slot holding `key`, or the empty slot where it would go (linear probing).
  size_t Find(uint64_t key) const {
    size_t slot = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
    while (table_[slot].key != key && table_[slot].key != kEmpty) slot = (slot + 1) & mask_;
    return slot;
  }
  // An open-addressing table, only looked up, never iterated: its order
  // cannot reach the plan.
  std::vector<Hull> table_;
  size_t mask_ = 0;
  int shift_ = 60;
  std::vector<int32_t> latest_;  // per sequence: the slot of its latest hull, -1 if none
};

enum class Start { kCompute, kVector, kAffinity };
// The local search's exchange partners for the heavy worker: the lightest
// workers by compute and by traffic, half each (kMixed), or all by the
// dimension that binds the heavy worker (kBinding).
enum class Partners { kMixed, kBinding };

class Assigner {
 public:
  explicit Assigner(const AssignmentInput& in)
      : in_(in), items_(in.sharding->items), n_(in.workers) {
    const int32_t blocks = static_cast<int32_t>(in.sharding->blocks.size());
    BuildGraphs(*in.pairs, blocks, deps_, users_);
    item_of_.assign(blocks, -1);
    block_tokens_.reserve(blocks);
    for (const Block& b : in.sharding->blocks) block_tokens_.push_back(b.tokens());
    item_work_.assign(items_.size(), 0);
    for (size_t i = 0; i < items_.size(); ++i)
      for (int32_t b : items_[i].blocks) {
        item_of_[b] = static_cast<int32_t>(i);
        item_work_[i] += static_cast<double>(in.block_work[b]);
      }
    BuildItemDeps();
    const double total_work = std::accumulate(item_work_.begin(), item_work_.end(), 0.0);
    targets_.compute = std::max(total_work / n_, 1.0);
    MakeModel();
  }

  // The most blocks of one worker that can need one K/V block: the blocks
  // that need it, and at most every block of the items a worker's slots
  // hold (every search keeps to the slots, each item taking one or more).
  int64_t MostCount() const {
    int64_t users = 0;
    for (size_t kv = 0; kv + 1 < users_.offset.size(); ++kv)
      users = std::max<int64_t>(users, users_.offset[kv + 1] - users_.offset[kv]);
    size_t item_blocks = 0;
    for (const Item& item : items_) item_blocks = std::max(item_blocks, item.blocks.size());
    const int64_t slots = int64_t{in_.sharding->big_slots} + in_.sharding->small_slots;
    return std::min(users, slots * static_cast<int64_t>(item_blocks));
  }

  // The searches' scratch, sized for the batch, with the narrowest counts
  // that hold MostCount: made once.
  template <typename Counter>
  void MakeModel() {
    model_.emplace(std::in_place_type<LoadModel<Counter>>, in_, items_, item_deps_, users_,
                   block_tokens_);
  }
  void MakeModel() {
    const int64_t most = MostCount();
    if (most <= std::numeric_limits<uint8_t>::max())
      MakeModel<uint8_t>();
    else if (most <= std::numeric_limits<uint16_t>::max())
      MakeModel<uint16_t>();
    else
      MakeModel<int32_t>();
  }
  // f(model) for the scratch.
  template <typename F>
  decltype(auto) WithModel(F f) {
    return std::visit(f, *model_);
  }

  // What only the greedy starts use: the items' needs and LPT orders.
  void PrepareGreedy() {
    ComputeNeeds();
    // LPT orders: by work, and by the larger normalised share (vector LPT).
    std::vector<double> size(items_.size());
    for (size_t i = 0; i < items_.size(); ++i)
      size[i] = targets_.Load(item_work_[i], item_traffic_[i]);
    compute_order_.resize(items_.size());
    std::iota(compute_order_.begin(), compute_order_.end(), 0);
    vector_order_ = compute_order_;
    std::stable_sort(compute_order_.begin(), compute_order_.end(),
                     [&](int32_t a, int32_t b) { return item_work_[a] > item_work_[b]; });
    std::stable_sort(vector_order_.begin(), vector_order_.end(),
                     [&](int32_t a, int32_t b) { return size[a] > size[b]; });
  }

  // Traffic an item causes wherever it goes (and the traffic target, their
  // mean per worker), assuming the blocks it depends on and the blocks that
  // depend on it sit on other workers: it receives the
  // K/V tokens of its dependencies outside the item and sends each of its
  // blocks once per outside user block (at most once per other worker).
  // Exact for spread-out sequences (zig-zag pairs make it the same for every
  // pair of a sequence); an over-estimate where blocks end up together,
  // which the traffic search then exploits.
  void EstimateTraffic() {
    item_traffic_.assign(items_.size(), 0);
    item_send_.assign(items_.size(), 0);
    for (size_t i = 0; i < items_.size(); ++i) {
      const auto outside = [&](int32_t block) {
        return item_of_[block] != static_cast<int32_t>(i);
      };
      for (int32_t b : items_[i].blocks) {
        int64_t users_outside = 0;
        for (int32_t q : users_.row(b)) users_outside += outside(q);
        item_send_[i] += static_cast<double>(std::min<int64_t>(users_outside, n_ - 1)) *
                         static_cast<double>(block_tokens_[b]);
      }
      item_traffic_[i] = item_send_[i];
      // Each K/V block it needs from outside, once (sums of integers: the
      // order does not matter).
      for (const Dep& d : item_deps_.row(static_cast<int32_t>(i)))
        if (outside(d.kv)) item_traffic_[i] += static_cast<double>(block_tokens_[d.kv]);
    }
    const double total_traffic = std::accumulate(item_traffic_.begin(), item_traffic_.end(), 0.0);
    targets_.traffic = std::max(total_traffic / n_, 1.0);
  }

  // Row i: each K/V block item i needs once, in first-need order, with the
  // number of its blocks that need it. (LoadModel only sums over a row.)
  void BuildItemDeps() {
    item_deps_.offset.assign(1, 0);
    item_deps_.offset.reserve(items_.size() + 1);
    item_deps_.items.reserve(in_.pairs->size());                 // at most one entry per pair
    std::vector<int32_t> slot(in_.sharding->blocks.size(), -1);  // kv -> its entry in the row
    for (const Item& item : items_) {
      const size_t first = item_deps_.items.size();
      for (int32_t b : item.blocks)
        for (int32_t j : deps_.row(b)) {
          if (slot[j] < 0) {
            slot[j] = static_cast<int32_t>(item_deps_.items.size());
            item_deps_.items.push_back({j, 0});
          }
          ++item_deps_.items[slot[j]].mult;
        }
      for (size_t k = first; k < item_deps_.items.size(); ++k) slot[item_deps_.items[k].kv] = -1;
      item_deps_.offset.push_back(static_cast<int32_t>(item_deps_.items.size()));
    }
  }

  // item_needs_: per item, the sequences it holds only part of and the keys
  // its queries attend in each (sequences it holds whole need nothing).
  void ComputeNeeds() {
    const std::vector<int64_t>& lengths = *in_.lengths;
    item_needs_.offset.assign(1, 0);
    std::vector<Segment> segments;
    for (size_t i = 0; i < items_.size(); ++i) {
      segments.clear();
      for (int32_t b : items_[i].blocks)
        for (const Segment& x : in_.sharding->blocks[b].segments)
          if (x.length < lengths[x.seq]) segments.push_back(x);
      std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
        return a.seq != b.seq ? a.seq < b.seq : a.start < b.start;
      });
      for (const Segment& x : segments) {
        const TokenRange keys =
            AttendedKeys(in_.mask, {x.start, x.start + x.length}, lengths[x.seq]);
        std::vector<SequenceNeed>& needs = item_needs_.items;  // row i is the tail
        const bool in_row = needs.size() > static_cast<size_t>(item_needs_.offset.back());
        if (in_row && needs.back().seq == x.seq) {
          needs.back().lo = std::min(needs.back().lo, keys.begin);
          needs.back().hi = std::max(needs.back().hi, keys.end);
          needs.back().own += x.length;
        } else {
          needs.push_back({x.seq, keys.begin, keys.end, x.length});
        }
      }
      item_needs_.offset.push_back(static_cast<int32_t>(item_needs_.items.size()));
    }
  }

  Assignment Run() {
    // Starts, each refined by the local search on real loads: compute-first
    // LPT, vector LPT (compute and estimated traffic), and vector LPT that
    // prices traffic by what a worker already holds of the item's sequences;
    // the local search runs with two partner policies. The Better result
    // wins (ties: the earlier). Time mode (a network ratio and no imbalance
    // bound) runs only the affinity start with mixed partners: it had the
    // lowest cost on 28 of 30 paper batches (N = 16..256, seeds 0-2).
    const std::vector<Start> starts =
        TimeMode() ? std::vector<Start>{Start::kAffinity}
                   : std::vector<Start>{Start::kCompute, Start::kVector, Start::kAffinity};
    EstimateTraffic();
    PrepareGreedy();
    Assignment best;
    for (const Start start : starts) {
      const Loads greedy = CountLoads(in_, users_, block_tokens_, Greedy(start));
      WithModel([&](auto& model) { Search(model, greedy, best); });
    }
    return best;
  }

  // `owner` as it is, or refined by the local search: the Better. One
  // policy (binding; mixed in time mode) for half the time: running both
  // after piece sizing changed one sized plan of docs/planner-quality.md
  // (docs/planner-benchmark.md, the assignment's data structures).
  Assignment Refine(std::vector<int32_t> owner) {
    EstimateTraffic();
    const Loads loads = CountLoads(in_, users_, block_tokens_, std::move(owner));
    Assignment best{loads.owner, loads.compute, loads.traffic};
    WithModel([&](auto& model) { Search(model, loads, best, /*refining=*/true); });
    return best;
  }

  // The (at most two) dataloader workers holding most of an item's tokens,
  // as workers of the assignment (`original`), and how many.
  struct HomeTokens {
    int32_t worker[2] = {-1, -1};
    int64_t tokens[2] = {0, 0};
    int64_t At(int32_t w) const {
      return w == worker[0] ? tokens[0] : w == worker[1] ? tokens[1] : 0;
    }
  };
  // Every item on the dataloader worker holding most of its tokens
  // (`homes`, in dataloader ids) where the slots allow, else its second
  // home, else the nearest worker with room (same node of `node_workers`
  // first); two-slot items first, so that none is left without a pair of
  // slots. Returns owner[block].
  std::vector<int32_t> AtHome(int32_t node_workers, const std::vector<HomeTokens>& homes) const {
    Slots slots(*in_.sharding, n_);
    std::vector<int32_t> owner(in_.sharding->blocks.size(), kUnassigned);
    const auto place = [&](size_t i) {
      const Item& item = items_[i];
      const int32_t home = homes[i].worker[0] >= 0 ? homes[i].worker[0] : in_.dataloader[i];
      int32_t to = -1;
      if (slots.Fits(item, home))
        to = home;
      else if (homes[i].worker[1] >= 0 && slots.Fits(item, homes[i].worker[1]))
        to = homes[i].worker[1];
      // Nearest by id, the home's node first (workers of a node are
      // consecutive ids), ties: the lower id. The first pass stays inside
      // the node (O(node_workers), not O(N): at N = 4096 the scan was a
      // tenth of the planning).
      const int32_t node = node_workers > 0 ? home / node_workers : 0;
      const int32_t reach = node_workers > 0 ? node_workers : n_;
      for (int pass = 0; pass < 2 && to < 0; ++pass)
        for (int32_t d = 1; d < (pass == 0 ? reach : n_) && to < 0; ++d)
          for (const int32_t w : {home - d, home + d}) {
            if (w < 0 || w >= n_ || to >= 0) continue;
            const bool same_node = node_workers > 0 && w / node_workers == node;
            if ((pass == 0) == same_node && slots.Fits(item, w)) to = w;
          }
      FCP_CHECK(to >= 0, "assignment: no worker has room for item " + std::to_string(i));
      slots.Take(item, to);
      for (int32_t b : item.blocks) owner[b] = to;
    };
    for (size_t i = 0; i < items_.size(); ++i)
      if (!items_[i].small && items_[i].slots >= 2) place(i);
    for (size_t i = 0; i < items_.size(); ++i)
      if (!items_[i].small && items_[i].slots < 2) place(i);
    for (size_t i = 0; i < items_.size(); ++i)
      if (items_[i].small) place(i);
    return owner;
  }

  // The home layout (issue 17, part 2): every item at home (AtHome), then
  // the local search, which moves only what lowers the most loaded worker
  // (an overloaded home sheds items, a light one takes them and gives back
  // replacements). In dataloader ids: no renaming.
  Assignment Home(int32_t node_workers, double reshuffle_pairs_per_token) {
    std::vector<int32_t> identity(n_);
    std::iota(identity.begin(), identity.end(), 0);
    const std::vector<HomeTokens> homes = HomesOf(identity);
    std::vector<int32_t> owner = AtHome(node_workers, homes);
    // The search by the cost itself, not by loads normalised by their
    // means: a home layout has little traffic, and normalised, one worker
    // holding a sequence cut at a home boundary would look most loaded.
    EstimateTraffic();
    ReshuffleLoad reshuffle;
    reshuffle.moved.assign(n_, 0);
    reshuffle.pairs_per_token = reshuffle_pairs_per_token;
    for (size_t i = 0; i < items_.size(); ++i) {
      double tokens = 0;
      for (int32_t b : items_[i].blocks) tokens += static_cast<double>(block_tokens_[b]);
      reshuffle.item_tokens.push_back(tokens);
      for (int k = 0; k < 2; ++k) {
        reshuffle.home.push_back(homes[i].worker[k]);
        reshuffle.tokens.push_back(static_cast<double>(homes[i].tokens[k]));
      }
      const int32_t w = owner[items_[i].blocks.front()];
      reshuffle.moved[w] += tokens - reshuffle.At(static_cast<int32_t>(i), w);
      // Its tokens at homes other than w go out from there.
      for (int k = 0; k < 2; ++k)
        if (homes[i].worker[k] >= 0 && homes[i].worker[k] != w)
          reshuffle.moved[homes[i].worker[k]] += static_cast<double>(homes[i].tokens[k]);
    }
    const double ratio = in_.judge.pairs_per_traffic_token;
    return WithModel([&](auto& model) {
      model.Start(CountLoads(in_, users_, block_tokens_, std::move(owner)));
      return Improve(model, Partners::kMixed, std::nullopt, ratio, &reshuffle);
    });
  }

  // The shed layout (issue 17, part 2), for batches whose dataloader layout
  // is unbalanced: every item at home (AtHome), then, while the most loaded
  // worker's compute is above the mean by more than kShedSlack, it gives
  // its densest item (work per token, highest first) for the lightest item
  // of equal slot use (or two one-slot items for a two-slot one) of a
  // worker that stays within the slack after the exchange: a worker of its
  // own node (consecutive ids of `node_workers`: the reshuffle stays on its
  // fast links), the least loaded first; else, among the kShedPartners
  // least loaded of other nodes, the one whose reshuffle across nodes (in +
  // out) ends least. When no exchange stays within the slack, the one that
  // lowers the larger of the two computes most; none: it stops. Traffic is
  // not searched (a local search by cost after it moved 20-60% more tokens
  // and simulated slower on the paper's batches). In dataloader ids.
  // O(M s (S + P s)) for M exchanges, s items per worker, S the node size
  // and P = kShedPartners.
  Assignment Shed(int32_t node_workers) {
    std::vector<int32_t> identity(n_);
    std::iota(identity.begin(), identity.end(), 0);
    const std::vector<HomeTokens> homes = HomesOf(identity);
    std::vector<int32_t> owner = AtHome(node_workers, homes);
    std::vector<std::vector<int32_t>> owned(n_);
    std::vector<double> compute(n_, 0), tokens(items_.size(), 0);
    for (size_t i = 0; i < items_.size(); ++i) {
      owned[owner[items_[i].blocks.front()]].push_back(static_cast<int32_t>(i));
      compute[owner[items_[i].blocks.front()]] += item_work_[i];
      for (int32_t b : items_[i].blocks) tokens[i] += static_cast<double>(block_tokens_[b]);
    }
    const double total = std::accumulate(compute.begin(), compute.end(), 0.0);
    const double limit = total / n_ * (1 + kShedSlack);
    std::set<std::pair<double, int32_t>> by_compute;  // (compute, worker), a total order
    for (int32_t w = 0; w < n_; ++w) by_compute.insert({compute[w], w});
    const int32_t node = std::max(node_workers, 1);
    // Per worker, reshuffle tokens in + out across nodes; an item's tokens
    // beyond its two largest homes count as crossing (sums of integers).
    std::vector<double> cross(n_, 0);
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
    for (size_t i = 0; i < items_.size(); ++i)
      account(static_cast<int32_t>(i), owner[items_[i].blocks.front()], 1);
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
        const Item& item = items_[y];
        if (item.small != items_[x].small) continue;
        const double w = item_work_[y];
        if (item.slots == items_[x].slots && w < best.work) best = {w, {y, -1}};
        if (!item.small && item.slots == 1 && items_[x].slots == 2) {
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
    const auto move = [&](int32_t item, int32_t from, int32_t to) {
      account(item, from, -1);
      for (int32_t b : items_[item].blocks) owner[b] = to;
      owned[from].erase(std::find(owned[from].begin(), owned[from].end(), item));
      owned[to].push_back(item);
      by_compute.erase({compute[from], from});
      by_compute.erase({compute[to], to});
      compute[from] -= item_work_[item];
      compute[to] += item_work_[item];
      by_compute.insert({compute[from], from});
      by_compute.insert({compute[to], to});
      account(item, to, 1);
    };
    std::vector<int32_t> order, partners;
    // Each exchange lowers the most loaded worker's compute or moves the
    // maximum to a worker below it; the cap only bounds pathological cases.
    const size_t max_steps = 4 * items_.size() + static_cast<size_t>(n_);
    for (size_t step = 0; step < max_steps; ++step) {
      const int32_t a = std::prev(by_compute.end())->second;
      if (compute[a] <= limit) break;
      order = owned[a];
      std::stable_sort(order.begin(), order.end(), [&](int32_t p, int32_t q) {
        return item_work_[p] * tokens[q] > item_work_[q] * tokens[p];
      });
      partners.clear();
      for (int32_t b = a / node * node; b < std::min(n_, (a / node + 1) * node); ++b)
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
          const Offer y = offer(x, b);
          if (y.y[0] < 0 || y.work >= item_work_[x]) continue;
          const double after_b = compute[b] + item_work_[x] - y.work;
          const double after_a = compute[a] - item_work_[x] + y.work;
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
    const Loads loads = CountLoads(in_, users_, block_tokens_, std::move(owner));
    return Assignment{loads.owner, loads.compute, loads.traffic};
  }

  // Exchanges that bring items to their dataloader worker, so that fewer
  // tokens travel in the reshuffle (about a third of a paper batch's bytes
  // at N = 256, 88% of its tokens before). Homes are the workers `rename`
  // (a LocalityRenaming of `start`) maps to each dataloader worker. Each
  // item away from its home is offered, in one pass, for the item of equal
  // slot use on its home that brings the most tokens home (one try: more
  // tries and passes took 2.7 times the evaluations for 2.3 points fewer
  // tokens moved at N = 256);
  // the exchange is kept when no worker's compute, traffic or cost rises
  // above the largest, total traffic does not grow, and does not shrink
  // below what keeps the traffic imbalance (max - mean) / max a little
  // (kLocalityMargin) inside the judge's bound, or where it was if outside:
  // less traffic at the same maximum is faster but reads as more imbalance.
  // (Not the judge's slack for traffic under a block's K/V: its plans would
  // report 15% imbalance.) `start` itself if Better.
  Assignment Localize(Assignment start, const std::vector<int32_t>& rename) {
    return WithModel([&](auto& model) { return Localize(model, std::move(start), rename); });
  }
  template <typename Model>
  Assignment Localize(Model& model, Assignment start, const std::vector<int32_t>& rename) {
    std::vector<int32_t> original(n_);  // dataloader worker -> the worker renamed to it
    for (int32_t w = 0; w < n_; ++w) original[rename[w]] = w;
    const std::vector<HomeTokens> homes = HomesOf(original);
    model.Start(CountLoads(in_, users_, block_tokens_, start.owner));
    std::vector<std::vector<int32_t>>& owned = Owned(model.loads());
    const double ratio = in_.judge.pairs_per_traffic_token;
    const auto cost = [&](double c, double t) { return c + ratio * t; };
    double max_compute = 0, max_traffic = 0, max_cost = 0, total_traffic = 0;
    for (int32_t w = 0; w < n_; ++w) {
      max_compute = std::max(max_compute, model.compute(w));
      max_traffic = std::max(max_traffic, model.traffic(w));
      max_cost = std::max(max_cost, cost(model.compute(w), model.traffic(w)));
      total_traffic += model.traffic(w);
    }
    const double least_total =
        std::min(total_traffic, static_cast<double>(n_) * max_traffic *
                                    std::max(0.0, 1 - in_.judge.max_imbalance + kLocalityMargin));
    for (size_t x = 0; x < items_.size(); ++x) {
      const int32_t a = model.loads().owner[items_[x].blocks.front()], b = homes[x].worker[0];
      if (b < 0 || a == b) continue;
      // b's offer that brings most tokens home without lifting a compute
      // above the largest (ties: the first owned).
      int32_t y = -1;
      int64_t best_gain = 0;
      for (int32_t candidate : owned[b]) {
        if (items_[candidate].slots != items_[x].slots ||
            items_[candidate].small != items_[x].small)
          continue;
        const int64_t gain =
            homes[x].At(b) + homes[candidate].At(a) - homes[x].At(a) - homes[candidate].At(b);
        const double shift = item_work_[x] - item_work_[candidate];
        if (gain > best_gain && model.compute(a) - shift <= max_compute &&
            model.compute(b) + shift <= max_compute) {
          best_gain = gain;
          y = candidate;
        }
      }
      if (y < 0) continue;
      const double ca = model.compute(a) - item_work_[x] + item_work_[y];
      const double cb = model.compute(b) - item_work_[y] + item_work_[x];
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
    Assignment local = Result(model.loads(), "locality exchanges");
    return Better(start, local, in_.judge) ? start : local;
  }

  // Leveling for a plan whose cost is balanced while its traffic imbalance
  // is outside the judge's bound (a few workers with little traffic lower the
  // mean): exchanges that lower the largest traffic, then, while still
  // outside, exchanges that raise the least, none lifting any worker's cost
  // or traffic above the largest of `start`, nor its compute above a cap
  // (Improve with a Leveling). The cap starts at `start`'s largest compute
  // and widens in kLevelComputeAllowance steps of the judge's bound until a
  // result is within it. Raising adds traffic only on workers below the
  // largest, and stops at the bound. The result with the least traffic
  // imbalance; `start` itself unless that falls.
  Assignment Level(Assignment start) {
    return WithModel([&](auto& model) {
      Leveling caps;
      caps.ratio = in_.judge.pairs_per_traffic_token;
      caps.stop_imbalance = in_.judge.max_imbalance - kLocalityMargin;
      // Balance mode has no cost to keep.
      caps.max_cost =
          caps.ratio > 0 ? Cost(start, caps.ratio) : std::numeric_limits<double>::infinity();
      double largest_compute = 0, largest_traffic = 0, total_compute = 0;
      for (int32_t w = 0; w < n_; ++w) {
        largest_compute = std::max(largest_compute, start.compute[w]);
        largest_traffic = std::max(largest_traffic, start.traffic[w]);
        total_compute += start.compute[w];
      }
      Assignment best = start;
      for (const double allowance : kLevelComputeAllowance) {
        caps.max_compute = std::max(largest_compute,
                                    total_compute / n_ / (1 - allowance * in_.judge.max_imbalance));
        caps.max_traffic = largest_traffic;
        caps.raise_least = false;
        model.Start(CountLoads(in_, users_, block_tokens_, start.owner));
        Assignment leveled = Improve(model, Partners::kBinding, caps);
        if (Imbalance(leveled.traffic) > in_.judge.max_imbalance) {
          caps.raise_least = true;
          caps.max_traffic = *std::max_element(leveled.traffic.begin(), leveled.traffic.end());
          leveled = Improve(model, Partners::kBinding, caps);
        }
        if (Imbalance(leveled.traffic) < Imbalance(best.traffic)) best = std::move(leveled);
        if (Imbalance(best.traffic) <= in_.judge.max_imbalance) break;
      }
      if (in_.self_check)
        for (int32_t w = 0; w < n_; ++w)
          FCP_CHECK(best.traffic[w] <= largest_traffic && best.compute[w] <= caps.max_compute &&
                        best.compute[w] + caps.ratio * best.traffic[w] <= caps.max_cost,
                    "leveling: worker " + std::to_string(w) + " ends above its caps");
      return best;
    });
  }

  std::vector<HomeTokens> HomesOf(const std::vector<int32_t>& original) const {
    const std::vector<int64_t> offsets = SequenceOffsets(*in_.lengths);
    std::vector<HomeTokens> homes(items_.size());
    std::vector<int64_t> at(n_, 0);
    std::vector<int32_t> touched;
    for (size_t i = 0; i < items_.size(); ++i) {
      touched.clear();
      for (int32_t b : items_[i].blocks)
        for (const Segment& s : in_.sharding->blocks[b].segments)
          ForEachDataloaderRun(s, offsets, n_, [&](int32_t home, int64_t tokens) {
            const int32_t w = original[home];
            if (at[w] == 0) touched.push_back(w);
            at[w] += tokens;
          });
      HomeTokens& h = homes[i];
      for (int32_t w : touched) {  // the two largest; ties: the lower id
        const auto beats = [&](int k) {
          return at[w] > h.tokens[k] ||
                 (at[w] == h.tokens[k] && (h.worker[k] < 0 || w < h.worker[k]));
        };
        if (beats(0)) {
          h.worker[1] = h.worker[0], h.tokens[1] = h.tokens[0];
          h.worker[0] = w, h.tokens[0] = at[w];
        } else if (beats(1)) {
          h.worker[1] = w, h.tokens[1] = at[w];
        }
        at[w] = 0;
      }
    }
    return homes;
  }

 private:
  // The items each worker owns in `model`, ascending. Rows are reused
  // from search to search (six of them allocated 6,000 rows at N = 256).
  std::vector<std::vector<int32_t>>& Owned(const Loads& loads) {
    owned_.resize(n_);
    for (std::vector<int32_t>& row : owned_) row.clear();
    for (size_t i = 0; i < items_.size(); ++i)
      owned_[loads.owner[items_[i].blocks.front()]].push_back(static_cast<int32_t>(i));
    return owned_;
  }

  bool TimeMode() const { return in_.judge.objective == PlannerObjective::kTime; }

  // The local search from `from` with each partner policy (one when
  // refining), into `best` when Better. The binding policy levels traffic
  // better on most paper batches, the mixed one on the rest (and on time);
  // time mode runs the mixed one.
  template <typename Model>
  void Search(Model& model, const Loads& from, Assignment& best, bool refining = false) {
    const std::vector<Partners> policies =
        TimeMode() ? std::vector<Partners>{Partners::kMixed}
        : refining ? std::vector<Partners>{Partners::kBinding}
                   : std::vector<Partners>{Partners::kMixed, Partners::kBinding};
    for (const Partners policy : policies) {
      model.Start(from);
      Assignment r = Improve(model, policy);
      if (best.owner.empty() || Better(r, best, in_.judge)) best = std::move(r);
    }
  }

  // Collects up to `limit` workers from `index` on which `item` fits.
  void Collect(const AscendingIndex& index, const Slots& slots, const Item& item, int limit,
               std::vector<int32_t>& out) const {
    int found = 0, scanned = 0;
    index.Visit([&](int32_t w, double) {
      if (slots.Fits(item, w) && std::find(out.begin(), out.end(), w) == out.end()) {
        out.push_back(w);
        ++found;
      }
      return found < limit && ++scanned < kScanLimit;
    });
  }

  // Places items in LPT order (by work, or by the larger normalised share)
  // on the candidate minimising the larger normalised load (compute,
  // traffic) after taking the item. kAffinity prices an item's traffic on a
  // worker by NeedHulls (what the worker already receives of its sequences)
  // and adds the workers holding its sequences to the candidates.
  std::vector<int32_t> Greedy(Start start) {
    const bool affinity = start == Start::kAffinity;
    const Targets targets = {targets_.compute, start == Start::kCompute
                                                   ? std::numeric_limits<double>::infinity()
                                                   : targets_.traffic};
    const std::vector<int32_t>& order = start == Start::kCompute ? compute_order_ : vector_order_;
    Slots slots(*in_.sharding, n_);
    NeedHulls hulls(in_.lengths->size(), affinity ? item_needs_.items.size() : 0);
    std::vector<double> compute(n_, 0), traffic(n_, 0);
    // Indexes of open workers (a free slot of the class) by compute and traffic.
    AscendingIndex by_compute[2] = {AscendingIndex(n_), AscendingIndex(n_)};
    AscendingIndex by_traffic[2] = {AscendingIndex(n_), AscendingIndex(n_)};
    for (int cls = 0; cls < 2; ++cls)
      for (int32_t w = 0; w < n_; ++w)
        if (slots.Open(w, cls)) {
          by_compute[cls].Insert(w, 0);
          by_traffic[cls].Insert(w, 0);
        }
    std::vector<int32_t> owner(in_.sharding->blocks.size(), kUnassigned);
    std::vector<int32_t> candidates;
    for (int32_t i : order) {
      const Item& item = items_[i];
      const std::span<const SequenceNeed> needs = item_needs_.row(i);
      const int cls = item.small ? 1 : 0;
      candidates.clear();
      Collect(by_compute[cls], slots, item, kComputeCandidates, candidates);
      Collect(by_traffic[cls], slots, item, kTrafficCandidates, candidates);
      const auto consider = [&](int32_t w) {
        if (slots.Fits(item, w) &&
            std::find(candidates.begin(), candidates.end(), w) == candidates.end())
          candidates.push_back(w);
      };
      const int32_t home = in_.dataloader[i];
      consider(home);
      if (affinity)
        for (const SequenceNeed& n : needs)
          hulls.ForLatestWorkers(n.seq, kAffinityCandidates, consider);
      if (candidates.empty())  // every indexed candidate was infeasible: scan all
        for (int32_t w = 0; w < n_ && candidates.empty(); ++w) consider(w);
      FCP_CHECK(!candidates.empty(),
                "assignment: no worker has room for item " + std::to_string(i));

      const auto item_traffic = [&](int32_t w) {
        return affinity ? hulls.Marginal(w, needs) + item_send_[i] : item_traffic_[i];
      };
      int32_t best = -1;
      double best_load = 0, best_traffic = 0;
      for (int32_t w : candidates) {
        const double added = item_traffic(w);
        const double load = targets.Load(compute[w] + item_work_[i], traffic[w] + added) +
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
      compute[best] += item_work_[i];
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

  // Local search on the real loads. Repeatedly takes the worker with the
  // largest normalised load max(compute/C*, traffic/X*) (X* the mean real
  // traffic after the greedy) and tries exchanges of equal slot use with the
  // lightest workers by compute and by traffic: one item for one, or a
  // two-slot item for two one-slot items. An exchange is kept when it brings
  // the worst worker below its load without lifting any other to it; "any
  // other" is every worker on a transfer the exchange removes or creates when
  // applied as removing the items, then adding them swapped (LoadModel::
  // Involves), so a worker at the limit that only re-sends or re-receives a
  // block also blocks it. Returns the result with its real per-worker loads.
  //
  // With a Leveling, the load is the traffic alone and an exchange is also
  // kept only when no worker it changes ends above the caps.
  template <typename Model>
  Assignment Improve(Model& model, Partners policy,
                     const std::optional<Leveling>& leveling = std::nullopt, double cost_ratio = 0,
                     ReshuffleLoad* reshuffle = nullptr) {
    // Copies: the loops below call Evaluate, which as far as the compiler
    // knows could write *leveling.
    const bool leveled = leveling.has_value();
    const Leveling level = leveling.value_or(Leveling{});
    std::vector<std::vector<int32_t>>& owned = Owned(model.loads());
    double mean_traffic = 0;
    for (int32_t w = 0; w < n_; ++w) mean_traffic += model.traffic(w) / n_;
    const Targets targets{targets_.compute, std::max(mean_traffic, 1.0)};
    // cost_ratio > 0: the load is the cost, compute + cost_ratio x traffic.
    const bool by_cost = !leveled && cost_ratio > 0;
    // With a reshuffle (by cost only), its tokens in + out add to the cost.
    const double reshuffle_weight = by_cost && reshuffle ? reshuffle->pairs_per_token : 0.0;
    const auto load_of = [&](double c, double t, double moved = 0) {
      return leveled   ? level.Load(t)
             : by_cost ? c + cost_ratio * t + reshuffle_weight * moved
                       : targets.Load(c, t);
    };
    const auto moved_of = [&](int32_t w) {
      return reshuffle_weight > 0 ? reshuffle->moved[w] : 0.0;
    };
    const auto load = [&](int32_t w) {
      return load_of(model.compute(w), model.traffic(w), moved_of(w));
    };
    const bool raising = leveled && level.raise_least;
    // Partners are the lightest by compute and by this.
    const auto partner_key = [&](int32_t w) { return leveled ? load(w) : model.traffic(w); };
    double total_traffic = 0;
    DescendingIndex by_load(n_);
    AscendingIndex by_compute(n_), by_traffic(n_);
    for (int32_t w = 0; w < n_; ++w) {
      total_traffic += model.traffic(w);
      by_load.Insert(w, load(w));
      by_compute.Insert(w, model.compute(w));
      by_traffic.Insert(w, partner_key(w));
    }
    offers_.resize(static_cast<size_t>(n_) * kOfferClasses);
    for (Offers& o : offers_) o.valid = false;
    int64_t budget = static_cast<int64_t>(in_.local_search_rounds) *
                     std::max<int64_t>(static_cast<int64_t>(items_.size()), n_) * 2;
    // With a network ratio small clusters get at least 32 steps a round: a
    // step is cheap there, and N steps stopped short of the cheapest
    // balanced plan at N = 16. (Balance mode keeps N: longer searches lower
    // the largest load but not always (max - mean) / max.)
    const int64_t min_steps = in_.judge.pairs_per_traffic_token > 0 ? kMinStepsPerRound : 0;
    const int64_t max_steps =
        static_cast<int64_t>(in_.local_search_rounds) * std::max<int64_t>(n_, min_steps);
    std::vector<int32_t> partners;
    for (int64_t step = 0; step < max_steps && budget > 0; ++step) {
      // (The cap bounds the largest traffic.)
      if (raising && 1 - total_traffic / n_ / level.max_traffic <= level.stop_imbalance) break;
      // Plain variables, not a structured binding: lambdas below capture
      // them, which Clang before 16 rejects for bindings.
      const double max_load = by_load.first_key();
      const int32_t heavy = by_load.first_id();
      const double limit = max_load * (1 - 1e-9);
      partners.clear();
      // The heavy worker's binding dimension must come down.
      const bool compute_bound =
          !leveled && (by_cost ? model.compute(heavy) >= cost_ratio * model.traffic(heavy)
                               : model.compute(heavy) / targets.compute >=
                                     model.traffic(heavy) / targets.traffic);
      for (const AscendingIndex* index : {&by_compute, &by_traffic}) {
        const bool binding = (index == &by_compute) == compute_bound;
        const int swap_partners = leveled ? kLevelPartners : kSwapPartners;
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
          const double c =
              w == heavy ? heavy_compute : (w == light ? light_compute : model.compute(w));
          const double t = model.traffic_after(w);
          const double m = w == heavy ? heavy_moved : w == light ? light_moved : moved_of(w);
          if (load_of(c, t, m) >= limit) return false;
          if (leveled && !level.Allows(c, t)) return false;
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
        const double give_work = item_work_[a], give_traffic = item_traffic_[a];
        for (size_t p = 0; p < partners.size(); ++p) {
          const int32_t light = partners[p];
          const std::vector<Offer>& offers = OffersOf(light, items_[a], owned[light]);
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
            const bool compute_blocked =
                leveled
                    ? light_now + shift > level.max_compute || heavy_now - shift > level.max_compute
                : by_cost ? light_now + shift >= max_load || heavy_now - shift >= max_load
                          : (light_now + shift) / targets.compute >= max_load ||
                                (heavy_now - shift) / targets.compute >= max_load;
            if (compute_blocked) continue;
            if (budget-- <= 0) break;
            if (partner_table[p] < 0) partner_table[p] = model.Table(light, owned[light]);
            model.Evaluate(a, heavy, heavy_table, {o.first, o.second}, light, partner_table[p]);
            const double heavy_compute = heavy_now - shift;
            const double light_compute = light_now + shift;
            if (reshuffle_weight > 0) {
              const ReshuffleLoad& r = *reshuffle;
              heavy_moved = r.moved[heavy] + r.Leave(a, heavy) + r.Join(o.first, heavy);
              light_moved = r.moved[light] + r.Leave(o.first, light) + r.Join(a, light);
              if (o.second >= 0) {
                heavy_moved += r.Join(o.second, heavy);
                light_moved += r.Leave(o.second, light);
              }
            }
            if (!below_limit(heavy_compute, light_compute, light)) continue;
            if (reshuffle_weight > 0) {
              reshuffle->moved[heavy] = heavy_moved;
              reshuffle->moved[light] = light_moved;
            }
            if (leveled)
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
    return Result(model.loads(), "local search");
  }

  // An exchange's counterpart: one or two items of a light worker (second =
  // -1 for one), with their work and estimated traffic (the offer loop
  // compares them for every item of the heavy worker).
  struct Offer {
    int32_t first, second;
    double work, traffic;
  };
  // Slot classes of items: one or two big slots, or the small slot.
  static constexpr int kOfferClasses = 4;
  struct Offers {
    bool valid = false;
    std::vector<Offer> list;
  };

  // Worker w's offers (`mine`: the items it owns) for item `give` of the
  // heavy worker: items of equal slot use, or two one-slot items for a
  // two-slot one, in the order of `mine`. They depend on `give` only through
  // its slot class, and the lightest workers stay partners for many steps:
  // cached per worker and class until its items change (ForgetOffers).
  const std::vector<Offer>& OffersOf(int32_t w, const Item& give,
                                     const std::vector<int32_t>& mine) {
    Offers& offers =
        offers_[static_cast<size_t>(w) * kOfferClasses + 2 * (give.slots - 1) + give.small];
    if (offers.valid) return offers.list;
    offers.valid = true;
    offers.list.clear();
    const auto add = [&](int32_t first, int32_t second) {
      offers.list.push_back({first, second,
                             item_work_[first] + (second >= 0 ? item_work_[second] : 0.0),
                             item_traffic_[first] + (second >= 0 ? item_traffic_[second] : 0.0)});
    };
    for (size_t y = 0; y < mine.size(); ++y) {
      const Item& b = items_[mine[y]];
      if (b.small != give.small) continue;
      if (b.slots == give.slots) add(mine[y], -1);
      if (give.slots == 2 && b.slots == 1)
        for (size_t z = y + 1; z < mine.size(); ++z)
          if (!items_[mine[z]].small && items_[mine[z]].slots == 1) add(mine[y], mine[z]);
    }
    return offers.list;
  }
  void ForgetOffers(int32_t w) {
    for (int c = 0; c < kOfferClasses; ++c)
      offers_[static_cast<size_t>(w) * kOfferClasses + c].valid = false;
  }

  // The model's assignment; with self_check, its loads must equal a recount.
  Assignment Result(const Loads& loads, const std::string& search) const {
    if (in_.self_check) {
      const Loads recount = CountLoads(in_, users_, block_tokens_, loads.owner);
      for (int32_t w = 0; w < n_; ++w)
        FCP_CHECK(recount.compute[w] == loads.compute[w] && recount.traffic[w] == loads.traffic[w],
                  search + ": worker " + std::to_string(w) + "'s loads differ from a recount");
    }
    return {loads.owner, loads.compute, loads.traffic};
  }

  const AssignmentInput& in_;
  const std::vector<Item>& items_;
  int32_t n_;
  Csr deps_, users_;
  Rows<Dep> item_deps_;  // row i: the K/V blocks item i needs, with multiplicities
  std::vector<int32_t> item_of_;
  std::vector<int64_t> block_tokens_;
  std::vector<double> item_work_;
  std::vector<double> item_traffic_;  // estimated tokens sent + received
  std::vector<double> item_send_;     // estimated tokens sent
  Rows<SequenceNeed> item_needs_;
  std::vector<int32_t> compute_order_, vector_order_;
  Targets targets_;
  std::optional<std::variant<LoadModel<uint8_t>, LoadModel<uint16_t>, LoadModel<int32_t>>> model_;
  std::vector<std::vector<int32_t>> owned_;  // Owned's
  std::vector<Offers> offers_;               // OffersOf's, per worker and slot class
};

}  // namespace

class AssignmentSearch::Impl : public Assigner {
  using Assigner::Assigner;
};

AssignmentSearch::AssignmentSearch(const AssignmentInput& input)
    : impl_(std::make_unique<Impl>(input)) {}
AssignmentSearch::~AssignmentSearch() = default;

Assignment AssignmentSearch::Assign() { return impl_->Run(); }

Assignment AssignmentSearch::Refine(std::vector<int32_t> owner) {
  return impl_->Refine(std::move(owner));
}

Assignment AssignmentSearch::Localize(Assignment assignment, const std::vector<int32_t>& rename) {
  return impl_->Localize(std::move(assignment), rename);
}

Assignment AssignmentSearch::Home(int32_t node_workers, double reshuffle_pairs_per_token) {
  return impl_->Home(node_workers, reshuffle_pairs_per_token);
}

Assignment AssignmentSearch::Shed(int32_t node_workers) { return impl_->Shed(node_workers); }

Assignment AssignmentSearch::Level(Assignment assignment) {
  return impl_->Level(std::move(assignment));
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
  for (size_t w = 0; w < a.compute.size(); ++w)
    worst = std::max(worst, a.compute[w] + pairs_per_traffic_token * a.traffic[w]);
  return worst;
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
