// assignment_parts.h — the assignment's data structures (src/plan/assignment_*.cpp),
// apart so that they have unit tests of their own (tests/assignment_parts_test.cpp):
// compressed rows, an indexed heap of workers ordered by (load, id), the
// slot bookkeeping that keeps two-slot items placeable, the per-worker
// compute and traffic of a complete assignment, and the load model that
// evaluates and applies the local search's exchanges. Internal to the planner.
// Invariants and complexity are stated at each type.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "assignment.h"
#include "buckets.h"
#include "fcp/error.h"

namespace fcp::detail {

using Csr = Rows<int32_t>;  // Rows: buckets.h

// An index of workers ordered by (key, id), ascending or (kDescending)
// descending: an indexed binary heap (contiguous, no allocation after
// construction), updated in O(log N), visited in order from the first
// entry by a best-first walk of the heap (O(k^2) for the first k, small).
// The order is total (ties by id), so a walk sees exactly the order a
// sorted container would. Keys are loads, >= 0: the bits of a non-negative
// double order like the double, so (key, id) packs into one 128-bit rank
// whose comparison compiles without branches (a branchy two-field compare
// was mispredicted on most of the walk's steps).
template <bool kDescending>
class WorkerIndex {
  __extension__ using Rank = unsigned __int128;

 public:
  explicit WorkerIndex(int32_t workers) : position_(workers, -1) { heap_.reserve(workers); }
  void Insert(int32_t w, double key) {
    position_[w] = static_cast<int32_t>(heap_.size());
    heap_.push_back(RankOf(key, w));
    SiftUp(position_[w]);
  }
  void Erase(int32_t w) {
    const int32_t at = position_[w];
    if (at < 0) return;
    position_[w] = -1;
    const Rank last = heap_.back();
    heap_.pop_back();
    if (at == static_cast<int32_t>(heap_.size())) return;
    Place(last, at);
    Restore(at);
  }
  void Update(int32_t w, double key) {
    const int32_t at = position_[w];
    if (at < 0) return;
    const Rank rank = RankOf(key, w);
    if (heap_[at] == rank) return;
    heap_[at] = rank;
    Restore(at);
  }
  // The first entry's key and id.
  double first_key() const { return KeyOf(heap_.front()); }
  int32_t first_id() const { return IdOf(heap_.front()); }
  // Calls visit(id, key) in order until it returns false or all are seen.
  template <typename F>
  void Visit(F visit) const {
    if (heap_.empty()) return;
    // frontier_[0, size): the entries whose parents were visited. Walks are
    // short (a few entries; at most kScanLimit in the greedy), so the next
    // is found by a scan. Each visit adds at most kArity - 1 entries net.
    // Entries are places in heap_: four bytes to move instead of a rank's 16.
    if (frontier_.size() < heap_.size()) frontier_.resize(heap_.size());
    int32_t* const frontier = frontier_.data();
    const Rank* const heap = heap_.data();
    frontier[0] = 0;
    size_t size = 1;
    const int32_t heap_size = static_cast<int32_t>(heap_.size());
    while (size > 0) {
      size_t next = 0;
      for (size_t k = 1; k < size; ++k) next = heap[frontier[k]] < heap[frontier[next]] ? k : next;
      const int32_t at = frontier[next];
      frontier[next] = frontier[--size];
      if (!visit(IdOf(heap[at]), KeyOf(heap[at]))) return;
      const int32_t end = std::min(kArity * at + kArity + 1, heap_size);
      for (int32_t c = kArity * at + 1; c < end; ++c) frontier[size++] = c;
    }
  }

