#include "assignment.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>

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
constexpr int kSwapPartners = 4;
// kAffinity start: workers already holding an item's sequence examined per
// sequence, and the weight of the item's added traffic in the score, which
// breaks the near-ties of a compute-bound choice toward less traffic.
constexpr size_t kAffinityCandidates = 8;
constexpr double kAffinityWeight = 0.25;

// Compressed rows: row r is items[offset[r] .. offset[r+1]).
struct Csr {
  std::vector<int32_t> offset;
  std::vector<int32_t> items;
  std::pair<const int32_t*, const int32_t*> row(int32_t r) const {
    return {items.data() + offset[r], items.data() + offset[r + 1]};
  }
};

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

// Counts per (K/V block, worker) in an open-addressing table: the ledger's
// hot path, where a list per block costs O(workers) per lookup for blocks
// early in long sequences. Entries are never erased (counts drop to 0); the
// table doubles when half full.
class PairCounter {
 public:
  explicit PairCounter(size_t expected) { Resize(std::max<size_t>(16, 2 * expected)); }
  int32_t& operator()(int32_t kv, int32_t w) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(kv)) << 32) | static_cast<uint32_t>(w);
    size_t slot = Find(key);
    if (keys_[slot] == kEmpty) {
      if (2 * (size_ + 1) > keys_.size()) {
        Resize(2 * keys_.size());
        slot = Find(key);
      }
      keys_[slot] = key;
      ++size_;
    }
    return counts_[slot];
  }

 private:
  size_t Find(uint64_t key) const {
    size_t slot = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask_;
    while (keys_[slot] != key && keys_[slot] != kEmpty) slot = (slot + 1) & mask_;
    return slot;
  }
  void Resize(size_t capacity) {
    size_t pow2 = 16;
    while (pow2 < capacity) pow2 *= 2;
    std::vector<uint64_t> old_keys(pow2, kEmpty);
    std::vector<int32_t> old_counts(pow2, 0);
    old_keys.swap(keys_);
    old_counts.swap(counts_);
    mask_ = pow2 - 1;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty) {
        const size_t slot = Find(old_keys[i]);
        keys_[slot] = old_keys[i];
        counts_[slot] = old_counts[i];
      }
  }

  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<uint64_t> keys_;
  std::vector<int32_t> counts_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Per-worker compute and traffic of a (partial) assignment, updated
// incrementally as blocks are added and removed.
class Ledger {
 public:
  Ledger(const AssignmentInput& in, const Csr& deps)
      : in_(in), deps_(deps), owner_(in.block_work.size(), kUnassigned),
        counts_(in.pairs->size()), needers_(in.block_work.size()), compute_(in.workers, 0),
        traffic_(in.workers, 0),
        touched_stamp_(in.workers, 0) {
    for (const Block& b : in.sharding->blocks) block_tokens_.push_back(static_cast<double>(b.tokens()));
  }

  int32_t owner(int32_t block) const { return owner_[block]; }
  void AddItem(const Item& item, int32_t w) {
    for (int32_t b : item.blocks) Add(b, w);
  }
  void RemoveItem(const Item& item) {
    for (auto it = item.blocks.rbegin(); it != item.blocks.rend(); ++it) Remove(*it);
  }
  double compute(int32_t w) const { return compute_[w]; }
  double traffic(int32_t w) const { return traffic_[w]; }
  const std::vector<int32_t>& owners() const { return owner_; }

  void Add(int32_t block, int32_t w) {
    owner_[block] = w;
    compute_[w] += in_.block_work[block];
    Touch(w);
    auto [begin, end] = deps_.row(block);
    for (const int32_t* j = begin; j != end; ++j)
      if (++counts_(*j, w) == 1) {
        needers_[*j].push_back(w);
        Link(*j, w, +1);
      }
    for (int32_t u : needers_[block])
      if (u != w) Move(block, w, u, +1);
  }

  void Remove(int32_t block) {
    const int32_t w = owner_[block];
    for (int32_t u : needers_[block])
      if (u != w) Move(block, w, u, -1);
    auto [begin, end] = deps_.row(block);
    for (const int32_t* j = begin; j != end; ++j)
      if (--counts_(*j, w) == 0) {
        std::vector<int32_t>& list = needers_[*j];
        *std::find(list.begin(), list.end(), w) = list.back();
        list.pop_back();
        Link(*j, w, -1);
      }
    compute_[w] -= in_.block_work[block];
    owner_[block] = kUnassigned;
    Touch(w);
  }

