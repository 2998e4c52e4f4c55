// The FCP planner through MakePlan: hand cases whose plan is forced, property
// tests over random batches and configs, quality on the paper's setup, and
// config errors.
#include <algorithm>
#include <future>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/plan_json.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/simulator.h"
#include "fcp/workload.h"

namespace fcp {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

int64_t Total(const std::vector<int64_t>& lengths) {
  return std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

PlannerConfig Config(int32_t workers, int64_t block_size, int32_t coalesce, Mask mask = {}) {
  PlannerConfig c;
  c.workers = workers;
  c.block_size = block_size;
  c.coalesce = coalesce;
  c.mask = mask;
  return c;
}

// A lognormal batch of the paper's setup (section 5): 32K tokens per worker,
// lengths up to 512K.
std::vector<int64_t> PaperBatch(int32_t workers, uint64_t seed) {
  WorkloadConfig w;
  w.workers = workers;
  w.tokens_per_worker = 32768;
  w.max_len = 524288;
  w.seed = seed;
  return GenerateWorkload(w);
}

// The worst worker's forward FLOPs + bytes moved (sent + received) x the
// ratio: the cost traffic leveling keeps.
double WorstCost(const PlanMetrics& m, double network_flops_per_byte) {
  double cost = 0;
  for (const WorkerMetrics& w : m.workers)
    cost = std::max(
        cost, w.forward_flops + network_flops_per_byte * static_cast<double>(w.traffic_bytes()));
  return cost;
}

// The same with the bytes by the worker's busiest NIC port (twice the larger
// of sent and received): the cost the default plan's candidates are ranked
// by (detail::Cost).
double WorstPortCost(const PlanMetrics& m, double network_flops_per_byte) {
  double cost = 0;
  for (const WorkerMetrics& w : m.workers)
    cost = std::max(
        cost, w.forward_flops + network_flops_per_byte * 2.0 *
                                    static_cast<double>(std::max(w.bytes_sent, w.bytes_received)));
  return cost;
}

// A knob's effect: the plan with it on (validated), its metrics, and the
// metrics of the plan with it off.
struct KnobEffect {
  Plan plan;
  PlanMetrics with, without;
};
KnobEffect EffectOf(const std::vector<int64_t>& lengths, const PlannerConfig& on,
                    const PlannerConfig& off) {
  KnobEffect e;
  e.plan = MakePlan(lengths, on);
  ValidatePlan(e.plan, {.forbid_redundant_transfers = true});
  e.with = ComputePlanMetrics(e.plan);
  e.without = ComputePlanMetrics(MakePlan(lengths, off));
  return e;
}

std::vector<Transfer> AllSends(const Plan& plan) {
  std::vector<Transfer> all;
  for (const ForwardStage& s : plan.forward) all.insert(all.end(), s.send.begin(), s.send.end());
  return all;
}

// ---- hand cases -------------------------------------------------------------

// Two workers, one sequence of two blocks, full mask:
//
//   seq 0: | [0,4) | [4,8) |      token cap 4: one block per worker, and each
//                                 worker needs the other's block.
//
// Forced: each worker owns one block and sends it to the other, in one stage
// (Delta = 1); in the backward each returns the other's partial dK/dV.
TEST(PlannerTest, TwoWorkersOneSequenceFullMask) {
  const Plan plan = MakePlan({8}, Config(2, 4, 1, {MaskKind::kFull, 0}));
  ASSERT_EQ(plan.blocks.size(), 2u);
  EXPECT_THAT((std::vector<int32_t>{plan.blocks[0].worker, plan.blocks[1].worker}),
              UnorderedElementsAre(0, 1));
  EXPECT_THAT((std::vector<Segment>{plan.blocks[0].segments.at(0), plan.blocks[1].segments.at(0)}),
              UnorderedElementsAre(Segment{0, 0, 4}, Segment{0, 4, 4}));
  const int32_t w0 = plan.blocks[0].worker, w1 = plan.blocks[1].worker;
  EXPECT_THAT(AllSends(plan), UnorderedElementsAre(Transfer{0, w0, w1}, Transfer{1, w1, w0}));
  int stages_with_sends = 0;
  for (const ForwardStage& s : plan.forward) stages_with_sends += !s.send.empty();
  EXPECT_EQ(stages_with_sends, 1);
  std::vector<Transfer> dkv;
  for (const BackwardStage& s : plan.backward)
    dkv.insert(dkv.end(), s.send_dkv.begin(), s.send_dkv.end());
  EXPECT_THAT(dkv, UnorderedElementsAre(Transfer{0, w1, w0}, Transfer{1, w0, w1}));
  EXPECT_NO_THROW(ValidatePlan(plan, {.forbid_redundant_transfers = true}));
}

// Causal instead: only the later block needs the earlier one, one transfer.
TEST(PlannerTest, TwoWorkersOneSequenceCausal) {
  const Plan plan = MakePlan({8}, Config(2, 4, 1));
  ASSERT_EQ(plan.blocks.size(), 2u);
  const std::vector<Transfer> sends = AllSends(plan);
  ASSERT_EQ(sends.size(), 1u);
  const Block& sent = plan.blocks[sends[0].block];
  EXPECT_EQ(sent.segments, (std::vector<Segment>{{0, 0, 4}}));
  EXPECT_EQ(sends[0].src, sent.worker);
}

// The compute floor of whole items, worked by hand. Two workers, cap 8192
// (two 4K slots each), causal:
//
//   seq 0: | b0 [0,4K) | b1 [4K,8K) |   one zig-zag item (b0, b1), two slots,
//   seq 1: | [0,4K) |  seq 2: | [0,4K) |   two one-slot items.
//
// Work in allowed pairs: the item 8192 x 8193 / 2 = 33,558,528, each single
// 4096 x 4097 / 2 = 8,390,656; mean 25,169,920. The item fills one worker
// whichever it is, so the imbalance is at least (33,558,528 - 25,169,920) /
// 33,558,528.
TEST(PlannerTest, ComputeFloorOfWholeItemsByHand) {
  PlannerConfig whole = Config(2, 4096, 16);
  whole.heavy_fraction = 0;
  const std::vector<int64_t> lengths = {8192, 4096, 4096};
  EXPECT_DOUBLE_EQ(FcpComputeImbalanceFloor(lengths, whole), 8388608.0 / 33558528.0);
  // No plan beats its floor.
  const Plan plan = MakePlan(lengths, whole);
  const PlanMetrics m = ComputePlanMetrics(plan);
  EXPECT_GE(m.compute_imbalance, 8388608.0 / 33558528.0 - 1e-12);
}

// Two short sequences packed into one block of 4096 on one worker:
//   | seq0 [0,1000) | seq1 [0,3096) |   one block, two segments, one pair.
TEST(PlannerTest, PackedBlockOnOneWorker) {
  const Plan plan = MakePlan({1000, 3096}, Config(1, 4096, 16));
  ASSERT_EQ(plan.blocks.size(), 1u);
  EXPECT_EQ(plan.blocks[0].worker, 0);
  EXPECT_THAT(plan.blocks[0].segments,
              UnorderedElementsAre(Segment{0, 0, 1000}, Segment{1, 0, 3096}));
  EXPECT_TRUE(AllSends(plan).empty());
  std::vector<BlockPair> forward, backward;
  for (const ForwardStage& s : plan.forward)
    forward.insert(forward.end(), s.compute.begin(), s.compute.end());
  for (const BackwardStage& s : plan.backward) {
    backward.insert(backward.end(), s.compute.begin(), s.compute.end());
    EXPECT_TRUE(s.send_kv.empty());
    EXPECT_TRUE(s.send_dkv.empty());
  }
  EXPECT_THAT(forward, UnorderedElementsAre(BlockPair{0, 0}));
  EXPECT_THAT(backward, UnorderedElementsAre(BlockPair{0, 0}));
}

// Three short sequences, two workers, block = cap = 8 tokens, causal:
//
//   slot 1: | seq0 [0,6) | seq1 [0,2) |   slot 2: | seq1 [2,4) | seq2 [0,6) |
//
// seq1 straddles the slots. Its pieces become blocks of their own, so the
// only transfer is seq1 [0,2) (2 tokens), not a whole packed block, and the
// later piece computes its local pair in the stage its remote K/V arrives.
TEST(PlannerTest, SplitShortSequenceMovesOnlyItsPiece) {
  const Plan plan = MakePlan({6, 4, 6}, Config(2, 8, 1));
  ValidatePlan(plan, {.forbid_redundant_transfers = true});
  ASSERT_EQ(plan.blocks.size(), 4u);
  // The blocks by their contents (their order is the planner's).
  const auto block_of = [&](std::vector<Segment> segments) {
    for (size_t b = 0; b < plan.blocks.size(); ++b)
      if (plan.blocks[b].segments == segments) return static_cast<int32_t>(b);
    return -1;
  };
  const int32_t first = block_of({{1, 0, 2}}), second = block_of({{1, 2, 2}});
  const int32_t whole = block_of({{0, 0, 6}});
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  ASSERT_GE(whole, 0);
  EXPECT_NE(plan.blocks[first].worker, plan.blocks[second].worker);
  EXPECT_THAT(AllSends(plan), UnorderedElementsAre(Transfer{first, plan.blocks[first].worker,
                                                            plan.blocks[second].worker}));
  const auto stage_of = [&](int32_t q, int32_t kv) {
    for (size_t t = 0; t < plan.forward.size(); ++t)
      for (const BlockPair& p : plan.forward[t].compute)
        if (p.q_block == q && p.kv_block == kv) return static_cast<int>(t);
    return -1;
  };
  EXPECT_EQ(stage_of(second, first), 1);
  EXPECT_EQ(stage_of(second, second), 1);
  EXPECT_EQ(stage_of(whole, whole), 0);  // whole sequences stay in stage 0
}

TEST(PlannerTest, OneWorkerNeverTransfers) {
  for (const Mask& mask : {Mask{MaskKind::kCausal, 0}, Mask{MaskKind::kFull, 0},
                           Mask{MaskKind::kSlidingWindow, 100}}) {
    const Plan plan = MakePlan({5000, 1, 300, 9000}, Config(1, 1024, 4, mask));
    ValidatePlan(plan, {.forbid_redundant_transfers = true});
    EXPECT_TRUE(AllSends(plan).empty());
    for (const BackwardStage& s : plan.backward) {
      EXPECT_TRUE(s.send_kv.empty());
      EXPECT_TRUE(s.send_dkv.empty());
    }
    for (const Block& b : plan.blocks) EXPECT_EQ(b.worker, 0);
  }
}

// Four sequences of exactly one block each on four workers, causal: no block
// needs another, so nothing moves and each worker owns one whole sequence.
TEST(PlannerTest, IndependentSequencesStayLocal) {
  const Plan plan = MakePlan({4, 4, 4, 4}, Config(4, 4, 1));
  ASSERT_EQ(plan.blocks.size(), 4u);
  std::set<int32_t> owners;
  for (const Block& b : plan.blocks) {
    owners.insert(b.worker);
    ASSERT_EQ(b.segments.size(), 1u);
    EXPECT_EQ(b.segments[0].start, 0);
    EXPECT_EQ(b.segments[0].length, 4);
  }
  EXPECT_EQ(owners.size(), 4u);
  EXPECT_TRUE(AllSends(plan).empty());
}

TEST(PlannerTest, PlanRecordsTheConfig) {
  PlannerConfig c = Config(3, 7, 2, {MaskKind::kSlidingWindow, 9});
  c.attention = {16, 4, 64, 4};
  c.token_cap = 40;
  const Plan plan = MakePlan({50, 3, 20}, c);
  EXPECT_EQ(plan.planner, "fcp");
  EXPECT_EQ(plan.workers, 3);
  EXPECT_EQ(plan.block_size, 7);
  EXPECT_EQ(plan.coalesce, 2);
  EXPECT_EQ(plan.mask, (Mask{MaskKind::kSlidingWindow, 9}));
  EXPECT_EQ(plan.attention, (AttentionShape{16, 4, 64, 4}));
  EXPECT_EQ(plan.token_cap, 40);
  EXPECT_EQ(plan.sequences, (std::vector<int64_t>{50, 3, 20}));
  c.token_cap = 0;
  EXPECT_EQ(MakePlan({50, 3, 20}, c).token_cap, 25);  // ceil(73 / 3)
}

// ---- properties over random batches and configs ---------------------------

struct Case {
  std::vector<int64_t> lengths;
  PlannerConfig config;
  std::string describe() const {
    std::string s =
        "N=" + std::to_string(config.workers) + " b=" + std::to_string(config.block_size) +
        " c=" + std::to_string(config.coalesce) + " mask=" + MaskKindName(config.mask.kind) + "/" +
        std::to_string(config.mask.window) + " cap=" + std::to_string(config.token_cap) +
        " lengths=[";
    for (size_t i = 0; i < lengths.size() && i < 40; ++i)
      s += (i ? "," : "") + std::to_string(lengths[i]);
    return s + (lengths.size() > 40 ? ",...]" : "]");
  }
};

// A random batch and config, small enough that the whole sweep stays at a
// few seconds in Release and well under a minute under sanitizers.
Case RandomCase(std::mt19937_64& rng) {
  const auto pick = [&](std::initializer_list<int64_t> xs) {
    return *(xs.begin() + rng() % xs.size());
  };
  Case k;
  PlannerConfig& c = k.config;
  c.workers = static_cast<int32_t>(rng() % 3 == 0 ? pick({1, 2, 3, 64}) : 1 + rng() % 40);
  c.block_size = pick({1, 2, 3, 7, 16, 64, 100, 512, 4096, 1 << 20});
  c.coalesce = static_cast<int32_t>(pick({1, 1, 2, 3, 4, 16, 32}));
  switch (rng() % 5) {
    case 0:
      c.mask = {MaskKind::kFull, 0};
      break;
    case 1:
    case 2:
      c.mask = {MaskKind::kCausal, 0};
      break;
    default:
      c.mask = {MaskKind::kSlidingWindow, pick({1, 2, 7, std::max<int64_t>(1, c.block_size / 2),
                                                c.block_size, 3 * c.block_size + 1, 1 << 30})};
  }
  // Total tokens: at least one per worker, at most ~200 blocks (120 for the
  // full mask, whose pairs are quadratic in blocks) and 20000 tokens.
  const int64_t max_blocks = c.mask.kind == MaskKind::kFull ? 120 : 200;
  const int64_t max_total =
      std::max<int64_t>(c.workers, std::min<int64_t>(max_blocks * c.block_size, 20000));
  const int64_t total = c.workers + static_cast<int64_t>(rng() % (max_total - c.workers + 1));
  const int64_t max_len = pick({1, 2, 5, 50, 1000, 30000, 1 << 30});
  switch (rng() % 4) {
    case 0: {  // lognormal-like via the generator, scaled to `total`
      WorkloadConfig w;
      w.workers = 1;
      w.tokens_per_worker = total;
      w.max_len = std::max<int64_t>(1, std::min<int64_t>(max_len, total));
      w.lognormal_mu = std::log(std::max<double>(2, static_cast<double>(total) / 50));
      w.seed = rng();
      k.lengths = GenerateWorkload(w);
      break;
    }
    case 1:  // many sequences of length 1 mixed with a long one
      k.lengths.assign(static_cast<size_t>(std::min<int64_t>(total - 1, 200)), 1);
      k.lengths.push_back(total - static_cast<int64_t>(k.lengths.size()));
      if (k.lengths.back() == 0) k.lengths.pop_back();
      std::shuffle(k.lengths.begin(), k.lengths.end(), rng);
      break;
    default:  // uniform pieces
      for (int64_t left = total; left > 0;) {
        const int64_t len =
            std::min<int64_t>(left, 1 + rng() % std::max<int64_t>(1, std::min(max_len, total)));
        k.lengths.push_back(len);
        left -= len;
      }
  }
  const int64_t even = CeilDiv(Total(k.lengths), c.workers);
  c.token_cap = rng() % 4 == 0 ? even + static_cast<int64_t>(rng() % (even + 1)) : 0;
  return k;
}

// Checks every plan rule on k's plan; `out`, if given, receives the plan.
void CheckPlanProperties(const Case& k, Plan* out = nullptr) {
  SCOPED_TRACE(k.describe());
  Plan plan;
  try {
    plan = MakePlan(k.lengths, k.config);
  } catch (const std::exception& e) {
    FAIL() << "MakePlan threw: " << e.what();
  }
  ASSERT_NO_THROW(ValidatePlan(plan, {.forbid_redundant_transfers = true}));
  const int64_t cap =
      k.config.token_cap ? k.config.token_cap : CeilDiv(Total(k.lengths), k.config.workers);
  EXPECT_EQ(plan.token_cap, cap);
  const PlanMetrics m = ComputePlanMetrics(plan);
  EXPECT_LE(m.max_tokens, cap);
  // Delta-optimal: exactly ceil(Delta / c) forward stages carry transfers,
  // Delta of the direct transfer graph (owners to receivers): node relays
  // (step 11) rewrite transfers within their stages (a relay may then send
  // more blocks in all than Delta, at most c a stage) and never add one.
  PlannerConfig direct_config = k.config;
  direct_config.node_relays = false;
  const PlanMetrics direct = ComputePlanMetrics(MakePlan(k.lengths, direct_config));
  EXPECT_EQ(direct.forward_transfer_stages, CeilDiv(direct.max_degree, k.config.coalesce));
  EXPECT_EQ(direct.transfer_stage_lower_bound, CeilDiv(direct.max_degree, k.config.coalesce));
  EXPECT_EQ(m.forward_transfer_stages, direct.forward_transfer_stages);
  // Deterministic: the same input gives the same bytes.
  const std::string text = WritePlanJson(plan);
  EXPECT_EQ(WritePlanJson(MakePlan(k.lengths, k.config)), text);
  EXPECT_EQ(ReadPlanJson(text), plan);
  if (out) *out = std::move(plan);
}

TEST(PlannerPropertyTest, RandomBatchesGiveValidOptimalDeterministicPlans) {
  std::mt19937_64 rng(20261129);
  for (int trial = 0; trial < 120; ++trial) {
    const Case k = RandomCase(rng);
    CheckPlanProperties(k);
    if (HasFatalFailure() || HasNonfatalFailure()) {
      ADD_FAILURE() << "first failing trial " << trial;
      return;
    }
  }
}

// The busiest worker's reshuffle tokens in + out that cross a node of
// `node_workers` workers.
int64_t BusiestCrossNodeReshuffle(const Plan& plan, int32_t node_workers) {
  const std::vector<int64_t> offsets = SequenceOffsets(plan.sequences);
  std::vector<int64_t> moved(plan.workers, 0);
  for (const Block& b : plan.blocks)
    for (const Segment& s : b.segments)
      ForEachDataloaderRun(s, offsets, plan.workers, [&](int32_t home, int64_t n) {
        if (home / node_workers == b.worker / node_workers) return;
        moved[home] += n;
        moved[b.worker] += n;
      });
  return *std::max_element(moved.begin(), moved.end());
}

// The planner's step cost with the reshuffle charged (fcp_planner.cpp,
// StepCostOf) in FLOPs: the worst worker's larger of forward FLOPs and
// network ratio x forward K/V bytes, plus the ratio x the busiest worker's
// reshuffle tokens in + out that cross a node of 8 workers, at their weight
// in K/V bytes: 4 (Hq + Hkv) / (2 Hkv) / 7 x 0.75 K/V tokens each.
double StepCostOf(const Plan& plan, const PlannerConfig& config) {
  const PlanMetrics m = ComputePlanMetrics(plan);
  const AttentionShape& a = plan.attention;
  const double r = config.network_flops_per_byte;
  double worst = 0;
  for (const WorkerMetrics& w : m.workers)
    worst = std::max({worst, w.forward_flops, r * static_cast<double>(w.traffic_bytes())});
  const double kv_token_bytes = 2.0 * a.heads_kv * a.head_dim * a.dtype_bytes;
  const double weight = 4.0 * (a.heads_q + a.heads_kv) / (2.0 * a.heads_kv) / 7.0 * 0.75;
  return worst + r * weight * kv_token_bytes *
                     static_cast<double>(BusiestCrossNodeReshuffle(plan, config.node_workers));
}

// A random case with 8 query heads on 2 K/V heads (GQA), so that the
// reshuffle's bytes a token (Q, K, V, O) differ from its K/V bytes.
Case RandomGqaCase(std::mt19937_64& rng) {
  Case k = RandomCase(rng);
  k.config.attention = {8, 2, 16, 2};
  return k;
}

// The locality exchanges and the home and shed layouts on random batches:
// the plan keeps every rule; unless it is one of the layouts it moves no
// more tokens in the reshuffle than the plan without them and raises
// neither the largest compute nor the largest traffic; the home layout,
// where kept, has the lower step cost, the shed layout a busiest reshuffle
// across nodes of at most 0.95 of the balanced plan's (before or after
// its exchanges: the plan without them is the first). On some batches
// fewer tokens move.
TEST(PlannerPropertyTest, LocalityExchangesNeverRaiseAMaximum) {
  std::mt19937_64 rng(20261201);
  int fewer = 0, traded = 0, all_short = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Case k = RandomGqaCase(rng);
    Plan local;
    CheckPlanProperties(k, &local);
    if (HasFatalFailure()) return;
    // With the locality off, a batch whose sequences all fit in a block
    // may be packed whole (step 7, whole packing) instead of the balanced
    // plan the exchanges start from: no reference for them then.
    if (std::all_of(k.lengths.begin(), k.lengths.end(),
                    [&](int64_t len) { return len <= k.config.block_size; })) {
      ++all_short;
      continue;
    }
    PlannerConfig off = k.config;
    off.reshuffle_locality = false;
    const PlanMetrics with = ComputePlanMetrics(local);
    const PlanMetrics without = ComputePlanMetrics(MakePlan(k.lengths, off));
    SCOPED_TRACE(k.describe());
    // The balanced plan after the exchanges moves no more tokens and raises
    // no maximum; the home layout, kept only when its step cost with the
    // reshuffle charged is lower than the plan's without the exchanges, may
    // trade compute, traffic or total tokens for that.
    const bool trade = with.max_compute > without.max_compute * (1 + 1e-12) ||
                       with.max_traffic_bytes > without.max_traffic_bytes ||
                       with.reshuffle_tokens > without.reshuffle_tokens;
    if (trade) {
      const Plan plain = MakePlan(k.lengths, off);
      const bool cheaper = StepCostOf(local, k.config) < StepCostOf(plain, k.config) * (1 + 1e-9);
      const bool shed = BusiestCrossNodeReshuffle(local, k.config.node_workers) <
                        BusiestCrossNodeReshuffle(plain, k.config.node_workers);
      EXPECT_TRUE(cheaper || shed);
    }
    fewer += with.reshuffle_tokens < without.reshuffle_tokens;
    traded += trade;
  }
  EXPECT_GT(fewer, 0);
  // The home layout is kept on some (12 of the 39 batches compared when
  // written; 21 of 60 all short).
  EXPECT_GT(traded, 0);
  EXPECT_LT(all_short, 30);
}

// The plan of `k`, checked (CheckPlanProperties), and its plan with the
// boolean setting `option` off; after a fatal failure, empty plans.
std::pair<Plan, Plan> PlanAndPlanWithout(const Case& k, bool PlannerConfig::*option) {
  std::pair<Plan, Plan> plans;
  CheckPlanProperties(k, &plans.first);
  if (::testing::Test::HasFatalFailure()) return plans;
  PlannerConfig off = k.config;
  off.*option = false;
  plans.second = MakePlan(k.lengths, off);
  return plans;
}

// Traffic leveling on random batches (without the locality exchanges, which
// run after it and may lower a maximum on their own): it changes only plans
// within the bound on compute and outside it on traffic, and then raises
// neither the largest traffic nor the largest cost, keeps the compute
// within the bound, and lowers the traffic imbalance; on some batches it
// runs and brings the traffic within the bound.
TEST(PlannerPropertyTest, TrafficLevelingNeverRaisesTheLargestTrafficOrCost) {
  std::mt19937_64 rng(20261130);
  int leveled = 0, within = 0;
  for (int trial = 0; trial < 80; ++trial) {
    Case k = RandomGqaCase(rng);
    k.config.reshuffle_locality = false;
    const auto [plan, plain] = PlanAndPlanWithout(k, &PlannerConfig::traffic_leveling);
    if (HasFatalFailure()) return;
    SCOPED_TRACE(k.describe());
    const PlanMetrics with = ComputePlanMetrics(plan), without = ComputePlanMetrics(plain);
    const double bound = k.config.max_imbalance;
    if (without.compute_imbalance > bound || without.traffic_imbalance <= bound) {
      EXPECT_EQ(plan.blocks, plain.blocks);
      continue;
    }
    leveled += plan.blocks != plain.blocks;
    within += with.traffic_imbalance <= bound;
    EXPECT_LE(with.max_traffic_bytes, without.max_traffic_bytes);
    const double ratio = k.config.network_flops_per_byte;
    EXPECT_LE(WorstCost(with, ratio), WorstCost(without, ratio) * (1 + 1e-12));
    EXPECT_LE(with.compute_imbalance, bound + 1e-12);
    EXPECT_LE(with.traffic_imbalance, without.traffic_imbalance);
  }
  EXPECT_GT(leveled, 0);
  EXPECT_GT(within, 0);
}

// Row ranges (step 12) on random batches, node relays on in some: the plan
// is valid (CheckPlanProperties: the validator checks that every compute
// holds the rows it attends and every sender the rows it sends) and is the
// whole-block plan with some transfers cut: the same blocks, stages and
// computes, a relayed block whole on every hop, and never more bytes on
// any worker. (Traffic leveling off in both: with it, the rows may decide
// whether it runs.) Some plans are cut.
TEST(PlannerPropertyTest, RowRangesOnlyCutTheWholeBlockPlan) {
  std::mt19937_64 rng(20261206);
  int cut_plans = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Case k = RandomGqaCase(rng);
    k.config.traffic_leveling = false;
    k.config.node_relays = rng() % 3 == 0;
    k.config.node_workers = static_cast<int32_t>(1 + rng() % 4);
    const auto [cut, whole] = PlanAndPlanWithout(k, &PlannerConfig::row_ranges);
    if (HasFatalFailure()) return;
    SCOPED_TRACE(k.describe());
    std::vector<uint8_t> relayed(cut.blocks.size(), 0);
    for (const ForwardStage& st : cut.forward)
      for (const Transfer& t : st.send) relayed[t.block] |= t.src != cut.blocks[t.block].worker;
    for (const BackwardStage& st : cut.backward)
      for (const Transfer& t : st.send_dkv) relayed[t.block] |= t.dst != cut.blocks[t.block].worker;
    bool any = false;
    Plan widened = cut;
    const auto widen = [&](std::vector<Transfer>& ts) {
      for (Transfer& t : ts) {
        EXPECT_TRUE(t.all_rows() || !relayed[t.block]) << "block " << t.block << " is relayed";
        any |= !t.all_rows();
        t = {t.block, t.src, t.dst};
      }
    };
    for (ForwardStage& st : widened.forward) widen(st.send);
    for (BackwardStage& st : widened.backward) widen(st.send_kv), widen(st.send_dkv);
    widened.planner_options = whole.planner_options;
    EXPECT_EQ(widened, whole);
    const PlanMetrics with = ComputePlanMetrics(cut), without = ComputePlanMetrics(whole);
    ASSERT_EQ(with.workers.size(), without.workers.size());
    for (size_t w = 0; w < with.workers.size(); ++w)
      EXPECT_LE(with.workers[w].traffic_bytes(), without.workers[w].traffic_bytes());
    cut_plans += any;
  }
  EXPECT_GT(cut_plans, 0);
}

