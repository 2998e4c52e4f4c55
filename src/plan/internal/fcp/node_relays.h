// fcp/node_relays.h — K/V blocks and dK/dV partials relayed through a node,
// rewritten into a plan's existing stages.
//
// Where several workers of one node receive the same K/V block from its
// owner in another node, the receiver that gets it first (the relay; ties:
// the lowest id) keeps its transfer across the network, and each other
// receiver whose transfer lies in a later stage gets the block from the
// relay instead, in that same stage, over its node's NVLink. On the way back
// the partial dK/dV of several workers of one node sent to an owner in
// another node are summed at the member that returns its partial last (the
// relay; ties: the lowest id): each member whose send lies in an earlier
// stage sends its partial to the relay in that same stage, and the relay's
// single send carries the sum across the network. Every pair keeps its
// stage, no stage is added and no transfer moves to another stage: the
// forward's `send`, the backward's `send_kv` (each list on its own) and its
// `send_dkv` change only in their sources or destinations.
//
// Only the crossings of owners whose network port is nearly as busy as their
// compute in the pass are rewritten: network_flops_per_byte x the owner's
// crossing bytes > 0.75 x its compute (forward FLOPs of its query blocks'
// pairs, x2.5 in the backward). A relayed receipt waits for the relay's
// receipts of the stage before, so elsewhere a relay only adds a wait
// (docs/planner.md, step 11, has the measurements).
//
// Invariants kept (PLAN_FORMAT.md): a relay holds the block from the stage
// after its own receipt, so a later stage's send from it is a send of a
// block held; a relay's partial is sent in a stage after every partial
// relayed into it and after its own last compute with the block (its send
// was already there); every receiver gets each block once; and a rewrite is
// made only where the relay's sends (K/V) or dK/dV receipts in that stage
// stay within plan.coalesce, so every stage keeps the plan's congestion
// bound for both port classes together (each worker <= c sends and <= c
// receipts per stage), which bounds each class on its own.
//
// Deterministic (groups visited in (block, node) order, each stage's lists
// sorted by (src, dst, block) after); O(T log T + R x T) for T transfers and
// R rounds (a round repeats while the last relayed something: a rewrite
// frees a place at an owner that may relay for another group).
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/plan.h"
#include "fcp/required_pairs.h"

namespace fcp {

// What RelayThroughNodes rewrote: transfers that now run inside a node
// instead of crossing the network.
struct RelayCounts {
  int64_t forward_kv = 0;   // forward `send`
  int64_t backward_kv = 0;  // backward `send_kv`
  int64_t dkv = 0;          // backward `send_dkv` (partials summed at a relay)
};

// Rewrites `plan` in place as above, nodes being `node_workers` consecutive
// worker ids (node_workers >= 1; 1: nothing to relay); `pairs`: the plan's
// required pairs (for each owner's compute). Requires every block owner and
// pair block in range (internal error otherwise); a plan that was valid
// stays valid.
RelayCounts RelayThroughNodes(Plan& plan, int32_t node_workers,
                              const std::vector<RequiredPair>& pairs,
                              double network_flops_per_byte);

}  // namespace fcp