  // Workers whose loads changed since the last call.
  std::vector<int32_t> TakeTouched() {
    std::vector<int32_t> out;
    out.swap(touched_);
    ++stamp_;
    return out;
  }

 private:
  // Worker w starts (+1) or stops (-1) needing kv: a transfer owner -> w.
  void Link(int32_t kv, int32_t w, int sign) {
    const int32_t o = owner_[kv];
    if (o != kUnassigned && o != w) Move(kv, o, w, sign);
  }
  void Move(int32_t kv, int32_t src, int32_t dst, int sign) {
    const double tokens = sign * block_tokens_[kv];
    traffic_[src] += tokens;
    traffic_[dst] += tokens;
    Touch(src);
    Touch(dst);
  }
  void Touch(int32_t w) {
    if (touched_stamp_[w] != stamp_) {
      touched_stamp_[w] = stamp_;
      touched_.push_back(w);
    }
  }

  const AssignmentInput& in_;
  const Csr& deps_;
  std::vector<double> block_tokens_;
  std::vector<int32_t> owner_;
  // counts_(kv, w): how many of w's query blocks need kv; needers_[kv]: the
  // workers with a non-zero count (unordered: only sums are taken over it).
  PairCounter counts_;
  std::vector<std::vector<int32_t>> needers_;
  std::vector<double> compute_;
  std::vector<double> traffic_;
  std::vector<uint32_t> touched_stamp_;
  uint32_t stamp_ = 1;
  std::vector<int32_t> touched_;
};

// An ordered index of workers by a key, with O(log N) updates.
class WorkerIndex {
 public:
  explicit WorkerIndex(int32_t workers) : key_(workers, 0), member_(workers, 0) {}
  void Insert(int32_t w, double key) {
    key_[w] = key;
    member_[w] = 1;
    set_.insert({key, w});
  }
  void Erase(int32_t w) {
    if (!member_[w]) return;
    set_.erase({key_[w], w});
    member_[w] = 0;
  }
  void Update(int32_t w, double key) {
    if (!member_[w] || key_[w] == key) return;
    // Re-keys the node in place: no allocation on this hot path.
    auto node = set_.extract({key_[w], w});
    node.value().first = key;
    key_[w] = key;
    set_.insert(std::move(node));
  }
  const std::set<std::pair<double, int32_t>>& ordered() const { return set_; }

 private:
  std::vector<double> key_;
  std::vector<uint8_t> member_;
  std::set<std::pair<double, int32_t>> set_;
};

struct Targets {
  double compute = 1;  // mean compute per worker
  double traffic = 1;  // mean traffic per worker (estimated)
  double Load(double compute_load, double traffic_load) const {
    return std::max(compute_load / compute, traffic_load / traffic);
  }
};

// Free slots of every worker, and whether an item may go to a worker without
// leaving some two-slot item with nowhere to go.
class Slots {
 public:
  Slots(const Sharding& sharding, int32_t workers)
      : big_(workers, sharding.big_slots), small_(workers, sharding.small_slots) {
    pairs_free_ = static_cast<int64_t>(workers) * (sharding.big_slots / 2);
    for (const Item& item : sharding.items) pairs_needed_ += !item.small && item.slots == 2;
  }
  bool Fits(const Item& item, int32_t w) const {
    if (item.small) return small_[w] >= 1;
    if (item.slots == 2) return big_[w] >= 2;
    if (big_[w] < 1) return false;
    // Taking one slot of an even count loses one free pair.
    return big_[w] % 2 == 1 || pairs_free_ - 1 >= pairs_needed_;
  }
  void Take(const Item& item, int32_t w) {
    if (item.small) {
      --small_[w];
      return;
    }
    pairs_free_ -= big_[w] / 2;
    big_[w] -= item.slots;
    pairs_free_ += big_[w] / 2;
    if (item.slots == 2) --pairs_needed_;
  }
  bool Open(int32_t w, bool small) const { return small ? small_[w] > 0 : big_[w] > 0; }