// Spread stages on random batches: every plan rule holds (CheckPlanProperties,
// self_check on), and the plan is the consecutive one with its transfers
// regrouped: the same blocks, stage counts and transfers (rows included),
// each compute one stage after its K/V arrives as before. Some plans differ.
TEST(PlannerPropertyTest, SpreadStagesOnlyRegroupTheTransfers) {
  std::mt19937_64 rng(20261206);
  int regrouped = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Case k = RandomGqaCase(rng);
    k.config.spread_stages = true;
    k.config.node_relays = false;  // relays are chosen from the stages
    k.config.row_ranges = rng() % 2 == 0;
    const auto [spread, consecutive] = PlanAndPlanWithout(k, &PlannerConfig::spread_stages);
    if (HasFatalFailure()) return;
    SCOPED_TRACE(k.describe());
    EXPECT_EQ(spread.blocks, consecutive.blocks);
    ASSERT_EQ(spread.forward.size(), consecutive.forward.size());
    ASSERT_EQ(spread.backward.size(), consecutive.backward.size());
    const auto transfers = [](const Plan& plan) {
      std::vector<std::tuple<int32_t, int32_t, int32_t, int64_t, int64_t>> all;
      for (const ForwardStage& st : plan.forward)
        for (const Transfer& t : st.send)
          all.emplace_back(t.block, t.src, t.dst, t.row_begin, t.row_count);
      std::sort(all.begin(), all.end());
      return all;
    };
    EXPECT_EQ(transfers(spread), transfers(consecutive));
    // Computes follow their K/V: a remote pair one stage after its arrival.
    const auto compute_offsets = [](const Plan& plan) {
      std::map<std::pair<int32_t, int32_t>, size_t> arrival;  // (block, dst) -> stage
      for (size_t s = 0; s < plan.forward.size(); ++s)
        for (const Transfer& t : plan.forward[s].send) arrival[{t.block, t.dst}] = s;
      std::vector<std::tuple<int32_t, int32_t, int64_t>> offsets;
      for (size_t s = 0; s < plan.forward.size(); ++s)
        for (const BlockPair& bp : plan.forward[s].compute) {
          const int32_t w = plan.blocks[bp.q_block].worker;
          const auto it = arrival.find({bp.kv_block, w});
          offsets.emplace_back(bp.q_block, bp.kv_block,
                               it == arrival.end() ? -1 : static_cast<int64_t>(s - it->second));
        }
      std::sort(offsets.begin(), offsets.end());
      return offsets;
    };
    EXPECT_EQ(compute_offsets(spread), compute_offsets(consecutive));
    regrouped += spread.forward != consecutive.forward;
  }
  EXPECT_GT(regrouped, 0);
}