 private:
  static constexpr int32_t kArity = 2;
  static Rank RankOf(double key, int32_t id) {
    // + 0.0 turns -0.0 into 0.0.
    const uint64_t bits = std::bit_cast<uint64_t>(key + 0.0);
    const uint32_t low = static_cast<uint32_t>(id);
    return kDescending ? (Rank{~bits} << 64) | ~low : (Rank{bits} << 64) | low;
  }
  static double KeyOf(Rank rank) {
    const uint64_t high = static_cast<uint64_t>(rank >> 64);
    return std::bit_cast<double>(kDescending ? ~high : high);
  }
  static int32_t IdOf(Rank rank) {
    const uint32_t low = static_cast<uint32_t>(rank);
    return static_cast<int32_t>(kDescending ? ~low : low);
  }
  void Place(Rank rank, int32_t at) {
    heap_[at] = rank;
    position_[IdOf(rank)] = at;
  }
  void Restore(int32_t at) {
    if (at > 0 && heap_[at] < heap_[(at - 1) / kArity])
      SiftUp(at);
    else
      SiftDown(at);
  }
  void SiftUp(int32_t at) {
    const Rank e = heap_[at];
    while (at > 0) {
      const int32_t parent = (at - 1) / kArity;
      if (!(e < heap_[parent])) break;
      Place(heap_[parent], at);
      at = parent;
    }
    Place(e, at);
  }
  void SiftDown(int32_t at) {
    const Rank e = heap_[at];
    const int32_t size = static_cast<int32_t>(heap_.size());
    while (true) {
      const int32_t first_child = kArity * at + 1;
      if (first_child >= size) break;
      int32_t best = first_child;
      const int32_t end = std::min(first_child + kArity, size);
      for (int32_t c = first_child + 1; c < end; ++c) best = heap_[c] < heap_[best] ? c : best;
      if (!(heap_[best] < e)) break;
      Place(heap_[best], at);
      at = best;
    }
    Place(e, at);
  }

