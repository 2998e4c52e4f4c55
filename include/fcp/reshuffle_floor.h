// fcp/reshuffle_floor.h — the fewest tokens any balanced plan must move away
// from their dataloader worker: the yardstick for a plan's reshuffle.
//
// The dataloader gives worker r the global tokens [floor(rT/N),
// floor((r+1)T/N)), its home share. A token's work is its query row's allowed
// keys (forward token pairs; the same on whichever worker computes it), and
// a worker's work is that of the query tokens it owns. Consider any plan in
// which every worker's work is at most `target` = floor(max_work_ratio x
// total work / N) and every worker owns at most `token_cap` tokens. Then:
//  1. Shed. A home r whose share's work W_r exceeds the target must give away
//     home tokens carrying at least W_r - target of work; the fewest that
//     can are its densest. Their count, summed over the overloaded homes, is
//     `shed_tokens`.
//  2. Replacements. Let O be the overloaded homes and U the rest. Work moved
//     between homes of O only adds to O, so tokens of O's homes carrying at
//     least E = sum over O of (W_r - target) must end on workers of U: at
//     least `pooled_shed_tokens` of them (O's densest tokens pooled). U's
//     workers own at most token_cap tokens each, so U must send away at least
//     that many minus its spare room (`spare_tokens` = sum over U of token_cap
//     - home share) of its own tokens; none of these was counted in 1.
// So the plan moves at least tokens = shed_tokens + max(0, pooled_shed_tokens
// - spare_tokens). The floor is a lower bound, not always reachable: the
// replacements carry work of their own. A batch whose home shares are
// balanced has floor 0.
//
// Token rows of one sequence get no lighter towards its end (causal, full and
// sliding-window masks), so each home's densest tokens are suffixes of its
// runs, cut in O(1) by a row's closed-form work: found by a binary search on
// the work threshold, O((N + sequences) x log(longest sequence)). Pure: same
// input, same answer.
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/mask.h"

namespace fcp {

struct ReshuffleFloorConfig {
  int32_t workers = 1;
  Mask mask;
  int64_t token_cap = 0;        // most tokens a worker may own; 0 = ceil(T / N)
  double max_work_ratio = 1.0;  // the balance asked for: work <= this x the mean
  // Error(kInvalidArgument) naming the field: workers < 1, token_cap < 0,
  // max_work_ratio not finite or <= 0, an invalid mask.
  void validate() const;
};

struct ReshuffleFloor {
  int64_t tokens = 0;              // shed_tokens + max(0, pooled_shed_tokens - spare_tokens)
  int64_t shed_tokens = 0;         // step 1: densest tokens per overloaded home
  int64_t pooled_shed_tokens = 0;  // step 2: densest tokens of all overloaded homes together
  int64_t spare_tokens = 0;        // room under the cap on the homes that are not overloaded
  int64_t replacement_tokens = 0;  // max(0, pooled_shed_tokens - spare_tokens)
  int32_t overloaded_workers = 0;
  // The work each worker may reach, and E, the overloaded homes' work above
  // it: exact integers below 2^53 (summed in 128 bits, reported as doubles).
  double target_token_pairs = 0;
  double excess_token_pairs = 0;
};

// Error(kInvalidArgument): an invalid config, a negative length, a token cap
// below ceil(T / N) (no plan fits), a total token count past int64.
ReshuffleFloor ComputeReshuffleFloor(const std::vector<int64_t>& sequences,
                                     const ReshuffleFloorConfig& config);

}  // namespace fcp