// Piece sizing (plans outside the imbalance bound) on random batches of one
// long sequence among short ones, where equal pieces are often too coarse:
// every plan rule holds with self_check on, and sizing does happen (pieces
// of the long sequence that are not a whole quarter or half block).
TEST(PlannerPropertyTest, SizedPiecesKeepEveryPlanRule) {
  std::mt19937_64 rng(20261130);
  int sized = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Case k;
    PlannerConfig& c = k.config;
    c.workers = static_cast<int32_t>(4 + rng() % 29);
    // Odd block sizes too: equal pieces of a pair then differ by a token.
    c.block_size = std::vector<int64_t>{1024, 2048, 2049, 3000, 4096}[rng() % 5];
    c.coalesce = 4;
    c.mask = {rng() % 3 == 0 ? MaskKind::kFull : MaskKind::kCausal, 0};
    c.self_check = true;
    const int64_t total = c.workers * 8 * c.block_size;
    const int64_t longest =
        total / 4 + static_cast<int64_t>(rng() % static_cast<uint64_t>(total / 4));
    k.lengths.push_back(longest);
    for (int64_t left = total - longest; left > 0;) {
      const int64_t len = std::min<int64_t>(left, 1 + static_cast<int64_t>(rng() % c.block_size));
      k.lengths.push_back(len);
      left -= len;
    }
    std::shuffle(k.lengths.begin(), k.lengths.end(), rng);
    Plan plan;
    CheckPlanProperties(k, &plan);
    if (HasFatalFailure() || HasNonfatalFailure()) {
      ADD_FAILURE() << "first failing trial " << trial;
      return;
    }
    // Equal pieces of a block that 256 divides are whole quarters or halves.
    if (c.block_size % 256 != 0) continue;
    const int32_t seq = static_cast<int32_t>(std::max_element(k.lengths.begin(), k.lengths.end()) -
                                             k.lengths.begin());
    bool unequal = false;
    for (const Block& block : plan.blocks)
      for (const Segment& s : block.segments)
        unequal |= s.seq == seq && s.start + s.length < longest - longest % c.block_size &&
                   s.length % (c.block_size / 4) != 0;
    sized += unequal;
  }
  EXPECT_GT(sized, 0);
}