  std::vector<Rank> heap_;
  std::vector<int32_t> position_;          // each worker's place in heap_, -1 if absent
  mutable std::vector<int32_t> frontier_;  // Visit's scratch (single-threaded use)
};
using AscendingIndex = WorkerIndex<false>;
using DescendingIndex = WorkerIndex<true>;

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

// Per-worker loads of a complete assignment, and for each K/V block how
// many workers own a block that needs it: where a search starts. traffic is
// tokens sent + received, send the sent part (a NIC is full duplex: its
// ports are send and traffic - send).
struct Loads {
  std::vector<int32_t> owner;  // owner[block]
  std::vector<double> compute, traffic, send;
  std::vector<int32_t> needers;
};
// The K/V transfers of a complete assignment, kv ascending: for every K/V
// block kv and every distinct worker w that owns a block needing kv
// (users: row kv lists those blocks), to(kv, w) if w != owner[kv] (one
// transfer owner[kv] -> w); then done(kv, needers, receivers), needers
// counting the owner too when it needs kv. `seen` is scratch, one entry
// per worker, all below 0 on entry. O(P + B).
template <typename To, typename Done>
void ForEachTransfer(const Csr& users, const std::vector<int32_t>& owner,
                     std::vector<int32_t>& seen, To to, Done done) {
  const int32_t blocks = static_cast<int32_t>(owner.size());
  const int32_t* const owner_of = owner.data();
  for (int32_t kv = 0; kv < blocks; ++kv) {
    const int32_t kv_owner = owner_of[kv];
    int32_t needers = 0, receivers = 0;
    for (int32_t q : users.row(kv)) {
      const int32_t w = owner_of[q];
      if (seen[w] == kv) continue;
      seen[w] = kv;
      ++needers;
      if (w != kv_owner) {
        to(kv, w);
        ++receivers;
      }
    }
    done(kv, needers, receivers);
  }
}

// The K/V transfers of a complete assignment, added to the per-worker
// loads: each transfer's tokens on the receiver's traffic and on the
// sender's traffic and send. With `needers`, needers[kv] = the distinct
// owners of kv's users. (Token counts are integers, exact in doubles: the
// owner's sends can be summed as a product.) O(P + B).
inline void CountTransfers(const Csr& users, const std::vector<int64_t>& tokens,
                           const std::vector<int32_t>& owner, std::vector<double>& traffic_out,
                           std::vector<double>& send_out, std::vector<int32_t>* needers_out) {
  std::vector<int32_t> seen(traffic_out.size(), -1);
  double* const traffic = traffic_out.data();
  double* const send = send_out.data();
  ForEachTransfer(
      users, owner, seen,
      [&](int32_t kv, int32_t w) { traffic[w] += static_cast<double>(tokens[kv]); },
      [&](int32_t kv, int32_t needers, int32_t receivers) {
        if (needers_out) (*needers_out)[kv] = needers;
        const double sent = receivers * static_cast<double>(tokens[kv]);
        traffic[owner[kv]] += sent;
        send[owner[kv]] += sent;
      });
}

inline Loads CountLoads(const AssignmentInput& in, const Csr& users,
                        const std::vector<int64_t>& tokens, std::vector<int32_t> owner) {
  const int32_t blocks = static_cast<int32_t>(owner.size());
  Loads loads{std::move(owner), std::vector<double>(in.workers, 0),
              std::vector<double>(in.workers, 0), std::vector<double>(in.workers, 0),
              std::vector<int32_t>(blocks, 0)};
  for (int32_t b = 0; b < blocks; ++b) loads.compute[loads.owner[b]] += in.block_work[b];
  CountTransfers(users, tokens, loads.owner, loads.traffic, loads.send, &loads.needers);
  return loads;
}

// Exchange partners examined per local-search step (ExchangeEngine): the load
// model caches a table for the heavy worker and each of them.
constexpr int kSwapPartners = 4;
constexpr int kLevelPartners = 16;  // the leveling searches'

// A K/V block an item needs, and how many of the item's blocks need it.
struct Dep {
  int32_t kv, mult;
};

// Per-worker compute, traffic and sent tokens of a complete assignment, and the exact
// effect of exchanging items between two workers, found without applying it:
// only the transfers of the moved blocks and of the K/V blocks they need
// change. Item dependencies are aggregated per item (K/V block, multiplicity),
// and the dependency counts of the heavy worker and its partners live in
// dense tables, cached across local-search steps (Apply keeps the tables of
// an exchange's two workers current, so a table stays valid), so an
// evaluation costs O(dependencies of the moved items) array accesses, no
// hashing. All loads are sums of integers, exact in doubles, so the result
// equals applying the exchange block by block.
//
// Counter: the type of a count, wide enough for the most blocks of one
// worker that can need one K/V block (AssignmentContext::MostCount). The narrowest
// that fits (uint8_t on the paper's batches, N = 16 to 4096) keeps more of the
// tables in cache: their misses were most of Fill's time and a quarter of
// Evaluate's. Counts are added and removed one item at a time, so a count
// may pass the bound midway through Apply; unsigned counts wrap modulo
// their width and are exact again when Apply returns.
template <typename Counter>
class LoadModel {
 public:
  // Dependency-count tables cached: one per worker where kTableEntries
  // counts allow it, else at least kMinTables (the heavy worker and its
  // partners of one step fit). A step's heavy worker is rarely the last
  // one's, so a table per worker misses far less than a few shared ones.
  // The budget is a trade of instructions for memory traffic: a larger one
  // saves instructions but zeroing its tables misses the last-level cache
  // (measured: docs/planner-benchmark.md, the assignment's data structures).
  static constexpr size_t kMinTables = 32;
  static constexpr size_t kTableEntries = size_t{1} << 20;  // 4 MiB of int32_t counts
  static_assert(kMinTables >= 1 + std::max(kSwapPartners, kLevelPartners));

