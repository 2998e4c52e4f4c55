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
#include <vector>

#include "fcp/plan.h"
#include "fcp/planner.h"

namespace fcp {

Plan MakeRingPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeByteScalePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeWlbPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeMagiPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeFcpNoPipelinePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeFcpRandomOrderPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);
Plan MakeFcpNoCoalescePlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);

// Zig-zag chunk c of `chunks` over a sequence of `length` tokens:
// [floor(c * length / chunks), floor((c + 1) * length / chunks)).
int64_t ZigZagChunkBegin(int64_t length, int32_t chunks, int32_t c);
// The member (0..members-1) that holds chunk c of 2 * members: c or 2m-1-c.
int32_t ZigZagMember(int32_t members, int32_t c);

}  // namespace fcp