// The local search and the locality exchanges evaluate exchanges without
// applying them and keep the loads incrementally; with self_check the
// planner recounts them from each search's result and throws if they differ.
TEST(PlannerPropertyTest, LocalSearchLoadsMatchARecount) {
  std::mt19937_64 rng(20261130);
  for (int trial = 0; trial < 40; ++trial) {
    Case k = RandomCase(rng);
    k.config.self_check = true;
    k.config.local_search_rounds = 1 + trial % 6;
    SCOPED_TRACE(k.describe());
    EXPECT_NO_THROW(MakePlan(k.lengths, k.config));
  }
  // The paper's setup at 64 workers: hundreds of kept exchanges.
  PlannerConfig c;
  c.workers = 64;
  c.self_check = true;
  c.local_search_rounds = 4;
  EXPECT_NO_THROW(MakePlan(PaperBatch(64, 3), c));
}

// The planner skips assigning the coarse candidate (heavy blocks in two
// pieces) when a lower bound on its compute imbalance breaks the bound and
// the first plan is within it, or outside it but more balanced than the
// bound. With self_check it assigns it anyway and throws if it would have
// won; the plan must be the same either way. Seed 0 at N = 128: the first
// plan is within 5%, a two-piece item outweighs the mean by 10%. Seed 2 at
// N = 256: the first plan is at 7.5%, the coarse bound 41%.
TEST(PlannerPropertyTest, PrunedCoarseCandidateCouldNotHaveWon) {
  for (const auto& [workers, seed] : {std::pair{128, 0}, std::pair{256, 2}}) {
    SCOPED_TRACE("N = " + std::to_string(workers) + ", seed " + std::to_string(seed));
    const std::vector<int64_t> lengths = PaperBatch(workers, seed);
    PlannerConfig c;
    c.workers = workers;
    const std::string plan = WritePlanJson(MakePlan(lengths, c));
    c.self_check = true;
    std::string checked;
    EXPECT_NO_THROW(checked = WritePlanJson(MakePlan(lengths, c)));
    EXPECT_EQ(checked, plan);
  }
}