  // Scratch sized for the batch; Start gives it loads to search from.
  LoadModel(const AssignmentInput& in, const std::vector<Item>& items, const Rows<Dep>& item_deps,
            const Csr& users, const std::vector<int64_t>& tokens)
      : items_(items), item_deps_(item_deps), users_(users), tokens_(tokens) {
    const size_t blocks = tokens.size();
    const size_t tables = std::min<size_t>(
        in.workers, std::max(kMinTables, kTableEntries / std::max<size_t>(blocks, 1)));
    count_.resize(tables);
    filled_.resize(tables);
    filled_size_.assign(tables, 0);
    table_worker_.assign(tables, -1);
    table_used_.assign(tables, 0);
    // Least recently used first: table t after t - 1.
    newer_.resize(tables);
    older_.resize(tables);
    for (size_t t = 0; t < tables; ++t) {
      newer_[t] = t + 1 < tables ? static_cast<int32_t>(t + 1) : -1;
      older_[t] = static_cast<int32_t>(t) - 1;
    }
    oldest_ = 0;
    newest_ = static_cast<int32_t>(tables) - 1;
    table_of_.assign(in.workers, -1);
    kv_.assign(blocks, KvScratch{});
    kvs_.assign(blocks, 0);
    delta_.assign(in.workers, 0);
    send_delta_.assign(in.workers, 0);
    delta_stamp_.assign(in.workers, 0);
    changed_.assign(in.workers, 0);
  }
  // Starts a search from `loads` (copied): empties the tables; the stamps
  // run on, so the scratch needs no reset.
  void Start(const Loads& loads) {
    loads_ = loads;
    for (int t = 0; t < static_cast<int>(count_.size()); ++t) {
      ClearTable(t);
      if (table_worker_[t] >= 0) table_of_[table_worker_[t]] = -1;
      table_worker_[t] = -1;
    }
  }

  double compute(int32_t w) const { return loads_.compute[w]; }
  double traffic(int32_t w) const { return loads_.traffic[w]; }
  const Loads& loads() const { return loads_; }

  // A local-search step begins: the tables it asks for are kept until the next.
  void BeginStep() { ++step_; }
  // The table holding, for every K/V block, how many blocks of worker w's
  // items (`owned`, the items w owns now) need it: cached, or filled in the
  // least recently used table, which must not have been asked for since
  // BeginStep.
  int Table(int32_t w, const std::vector<int32_t>& owned) {
    if (table_of_[w] < 0) return Fill(w, owned);
    Touch(table_of_[w]);
    return table_of_[w];
  }
  // Table's miss: w's counts into the least recently used table (allocated
  // on first use: small batches never use most of them).
  int Fill(int32_t w, const std::vector<int32_t>& owned) {
    const int victim = oldest_;
    FCP_CHECK(table_used_[victim] != step_, "local search: more than " +
                                                std::to_string(count_.size()) +
                                                " dependency tables asked for in one step");
    if (count_[victim].empty()) count_[victim].assign(tokens_.size(), 0);
    ClearTable(victim);
    if (table_worker_[victim] >= 0) table_of_[table_worker_[victim]] = -1;
    for (int32_t i : owned) AddDeps<1>(victim, i);
    table_worker_[victim] = w;
    table_of_[w] = victim;
    Touch(victim);
    return victim;
  }

