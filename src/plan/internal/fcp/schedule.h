// fcp/schedule.h — turning an assignment into stages: the transfer graph, its
// congestion-free colouring and the coalesced forward and backward stages.
//
// Given blocks with owners, TransferEdges lists one edge (owner(j) -> w) for
// each K/V block j that worker w needs and does not own: a bipartite
// multigraph whose max degree Delta bounds the sub-stage count from below.
// BuildStages colours it with exactly Delta matchings (edge_coloring.h) and
// groups c consecutive colours into a stage, so every worker sends and
// receives at most c blocks per stage and there are ceil(Delta/c) transfer
// stages, the minimum. A block received in stage t is computed in stage t+1;
// local pairs run in stage 0 (they hide the reshuffle and the first
// transfers). The backward pulls K/V over the same stages and returns each
// partial dK/dV over the reversed edge two stages after its K/V arrived (one
// stage to compute with it, so the send follows the last use). Reversed
// matchings are matchings, so the backward is congestion-free too. BuildStages
// then runs the backward's transfer stages in reverse order
// (ReverseBackwardTransferStages, up to 256 workers): the greedy colouring
// fills its first colours densely and leaves the busiest workers' last edges
// to its last ones, so in the forward's order the backward ends with those
// workers alone computing and returning their last partials; reversed, they
// start with them while the others compute their local pairs
// (docs/planner.md, step 10).
// With StageGrouping::kRoundRobin short runs of colours are dealt over the
// stages instead: the same stage count and the same bound of c blocks per
// worker and stage, but each worker's sends and receives spread over the
// stages rather than packed into the first ones (PlannerConfig::
// spread_stages; docs/planner.md, step 9).
// Deterministic; O(P + N + E * path) for P pairs, N workers and E edges
// (plus sorting each sender's edges).
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/plan.h"
#include "fcp/required_pairs.h"

namespace fcp {

// How BuildStages groups the Delta colours (sub-stages) of the transfer graph
// into S = ceil(Delta / c) transfer stages.
enum class StageGrouping {
  // Colour k in stage k / c: c consecutive colours a stage. The greedy
  // colouring gives every worker's first edges the lowest colours, so the
  // first stages carry almost every worker's transfers and the last ones
  // only the busiest workers'.
  kConsecutive,
  // Runs of r = SpreadRunColours(c) consecutive colours dealt round-robin:
  // colour k in stage (k / r) mod S. Stage s holds runs s, s + S, ...: with
  // r dividing c there are at most c / r of them, so the bound of c blocks
  // per worker and stage holds as well. A worker whose edges have the
  // colours 0..d-1 pulls r blocks in each of its first ceil(d / r) stages
  // (wrapping around) instead of c in its first ceil(d / c).
  kRoundRobin,
};

// Runs a stage takes under kRoundRobin: 4 runs of c / 4 colours (c = 16).
// On the report card's rows (docs/planner.md, step 9) 16 runs of one colour
// spread the pulls most but cut each worker's pairs into the most, shortest
// kernels; 2 runs of 8 spread too little at N = 256 with no reshuffle.
inline constexpr int32_t kSpreadRunsPerStage = 4;

// The run length r for coalesce c: the largest divisor of c that is at most
// c / kSpreadRunsPerStage, and at least 1.
int32_t SpreadRunColours(int32_t coalesce);

// Sorted by (src, dst, block); unique. Every block's worker must lie in
// [0, plan.workers) (internal error otherwise), as for BuildStages*.
std::vector<Transfer> TransferEdges(const Plan& plan, const std::vector<RequiredPair>& pairs);

// Fills plan.forward and plan.backward (in the forward's stage order) from
// edges given a sub-stage for each edge (sub_stage[e] in [0, sub_stages));
// sub-stages are grouped into ceil(sub_stages / plan.coalesce) stages as
// `grouping` says. Congestion-freedom holds when each sub-stage is a matching.
void BuildStagesFromSubStages(Plan& plan, const std::vector<RequiredPair>& pairs,
                              const std::vector<Transfer>& edges,
                              const std::vector<int32_t>& sub_stage, int32_t sub_stages,
                              StageGrouping grouping = StageGrouping::kConsecutive);

// The backward's transfer stages in reverse order: K/V group t of the
// forward is pulled in backward stage T-1-t (T transfer stages), its pairs
// computed in T-t and its partials returned in T+1-t; stage 0's local pairs
// stay first. Its own inverse. Requires BuildStagesFromSubStages's shape
// (T + 2 backward stages; internal error otherwise); O(stages).
void ReverseBackwardTransferStages(Plan& plan);

// Up to this many workers BuildStages reverses the backward's transfer
// stages. Measured to lower the step there in geometric mean (N = 16-256,
// both profiles, with and without the reshuffle charged; the rows it raised
// are in the measurement log (docs/planner.md)); above, on
// lognormal seed 0 at N = 512-4096, it raised the step in the plan's own
// layout by 1-5% and moved the transparent one by -2.1% to +1.0%, within
// the simulator's spread at that size.
inline constexpr int32_t kReversedBackwardMaxWorkers = 256;

// The FCP schedule: sub-stages = a Delta-colouring of TransferEdges grouped
// as `grouping` says, the backward's transfer stages reversed up to
// kReversedBackwardMaxWorkers. With `self_check`, verifies the colouring
// (every class a matching, Delta colours).
void BuildStages(Plan& plan, const std::vector<RequiredPair>& pairs, bool self_check = false,
                 StageGrouping grouping = StageGrouping::kConsecutive);

}  // namespace fcp