// Block sizes at the edges: 1 (every token its own block) and larger than
// every sequence; coalesce larger than any degree.
TEST(PlannerPropertyTest, ExtremeBlockSizesAndCoalesce) {
  const std::vector<int64_t> lengths = {1, 17, 1, 40, 3, 1, 60, 2};  // T = 125
  for (int32_t workers : {1, 2, 5, 64})
    for (int64_t block : {1, 2, 5, 125, 1000})
      for (int32_t coalesce : {1, 32, INT32_MAX})  // INT32_MAX once overflowed a ceil-division
        for (const Mask& mask : {Mask{MaskKind::kCausal, 0}, Mask{MaskKind::kFull, 0},
                                 Mask{MaskKind::kSlidingWindow, 4}}) {
          if (workers > Total(lengths)) continue;
          PlannerConfig c = Config(workers, block, coalesce, mask);
          CheckPlanProperties({lengths, c});
          if (HasFailure()) return;
        }
}

// ---- quality on the paper's setup ------------------------------------------

// Lognormal batches, 32K tokens per worker up to 512K, block 4096, coalesce
// 16, causal, Llama-3-70B attention: compute and traffic imbalance < 5%
// (the paper's claim, section 5).
class PlannerQualityTest : public ::testing::TestWithParam<std::tuple<int32_t, uint64_t>> {
 protected:
  std::vector<int64_t> Batch() const {
    return PaperBatch(std::get<0>(GetParam()), std::get<1>(GetParam()));
  }
  PlannerConfig PaperConfig() const {
    PlannerConfig c = Config(std::get<0>(GetParam()), 4096, 16);
    c.attention = {64, 8, 128, 2};
    return c;
  }
};