  // The exchange of item `give` of worker `heavy` (counts in table hs) for
  // items `take` (one or two, -1 for none) of worker `light` (table ls).
  // Afterwards: traffic_after(w) and send_after(w) of the workers in
  // changed(), heavy, light and every other worker whose traffic changes.
  // (Compute moves by the works exchanged, which the caller knows.)
  void Evaluate(int32_t give, int32_t heavy, int hs, std::array<int32_t, 2> take, int32_t light,
                int ls) {
    ++stamp_;
    changed_count_ = 0;
    heavy_ = heavy;
    light_ = light;
    give_item_ = give;
    take_items_ = take;
    hs_ = hs;
    ls_ = ls;
    // Locals: stores through the members could alias them, which the loops
    // below would otherwise reload for every block.
    const uint32_t stamp = stamp_;
    KvScratch* const scratch = kv_.data();
    int32_t* const kvs = kvs_.data();  // room for every block: no growth check
    size_t kv_count = 0;
    const auto mark = [&](int32_t kv) -> KvScratch& {
      KvScratch& x = scratch[kv];
      if (x.stamp != stamp) {
        x.stamp = stamp;
        x.give = x.take = 0;
        x.moved_to = -1;
        kvs[kv_count++] = kv;
      }
      return x;
    };
    const auto shift = [&](int32_t item, int32_t to, int32_t KvScratch::*mult) {
      for (const Dep& d : Deps(item)) mark(d.kv).*mult += d.mult;
      for (int32_t b : items_[item].blocks) {
        mark(b).moved_to = to;
      }
    };
    shift(give, light, &KvScratch::give);
    for (int32_t item : take)
      if (item >= 0) shift(item, heavy, &KvScratch::take);
    kv_count_ = kv_count;
    Register(heavy);
    Register(light);
    // Token counts, exact; heavy's and light's in registers (they change the
    // most, and a sum in memory would chain every update through a store).
    // *_delta: sent + received, *_send: sent.
    int64_t heavy_delta = 0, light_delta = 0, heavy_send = 0, light_send = 0;
    const auto change_send = [&](int32_t w, int64_t amount) {
      if (amount == 0) return;  // most blocks: their transfers stay as they are
      if (w == heavy) {
        heavy_delta += amount, heavy_send += amount;
      } else if (w == light) {
        light_delta += amount, light_send += amount;
      } else {
        Register(w);
        delta_[w] += amount;
        send_delta_[w] += amount;
      }
    };
    const int32_t* const owner = loads_.owner.data();
    const Counter* const heavy_count = count_[hs].data();
    const Counter* const light_count = count_[ls].data();
    const int64_t* const tokens = tokens_.data();
    for (int32_t kv : evaluated()) {
      const KvScratch& x = scratch[kv];
      if (x.moved_to < 0) {
        // Heavy's and light's receiving kv changes; its owner sends it
        // accordingly (other receivers are unchanged). Most blocks: no change.
        // (Members' after - before, in ints: through the struct of bools
        // it took more instructions, docs/planner-benchmark.md.)
        const int32_t hc = heavy_count[kv], lc = light_count[kv], d = x.take - x.give;
        const int dh = (hc + d > 0) - (hc > 0), dl = (lc - d > 0) - (lc > 0);
        if ((dh | dl) == 0) continue;
        const int32_t o = owner[kv];
        const int64_t rh = heavy != o ? dh * tokens[kv] : 0;
        const int64_t rl = light != o ? dl * tokens[kv] : 0;
        heavy_delta += rh;
        light_delta += rl;
        change_send(o, rh + rl);
        continue;
      }
      // Moved between heavy and light (its item is exchanged): the new owner
      // sends it to every needer but itself, the old one stops sending it to
      // the others and receives it if it still needs it.
      const Membership m = Members(heavy_count[kv], light_count[kv], x);
      const int32_t before = loads_.needers[kv], after = before + m.delta();
      const int64_t t = tokens[kv];
      if (x.moved_to == light) {
        const int64_t stop = (before - m.heavy_before) * t, start = (after - m.light_after) * t;
        heavy_delta += m.heavy_after * t - stop;
        heavy_send -= stop;
        light_delta += start - m.light_before * t;
        light_send += start;
      } else {
        const int64_t stop = (before - m.light_before) * t, start = (after - m.heavy_after) * t;
        light_delta += m.light_after * t - stop;
        light_send -= stop;
        heavy_delta += start - m.heavy_before * t;
        heavy_send += start;
      }
    }
    delta_[heavy] = heavy_delta;
    delta_[light] = light_delta;
    send_delta_[heavy] = heavy_send;
    send_delta_[light] = light_send;
  }
  std::span<const int32_t> changed() const { return {changed_.data(), changed_count_}; }
  double traffic_after(int32_t w) const {
    return loads_.traffic[w] + static_cast<double>(delta_[w]);
  }
  double send(int32_t w) const { return loads_.send[w]; }
  double send_after(int32_t w) const {
    return loads_.send[w] + static_cast<double>(send_delta_[w]);
  }
  bool in_changed(int32_t w) const { return delta_stamp_[w] == stamp_; }

