// Short-sequence rehoming: after the assignment, the sequences that fit in
// one block go back to their dataloader workers where the compute allows
// (FCP step 7, issue 17). Private to src/plan.
//
// The assignment places items for balance: pieces of long sequences, each
// completed to a slot by a filler cut from short sequences, and packed
// blocks of short sequences. Which short tokens fill a worker's slots is
// free as far as the cap goes (a worker needs only as many of them), and
// a whole short sequence needs no K/V from anyone; yet the fillers and
// packed blocks are chosen before placement, so most of them land away
// from their dataloader worker and are reshuffled there and back (on
// lognormal seed 0 at N = 64, 30% of the batch's tokens moved as short
// sequences). This pass keeps every worker's short-token count (its room)
// and every other segment where it is, and re-deals the short sequences:
//   1. at home: in sequence order, each to the dataloader worker holding
//      most of its tokens (ties: the first), if it fits that worker's room
//      whole and keeps the worker's compute within what it had before;
//   2. the rest, longest first (ties by id), whole to the worker with room
//      for it and, within the plan's largest compute, the most headroom per
//      token of room it leaves (the densest go where the headroom is, so
//      the last rooms still fit the lightest): of the home's node
//      (node_workers consecutive ids) first, then of every node with room;
//      else whole to the least computing worker with room; else cut across
//      the workers with the most room, in token order (the cut pieces need
//      each other's K/V, as fillers did);
//   3. repair: a worker left above the plan's largest compute gives one of
//      its longest whole sequences x for two whole sequences y, z of a less
//      loaded worker with len(y) + len(z) = len(x) (tokens exact; a later
//      row attends more keys, so y and z weigh less than x), the partner
//      staying within the largest (bounded: kRepairExchanges per worker,
//      kRepairOffers sequences offered, kRepairPartners partners).
// Blocks: every other block as it was (its short segments removed, empty
// ones dropped); then per worker its whole sequences away from home,
// grouped by their home (a block then waits for one sender), then those at
// home, packed in that order into blocks of at most block_size tokens
// (AppendSequenceBlocks); then each cut piece in a block of its own.
//
// The planner keeps the result only where fewer tokens are away from home
// and no maximum rises (fcp_planner.cpp); measured there
// (the measurement log (docs/planner.md), the report card after short-sequence
// rehoming): the step with the reshuffle overlapped -2.0% (N = 16) and
// -1.2% (N = 64) on the benchmark set, geometric means, no row slower,
// and a third fewer tokens reshuffled on the lognormal mixes. Not run on
// the home layout, which is at home already and balanced by exchanges
// this would undo.
//
// Invariants of the result: every token in exactly one segment; every
// worker holds as many tokens as before (so the cap holds); segments of
// sequences longer than block_size unchanged and on the same workers.
// A worker's compute (allowed token pairs of its queries) ends above the
// input's largest only where step 2 fell back or cut and step 3 found no
// exchange. Deterministic. O(S log S + B + S W + N R) for S short
// sequences, B segments, W workers of the nodes a sequence looks at (its
// own node, or every node with room enough) and R = the repair's bounded
// work per worker (its partners' sequences).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fcp/mask.h"
#include "fcp/plan.h"

namespace fcp::detail {

// Appends worker `worker`'s whole sequences as blocks of at most block_size
// tokens: those of `away`, then those of `at_home` (each list in its order),
// never both in one block. A block computes once all its rows have
// arrived: apart, the sequences at home compute while the others arrive,
// and those come first in the worker's compute order, so they compute as
// soon as they are in and their outputs leave early. (Also the home
// layout's blocks, home_packing.h.)
void AppendSequenceBlocks(int32_t worker, const std::vector<int32_t>& away,
                          const std::vector<int32_t>& at_home, const std::vector<int64_t>& lengths,
                          int64_t block_size, std::vector<Block>& out,
                          const std::vector<int32_t>* away_source = nullptr);

// Whether some sequence fits one block: what RehomeShortSequences deals.
bool HasShortSequences(const std::vector<int64_t>& lengths, int64_t block_size);

// `blocks` with workers set (the final names, 0..workers-1), tiling every
// sequence exactly once. Returns the new blocks, or nothing when no
// sequence fits one block (!HasShortSequences: nothing to deal, the caller
// then skips the pairs and loads it would compare). Throws
// Error(kInvalidArgument) naming the pass when workers < 1, block_size < 1,
// a length is < 1, a worker is out of range, a segment leaves its sequence
// or the segments of a sequence do not add up to its length. (Overlaps
// that add up are not looked for: RequiredPairs of the result finds them.)
std::optional<std::vector<Block>> RehomeShortSequences(const std::vector<int64_t>& lengths,
                                                       const Mask& mask,
                                                       const std::vector<Block>& blocks,
                                                       int32_t workers, int64_t block_size,
                                                       int32_t node_workers);

}  // namespace fcp::detail