// The paper's balance (Figure 9) for the network-aware plan without the
// reshuffle charged (within max_imbalance = 5%; with it charged the shed
// layout may trade balance for fewer tokens moved, PlannerLocalityTest) and
// for balance mode (no network ratio).
TEST_P(PlannerQualityTest, ImbalanceBelowFivePercentWithoutReshuffleAndInBalanceMode) {
  const std::vector<int64_t> lengths = Batch();
  for (const double ratio : {PlannerConfig{}.network_flops_per_byte, 0.0}) {
    SCOPED_TRACE("network_flops_per_byte " + std::to_string(ratio));
    PlannerConfig c = PaperConfig();
    c.network_flops_per_byte = ratio;
    c.reshuffle_locality = false;
    const Plan plan = MakePlan(lengths, c);
    ValidatePlan(plan, {.forbid_redundant_transfers = true});
    const PlanMetrics m = ComputePlanMetrics(plan);
    EXPECT_LT(m.compute_imbalance, 0.05);
    EXPECT_LT(m.traffic_imbalance, 0.05);
    EXPECT_EQ(m.max_tokens, 32768);  // b divides T/N: exact memory balance
    EXPECT_EQ(m.forward_transfer_stages, m.transfer_stage_lower_bound);
  }
}

// The network-aware plan without the reshuffle charged minimises the worst
// worker's FLOPs + busiest port's bytes x ratio over the candidates within 5% imbalance, which
// include the balance-mode plan when that one is within 5% (as on these batches): never worse
// by that measure.
TEST_P(PlannerQualityTest, NetworkAwarePlanNeverCostsMoreThanTheBalancedOne) {
  const std::vector<int64_t> lengths = Batch();
  PlannerConfig aware = PaperConfig();
  aware.reshuffle_locality = false;  // the shed layout is judged by its ports instead
  ASSERT_GT(aware.network_flops_per_byte, 0);
  PlannerConfig balanced = aware;
  balanced.network_flops_per_byte = 0;
  const auto worst = [&](const Plan& plan) {
    ValidatePlan(plan, {.forbid_redundant_transfers = true});
    const PlanMetrics m = ComputePlanMetrics(plan);
    EXPECT_EQ(m.max_tokens, 32768);
    return WorstPortCost(m, aware.network_flops_per_byte);
  };
  EXPECT_LE(worst(MakePlan(lengths, aware)), worst(MakePlan(lengths, balanced)) * (1 + 1e-9));
}

// A 143K-token sequence among short ones at N = 16 (bimodal, seed 0): its
// 17 pairs in four equal pieces put 5 sub-items on 4 workers and 4 on the
// rest, 9% compute imbalance that no exchange removes. Sized pieces level
// them: under 2% compute and 5% traffic imbalance, with pieces of other
// sizes than a quarter block.
TEST(PlannerBalanceTest, SizedPiecesLevelALongSequenceAmongShortOnes) {
  WorkloadConfig w;
  w.workers = 16;
  w.dist = LengthDistribution::kBimodal;
  const std::vector<int64_t> lengths = GenerateWorkload(w);
  PlannerConfig c = Config(16, 4096, 16);
  c.attention = {64, 8, 128, 2};
  const Plan plan = MakePlan(lengths, c);
  ValidatePlan(plan, {.forbid_redundant_transfers = true});
  const PlanMetrics m = ComputePlanMetrics(plan);
  EXPECT_LT(m.compute_imbalance, 0.02);
  EXPECT_LT(m.traffic_imbalance, 0.05);
  const auto longest = std::max_element(lengths.begin(), lengths.end()) - lengths.begin();
  std::set<int64_t> piece_tokens;
  for (const Block& block : plan.blocks)
    for (const Segment& s : block.segments)
      if (s.seq == longest && s.length < 4096) piece_tokens.insert(s.length);
  EXPECT_GT(piece_tokens.size(), 1u);
}

// The paper's batch at N = 32, seed 5: the default candidates (heavy items
// in up to 4 and in 2 pieces, then piece sizing) stay at 11% imbalance;
// the rescue (heavy items in up to 3 pieces) brings the plan within 5%.
// In time mode there is no bound to reach, so no rescue.
TEST(PlannerBalanceTest, RescueBringsAPlanOutsideTheBoundWithinIt) {
  const std::vector<int64_t> lengths = PaperBatch(32, 5);
  PlannerConfig c = Config(32, 4096, 16);
  c.attention = {64, 8, 128, 2};
  PlannerConfig off = c;
  off.rescue_max_split = 0;
  const auto [rescued, with, without] = EffectOf(lengths, c, off);
  EXPECT_GT(without.compute_imbalance, 0.05);
  EXPECT_LT(with.compute_imbalance, 0.05);
  EXPECT_LT(with.traffic_imbalance, 0.05);
  EXPECT_EQ(PlannerConfigOf(rescued).rescue_max_split, 8);
  c.self_check = true;
  EXPECT_EQ(WritePlanJson(MakePlan(lengths, c)), WritePlanJson(rescued));

  c.self_check = false;
  c.max_imbalance = off.max_imbalance = 1;
  const Plan timed = MakePlan(lengths, c);
  Plan timed_off = MakePlan(lengths, off);
  EXPECT_GT(ComputePlanMetrics(timed).compute_imbalance, 0.05);
  timed_off.planner_options = timed.planner_options;  // they differ only in the knob
  EXPECT_EQ(WritePlanJson(timed_off), WritePlanJson(timed));
}

// All short sequences (uniform in 1..4K) at N = 16: the default plan's cost
// is balanced, but two workers with little traffic leave its traffic
// imbalance at 8%. Traffic leveling brings it within 5% at a lower largest
// traffic and cost (the compute cap widened to a quarter of the bound), the
// same plan under the self-check; off, the plan is the one before.
TEST(PlannerBalanceTest, TrafficLevelingBringsAllShortTrafficWithinTheBound) {
  WorkloadConfig w;
  w.workers = 16;
  w.dist = LengthDistribution::kUniform;
  w.max_len = 4096;
  const std::vector<int64_t> lengths = GenerateWorkload(w);
  PlannerConfig c = Config(16, 4096, 16);
  c.attention = {64, 8, 128, 2};
  // The balanced plan (with the reshuffle charged, this batch stays home).
  c.reshuffle_locality = false;
  PlannerConfig off = c;
  off.traffic_leveling = false;
  const auto [leveled, with, without] = EffectOf(lengths, c, off);
  EXPECT_GT(without.traffic_imbalance, 0.08);
  EXPECT_LT(without.compute_imbalance, 0.005);
  EXPECT_LT(with.traffic_imbalance, 0.05);
  EXPECT_LT(with.compute_imbalance, 0.0125);
  EXPECT_LT(with.max_traffic_bytes, without.max_traffic_bytes);
  const double ratio = c.network_flops_per_byte;
  EXPECT_LT(WorstCost(with, ratio), WorstCost(without, ratio));
  EXPECT_TRUE(PlannerConfigOf(leveled).traffic_leveling);
  EXPECT_FALSE(PlannerConfigOf(MakePlan(lengths, off)).traffic_leveling);
  c.self_check = true;
  EXPECT_EQ(WritePlanJson(MakePlan(lengths, c)), WritePlanJson(leveled));
}