  // Whether the evaluated exchange, applied as remove-all then add-all
  // (heavy's item, light's items, then re-adding them swapped), would
  // remove or create a transfer of worker u, where u is neither heavy, light,
  // nor in changed(): u needs a moved block, or owns a K/V block that heavy
  // or light stops needing during the exchange (if only to need it again).
  bool Involves(int32_t u) const {
    for (int32_t kv : evaluated()) {
      if (kv_[kv].moved_to >= 0) {
        for (int32_t q : users_.row(kv))
          if (loads_.owner[q] == u) return true;
      } else if (loads_.owner[kv] == u) {
        const int32_t ch = count_[hs_][kv], cl = count_[ls_][kv];
        const KvScratch& x = kv_[kv];
        if ((ch == x.give && (ch > 0 || x.take > 0)) || (cl == x.take && (cl > 0 || x.give > 0)))
          return true;
      }
    }
    return false;
  }

  // Applies the evaluated exchange; heavy and light get the given computes.
  void Apply(double heavy_compute, double light_compute) {
    // Locals: the stores below could alias the members.
    const Counter* const heavy_count = count_[hs_].data();
    const Counter* const light_count = count_[ls_].data();
    const KvScratch* const scratch = kv_.data();
    int32_t* const needers = loads_.needers.data();
    int32_t* const owner = loads_.owner.data();
    for (int32_t kv : evaluated()) {
      const KvScratch& x = scratch[kv];
      needers[kv] += Members(heavy_count[kv], light_count[kv], x).delta();
      if (x.moved_to >= 0) owner[kv] = x.moved_to;
    }
    loads_.compute[heavy_] = heavy_compute;
    loads_.compute[light_] = light_compute;
    for (int32_t w : changed()) {
      loads_.traffic[w] += static_cast<double>(delta_[w]);
      loads_.send[w] += static_cast<double>(send_delta_[w]);
    }
    // Last: Members above reads the counts before the exchange.
    AddDeps<-1>(hs_, give_item_);
    AddDeps<1>(ls_, give_item_);
    for (int32_t item : take_items_)
      if (item >= 0) {
        AddDeps<-1>(ls_, item);
        AddDeps<1>(hs_, item);
      }
  }

