// assignment_parts.h — the assignment's data structures (src/plan/assignment.cpp),
// apart so that they have unit tests of their own (tests/assignment_parts_test.cpp):
// compressed rows, an indexed heap of workers ordered by (load, id), the
// slot bookkeeping that keeps two-slot items placeable, and the per-worker
// compute and traffic of a complete assignment. Internal to the planner.
// Invariants and complexity are stated at each type.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "assignment.h"

namespace fcp::detail {

// Compressed rows: row r is items[offset[r] .. offset[r+1]).
template <typename T>
struct Rows {
  std::vector<int32_t> offset;
  std::vector<T> items;
  std::span<const T> row(int32_t r) const {
    return {items.data() + offset[r], items.data() + offset[r + 1]};
  }
};
using Csr = Rows<int32_t>;

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
// many workers own a block that needs it: where a search starts.
struct Loads {
  std::vector<int32_t> owner;  // owner[block]
  std::vector<double> compute, traffic;
  std::vector<int32_t> needers;
};
inline Loads CountLoads(const AssignmentInput& in, const Csr& users, const std::vector<int64_t>& tokens,
                 std::vector<int32_t> owner) {
  const int32_t blocks = static_cast<int32_t>(owner.size());
  Loads loads{std::move(owner), std::vector<double>(in.workers, 0),
              std::vector<double>(in.workers, 0), std::vector<int32_t>(blocks, 0)};
  for (int32_t b = 0; b < blocks; ++b) loads.compute[loads.owner[b]] += in.block_work[b];
  // A transfer owner(kv) -> w for every worker w != owner(kv) that owns a
  // block needing kv. (Token counts are integers, exact in doubles: the
  // owner's sends can be summed as a product.)
  std::vector<int32_t> seen(in.workers, -1);
  const int32_t* const owner_of = loads.owner.data();
  double* const traffic = loads.traffic.data();
  for (int32_t kv = 0; kv < blocks; ++kv) {
    const int32_t kv_owner = owner_of[kv];
    const double t = static_cast<double>(tokens[kv]);
    int32_t needers = 0, receivers = 0;
    for (int32_t q : users.row(kv)) {
      const int32_t w = owner_of[q];
      if (seen[w] == kv) continue;
      seen[w] = kv;
      ++needers;
      if (w != kv_owner) {
        traffic[w] += t;
        ++receivers;
      }
    }
    loads.needers[kv] = needers;
    traffic[kv_owner] += receivers * t;
  }
  return loads;
}

}  // namespace fcp::detail
