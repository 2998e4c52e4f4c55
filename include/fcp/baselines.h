// fcp/baselines.h — the planners FCP is compared against, and FCP ablations.
// Each writes an ordinary plan (PLAN_FORMAT.md) that passes ValidatePlan for
// causal, full and sliding-window masks, so it runs on the same simulator and
// the same runtime as FCP. All take PlannerConfig (workers, block_size,
// coalesce, mask, attention, token_cap) and are registered in Planners().
//
//  ring       zig-zag ring attention: every sequence cut into 2N chunks, worker
//             i holds chunks i and 2N-1-i (one block per worker); K/V relayed
//             around the ring, N-1 steps; dK/dV partials relayed back to their
//             owner around the same ring in the backward. coalesce = 1.
//  bytescale  ByteScale-like: a sequence that fits one worker's share is not
//             split (whole, to the worker with the fewest tokens); a longer one
//             gets a group of ceil(L / share) workers (the least loaded), with a
//             zig-zag ring inside the group. Rings run concurrently.
//  wlb        WLB-LLM-like: per batch, whichever of ring and bytescale the cost
//             model (Simulate on the built-in gpu-x profile, no reshuffle)
//             predicts faster.
//  magi       MagiAttention-like: the token stream cut into chunks of
//             ceil(T / (8N)) tokens (MagiAttention's default), assigned by
//             compute-only LPT (MinHeap, largest mask area first) with an equal
//             chunk count per worker; every remote K/V fetched from its owner in
//             one stage that overlaps the local work (overlap degree 1), with no
//             congestion control: coalesce is set to the largest per-stage
//             send/receive count the plan produces.
//  magi-dynamic  MagiAttention's dynamic solver (MAGI_ATTENTION_QO_COMM=1,
//             BinaryGreedyParallel): tokens stay in the dataloader layout (one
//             block per worker, its shard); the work is the grid of (query shard,
//             key shard) cells, placed by their binary search over a per-rank
//             communication threshold and greedy placement under a work cap of
//             1.10 x the mean (SolveMagiDynamic). A cell computed away from its
//             query's owner uses the remote-compute extension (Q to the worker,
//             partial O / dQ back: docs/plan-format.md). Stages: fetch Q and K/V
//             while computing the local cells, compute the rest, return partials.
//  fcp-nopipe        FCP's assignment; all transfers first, then all compute.
//  fcp-random-order  FCP's assignment; each worker pulls its blocks in a random
//                    (seeded, deterministic) order, c per stage, instead of the
//                    congestion-free colouring: receivers get <= c per stage,
//                    senders may get more (coalesce = the largest count).
//  fcp-nocoalesce    FCP with coalesce 1.
// (The fourth ablation, no reshuffle overlap, is SimConfig::reshuffle = kBlocking.)
//
// token_cap of every baseline plan is the largest token count it actually
// gives a worker (ring and magi: ~T/N; bytescale may exceed T/N when whole
// sequences do not pack evenly).
// Determinism: pure functions of (lengths, config); stable sorts, ties by id.
// Cost: ring O(sum_s min(L_s, 2N) * N / 64 + N^2); bytescale and magi are
// dominated by RequiredPairs; wlb simulates both candidates.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fcp/plan.h"
#include "fcp/planner.h"

namespace fcp {

Plan MakeRingPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeByteScalePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeWlbPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeMagiPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeMagiDynamicPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeFcpNoPipelinePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeFcpRandomOrderPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeFcpNoCoalescePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);

// MagiAttention's dynamic solver on an abstract grid (the magi-dynamic
// planner's core, exposed for tests). Shard i (a grid row as queries and a
// grid column as keys) is owned by range_owner[i] and holds range_tokens[i]
// tokens; each cell is a (query shard, key shard) pair with its mask area
// (allowed token pairs, > 0), listed in MagiDynamicGridOrder.
struct MagiDynamicCell {
  int32_t q = 0;
  int32_t k = 0;
  int64_t area = 0;
};
struct MagiDynamicProblem {
  int32_t workers = 1;
  int32_t heads_q = 64;
  int32_t heads_kv = 8;
  std::vector<int32_t> range_owner;
  std::vector<int64_t> range_tokens;
  std::vector<MagiDynamicCell> cells;
};
struct MagiDynamicResult {
  std::vector<int32_t> rank;  // the worker that computes each cell
  std::vector<int64_t> work;  // per worker, the area of its cells
  bool feasible = false;      // some search step met the 1.10 x mean cap
  int32_t iterations = 0;     // binary-search steps run (<= 20)
};
// Their rules: binary search (<= 20 steps, 1% tolerance) over a per-rank
// threshold on Q/K/V edge costs (tokens x heads); per step, simplex edges
// weighted by the work already placed, taken greedily by weight / cost under
// the threshold; cells placed greedily (fewest allowed ranks first, then
// largest area; both shards' owner, else the query owner while below the
// mean, else the least loaded) and refined for 5 rounds. If no step meets the
// cap, the last attempt is kept and unplaced cells go to their query's owner.
// Deterministic; O(steps x (N x shards log + cells x N)). Throws
// Error(kInvalidArgument) on owners outside [0, workers) or cells outside the
// grid or with area < 1.
MagiDynamicResult SolveMagiDynamic(const MagiDynamicProblem& problem);
// Their KD split of a rows x cols grid into cells: halve the query range and
// the key range alternately (queries first; one side once the other is 1
// wide), depth first, lower half first.
std::vector<std::pair<int32_t, int32_t>> MagiDynamicGridOrder(int32_t rows, int32_t cols);

// Zig-zag chunk c of `chunks` over a sequence of `length` tokens:
// [floor(c * length / chunks), floor((c + 1) * length / chunks)).
int64_t ZigZagChunkBegin(int64_t length, int32_t chunks, int32_t c);
// The member (0..members-1) that holds chunk c of 2 * members: c or 2m-1-c.
int32_t ZigZagMember(int32_t members, int32_t c);

}  // namespace fcp
