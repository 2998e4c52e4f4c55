#include "fcp/step_estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>
#include "fcp/cost_model.h"

#include "fcp/error.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/required_pairs.h"
#include "fcp/simulator.h"
#include "fcp/step_estimate_input.h"
#include "fcp/workload.h"
#include "hand_plans.h"

namespace fcp {
namespace {

// 1 FLOP per us at efficiency 1 for every kernel length; NIC 1 byte per us;
// every worker a node of its own.
StepCosts UnitCosts() {
  StepCosts c;
  c.compute_flops_per_s = 1e6;
  c.efficiency = {{1, 1.0}};
  c.backward_flops_factor = 2.5;
  c.backward_efficiency_ratio = 1;
  c.kernel_launch_us = 0;
  c.node_workers = 1;
  c.nvlink_bytes_per_us = 1;
  c.nic_bytes_per_us = 1;
  return c;
}

// One worker, one block of the whole 12-token causal sequence: 78 token
// pairs x 32 FLOPs, one launch per pass; nothing moves.
TEST(StepEstimateTest, OneWorkerOneBlockIsItsCompute) {
  Plan p = testing::OneSequenceOf12(1, 12);
  p.blocks = {{0, {{0, 0, 12}}}};
  StepCosts c = UnitCosts();
  c.kernel_launch_us = 5;
  c.nic_latency_us = 100;  // no transfer: never charged
  const StepEstimate e = EstimateStep(p, c);
  EXPECT_DOUBLE_EQ(e.forward.time_us, 78 * 32 + 5);
  EXPECT_DOUBLE_EQ(e.backward.time_us, 78 * 32 * 2.5 + 5);
  EXPECT_DOUBLE_EQ(e.total_us, e.forward.time_us + e.backward.time_us);
  EXPECT_EQ(e.forward.binding, "compute");
  EXPECT_DOUBLE_EQ(e.forward.port_us, 0);
  EXPECT_DOUBLE_EQ(e.forward.latency_us, 0);
}

// The kernel length of a block's pairs with itself: a 4-token causal block
// has 10 pairs, 2 x 10 / 4 = 5 tokens, at 5/8 of peak below an 8-token
// first point.
TEST(StepEstimateTest, KernelEfficiencyOfTheDiagonal) {
  Plan p = testing::OneSequenceOf12(1, 12);
  p.sequences = {4};
  p.blocks = {{0, {{0, 0, 4}}}};
  StepCosts c = UnitCosts();
  c.efficiency = {{8, 1.0}};
  EXPECT_DOUBLE_EQ(InterpolateEfficiency(c.efficiency, 5), 5.0 / 8);
  const StepEstimate e = EstimateStep(p, c);
  EXPECT_DOUBLE_EQ(e.forward.time_us, 10 * 32 / (5.0 / 8));
}

// hand_plans.h's two-worker plan: w1 computes (1,1), (2,2) on the diagonal
// (20 pairs), (2,1) locally (16) and (1,0), (2,0) with B0 received (32):
// 68 x 32 = 2176 us and two launches; B0 (4 tokens x 16 bytes) crosses
// once: 64 us on w1's in-port, in one transfer stage that w1's local
// compute (1154 us) hides; one stage of latency. The backward: 2.5x the
// compute, the partial back on the other direction, latency over 1 + 2
// stages.
TEST(StepEstimateTest, TwoWorkersOneTransfer) {
  const Plan p = testing::TwoWorkerPlan();
  StepCosts c = UnitCosts();
  c.kernel_launch_us = 1;
  c.nic_latency_us = 3;
  const StepEstimate e = EstimateStep(p, c);
  EXPECT_DOUBLE_EQ(e.forward.compute_us, 2176 + 2);
  EXPECT_DOUBLE_EQ(e.forward.port_us, 64);
  EXPECT_DOUBLE_EQ(e.forward.fill_us, 0);
  EXPECT_DOUBLE_EQ(e.forward.latency_us, 3);
  EXPECT_DOUBLE_EQ(e.forward.time_us, 2176 + 2 + 3);
  EXPECT_EQ(e.forward.critical_worker, 1);
  EXPECT_DOUBLE_EQ(e.backward.time_us, 2176 * 2.5 + 2 + 9);
  // Inside one node the same bytes go over NVLink, here 4x faster.
  c.node_workers = 2;
  c.nvlink_bytes_per_us = 4;
  c.nvlink_latency_us = 1;
  const StepEstimate inside = EstimateStep(p, c);
  EXPECT_DOUBLE_EQ(inside.forward.port_us, 16);
  EXPECT_DOUBLE_EQ(inside.forward.time_us, 2176 + 2 + 1);
  // Slow links bind the pass: the transfer (5000 us) outlasts the local
  // compute (1152), and the compute with B0 (1024) follows it.
  c = UnitCosts();
  c.nic_bytes_per_us = 64.0 / 5000;
  const StepEstimate slow = EstimateStep(p, c);
  EXPECT_EQ(slow.forward.binding, "ports");
  EXPECT_DOUBLE_EQ(slow.forward.time_us, 5000 + 1024);
  EXPECT_DOUBLE_EQ(slow.forward.fill_us, 1024);
}

// Pulls share their sender's out-port (hand_plans.h's three-worker plan,
// c = 1, a slow NIC: 1000 us a block). w0 sends B0 to w1 and w2, w1 sends
// B1 to w2. w2 pulls B0 (slowed by w0's other pull: 1000 us of it in a pass
// of P, 1000 / (1 - 1000 / P)) and then B1 (w1 sends nothing else: 1000),
// and computes with the last after it (its 1024 us with received K/V over
// two stages: 512). The pass is the fixed point P = 1000 P / (P - 1000) +
// 1512, the larger root of P^2 - 3512 P + 1,512,000 = 0 (3009.6 us), above
// its in-port's 2000 + 512 without the sharing.
TEST(StepEstimateTest, PullsShareTheirSendersOutPort) {
  const Plan p = testing::ThreeWorkerPlan();
  StepCosts c = UnitCosts();
  c.nic_bytes_per_us = 64.0 / 1000;
  const StepEstimate e = EstimateStep(p, c);
  const double fixed_point = (3512 + std::sqrt(3512.0 * 3512 - 4 * 1512000.0)) / 2;
  EXPECT_NEAR(e.forward.time_us, fixed_point, 1e-5);
  EXPECT_EQ(e.forward.critical_worker, 2);
  EXPECT_EQ(e.forward.binding, "ports");
  EXPECT_NEAR(e.forward.port_us, fixed_point - 512, 1e-5);
  // Coalesced (c = 2), w2 pulls both at once: the group lasts its slowest
  // pull or its in-port's 2000 us, whichever is longer; here the in-port.
  Plan coalesced = p;
  coalesced.coalesce = 2;
  EXPECT_DOUBLE_EQ(EstimateStep(coalesced, c).forward.time_us, 2000 + 1024);
}

// Two workers each holding the other's dataloader half: with the reshuffle
// charged, w0's only block is away, so its Q, K, V in (4 tokens x 32 bytes,
// as its own go out: 128 us), its compute (the (1,1) diagonal, 10 pairs,
// and (1,0) with B0 received, 16 pairs: 832 us) and its O back (4 x 16:
// 64 us; final only after the received K/V) run in series, longer than its
// compute without the reshuffle (B0's 64 us hidden by the diagonal's 320).
TEST(StepEstimateTest, ReshuffleWaitsBeforeAndAfter) {
  Plan p = testing::OneSequenceOf12(2, 4);
  p.sequences = {8};
  p.blocks = {{1, {{0, 0, 4}}}, {0, {{0, 4, 4}}}};
  StepCosts c = UnitCosts();
  const double without = EstimateStep(p, c).forward.time_us;
  EXPECT_DOUBLE_EQ(without, 832);
  c.reshuffle = true;
  const StepEstimate e = EstimateStep(p, c);
  EXPECT_DOUBLE_EQ(e.forward.time_us, 128 + 832 + 64);
  EXPECT_DOUBLE_EQ(e.forward.reshuffle_us, 128 + 64);
  // A block at home computes while the other's inputs arrive: w1 keeps B0,
  // computes its diagonal (320 us) beside w0's 1024.
  EXPECT_EQ(e.forward.critical_worker, 0);
  // Its own layout: nothing to reshuffle.
  p.blocks = {{0, {{0, 0, 4}}}, {1, {{0, 4, 4}}}};
  EXPECT_DOUBLE_EQ(EstimateStep(p, c).forward.reshuffle_us, 0);
}

// A plan in progress: owners given apart from the blocks (their worker
// fields unread), the pairs computed once; the same estimate as the plan
// with those owners.
TEST(StepEstimateTest, PlanInProgressMatchesThePlan) {
  Plan p = testing::TwoWorkerPlan();
  const StepCosts c = UnitCosts();
  const std::vector<RequiredPair> pairs = RequiredPairs(p.sequences, p.blocks, p.mask);
  std::vector<Block> unowned = p.blocks;
  for (Block& b : unowned) b.worker = 0;
  const std::vector<int32_t> owner = {0, 1, 1};
  detail::StepEstimateInput in{&p.sequences, &unowned,    &owner,    &pairs,
                               p.mask,       p.attention, p.workers, p.coalesce};
  EXPECT_EQ(detail::EstimateStep(in, c).total_us, EstimateStep(p, c).total_us);
  // Everything on w1: no transfer, w1 computes all 78 pairs.
  const std::vector<int32_t> together = {1, 1, 1};
  in.owner = &together;
  const StepEstimate all = detail::EstimateStep(in, c);
  EXPECT_DOUBLE_EQ(all.forward.time_us, 78 * 32);
  EXPECT_EQ(all.forward.critical_worker, 1);
  const std::vector<int32_t> outside = {0, 2, 1}, short_owner = {0, 1};
  in.owner = &outside;
  EXPECT_THROW(detail::EstimateStep(in, c), Error);
  in.owner = &short_owner;
  EXPECT_THROW(detail::EstimateStep(in, c), Error);
}

TEST(StepEstimateTest, BadCostsAreNamed) {
  const Plan p = testing::TwoWorkerPlan();
  StepCosts c = UnitCosts();
  c.nic_bytes_per_us = 0;
  try {
    EstimateStep(p, c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "step estimate: nic_bytes_per_us must be > 0, got 0");
  }
  c = UnitCosts();
  c.efficiency = {{8, 0.5}, {4, 0.6}};
  EXPECT_THROW(EstimateStep(p, c), Error);
}

// The one check of an efficiency table names the point, the field and the
// caller's context.
TEST(StepEstimateTest, EfficiencyTableMessages) {
  const auto message = [](const std::vector<EfficiencyPoint>& curve) -> std::string {
    try {
      ValidateEfficiencyTable(curve, "ctx");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({{1, 1}, {2, 0.5}}), "");
  EXPECT_EQ(message({}), "ctx: efficiency table is empty");
  EXPECT_EQ(message({{0.5, 0.2}}), "ctx: efficiency point 0: tokens must be >= 1, got 0.5");
  EXPECT_EQ(message({{8, 0.5}, {8, 0.6}}),
            "ctx: efficiency point 1: tokens must increase (8 after 8)");
  EXPECT_EQ(message({{8, 0.5}, {16, 1.5}}),
            "ctx: efficiency point 1: efficiency must be in (0, 1], got 1.5");
  EXPECT_EQ(message({{8, 0}}), "ctx: efficiency point 0: efficiency must be in (0, 1], got 0");
  EXPECT_EQ(message({{std::numeric_limits<double>::infinity(), 0.5}}),
            "ctx: efficiency point 0: tokens must be >= 1, got inf");
}

// The profile's numbers, as the model layer passes them.
TEST(StepEstimateTest, CostsOfAProfile) {
  const HardwareProfile x = BuiltinProfile("gpu-x");
  const StepCosts c = StepCostsOf(x, true);
  EXPECT_NO_THROW(c.validate());
  EXPECT_DOUBLE_EQ(c.compute_flops_per_s, x.peak_flops * x.compute_sm_fraction);
  EXPECT_DOUBLE_EQ(c.nic_bytes_per_us, 50e3);
  EXPECT_EQ(c.node_workers, 8);
  EXPECT_TRUE(c.reshuffle);
  for (double len : {100.0, 512.0, 3000.0, 4096.0, 70000.0})
    EXPECT_DOUBLE_EQ(InterpolateEfficiency(c.efficiency, len), KernelEfficiency(x, len));
  // The planner's default costs are gpu-x's, to the bit.
  EXPECT_EQ(GpuXStepCosts(), StepCostsOf(x, false));
  EXPECT_EQ(PlannerConfig{}.step_costs, StepCostsOf(x, false));
}

// Within this share of the simulated step on random small batches: the
// worst error measured there (docs/simulator.md, the step estimate) with a
// margin.
constexpr double kRandomBatchError = 0.25;

// FCP's plans of random batches (lognormal and uniform lengths, 4 to 32
// workers), each simulated and estimated on both profiles under both
// reshuffle rules: the estimate within kRandomBatchError of the simulated
// step, no lower with the reshuffle than without, and the same twice.
TEST(StepEstimateTest, NearTheSimulatorOnRandomBatches) {
  double worst = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    WorkloadConfig w;
    w.dist = seed % 2 ? LengthDistribution::kUniform : LengthDistribution::kLognormal;
    w.workers = 4 << (seed % 4);
    w.tokens_per_worker = 16384;
    w.seed = seed;
    const std::vector<int64_t> lengths = GenerateWorkload(w);
    PlannerConfig config;
    config.workers = w.workers;
    const Plan plan = MakePlan(lengths, config);
    for (const char* name : {"gpu-x", "gpu-y"}) {
      const HardwareProfile profile = BuiltinProfile(name);
      double without_us = 0;
      for (ReshuffleMode mode : {ReshuffleMode::kNone, ReshuffleMode::kOverlapped}) {
        SimConfig sim;
        sim.reshuffle = mode;
        const double simulated_us = Simulate(plan, profile, sim).total_time_s * 1e6;
        const StepCosts costs = StepCostsOf(profile, mode == ReshuffleMode::kOverlapped);
        const StepEstimate e = EstimateStep(plan, costs);
        EXPECT_EQ(e.total_us, EstimateStep(plan, costs).total_us);
        const double error = e.total_us / simulated_us - 1;
        worst = std::max(worst, std::abs(error));
        EXPECT_LE(std::abs(error), kRandomBatchError)
            << "seed " << seed << ", " << name << ", reshuffle " << ReshuffleModeName(mode)
            << ": estimate " << e.total_us << " us, simulated " << simulated_us << " us";
        if (mode == ReshuffleMode::kNone)
          without_us = e.total_us;
        else
          EXPECT_GE(e.total_us, without_us);
      }
    }
  }
  RecordProperty("worst_error_percent", static_cast<int>(std::lround(worst * 100)));
}

}  // namespace
}  // namespace fcp