// The locality exchanges (reshuffle_locality) on the paper's batch at N =
// 64 (seed 8, which keeps the balanced plan; seeds 0-4, 6 and 7 take the shed
// layout, below): fewer tokens leave their dataloader worker, and no
// worker's compute or traffic exceeds the largest of the plan without them;
// the plan is still within 5% imbalance, valid and deterministic, and
// records the option.
TEST(PlannerLocalityTest, FewerTokensReshuffledWithoutRaisingAnyMaximum) {
  const std::vector<int64_t> lengths = PaperBatch(64, 8);
  PlannerConfig c = Config(64, 4096, 16);
  c.attention = {64, 8, 128, 2};
  // The exchanges' promise is on the assignment; node relays (step 11) then
  // move traffic onto relays in either plan, by different amounts.
  c.node_relays = false;
  PlannerConfig off = c;
  off.reshuffle_locality = false;
  const Plan local = MakePlan(lengths, c), plain = MakePlan(lengths, off);
  ValidatePlan(local, {.forbid_redundant_transfers = true});
  EXPECT_EQ(WritePlanJson(local), WritePlanJson(MakePlan(lengths, c)));
  EXPECT_TRUE(PlannerConfigOf(local).reshuffle_locality);
  EXPECT_FALSE(PlannerConfigOf(plain).reshuffle_locality);
  const PlanMetrics with = ComputePlanMetrics(local), without = ComputePlanMetrics(plain);
  // 84% -> 67% of the tokens when this test was written.
  EXPECT_LT(static_cast<double>(with.reshuffle_tokens),
            0.9 * static_cast<double>(without.reshuffle_tokens));
  EXPECT_LE(with.max_compute, without.max_compute * (1 + 1e-12));
  EXPECT_LE(with.max_traffic_bytes, without.max_traffic_bytes);
  EXPECT_LT(with.compute_imbalance, 0.05);
  EXPECT_LT(with.traffic_imbalance, 0.05);
}

// A batch whose dataloader layout is balanced stays home (the home
// candidate): eight 2-token sequences on 2 workers, 4-token blocks, cap 8.
// Every block is owned by the dataloader worker of its tokens, nothing is
// reshuffled and nothing moves; without the reshuffle charged
// (reshuffle_locality false) the balanced plan moves half the tokens.
TEST(PlannerLocalityTest, BalancedHomeLayoutStaysHome) {
  const std::vector<int64_t> lengths(8, 2);
  PlannerConfig c = Config(2, 4, 1);
  c.self_check = true;
  const Plan plan = MakePlan(lengths, c);
  ValidatePlan(plan, {.forbid_redundant_transfers = true});
  const std::vector<int64_t> offsets = SequenceOffsets(lengths);
  ASSERT_EQ(plan.blocks.size(), 4u);
  for (const Block& b : plan.blocks) {
    const Segment& s = b.segments.front();
    EXPECT_EQ(b.worker, DataloaderWorker(16, 2, offsets[s.seq] + s.start));
  }
  const PlanMetrics m = ComputePlanMetrics(plan);
  EXPECT_EQ(m.reshuffle_tokens, 0);
  EXPECT_EQ(m.transfer_edges, 0);
  EXPECT_EQ(WritePlanJson(MakePlan(lengths, c)), WritePlanJson(plan));
  PlannerConfig off = c;
  off.reshuffle_locality = false;
  EXPECT_GT(ComputePlanMetrics(MakePlan(lengths, off)).reshuffle_tokens, 0);  // 8 when written
}

// The shed layout (issue 17) on the paper's batches where it is kept (N =
// 16 and 64, seeds 0 and 2; simulated 5-15% faster with the reshuffle
// overlapped, the measurement log (docs/planner.md)): every worker's compute within 7%
// of the mean (Shed aims at 2%; at N = 64 seed 0 it stops at 6.4%, where
// no exchange of whole items lowers the larger compute), fewer tokens reshuffled than the balanced
// plan (reshuffle_locality false) and a lower busiest reshuffle across nodes; every plan rule
// holds, the cap is exact, and the plan is deterministic.
TEST(PlannerLocalityTest, ShedLayoutMovesFewerTokensAtBalancedCompute) {
  for (const int32_t n : {16, 64})
    for (const uint64_t seed : {0u, 2u}) {
      SCOPED_TRACE("N " + std::to_string(n) + " seed " + std::to_string(seed));
      const std::vector<int64_t> lengths = PaperBatch(n, seed);
      PlannerConfig c = Config(n, 4096, 16);
      c.attention = {64, 8, 128, 2};
      PlannerConfig off = c;
      off.reshuffle_locality = false;
      const Plan shed = MakePlan(lengths, c), balanced = MakePlan(lengths, off);
      ValidatePlan(shed, {.forbid_redundant_transfers = true});
      EXPECT_EQ(WritePlanJson(MakePlan(lengths, c)), WritePlanJson(shed));
      const PlanMetrics m = ComputePlanMetrics(shed), b = ComputePlanMetrics(balanced);
      EXPECT_EQ(m.max_tokens, 32768);
      EXPECT_EQ(m.forward_transfer_stages, m.transfer_stage_lower_bound);
      EXPECT_LT(m.max_compute, 1.07 * m.total_forward_flops / n);
      // 50-71% of the tokens against 67-82% when written.
      EXPECT_LT(static_cast<double>(m.reshuffle_tokens),
                0.95 * static_cast<double>(b.reshuffle_tokens));
      EXPECT_LT(BusiestCrossNodeReshuffle(shed, c.node_workers),
                BusiestCrossNodeReshuffle(balanced, c.node_workers));
    }
}

// The planner runs parts of its work on a second thread (the local shed
// layout, the placed plan's measures) and may itself be called from several
// threads (fcp plan --tune does): plans made four at a time, each with its
// own threads, are byte for byte the plan made alone. The batches take both
// threaded paths (shed layouts with the reshuffle at N = 64, short sequences
// re-dealt) and neither (no reshuffle).
TEST(PlannerLocalityTest, ConcurrentCallsGiveTheSamePlan) {
  const std::vector<int64_t> lengths = PaperBatch(64, 1);
  PlannerConfig c = Config(64, 4096, 16);
  c.attention = {64, 8, 128, 2};
  PlannerConfig off = c;
  off.reshuffle_locality = false;
  for (const PlannerConfig& config : {c, off}) {
    const std::string alone = WritePlanJson(MakePlan(lengths, config));
    std::vector<std::future<std::string>> together;
    for (int k = 0; k < 4; ++k)
      together.push_back(std::async(std::launch::async, [&lengths, &config] {
        return WritePlanJson(MakePlan(lengths, config));
      }));
    for (std::future<std::string>& plan : together) EXPECT_EQ(plan.get(), alone);
  }
}

// All short sequences, uniform 64..2048, seed 0 (step_bench's allshort).
std::vector<int64_t> AllShortBatch(int32_t workers) {
  WorkloadConfig w;
  w.workers = workers;
  w.dist = LengthDistribution::kUniform;
  w.min_len = 64;
  w.max_len = 2048;
  return GenerateWorkload(w);
}

