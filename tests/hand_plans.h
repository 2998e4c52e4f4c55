// Small plans drawn by hand, shared by the plan tests (validator, metrics,
// JSON). Each is valid under PLAN_FORMAT.md; tests mutate copies of them.
#pragma once

#include "fcp/plan.h"

namespace fcp::testing {

// A tiny attention shape so byte and FLOP counts stay easy to check by hand:
// FLOPs per token pair = 4 * 2 * 4 = 32; K/V bytes per token = 2 * 1 * 4 * 2 = 16.
inline AttentionShape TinyShape() { return AttentionShape{2, 1, 4, 2}; }

// What both hand plans share: one causal sequence of 12 tokens in blocks of
// 4 in TinyShape, coalesce 1; blocks and stages are each plan's own.
inline Plan OneSequenceOf12(int32_t workers, int64_t token_cap) {
  Plan p;
  p.planner = "hand";
  p.workers = workers;
  p.mask = {MaskKind::kCausal, 0};
  p.attention = TinyShape();
  p.block_size = 4;
  p.coalesce = 1;
  p.token_cap = token_cap;
  p.sequences = {12};
  return p;
}

// Two workers, one causal sequence of 12 tokens in blocks of 4:
//
//   seq 0: |  B0 [0,4)  |  B1 [4,8)  |  B2 [8,12) |
//   owner:     w0            w1            w1
//
// Required pairs (causal): (0,0) (1,0) (1,1) (2,0) (2,1) (2,2).
// Only block 0 ever moves (w0 -> w1); w1 uses it for two query blocks, so its
// partial dK/dV of block 0 goes back after the later of the two computes.
//
//   forward   stage 0: send B0 w0->w1 | compute (0,0) (1,1) (2,1) (2,2)
//             stage 1:                | compute (1,0) (2,0)
//   backward  stage 0: send_kv B0 w0->w1 | compute (0,0) (1,1) (2,1) (2,2)
//             stage 1:                   | compute (1,0)
//             stage 2:                   | compute (2,0)
//             stage 3: send_dkv B0 w1->w0
inline Plan TwoWorkerPlan() {
  Plan p = OneSequenceOf12(2, 8);
  p.blocks = {{0, {{0, 0, 4}}}, {1, {{0, 4, 4}}}, {1, {{0, 8, 4}}}};
  p.forward = {{{{0, 0, 1}}, {{0, 0}, {1, 1}, {2, 1}, {2, 2}}}, {{}, {{1, 0}, {2, 0}}}};
  p.backward = {{{{0, 0, 1}}, {}, {{0, 0}, {1, 1}, {2, 1}, {2, 2}}},
                {{}, {}, {{1, 0}}},
                {{}, {}, {{2, 0}}},
                {{}, {{0, 1, 0}}, {}}};
  return p;
}

// Three workers, one causal sequence of 12 tokens in blocks of 4, coalesce 1:
//
//   seq 0: |  B0 [0,4)  |  B1 [4,8)  |  B2 [8,12) |
//   owner:     w0            w1            w2
//
// Transfers: B0 to w1 and w2, B1 to w2. w0 sends twice, so with c = 1 the
// forward needs two stages with sends (Delta = 2).
//
//   forward   stage 0: send B0 w0->w1, B1 w1->w2 | compute (0,0) (1,1) (2,2)
//             stage 1: send B0 w0->w2            | compute (1,0) (2,1)
//             stage 2:                           | compute (2,0)
//   backward  stage 0: send_kv as forward 0      | compute (0,0) (1,1) (2,2)
//             stage 1: send_kv as forward 1      | compute (1,0) (2,1)
//             stage 2: send_dkv B0 w1->w0, B1 w2->w1 | compute (2,0)
//             stage 3: send_dkv B0 w2->w0
inline Plan ThreeWorkerPlan() {
  Plan p = OneSequenceOf12(3, 4);
  p.blocks = {{0, {{0, 0, 4}}}, {1, {{0, 4, 4}}}, {2, {{0, 8, 4}}}};
  p.forward = {{{{0, 0, 1}, {1, 1, 2}}, {{0, 0}, {1, 1}, {2, 2}}},
               {{{0, 0, 2}}, {{1, 0}, {2, 1}}},
               {{}, {{2, 0}}}};
  p.backward = {{{{0, 0, 1}, {1, 1, 2}}, {}, {{0, 0}, {1, 1}, {2, 2}}},
                {{{0, 0, 2}}, {}, {{1, 0}, {2, 1}}},
                {{}, {{0, 1, 0}, {1, 2, 1}}, {{2, 0}}},
                {{}, {{0, 2, 0}}, {}}};
  return p;
}

// Two workers, causal, sequences {2, 6}; K/V sent as a row range (the
// extension of docs/plan-format.md):
//
//   B0 = s0[0,2) s1[0,2) on w0 (rows 0-1: s0, rows 2-3: s1), B1 = s1[2,6) on w1
//
// w1's queries (s1 tokens 2-5) attend only s1's keys: rows [2, 4) of B0, so
// B0 goes to w1 as those two rows and its partial dK/dV comes back as them.
//
//   forward   stage 0: send B0 rows [2,4) w0->w1 | compute (0,0) (1,1)
//             stage 1:                           | compute (1,0)
//   backward  stage 0: send_kv as forward 0      | compute (0,0) (1,1)
//             stage 1:                           | compute (1,0)
//             stage 2: send_dkv B0 rows [2,4) w1->w0
inline Plan RowRangePlan() {
  Plan p = OneSequenceOf12(2, 4);
  p.sequences = {2, 6};
  p.blocks = {{0, {{0, 0, 2}, {1, 0, 2}}}, {1, {{1, 2, 4}}}};
  p.forward = {{{{0, 0, 1, 2, 2}}, {{0, 0}, {1, 1}}}, {{}, {{1, 0}}}};
  p.backward = {
      {{{0, 0, 1, 2, 2}}, {}, {{0, 0}, {1, 1}}}, {{}, {}, {{1, 0}}}, {{}, {{0, 1, 0, 2, 2}}, {}}};
  return p;
}

// The remote-compute extension (docs/plan-format.md): TwoWorkerPlan's
// blocks, with pair (2,0) computed on w0, which owns block 0's K/V, after
// w1 sends it block 2's queries; w0 returns its partial O (backward dQ).
//
//   forward   stage 0: send B0 w0->w1, send_q B2 w1->w0 | compute (0,0) (1,1) (2,1) (2,2)
//             stage 1:                                  | compute (1,0) (2,0 on w0)
//             stage 2: send_o B2 w0->w1
//   backward  stage 0: send_kv B0 w0->w1, send_q B2 w1->w0 | compute as forward 0
//             stage 1:                                     | compute as forward 1
//             stage 2: send_dkv B0 w1->w0, send_dq B2 w0->w1
inline Plan RemoteComputePlan() {
  Plan p = OneSequenceOf12(2, 8);
  p.blocks = {{0, {{0, 0, 4}}}, {1, {{0, 4, 4}}}, {1, {{0, 8, 4}}}};
  const std::vector<BlockPair> local = {{0, 0}, {1, 1}, {2, 1}, {2, 2}};
  const std::vector<BlockPair> remote = {{1, 0}, {2, 0, 0}};
  p.forward = {
      {{{0, 0, 1}}, local, {{2, 1, 0}}, {}}, {{}, remote, {}, {}}, {{}, {}, {}, {{2, 0, 1}}}};
  p.backward = {{{{0, 0, 1}}, {}, local, {{2, 1, 0}}, {}},
                {{}, {}, remote, {}, {}},
                {{}, {{0, 1, 0}}, {}, {}, {{2, 0, 1}}}};
  return p;
}

}  // namespace fcp::testing
