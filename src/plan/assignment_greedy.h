// assignment_greedy.h — the assignment's greedy starts (the portfolio's
// starting assignments). Internal to the planner.
//
// Items in LPT order, each to the candidate worker with the least
// max(compute/C*, traffic/X*) after taking it (C*, X*: the per-worker
// means): compute-first LPT (traffic ignored), vector LPT (compute and
// estimated traffic, by the larger normalised share), and sequence-affinity
// vector LPT, which prices an item's traffic on a worker by what the worker
// already receives of the item's sequences (NeedHulls) and adds the workers
// holding them to the candidates. Candidates: the least-loaded workers by
// compute and by traffic and the item's dataloader worker, which also wins
// ties (less reshuffle).
//
// Invariants: every block of an item goes to one worker; the slots are
// kept (Slots: two-slot items stay placeable, so the token cap holds); the
// same context gives the same owners. Cost: O(I (C D + log N)) a start for
// I items, C candidates, D sequence needs per item.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "assignment_context.h"

namespace fcp::detail {

enum class Start { kCompute, kVector, kAffinity };

// The K/V one item's queries attend in one sequence it only partly holds:
// the hull [lo, hi) of those keys and how many of them the item owns.
struct SequenceNeed {
  int32_t seq;
  int64_t lo, hi, own;
};

// Per (worker, sequence), the hull of the keys the worker's queries attend:
// the hull minus the tokens the worker owns estimates the K/V tokens it
// must receive for that sequence (exact for causal and full masks, where
// every hull starts at the sequence start or covers it). Placing a block
// next to blocks of its own sequence then costs only the keys they do not
// share, which is what makes the greedy keep long sequences on few
// workers. A joining item adds the hull's growth minus the tokens it owns:
// what the worker owned already cancels, so hulls do not store it.
class NeedHulls {
 public:
  // At most `capacity` (worker, sequence) hulls will be added.
  NeedHulls(size_t sequences, size_t capacity);
  // Receive tokens added if `needs` joined worker w.
  double Marginal(int32_t w, std::span<const SequenceNeed> needs) const;
  void Add(int32_t w, std::span<const SequenceNeed> needs);
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
    int64_t lo = 0, hi = 0;
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

// The greedy starts over one context, whose traffic estimate
// (EstimateTraffic) must be current: the items' needs and LPT orders are
// computed once, in the constructor.
class GreedyStarts {
 public:
  explicit GreedyStarts(const AssignmentContext& context);
  // owner[block] of the start.
  std::vector<int32_t> Build(Start start) const;

 private:
  const AssignmentContext& ctx_;
  // Per item, the sequences it holds only part of and the keys its queries
  // attend in each (sequences it holds whole need nothing).
  Rows<SequenceNeed> needs_;
  std::vector<int32_t> compute_order_, vector_order_;  // LPT: by work, by the larger share
};

}  // namespace fcp::detail
