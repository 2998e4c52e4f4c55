// ComputePlanMetrics on hand plans, every number counted by hand.
#include <gtest/gtest.h>

#include "fcp/plan_metrics.h"
#include "hand_plans.h"

namespace fcp {
namespace {

// TinyShape: 32 FLOPs per token pair, 16 K/V bytes per token (64 per 4-token block).

TEST(PlanMetricsTest, ThreeWorkerPlanHandCounted) {
  const PlanMetrics m = ComputePlanMetrics(testing::ThreeWorkerPlan());
  // Token pairs (causal, blocks of 4): diagonal 10, below-diagonal 16.
  //   w0: (0,0) = 10             -> 320 FLOPs
  //   w1: (1,0) + (1,1) = 26      -> 832
  //   w2: (2,0) + (2,1) + (2,2) = 42 -> 1344;  total 2496, mean 832.
  ASSERT_EQ(m.workers.size(), 3u);
  EXPECT_DOUBLE_EQ(m.workers[0].forward_flops, 320);
  EXPECT_DOUBLE_EQ(m.workers[1].forward_flops, 832);
  EXPECT_DOUBLE_EQ(m.workers[2].forward_flops, 1344);
  EXPECT_DOUBLE_EQ(m.total_forward_flops, 2496);
  EXPECT_DOUBLE_EQ(m.max_compute, 1344);
  EXPECT_DOUBLE_EQ(m.max_pair_flops, 16 * 32);
  EXPECT_DOUBLE_EQ(m.compute_imbalance, (1344.0 - 832.0) / 1344.0);
  // Lower bound: max(2496 / 3 = 832, largest query block = block 2's 1344).
  EXPECT_DOUBLE_EQ(m.compute_lower_bound, 1344);
  // Transfers [0,0,1] [1,1,2] [0,0,2], 64 bytes each.
  EXPECT_EQ(m.workers[0].kv_blocks_sent, 2);
  EXPECT_EQ(m.workers[0].kv_blocks_received, 0);
  EXPECT_EQ(m.workers[1].kv_blocks_sent, 1);
  EXPECT_EQ(m.workers[1].kv_blocks_received, 1);
  EXPECT_EQ(m.workers[2].kv_blocks_sent, 0);
  EXPECT_EQ(m.workers[2].kv_blocks_received, 2);
  EXPECT_EQ(m.workers[0].bytes_sent, 128);
  EXPECT_EQ(m.workers[2].bytes_received, 128);
  for (const WorkerMetrics& w : m.workers) EXPECT_EQ(w.traffic_bytes(), 128);
  EXPECT_DOUBLE_EQ(m.traffic_imbalance, 0);
  EXPECT_DOUBLE_EQ(m.send_imbalance, 0.5);     // sent 128, 64, 0: (128 - 64) / 128
  EXPECT_DOUBLE_EQ(m.receive_imbalance, 0.5);  // received 0, 64, 128
  EXPECT_EQ(m.transfer_edges, 3);
  EXPECT_EQ(m.required_pairs, 6);
  EXPECT_EQ(m.max_degree, 2);
  EXPECT_EQ(m.forward_stages, 3);
  EXPECT_EQ(m.forward_transfer_stages, 2);
  EXPECT_EQ(m.transfer_stage_lower_bound, 2);  // ceil(2 / 1)
  EXPECT_EQ(m.backward_stages, 4);
  // Tokens 4 each; the dataloader also gives worker r tokens [4r, 4r + 4).
  EXPECT_EQ(m.total_tokens, 12);
  EXPECT_EQ(m.max_tokens, 4);
  EXPECT_DOUBLE_EQ(m.token_imbalance, 0);
  EXPECT_EQ(m.reshuffle_tokens, 0);
  EXPECT_EQ(m.reshuffle_bytes, 0);
}

TEST(PlanMetricsTest, TwoWorkerPlanHandCounted) {
  const PlanMetrics m = ComputePlanMetrics(testing::TwoWorkerPlan());
  // w0: (0,0) = 10 pairs -> 320; w1: 16 + 10 + 16 + 16 + 10 = 68 -> 2176.
  EXPECT_DOUBLE_EQ(m.workers[0].forward_flops, 320);
  EXPECT_DOUBLE_EQ(m.workers[1].forward_flops, 2176);
  EXPECT_DOUBLE_EQ(m.compute_imbalance, (2176.0 - 1248.0) / 2176.0);
  EXPECT_DOUBLE_EQ(m.compute_lower_bound, 1344);  // block 2 (42 pairs) > 2496 / 2 = 1248
  EXPECT_EQ(m.workers[0].tokens, 4);
  EXPECT_EQ(m.workers[1].tokens, 8);
  EXPECT_EQ(m.max_tokens, 8);
  EXPECT_DOUBLE_EQ(m.token_imbalance, (8.0 - 6.0) / 8.0);
  EXPECT_EQ(m.transfer_edges, 1);
  EXPECT_EQ(m.max_degree, 1);
  EXPECT_EQ(m.transfer_stage_lower_bound, 1);
  EXPECT_DOUBLE_EQ(m.traffic_imbalance, 0);  // 64 sent by w0, 64 received by w1
  // Dataloader: w0 holds [0, 6), w1 [6, 12). Block 1 = [4, 8) lives on w1,
  // so tokens 4 and 5 move: 2 tokens x (Q,K,V in: (2 + 2*1)*4*2 = 32 bytes,
  // O out: 2*4*2 = 16 bytes) = 96 bytes.
  EXPECT_EQ(m.reshuffle_tokens, 2);
  EXPECT_EQ(m.reshuffle_bytes, 96);
  EXPECT_EQ(m.max_worker_reshuffle_tokens, 2);  // w0 sends 2, w1 receives 2
}

// Two workers, sequences {a, b}: block 0 is sequence `first` whole on worker
// 1, block 1 the other sequence whole on worker 0; only local pairs.
PlanMetrics TwoWholeSequences(std::vector<int64_t> sequences, int32_t first, int64_t cap) {
  Plan p = testing::TwoWorkerPlan();
  p.sequences = std::move(sequences);
  p.token_cap = cap;
  p.blocks = {{1, {{first, 0, p.sequences[first]}}}, {0, {{1 - first, 0, p.sequences[1 - first]}}}};
  p.forward = {{{}, {{0, 0}, {1, 1}}}};
  p.backward = {{{}, {}, {{0, 0}, {1, 1}}}};
  ValidatePlan(p);
  return ComputePlanMetrics(p);
}

TEST(PlanMetricsTest, BusiestWorkerOfAReshuffleCountsInAndOut) {
  // Sequences {4, 4} swapped between the 2 workers: every token moves, and
  // each worker receives 4 and sends 4.
  const PlanMetrics m = TwoWholeSequences({4, 4}, 0, 4);
  EXPECT_EQ(m.reshuffle_tokens, 8);
  EXPECT_EQ(m.max_worker_reshuffle_tokens, 8);
}

TEST(PlanMetricsTest, ReshuffleAcrossSequenceAndShareBoundaries) {
  // Sequences {3, 5}, 2 workers: dataloader w0 = global [0, 4), w1 = [4, 8).
  // Block 0 (w1) = seq1 [0, 5) = global [3, 8): token 3 belongs to w0 -> 1 moves.
  // Block 1 (w0) = seq0 [0, 3) = global [0, 3): stays.
  const PlanMetrics m = TwoWholeSequences({3, 5}, 1, 5);
  EXPECT_EQ(m.reshuffle_tokens, 1);
  EXPECT_EQ(m.transfer_edges, 0);
  EXPECT_EQ(m.forward_transfer_stages, 0);
  EXPECT_EQ(m.transfer_stage_lower_bound, 0);
  // Causal pairs: 5x5 -> 15, 3x3 -> 6.
  EXPECT_DOUBLE_EQ(m.workers[1].forward_flops, 15 * 32);
  EXPECT_DOUBLE_EQ(m.workers[0].forward_flops, 6 * 32);
}

TEST(PlanMetricsTest, ImbalanceDefinition) {
  EXPECT_DOUBLE_EQ(Imbalance({}), 0);
  EXPECT_DOUBLE_EQ(Imbalance({0, 0}), 0);
  EXPECT_DOUBLE_EQ(Imbalance({5, 5, 5}), 0);
  EXPECT_DOUBLE_EQ(Imbalance({4, 2, 0}), 0.5);
  EXPECT_DOUBLE_EQ(Imbalance({10, 0, 0, 0}), 0.75);
}

}  // namespace
}  // namespace fcp