 private:
  std::vector<int32_t> big_, small_;
  int64_t pairs_free_ = 0;    // sum over workers of floor(free big slots / 2)
  int64_t pairs_needed_ = 0;  // two-slot items not yet placed
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
  explicit NeedHulls(size_t sequences) : workers_of_(sequences) {}
  // Receive tokens added if `needs` joined worker w.
  double Marginal(int32_t w, const std::vector<SequenceNeed>& needs) const {
    double added = 0;
    for (const SequenceNeed& n : needs) {
      const auto it = hulls_.find(Key(w, n.seq));
      if (it == hulls_.end()) {
        added += static_cast<double>(n.hi - n.lo - n.own);
        continue;
      }
      const Hull& h = it->second;
      const int64_t before = h.hi - h.lo - h.own;
      const int64_t after = std::max(h.hi, n.hi) - std::min(h.lo, n.lo) - h.own - n.own;
      added += static_cast<double>(after - before);
    }
    return added;
  }
  void Add(int32_t w, const std::vector<SequenceNeed>& needs) {
    for (const SequenceNeed& n : needs) {
      const auto [it, inserted] = hulls_.try_emplace(Key(w, n.seq), Hull{n.lo, n.hi, n.own});
      if (inserted) {
        workers_of_[n.seq].push_back(w);
        continue;
      }
      Hull& h = it->second;
      h.lo = std::min(h.lo, n.lo);
      h.hi = std::max(h.hi, n.hi);
      h.own += n.own;
    }
  }
  // Workers holding queries of `seq`, in the order they got them.
  const std::vector<int32_t>& WorkersOf(int32_t seq) const { return workers_of_[seq]; }

 private:
  struct Hull {
    int64_t lo, hi, own;
  };
  static uint64_t Key(int32_t w, int32_t seq) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(seq)) << 32) | static_cast<uint32_t>(w);
  }
  // Only looked up, never iterated: its order cannot reach the plan.
  std::unordered_map<uint64_t, Hull> hulls_;
  std::vector<std::vector<int32_t>> workers_of_;
};

enum class Start { kCompute, kVector, kAffinity };

// Per-worker compute (token pairs) and K/V traffic (tokens sent + received).
struct Loads {
  std::vector<double> compute, traffic;
};

class Assigner {
 public:
  explicit Assigner(const AssignmentInput& in)
      : in_(in), items_(in.sharding->items), n_(in.workers) {
    const int32_t blocks = static_cast<int32_t>(in.sharding->blocks.size());
    BuildGraphs(*in.pairs, blocks, deps_, users_);
    item_of_.assign(blocks, -1);
    item_work_.assign(items_.size(), 0);
    for (size_t i = 0; i < items_.size(); ++i)
      for (int32_t b : items_[i].blocks) {
        item_of_[b] = static_cast<int32_t>(i);
        item_work_[i] += static_cast<double>(in.block_work[b]);
      }
    EstimateTraffic();
    ComputeNeeds();
    const double total_work = std::accumulate(item_work_.begin(), item_work_.end(), 0.0);
    const double total_traffic = std::accumulate(item_traffic_.begin(), item_traffic_.end(), 0.0);
    targets_.compute = std::max(total_work / n_, 1.0);
    targets_.traffic = std::max(total_traffic / n_, 1.0);
    // LPT orders: by work, and by the larger normalised share (vector LPT).
    std::vector<double> size(items_.size());
    for (size_t i = 0; i < items_.size(); ++i) size[i] = targets_.Load(item_work_[i], item_traffic_[i]);
    compute_order_.resize(items_.size());
    std::iota(compute_order_.begin(), compute_order_.end(), 0);
    vector_order_ = compute_order_;
    std::stable_sort(compute_order_.begin(), compute_order_.end(),
                     [&](int32_t a, int32_t b) { return item_work_[a] > item_work_[b]; });
    std::stable_sort(vector_order_.begin(), vector_order_.end(),
                     [&](int32_t a, int32_t b) { return size[a] > size[b]; });
  }

