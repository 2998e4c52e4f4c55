// fcp/token_permutation.h — where every token of a batch lives under a plan,
// as a permutation of global token positions: what a dataloader needs to move
// tokens from its own layout into the plan's layout and back.
//
// Planned order: worker 0's tokens, then worker 1's, ...; within a worker, the
// blocks it owns in increasing block id, within a block its segments in block
// order, within a segment its tokens in sequence order. This is the order in
// which a worker stores the Q, K, V rows of the blocks it owns. Global token
// positions are as in PLAN_FORMAT.md (sum of the lengths before the sequence
// plus the token's index in it).
//
// Invariant: `order` is a permutation of [0, T): order[worker_offsets[w] + i]
// is the global position of worker w's i-th planned token, and `inverse`
// (when built) satisfies inverse[order[p]] == p.
// Cost: O(T + blocks + segments) time and O(T) memory; the inverse another O(T).
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/plan.h"

namespace fcp {

struct TokenPermutation {
  std::vector<int64_t> worker_offsets;  // size workers + 1; worker w's tokens are [w], [w + 1)
  std::vector<int64_t> order;           // planned position -> global token position
};

// Precondition: ValidatePlan(plan) passes (every token in exactly one segment).
TokenPermutation PlannedTokenOrder(const Plan& plan);

// inverse[permutation[p]] = p. Throws Error(kInvalidArgument) if `permutation`
// is not a permutation of [0, size).
std::vector<int64_t> InvertPermutation(const std::vector<int64_t>& permutation);

}  // namespace fcp
