// Home packing: the home layout of a batch whose sequences all fit in one
// block (FCP step 7, the home layout; issue 17). Private to src/plan.
//
// The dataloader layout at sequence granularity: a sequence inside one
// worker's dataloader share stays whole on it; one across shares is cut
// at their boundaries, each piece a block at home (every worker then
// holds exactly its share, within the cap). Then, while the most loaded
// worker's work is above the mean by more than kPackSlack, it exchanges
// one of its densest sequences x for replacements Y of a worker of its own
// node (consecutive ids of node_workers): the shortest of that worker's
// sequences, or a prefix of them completed by one or two more, with
// tokens enough to keep both within the cap (between len(x) - room of the
// partner and len(x) + room of the worker). Exchanges that would take the
// tokens away from home past the budget (the smaller of kPackMovedShare of
// the batch and kPackFloorMultiple x the reshuffle floor) are skipped; of
// the rest, the one kept lowers the larger of the two works most, ties to
// the fewest tokens away from home, then to the densest x. It stops when
// none lowers it, within kPackSlack, or after 4N exchanges. This is the reshuffle floor's rule
// (reshuffle_floor.h: an overloaded home sheds its densest tokens and takes light ones back) at
// sequence granularity, with the budget explicit. Partners stay inside the node: the reshuffle then
// runs on NVLink, and its blocks are apart from those at home, so it hides behind their compute.
//
// Invariants of a result: every token in exactly one segment, sequences
// whole but for the pieces at share boundaries; blocks of at most
// block_size tokens; no worker above token_cap; tokens away from their
// dataloader worker within the budget. Deterministic:
// every choice is by a total order (ties by id). O(S log S + M (s + P k
// log s)) for S sequences, M <= 4N exchanges, s sequences per worker and
// P workers per node, k bounded (home_packing.cpp: a step's offers and
// completions are capped, so batches of many tiny sequences stay fast).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fcp/mask.h"
#include "fcp/plan.h"
#include "fcp/required_pairs.h"
#include "planner_constants.h"

namespace fcp::detail {

struct HomePacking {
  // Worker set: per worker, blocks of its whole sequences away from home,
  // then of those at home (each in id order); then one block per piece of
  // a sequence across dataloader shares.
  std::vector<Block> blocks;
  std::vector<RequiredPair> pairs;  // RequiredPairs of the blocks
  // Per worker: allowed token pairs of its queries; K/V tokens it sends plus
  // receives, and the part it sends (detail::Assignment's loads).
  std::vector<double> compute, traffic, send;
  int64_t moved_tokens = 0;  // tokens not on their dataloader worker
};

// The layout, or nothing when a sequence is longer than block_size or the
// cap (then the caller keeps its other layouts). node_workers: consecutive
// workers sharing fast links (< 1 counts as 1). Requires workers >= 1,
// block_size >= 1 and token_cap >= ceil(T / workers) (the planner validates
// them first); throws kInvalidArgument naming home packing otherwise.
// self_check (PlannerConfig::self_check): the result's compute loads are
// recounted from its pairs and its blocks checked against block_size and the
// cap; a difference throws kInternal.
std::optional<HomePacking> PackAtHome(const std::vector<int64_t>& lengths, const Mask& mask,
                                      int32_t workers, int64_t token_cap, int64_t block_size,
                                      int32_t node_workers, bool self_check = false);

// Whole packing: the layout of a batch whose sequences all fit in one block
// when nothing is charged for moving tokens (no reshuffle: the dataloader
// adopts the plan). The sequences dealt whole by LPT, heaviest first, each
// to the least loaded worker with room for it; the rooms left then
// refilled exactly by the lightest sequences (each worker's k last dealt,
// given back, and those that fit nowhere: a bitset subset-sum per room),
// with the k in 0..4 that cuts the fewest sequences; what no room takes
// whole is cut across the rooms left, so that every worker stays within
// the cap exactly as the slots would keep it.
// Then the exchanges above, with partners the kWholePartners least loaded
// workers of any node and no movement budget. This is the one-sequence
// granularity ByteScale-like balances to, within the cap, which
// ByteScale-like does not keep. Blocks, pairs and loads as above
// (moved_tokens counted but not bounded). Same preconditions, errors
// (naming whole packing) and self_check; deterministic (total orders).
std::optional<HomePacking> PackWhole(const std::vector<int64_t>& lengths, const Mask& mask,
                                     int32_t workers, int64_t token_cap, int64_t block_size,
                                     bool self_check = false);

}  // namespace fcp::detail
