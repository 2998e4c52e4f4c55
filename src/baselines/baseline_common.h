// Shared building blocks of the baseline planners (private to src/baselines):
// a plan skeleton from the config, zig-zag rings, direct-pull stage layouts,
// and the final bookkeeping (token_cap, coalesce). See fcp/baselines.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fcp/plan.h"
#include "fcp/planner.h"
#include "fcp/required_pairs.h"

namespace fcp::baselines {

// Appends one block per member holding the zig-zag chunks m and 2k-1-m of
// sequence `seq` (k = members.size()) for every member with tokens; returns
// the block id of each member (-1 if that member got no tokens). When
// `member_blocks` already holds a block id for a member, the chunks are added
// to that block instead (ring: one block per worker for all sequences).
void AddZigZagSequence(Plan& plan, int32_t seq, const std::vector<int32_t>& members,
                       std::vector<int32_t>& member_blocks);

using RequiredFn = std::function<bool(int32_t q_block, int32_t kv_block)>;

// Adds a ring over `ring_blocks` (member m holds block ring_blocks[m], all on
// distinct workers, in ring order) to the plan's stages 0..k (stages are
// shared with other rings running concurrently). Forward: stage s, member r
// computes (B_r, B_{r-s}) when required and passes B_{r-s} on while a later
// member still needs it. Backward: the same K/V ring; the partial dK/dV of
// B_j starts at the first member that computes with it and is relayed member
// to member until it reaches B_j's owner.
void AddRing(Plan& plan, const std::vector<int32_t>& ring_blocks, const RequiredFn& required);

// One K/V edge: `block` pulled from its owner by `dst`, in transfer stage `stage`.
struct PullEdge {
  int32_t block = 0;
  int32_t dst = 0;
  int32_t stage = 0;
};

// The edges a block assignment needs: one per (kv block, worker) with some
// required pair on that worker and the block remote; stage 0. Sorted by (dst, block).
std::vector<PullEdge> PullEdges(const Plan& plan, const std::vector<RequiredPair>& required);

// Lays out forward and backward stages for direct pulls. Pipelined: local
// pairs in stage 0, an edge's pairs in the stage after its transfer, partial
// dK/dV back to the owner two stages after the transfer. Not pipelined: every
// transfer in stage 0, every pair in stage 1, every dK/dV in stage 2.
void BuildPullStages(Plan& plan, const std::vector<RequiredPair>& required,
                     const std::vector<PullEdge>& edges, bool pipelined);

// Drops trailing empty stages, sets token_cap to the largest worker token
// count and coalesce to max(min_coalesce, the largest per-stage send or
// receive count of any worker).
void FinishPlan(Plan& plan, int32_t min_coalesce);

// The FCP plan's assignment (blocks) with the stages removed.
Plan FcpAssignment(const std::vector<int64_t>& lengths, const PlannerConfig& config,
                   const std::string& planner);

}  // namespace fcp::baselines