 private:
  // Per K/V block, for the evaluated exchange (valid where stamp ==
  // stamp_): its dependencies in the given / taken items, and the worker it
  // moves to (-1: it stays). One struct of 16 bytes: an evaluation touches
  // all of them for each block.
  struct KvScratch {
    uint32_t stamp = 0;
    int32_t give = 0, take = 0, moved_to = -1;
  };
  struct Membership {
    bool heavy_before, heavy_after, light_before, light_after;
    int delta() const { return heavy_after - heavy_before + light_after - light_before; }
  };
  std::span<const Dep> Deps(int32_t item) const { return item_deps_.row(item); }
  std::span<const int32_t> evaluated() const { return {kvs_.data(), kv_count_}; }
  // Adds (kSign 1) or removes (-1) an item's dependencies to table t. A
  // block listed in filled_ may have dropped to zero (or be listed twice):
  // filled_ only says which entries to reset. Each block is written at the
  // end of the list, which grows only when it was at zero: no branch on the
  // count (it was mispredicted on a third of the blocks). The sign is a
  // constant: Fill's calls, when not inlined, took more instructions with
  // it an argument (docs/planner-benchmark.md).
  template <int kSign>
  void AddDeps(int t, int32_t item) {
    const std::span<const Dep> deps = Deps(item);
    std::vector<int32_t>& filled = filled_[t];
    size_t size = filled_size_[t];
    if (filled.size() < size + deps.size()) filled.resize(2 * (size + deps.size()));
    int32_t* const list = filled.data();
    Counter* const count = count_[t].data();
    for (const Dep& d : deps) {
      list[size] = d.kv;
      size += count[d.kv] == 0;
      count[d.kv] += kSign * d.mult;
    }
    filled_size_[t] = size;
  }
  void ClearTable(int t) {
    // Locals: a store of a one-byte count may alias anything, so the loop
    // would reload the size and both vectors' data on every entry.
    Counter* const count = count_[t].data();
    const int32_t* const list = filled_[t].data();
    const size_t size = filled_size_[t];
    for (size_t k = 0; k < size; ++k) count[list[k]] = 0;
    filled_size_[t] = 0;
  }
  // kv's need by heavy and light, before and after the exchange, from its
  // counts in their tables and its scratch.
  static Membership Members(int32_t heavy_count, int32_t light_count, const KvScratch& x) {
    const int32_t d = x.take - x.give;
    return {heavy_count > 0, heavy_count + d > 0, light_count > 0, light_count - d > 0};
  }
  // Marks table t asked for in this step, and makes it the most recently used.
  void Touch(int t) {
    table_used_[t] = step_;
    if (t == newest_) return;
    // Unlink (t is not the newest, so it has a newer neighbour) ...
    (older_[t] >= 0 ? newer_[older_[t]] : oldest_) = newer_[t];
    older_[newer_[t]] = older_[t];
    // ... and append.
    older_[t] = newest_;
    newer_[t] = -1;
    newer_[newest_] = t;
    newest_ = t;
  }
  // Puts w in changed() (once per evaluation).
  void Register(int32_t w) {
    if (delta_stamp_[w] == stamp_) return;
    delta_stamp_[w] = stamp_;
    delta_[w] = 0;
    send_delta_[w] = 0;
    changed_[changed_count_++] = w;
  }

  const std::vector<Item>& items_;
  const Rows<Dep>& item_deps_;
  const Csr& users_;
  const std::vector<int64_t>& tokens_;  // of each block
  Loads loads_;
  std::vector<std::vector<Counter>> count_;
  std::vector<std::vector<int32_t>> filled_;
  std::vector<size_t> filled_size_;    // filled_[t]'s entries in use
  std::vector<int32_t> table_worker_;  // whose counts each table holds, -1: none
  std::vector<int32_t> table_of_;      // per worker: the table holding its counts, -1: none
  std::vector<uint64_t> table_used_;   // the step that last asked for it
  // Tables from the least to the most recently used: a doubly linked list.
  std::vector<int32_t> newer_, older_;  // -1: none
  int32_t oldest_ = -1, newest_ = -1;
  uint64_t step_ = 0;
  // The evaluated exchange.
  uint32_t stamp_ = 0;
  int32_t heavy_ = -1, light_ = -1;
  int32_t give_item_ = -1;
  std::array<int32_t, 2> take_items_{-1, -1};
  int hs_ = 0, ls_ = 0;
  // K/V blocks whose transfers may change: kvs_[0, kv_count_).
  std::vector<int32_t> kvs_;
  size_t kv_count_ = 0;
  std::vector<KvScratch> kv_;
  std::vector<int64_t> delta_;       // traffic change (tokens) of the workers in changed_
  std::vector<int64_t> send_delta_;  // the change of their sent tokens
  std::vector<uint32_t> delta_stamp_;
  std::vector<int32_t> changed_;  // changed_[0, changed_count_): room for every worker
  size_t changed_count_ = 0;
};

}  // namespace fcp::detail