  // Traffic an item causes wherever it goes, assuming the blocks it depends
  // on and the blocks that depend on it sit on other workers: it receives the
  // K/V tokens of its dependencies outside the item and sends each of its
  // blocks once per outside user block (at most once per other worker).
  // Exact for spread-out sequences (zig-zag pairs make it the same for every
  // pair of a sequence); an over-estimate where blocks end up together,
  // which the traffic search then exploits.
  void EstimateTraffic() {
    item_traffic_.assign(items_.size(), 0);
    item_send_.assign(items_.size(), 0);
    for (size_t i = 0; i < items_.size(); ++i) {
      const auto outside = [&](int32_t block) { return item_of_[block] != static_cast<int32_t>(i); };
      std::vector<int32_t> received;
      for (int32_t b : items_[i].blocks) {
        auto [dbegin, dend] = deps_.row(b);
        for (const int32_t* j = dbegin; j != dend; ++j)
          if (outside(*j)) received.push_back(*j);
        int64_t users_outside = 0;
        auto [ubegin, uend] = users_.row(b);
        for (const int32_t* q = ubegin; q != uend; ++q) users_outside += outside(*q);
        item_send_[i] += static_cast<double>(std::min<int64_t>(users_outside, n_ - 1)) *
                         static_cast<double>(in_.sharding->blocks[b].tokens());
      }
      std::sort(received.begin(), received.end());
      received.erase(std::unique(received.begin(), received.end()), received.end());
      item_traffic_[i] = item_send_[i];
      for (int32_t j : received)
        item_traffic_[i] += static_cast<double>(in_.sharding->blocks[j].tokens());
    }
  }