// All short sequences (uniform 64..2048, the issue-17 batch) at N = 16 and
// 64, with the reshuffle charged: the home packing (home_packing.h) keeps
// at most 5% of the tokens, and twice the reshuffle floor, away from their
// dataloader worker, where the
// plan for no reshuffle (whole packing) moves most of them, and balances compute within 4% (1.8%
// and 3.2% when written; the dataloader layout is 16-17% unbalanced).
// Every plan rule holds, the cap is exact, the plan is deterministic.
TEST(PlannerLocalityTest, AllShortBatchesStayNearlyHome) {
  for (const int32_t n : {16, 64}) {
    const std::vector<int64_t> lengths = AllShortBatch(n);
    PlannerConfig c = Config(n, 4096, 16);
    c.attention = {64, 8, 128, 2};
    PlannerConfig off = c;
    off.reshuffle_locality = false;
    const Plan plan = MakePlan(lengths, c);
    ValidatePlan(plan, {.forbid_redundant_transfers = true});
    EXPECT_EQ(WritePlanJson(MakePlan(lengths, c)), WritePlanJson(plan));
    const PlanMetrics home = ComputePlanMetrics(plan);
    const PlanMetrics balanced = ComputePlanMetrics(MakePlan(lengths, off));
    SCOPED_TRACE(n);
    EXPECT_LE(static_cast<double>(home.reshuffle_tokens), 0.05 * home.total_tokens);
    EXPECT_LE(home.reshuffle_tokens, 2 * home.reshuffle_floor.tokens);
    EXPECT_GT(home.reshuffle_tokens, 0);
    EXPECT_LT(home.compute_imbalance, 0.04);
    EXPECT_EQ(home.max_tokens, 32768);
    EXPECT_GT(static_cast<double>(balanced.reshuffle_tokens), 0.5 * home.total_tokens);
  }
}

// All short sequences (uniform 64..2048, seed 0: step_bench's allshort) at
// N = 16 and 64 with no reshuffle charged (the dataloader adopts each plan,
// as `fcp compare --reshuffle none` plans them): FCP deals the sequences
// whole (PackWhole) and its simulated step is no slower than
// ByteScale-like's, which also keeps sequences whole but not the cap, on
// gpu-x and gpu-y (7.882 / 4.931 against 7.884 / 4.933 ms at N = 16,
// 7.864 / 4.927 against 7.867 / 4.929 at N = 64 when written; the slot
// packing it replaces: 8.1-8.2 / 5.0-5.1). No sequence is cut on these
// batches, so one stage; the cap is exact; the plan is deterministic.
TEST(PlannerLocalityTest, AllShortBatchesWithoutReshuffleAreWholeAndNoSlowerThanByteScale) {
  for (const int32_t n : {16, 64}) {
    SCOPED_TRACE(n);
    const std::vector<int64_t> lengths = AllShortBatch(n);
    PlannerConfig c;
    c.workers = n;
    c.reshuffle_locality = false;
    const Plan plan = MakePlan(lengths, c);
    ValidatePlan(plan, {.forbid_redundant_transfers = true});
    EXPECT_EQ(WritePlanJson(MakePlan(lengths, c)), WritePlanJson(plan));
    std::vector<int32_t> segments(lengths.size(), 0);
    for (const Block& b : plan.blocks)
      for (const Segment& s : b.segments) ++segments[s.seq];
    EXPECT_EQ(std::count(segments.begin(), segments.end(), 1),
              static_cast<std::ptrdiff_t>(lengths.size()));
    EXPECT_EQ(plan.forward.size(), 1u);
    EXPECT_EQ(ComputePlanMetrics(plan).max_tokens, 32768);
    PlannerConfig b = c;
    b.planner = "bytescale";
    const Plan bytescale = MakePlan(lengths, b);
    SimConfig none;
    none.reshuffle = ReshuffleMode::kNone;
    for (const char* profile : {"gpu-x", "gpu-y"}) {
      const HardwareProfile hw = BuiltinProfile(profile);
      EXPECT_LE(Simulate(plan, hw, none).total_time_s, Simulate(bytescale, hw, none).total_time_s)
          << profile;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paper, PlannerQualityTest,
                         ::testing::Combine(::testing::Values(16, 64), ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           return "N" + std::to_string(std::get<0>(info.param)) + "_seed" +
                                  std::to_string(std::get<1>(info.param));
                         });

// ---- config errors -----------------------------------------------------------

std::string PlanError(const std::vector<int64_t>& lengths, const PlannerConfig& c,
                      ErrorCode code = ErrorCode::kInvalidArgument) {
  return testing::ExpectedErrorMessage(code, [&] { MakePlan(lengths, c); });
}

TEST(PlannerTest, ConfigErrorsNameTheField) {
  EXPECT_THAT(PlanError({8}, Config(0, 4, 1)), HasSubstr("workers must be >= 1, got 0"));
  EXPECT_THAT(PlanError({8}, Config(-3, 4, 1)), HasSubstr("workers must be >= 1, got -3"));
  EXPECT_THAT(PlanError({8}, Config(2, 0, 1)), HasSubstr("block_size must be >= 1, got 0"));
  EXPECT_THAT(PlanError({8}, Config(2, 4, 0)), HasSubstr("coalesce must be >= 1, got 0"));
  EXPECT_THAT(PlanError({}, Config(2, 4, 1)), HasSubstr("the batch has no sequences"));
  EXPECT_THAT(PlanError({8, 0}, Config(2, 4, 1)), HasSubstr("sequence 1 has length 0"));
  // 2 x (2^31)^2 = 2^63 token pairs: the work sums would pass int64.
  const int64_t longest = int64_t{1} << 31;
  EXPECT_THAT(PlanError({longest, longest}, Config(2, 4, 1)),
              HasSubstr("more than 2^62 token pairs (sum of length^2, at sequence 1)"));
  EXPECT_THAT(PlanError({8}, Config(2, 4, 1, {MaskKind::kSlidingWindow, 0})),
              HasSubstr("sliding_window needs window >= 1"));
  EXPECT_THAT(PlanError({8}, Config(2, 4, 1, {MaskKind::kCausal, 5})),
              HasSubstr("window is only meaningful for sliding_window"));
  PlannerConfig c = Config(3, 4, 1);
  c.token_cap = 3;  // ceil(10 / 3) = 4
  EXPECT_THAT(PlanError({10}, c, ErrorCode::kInfeasible),
              HasSubstr("token_cap 3 is below ceil(T/N) = 4"));
  c.token_cap = -1;
  EXPECT_THAT(PlanError({10}, c), HasSubstr("token_cap must be >= 0"));
  c = Config(2, 4, 1);
  c.planner = "nope";
  EXPECT_THAT(PlanError({8}, c), HasSubstr("unknown planner 'nope'"));
  c = Config(2, 4, 1);
  c.attention.heads_kv = 0;
  EXPECT_THAT(PlanError({8}, c), HasSubstr("heads_kv must be > 0"));
  c = Config(2, 4, 1);
  c.max_imbalance = -0.5;
  EXPECT_THAT(PlanError({8}, c), HasSubstr("max_imbalance must be >= 0"));
  c = Config(2, 4, 1);
  c.rescue_max_split = -1;
  EXPECT_THAT(PlanError({8}, c), HasSubstr("rescue_max_split must be >= 0"));
  c = Config(2, 4, 1);
  c.network_flops_per_byte = std::numeric_limits<double>::infinity();
  EXPECT_THAT(PlanError({8}, c), HasSubstr("network_flops_per_byte must be >= 0"));
  // More workers than tokens cannot give every worker a token, but is still
  // feasible: some workers own nothing.
  EXPECT_NO_THROW(ValidatePlan(MakePlan({3}, Config(5, 1, 1))));
}

}  // namespace
}  // namespace fcp
