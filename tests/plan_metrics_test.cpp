// ComputePlanMetrics on hand plans, every number counted by hand.
#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

#include "fcp/error.h"
#include "fcp/plan_metrics.h"
#include "hand_plans.h"

namespace fcp {
namespace {

// TinyShape: 32 FLOPs per token pair, 16 K/V bytes per token (64 per 4-token block).

// Expects field `f` of every worker of `m`, in worker order.
template <typename T>
void ExpectPerWorker(const PlanMetrics& m, T WorkerMetrics::*f,
                     const std::vector<std::type_identity_t<T>>& expected) {
  ASSERT_EQ(m.workers.size(), expected.size());
  for (size_t w = 0; w < expected.size(); ++w)
    EXPECT_EQ(m.workers[w].*f, expected[w]) << "worker " << w;
}

TEST(PlanMetricsTest, ThreeWorkerPlanHandCounted) {
  const PlanMetrics m = ComputePlanMetrics(testing::ThreeWorkerPlan());
  // Token pairs (causal, blocks of 4): diagonal 10, below-diagonal 16.
  //   w0: (0,0) = 10             -> 320 FLOPs
  //   w1: (1,0) + (1,1) = 26      -> 832
  //   w2: (2,0) + (2,1) + (2,2) = 42 -> 1344;  total 2496, mean 832.
  ExpectPerWorker(m, &WorkerMetrics::forward_flops, {320, 832, 1344});
  EXPECT_DOUBLE_EQ(m.total_forward_flops, 2496);
  EXPECT_DOUBLE_EQ(m.max_compute, 1344);
  EXPECT_DOUBLE_EQ(m.max_pair_flops, 16 * 32);
  EXPECT_DOUBLE_EQ(m.compute_imbalance, (1344.0 - 832.0) / 1344.0);
  // Lower bound: max(2496 / 3 = 832, largest query block = block 2's 1344).
  EXPECT_DOUBLE_EQ(m.compute_lower_bound, 1344);
  // Transfers [0,0,1] [1,1,2] [0,0,2], 64 bytes each.
  ExpectPerWorker(m, &WorkerMetrics::kv_blocks_sent, {2, 1, 0});
  ExpectPerWorker(m, &WorkerMetrics::kv_blocks_received, {0, 1, 2});
  ExpectPerWorker(m, &WorkerMetrics::bytes_sent, {128, 64, 0});
  ExpectPerWorker(m, &WorkerMetrics::bytes_received, {0, 64, 128});
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
  ExpectPerWorker(m, &WorkerMetrics::forward_flops, {320, 2176});
  EXPECT_DOUBLE_EQ(m.compute_imbalance, (2176.0 - 1248.0) / 2176.0);
  EXPECT_DOUBLE_EQ(m.compute_lower_bound, 1344);  // block 2 (42 pairs) > 2496 / 2 = 1248
  ExpectPerWorker(m, &WorkerMetrics::tokens, {4, 8});
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
  ExpectPerWorker(m, &WorkerMetrics::forward_flops, {6 * 32, 15 * 32});
}

// ThreeWorkerPlan on nodes of two GPUs ({w0, w1}, {w2}): [0,0,1] stays on
// NVLink, [1,1,2] and [0,0,2] cross the NIC (64 bytes each).
TEST(PlanMetricsTest, TrafficSplitsIntoNvlinkAndNic) {
  const PlanMetrics m = ComputePlanMetrics(testing::ThreeWorkerPlan(), 2);
  EXPECT_EQ(m.gpus_per_node, 2);
  EXPECT_EQ(m.nvlink_bytes, 64);
  EXPECT_EQ(m.nic_bytes, 128);
  ExpectPerWorker(m, &WorkerMetrics::nvlink_bytes_sent, {64, 0, 0});
  ExpectPerWorker(m, &WorkerMetrics::nvlink_bytes_received, {0, 64, 0});
  ExpectPerWorker(m, &WorkerMetrics::nic_bytes_sent, {64, 64, 0});
  ExpectPerWorker(m, &WorkerMetrics::nic_bytes_received, {0, 0, 128});
  EXPECT_EQ(m.max_nic_bytes_sent, 64);
  EXPECT_EQ(m.max_nic_bytes_received, 128);
  EXPECT_EQ(m.max_bytes_sent, 128);                    // w0, both links
  EXPECT_EQ(m.max_bytes_received, 128);                // w2
  EXPECT_DOUBLE_EQ(m.nic_send_imbalance, 1.0 / 3);     // 64, 64, 0
  EXPECT_DOUBLE_EQ(m.nic_receive_imbalance, 2.0 / 3);  // 0, 0, 128
  // The built-in node of 8 holds all three; nodes of one hold none together.
  const PlanMetrics one_node = ComputePlanMetrics(testing::ThreeWorkerPlan());
  EXPECT_EQ(one_node.gpus_per_node, kBuiltinGpusPerNode);
  EXPECT_EQ(one_node.nic_bytes, 0);
  EXPECT_EQ(one_node.nvlink_bytes, 192);
  EXPECT_DOUBLE_EQ(one_node.nic_receive_imbalance, 0);
  EXPECT_EQ(ComputePlanMetrics(testing::ThreeWorkerPlan(), 1).nic_bytes, 192);
  EXPECT_THROW(ComputePlanMetrics(testing::ThreeWorkerPlan(), 0), Error);
}

// TwoWorkerPlan: tokens 4, 5 move from w0's share to w1 (Q, K, V 32 bytes a
// token, O 16). w1 takes in their Q, K, V (64) and sends their O back (32);
// w0 the reverse.
TEST(PlanMetricsTest, ReshuffleBytesPerWorkerAndDirection) {
  const PlanMetrics m = ComputePlanMetrics(testing::TwoWorkerPlan());
  ExpectPerWorker(m, &WorkerMetrics::reshuffle_tokens_out, {2, 0});
  ExpectPerWorker(m, &WorkerMetrics::reshuffle_tokens_in, {0, 2});
  ExpectPerWorker(m, &WorkerMetrics::reshuffle_bytes_in, {32, 64});
  ExpectPerWorker(m, &WorkerMetrics::reshuffle_bytes_out, {64, 32});
  EXPECT_EQ(m.max_worker_reshuffle_bytes_in, 64);
  EXPECT_EQ(m.max_worker_reshuffle_bytes_out, 64);
  // Swapped sequences: each worker takes 4 tokens in and sends 4 out.
  const PlanMetrics swapped = TwoWholeSequences({4, 4}, 0, 4);
  EXPECT_EQ(swapped.max_worker_reshuffle_bytes_in, 4 * 32 + 4 * 16);
  EXPECT_EQ(swapped.max_worker_reshuffle_bytes_out, 4 * 32 + 4 * 16);
}

// The floor of the batch within the plan's cap (reshuffle_floor.h). One causal
// sequence of 12 on 3 workers: homes carry 10, 26, 42 pairs, target 26; w2
// sheds rows 12 and 11 (23 >= 16), and with cap 4 nobody has room: floor 4.
// TwoWorkerPlan: homes rows 1..6 | 7..12 carry 21 | 57, target 39; w1 sheds
// rows 12 and 11 (23 >= 18), and the cap of 8 leaves w0 room for both: floor 2.
TEST(PlanMetricsTest, ReshuffleFloorOfTheBatch) {
  const PlanMetrics m = ComputePlanMetrics(testing::ThreeWorkerPlan());
  EXPECT_EQ(m.reshuffle_floor.shed_tokens, 2);
  EXPECT_EQ(m.reshuffle_floor.replacement_tokens, 2);
  EXPECT_EQ(m.reshuffle_floor.tokens, 4);
  const PlanMetrics two = ComputePlanMetrics(testing::TwoWorkerPlan());
  EXPECT_EQ(two.reshuffle_floor.target_token_pairs, 39);
  EXPECT_EQ(two.reshuffle_floor.shed_tokens, 2);
  EXPECT_EQ(two.reshuffle_floor.spare_tokens, 2);
  EXPECT_EQ(two.reshuffle_floor.tokens, 2);
  EXPECT_LE(two.reshuffle_floor.tokens, two.reshuffle_tokens);
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
