// fcp/token_permutation.h — where every token of a batch lives under a plan:
// what a dataloader needs to move tokens from its own layout into the plan's
// layout and back.
//
// Planned order: worker 0's tokens, then worker 1's, ...; within a worker, the
// blocks it owns in increasing block id, within a block its segments in block
// order, within a segment its tokens in sequence order. This is the order in
// which a worker stores the Q, K, V rows of the blocks it owns. Global token
// positions are as in PLAN_FORMAT.md (sum of the lengths before the sequence
// plus the token's index in it); the dataloader layout gives worker r the
// global positions [DataloaderBegin(r), DataloaderBegin(r + 1)).
//
// The planned order is a permutation of [0, T): Order()[p] is the global
// position of the token at planned position p, PlannedPositions(0, T) its
// inverse. One rank needs only its own part, so the per-worker and per-range
// queries cost O(its tokens) plus a lookup, never O(T): building the layout is
// O(K + S log S) for K blocks and S segments, WorkerOrder(w) O(K + tokens of
// w), PlannedPositions / Placement on [begin, end) O(log S + end - begin +
// segments overlapped); Order() and the full inverse are O(T).
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/plan.h"

namespace fcp {

class TokenLayout {
 public:
  // Precondition: ValidatePlan(plan) passes (every token in exactly one
  // segment). The layout copies what it needs; `plan` may go away.
  explicit TokenLayout(const Plan& plan);

  int32_t workers() const { return static_cast<int32_t>(worker_offsets_.size()) - 1; }
  int64_t total_tokens() const { return worker_offsets_.back(); }
  // Size workers + 1: worker w's tokens are planned positions
  // [worker_offsets()[w], worker_offsets()[w + 1]).
  const std::vector<int64_t>& worker_offsets() const { return worker_offsets_; }

  // Global positions of worker w's tokens, in planned order. Error(kInvalidArgument)
  // if w is not a worker.
  std::vector<int64_t> WorkerOrder(int32_t worker) const;
  // Global positions of all tokens in planned order (the workers' orders concatenated).
  std::vector<int64_t> Order() const;

  // Planned position of each global token in [begin, end). Error(kInvalidArgument)
  // unless 0 <= begin <= end <= T.
  std::vector<int64_t> PlannedPositions(int64_t begin, int64_t end) const;

  // For each global token in [begin, end): the worker that owns it and its
  // index in that worker's WorkerOrder. Same preconditions as PlannedPositions.
  struct Placement {
    std::vector<int32_t> owner;
    std::vector<int64_t> index;
  };
  Placement Place(int64_t begin, int64_t end) const;

 private:
  // A segment seen from the global token order.
  struct Piece {
    int64_t global_begin;  // first global position
    int64_t length;
    int64_t planned_position;  // planned position of its first token
    int32_t owner;
  };
  void CheckRange(int64_t begin, int64_t end) const;
  // Calls visit(piece, first, count) for each run of global tokens
  // [first, first + count) of [begin, end), in increasing order.
  template <typename Visit>
  void ForEachRun(int64_t begin, int64_t end, Visit visit) const;

  std::vector<int64_t> worker_offsets_;
  std::vector<int64_t> block_offsets_;  // per worker, CSR into blocks_by_worker_
  std::vector<int32_t> blocks_by_worker_;
  std::vector<std::vector<Piece>> block_pieces_;  // per block, its segments in order
  std::vector<Piece> by_global_;                  // every segment, sorted by global_begin
};

}  // namespace fcp
