// Home packing: the home layout of a batch whose sequences all fit in one
// block (FCP step 7, the home layout; issue 17). Private to src/plan.
//
// Every sequence stays whole (no piece, no K/V transfer, one compute stage)
// on the dataloader worker holding most of its tokens. Then:
// 1. Repair: a worker above the token cap gives a sequence x to a worker
//    with room, taking back at most two of its sequences Y, so that the
//    net tokens it sheds fit the partner's room; exchanges that clear the
//    whole surplus first, then the fewest tokens away from home.
// 2. Balance: while the most loaded worker's work is above the mean by
//    more than kPackSlack, the exchange of one of its sequences for at most
//    two of a partner's (its node's workers, then the kPackPartners least
//    loaded elsewhere) that lowers the larger of the two works most, ties
//    to the fewest tokens away from home; the cap holds after each one.
//    It stops when no exchange lowers the maximum or the next would take
//    the tokens away from home past kPackMovedShare of the batch: the
//    reshuffle floor's rule (reshuffle_floor.h, an overloaded home sheds
//    its densest tokens and takes light ones back) with the budget explicit.
// Invariants of a result: every sequence in exactly one block, whole;
// blocks of at most block_size tokens; no worker above token_cap; tokens
// away from their dataloader worker at most kPackMovedShare of the batch
// plus what the repair needed. Deterministic: every choice is by a total
// order (ties by id). O(S log S + M s^2 log s (S_n + P)) for S sequences,
// M exchanges, s sequences per worker, S_n workers per node, P partners.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fcp/mask.h"
#include "fcp/plan.h"
#include "fcp/required_pairs.h"

namespace fcp::detail {

// Tokens away from home the balance may reach, as a share of the batch
// (issue 17: all-short batches move at most 5%).
constexpr double kPackMovedShare = 0.05;
// The balance stops within this share above the mean work.
constexpr double kPackSlack = 0.001;
// Partners of other nodes tried per exchange, the least loaded first.
constexpr int32_t kPackPartners = 0;

struct HomePacking {
  // Worker set: per worker blocks of whole sequences in id order, then one
  // block per piece of a sequence across dataloader shares.
  std::vector<Block> blocks;
  std::vector<RequiredPair> pairs;  // RequiredPairs of the blocks
  // Per worker: allowed token pairs of its queries; K/V tokens it sends plus
  // receives, and the part it sends (detail::Assignment's loads).
  std::vector<double> compute, traffic, send;
  int64_t moved_tokens = 0;  // tokens not on their dataloader worker
};

// The layout, or nothing when a sequence is longer than block_size or the
// cap, or the repair finds no exchange (then the caller keeps its other
// layouts). node_workers: consecutive workers sharing fast links (>= 1).
std::optional<HomePacking> PackAtHome(const std::vector<int64_t>& lengths, const Mask& mask,
                                      int32_t workers, int64_t token_cap, int64_t block_size,
                                      int32_t node_workers);

}  // namespace fcp::detail