  // item_needs_: per item, the sequences it holds only part of and the keys
  // its queries attend in each (sequences it holds whole need nothing).
  void ComputeNeeds() {
    const std::vector<int64_t>& lengths = *in_.lengths;
    item_needs_.assign(items_.size(), {});
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
        const TokenRange keys = AttendedKeys(in_.mask, {x.start, x.start + x.length}, lengths[x.seq]);
        std::vector<SequenceNeed>& needs = item_needs_[i];
        if (!needs.empty() && needs.back().seq == x.seq) {
          needs.back().lo = std::min(needs.back().lo, keys.begin);
          needs.back().hi = std::max(needs.back().hi, keys.end);
          needs.back().own += x.length;
        } else {
          needs.push_back({x.seq, keys.begin, keys.end, x.length});
        }
      }
    }
  }

  Assignment Run() {
    // Three starts, each refined by the local search on real loads:
    // compute-first LPT, vector LPT (compute and estimated traffic), and
    // vector LPT that prices traffic by what a worker already holds of the
    // item's sequences. The one with the lowest Cost wins (ties: the earlier).
    struct Result {
      std::vector<int32_t> owner;
      Loads loads;
    };
    std::vector<Result> results;
    size_t best = 0;
    double best_cost = std::numeric_limits<double>::infinity();
    for (const Start start : {Start::kCompute, Start::kVector, Start::kAffinity}) {
      Result r{Greedy(start), {}};
      r.loads = Improve(r.owner);
      const double cost =
          Cost({{}, r.loads.compute, r.loads.traffic}, in_.pairs_per_traffic_token);
      if (cost < best_cost) {
        best_cost = cost;
        best = results.size();
      }
      results.push_back(std::move(r));
    }
    Result& r = results[best];
    return {std::move(r.owner), std::move(r.loads.compute), std::move(r.loads.traffic)};
  }

 private:
  // Collects up to `limit` workers from `index` on which `item` fits.
  void Collect(const WorkerIndex& index, const Slots& slots, const Item& item, int limit,
               std::vector<int32_t>& out) const {
    int found = 0, scanned = 0;
    for (auto it = index.ordered().begin();
         it != index.ordered().end() && found < limit && scanned < kScanLimit; ++it, ++scanned)
      if (slots.Fits(item, it->second) &&
          std::find(out.begin(), out.end(), it->second) == out.end()) {
        out.push_back(it->second);
        ++found;
      }
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
    NeedHulls hulls(in_.lengths->size());
    std::vector<double> compute(n_, 0), traffic(n_, 0);
    // Indexes of open workers (a free slot of the class) by compute and traffic.
    WorkerIndex by_compute[2] = {WorkerIndex(n_), WorkerIndex(n_)};
    WorkerIndex by_traffic[2] = {WorkerIndex(n_), WorkerIndex(n_)};
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
      const std::vector<SequenceNeed>& needs = item_needs_[i];
      const int cls = item.small ? 1 : 0;
      candidates.clear();
      Collect(by_compute[cls], slots, item, kComputeCandidates, candidates);
      Collect(by_traffic[cls], slots, item, kTrafficCandidates, candidates);
      const auto consider = [&](int32_t w) {
        if (slots.Fits(item, w) && std::find(candidates.begin(), candidates.end(), w) == candidates.end())
          candidates.push_back(w);
      };
      const int32_t home = in_.dataloader[i];
      consider(home);
      if (affinity)
        for (const SequenceNeed& n : needs) {
          const std::vector<int32_t>& holders = hulls.WorkersOf(n.seq);
          const size_t first = holders.size() - std::min<size_t>(holders.size(), kAffinityCandidates);
          for (size_t k = holders.size(); k-- > first;) consider(holders[k]);
        }
      if (candidates.empty())  // every indexed candidate was infeasible: scan all
        for (int32_t w = 0; w < n_ && candidates.empty(); ++w) consider(w);
      FCP_CHECK(!candidates.empty(), "assignment: no worker has room for item " + std::to_string(i));

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
          if (load < best_load - tolerance) better = true;
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
  // the worst worker below its load without lifting any other to it. Returns
  // the real per-worker loads of the result.
  Loads Improve(std::vector<int32_t>& owner) {
    Ledger ledger(in_, deps_);
    std::vector<std::vector<int32_t>> owned(n_);
    for (size_t i = 0; i < items_.size(); ++i) {
      const int32_t w = owner[items_[i].blocks.front()];
      ledger.AddItem(items_[i], w);
      owned[w].push_back(static_cast<int32_t>(i));
    }
    ledger.TakeTouched();
    double mean_traffic = 0;
    for (int32_t w = 0; w < n_; ++w) mean_traffic += ledger.traffic(w) / n_;
    const Targets targets{targets_.compute, std::max(mean_traffic, 1.0)};
    const auto load = [&](int32_t w) { return targets.Load(ledger.compute(w), ledger.traffic(w)); };
    WorkerIndex by_load(n_), by_compute(n_), by_traffic(n_);
    for (int32_t w = 0; w < n_; ++w) {
      by_load.Insert(w, load(w));
      by_compute.Insert(w, ledger.compute(w));
      by_traffic.Insert(w, ledger.traffic(w));
    }
    const auto refresh = [&]() {
      double max_touched = 0;
      for (int32_t w : ledger.TakeTouched()) {
        by_load.Update(w, load(w));
        by_compute.Update(w, ledger.compute(w));
        by_traffic.Update(w, ledger.traffic(w));
        max_touched = std::max(max_touched, load(w));
      }
      return max_touched;
    };
    // An exchange: item `give` of the heavy worker for one or two items of a
    // light one (second = -1 for one).
    struct Offer {
      int32_t first, second;
    };
    const auto exchange = [&](int32_t give, int32_t from, Offer take, int32_t to) {
      ledger.RemoveItem(items_[give]);
      ledger.RemoveItem(items_[take.first]);
      if (take.second >= 0) ledger.RemoveItem(items_[take.second]);
      ledger.AddItem(items_[give], to);
      ledger.AddItem(items_[take.first], from);
      if (take.second >= 0) ledger.AddItem(items_[take.second], from);
    };
    const auto offer_work = [&](Offer o) {
      return item_work_[o.first] + (o.second >= 0 ? item_work_[o.second] : 0.0);
    };
    int64_t budget = static_cast<int64_t>(in_.local_search_rounds) *
                     std::max<int64_t>(static_cast<int64_t>(items_.size()), n_) * 2;
    const int64_t max_steps = static_cast<int64_t>(in_.local_search_rounds) * n_;
    std::vector<int32_t> partners;
    std::vector<Offer> offers;
    for (int64_t step = 0; step < max_steps && budget > 0; ++step) {
      const auto [max_load, heavy] = *by_load.ordered().rbegin();
      partners.clear();
      for (const WorkerIndex* index : {&by_compute, &by_traffic}) {
        int taken = 0;
        for (auto it = index->ordered().begin();
             it != index->ordered().end() && taken < kSwapPartners / 2; ++it)
          if (it->second != heavy &&
              std::find(partners.begin(), partners.end(), it->second) == partners.end()) {
            partners.push_back(it->second);
            ++taken;
          }
      }
      // The heavy worker's binding dimension must come down.
      const bool compute_bound =
          ledger.compute(heavy) / targets.compute >= ledger.traffic(heavy) / targets.traffic;
      bool improved = false;
      for (size_t x = 0; x < owned[heavy].size() && !improved && budget > 0; ++x) {
        const int32_t a = owned[heavy][x];
        for (int32_t light : partners) {
          offers.clear();
          const auto& mine = owned[light];
          for (size_t y = 0; y < mine.size(); ++y) {
            const Item& b = items_[mine[y]];
            if (b.small != items_[a].small) continue;
            if (b.slots == items_[a].slots) offers.push_back({mine[y], -1});
            if (items_[a].slots == 2 && b.slots == 1)
              for (size_t z = y + 1; z < mine.size(); ++z)
                if (!items_[mine[z]].small && items_[mine[z]].slots == 1)
                  offers.push_back({mine[y], mine[z]});
          }
          for (const Offer offer : offers) {
            // Compute moves by exactly the works exchanged: skip, without
            // touching the ledger, what would leave either side at the limit.
            const double shift = item_work_[a] - offer_work(offer);
            if ((ledger.compute(light) + shift) / targets.compute >= max_load ||
                (ledger.compute(heavy) - shift) / targets.compute >= max_load)
              continue;
            // Traffic-bound: only offers estimated to carry less traffic.
            if (!compute_bound &&
                item_traffic_[a] <= item_traffic_[offer.first] +
                                        (offer.second >= 0 ? item_traffic_[offer.second] : 0.0))
              continue;
            if (budget-- <= 0) break;
            exchange(a, heavy, offer, light);
            if (refresh() < max_load * (1 - 1e-9)) {
              std::vector<int32_t>& h = owned[heavy];
              std::vector<int32_t>& l = owned[light];
              h[x] = offer.first;
              if (offer.second >= 0) h.push_back(offer.second);
              *std::find(l.begin(), l.end(), offer.first) = a;
              if (offer.second >= 0) l.erase(std::find(l.begin(), l.end(), offer.second));
              improved = true;
              break;
            }
            exchange(a, light, offer, heavy);  // undo: a back to heavy, the offer to light
            refresh();
          }
          if (improved) break;
        }
      }
      if (!improved) break;
    }
    owner = ledger.owners();
    Loads loads{std::vector<double>(n_), std::vector<double>(n_)};
    for (int32_t w = 0; w < n_; ++w) {
      loads.compute[w] = ledger.compute(w);
      loads.traffic[w] = ledger.traffic(w);
    }
    return loads;
  }

  const AssignmentInput& in_;
  const std::vector<Item>& items_;
  int32_t n_;
  Csr deps_, users_;
  std::vector<int32_t> item_of_;
  std::vector<double> item_work_;
  std::vector<double> item_traffic_;  // estimated tokens sent + received
  std::vector<double> item_send_;     // estimated tokens sent
  std::vector<std::vector<SequenceNeed>> item_needs_;
  std::vector<int32_t> compute_order_, vector_order_;
  Targets targets_;
};

}  // namespace

Assignment AssignBlocks(const AssignmentInput& input) { return Assigner(input).Run(); }

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
  const int64_t total = offsets.back();
  std::vector<Shared> shared;
  for (size_t b = 0; b < blocks.size(); ++b)
    for (const Segment& s : blocks[b].segments) {
      int64_t token = offsets[s.seq] + s.start;
      const int64_t end = token + s.length;
      while (token < end) {
        const int32_t home = DataloaderWorker(total, workers, token);
        const int64_t stop = std::min(end, DataloaderBegin(total, workers, home + 1));
        shared.push_back({stop - token, owner[b], home});
        token = stop;
      }
    }
  // Sum per (worker, home), then take pairs heaviest first.
  std::sort(shared.begin(), shared.end(), [](const Shared& a, const Shared& b) {
    return a.worker != b.worker ? a.worker < b.worker : a.home < b.home;
  });
  std::vector<Shared> merged;
  for (const Shared& x : shared) {
    if (!merged.empty() && merged.back().worker == x.worker && merged.back().home == x.home)
      merged.back().tokens += x.tokens;
    else
      merged.push_back(x);
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
