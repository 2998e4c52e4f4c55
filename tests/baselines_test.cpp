#include "fcp/baselines.h"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "fcp/error.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/planner_registry.h"
#include "fcp/required_pairs.h"
#include "fcp/workload.h"

namespace fcp {
namespace {

PlannerConfig Config(const std::string& planner, int32_t n, MaskKind kind) {
  PlannerConfig pc;
  pc.planner = planner;
  pc.workers = n;
  pc.block_size = 256;
  pc.coalesce = 4;
  pc.mask.kind = kind;
  pc.mask.window = kind == MaskKind::kSlidingWindow ? 300 : 0;
  return pc;
}

std::vector<int64_t> Workload(LengthDistribution dist, int32_t n, uint64_t seed) {
  WorkloadConfig wc;
  wc.dist = dist;
  wc.workers = n;
  wc.tokens_per_worker = 512;
  wc.max_len = 4096;
  wc.min_len = 1;
  wc.seed = seed;
  return GenerateWorkload(wc);
}

int64_t MaxTokens(const Plan& plan) {
  std::vector<int64_t> tokens(plan.workers, 0);
  for (const Block& b : plan.blocks) tokens[b.worker] += b.tokens();
  return *std::max_element(tokens.begin(), tokens.end());
}

// Every baseline and ablation is a valid plan on many random batches, all
// masks, N from 1 to 64; its token_cap is what it actually gives a worker.
TEST(BaselinesTest, EveryPlannerIsValidEverywhere) {
  const std::vector<std::string> planners = {
      "ring", "bytescale", "magi", "wlb", "fcp-nopipe", "fcp-random-order", "fcp-nocoalesce"};
  uint64_t seed = 1;
  for (int32_t n : {1, 2, 3, 5, 8, 13, 32, 64})
    for (LengthDistribution dist : {LengthDistribution::kLognormal, LengthDistribution::kUniform,
                                    LengthDistribution::kBimodal})
      for (MaskKind kind : {MaskKind::kCausal, MaskKind::kFull, MaskKind::kSlidingWindow}) {
        const std::vector<int64_t> lengths = Workload(dist, n, seed++);
        for (const std::string& name : planners) {
          if (n == 64 && name != "ring" && name != "magi" && name != "bytescale") continue;
          SCOPED_TRACE(name + " N=" + std::to_string(n) + " " + LengthDistributionName(dist) + " " +
                       MaskKindName(kind));
          const Plan plan = MakePlan(lengths, Config(name, n, kind));
          EXPECT_EQ(plan.planner, name);
          EXPECT_NO_THROW(ValidatePlan(plan));
          EXPECT_EQ(plan.token_cap, MaxTokens(plan));
        }
      }
}

// Ring: worker i holds exactly chunks i and 2N-1-i of every sequence, passes
// K/V to i+1, one send per stage, N-1 steps, coalesce 1.
TEST(BaselinesTest, RingStructure) {
  const int32_t n = 6;
  const std::vector<int64_t> lengths = {1200, 37, 5000, 12, 600};
  const Plan plan = MakeRingPlan(lengths, Config("ring", n, MaskKind::kCausal));
  ASSERT_NO_THROW(ValidatePlan(plan, {/*forbid_redundant_transfers=*/false}));
  ASSERT_EQ(plan.blocks.size(), static_cast<size_t>(n));
  for (int32_t w = 0; w < n; ++w) {
    EXPECT_EQ(plan.blocks[w].worker, w);
    for (const Segment& s : plan.blocks[w].segments) {
      const int64_t len = lengths[s.seq];
      const bool low = s.start == ZigZagChunkBegin(len, 2 * n, w) &&
                       s.length == ZigZagChunkBegin(len, 2 * n, w + 1) - s.start;
      const bool high = s.start == ZigZagChunkBegin(len, 2 * n, 2 * n - 1 - w) &&
                        s.length == ZigZagChunkBegin(len, 2 * n, 2 * n - w) - s.start;
      EXPECT_TRUE(low || high) << "worker " << w << " seq " << s.seq << " start " << s.start;
    }
  }
  EXPECT_EQ(plan.coalesce, 1);
  EXPECT_EQ(plan.forward.size(), static_cast<size_t>(n));       // N compute steps
  EXPECT_EQ(plan.backward.size(), static_cast<size_t>(n + 1));  // + the last dK/dV hop home
  for (const ForwardStage& s : plan.forward)
    for (const Transfer& t : s.send) EXPECT_EQ(t.dst, (t.src + 1) % n);
  for (const BackwardStage& s : plan.backward)
    for (const Transfer& t : s.send_dkv) EXPECT_EQ(t.dst, (t.src + 1) % n);
  // A causal batch with a long sequence needs every pair: N (N - 1) relayed sends.
  size_t sends = 0;
  for (const ForwardStage& s : plan.forward) sends += s.send.size();
  EXPECT_EQ(sends, static_cast<size_t>(n * (n - 1)));
  // Zig-zag balance: lengths divisible by 2N give every worker exactly T/N.
  const Plan even = MakeRingPlan({1200, 600, 48}, Config("ring", n, MaskKind::kCausal));
  EXPECT_EQ(even.token_cap, (1200 + 600 + 48) / n);
  const PlanMetrics m = ComputePlanMetrics(even);
  EXPECT_LT(m.compute_imbalance, 0.01);
}

// A sliding window needs only nearby chunks: the ring stops relaying a block
// once no later worker needs it.
TEST(BaselinesTest, RingSendsOnlyWhatIsStillNeeded) {
  PlannerConfig pc = Config("ring", 8, MaskKind::kSlidingWindow);
  pc.mask.window = 10;
  const Plan plan = MakeRingPlan({1600}, pc);
  ASSERT_NO_THROW(ValidatePlan(plan));
  size_t sends = 0;
  for (const ForwardStage& s : plan.forward) sends += s.send.size();
  EXPECT_LT(sends, static_cast<size_t>(8 * 7));
}

// Magi: chunks of ceil(T / 8N) tokens, the same number per rank (+-1), and
// compute balanced by LPT; transfers all in the first stage.
TEST(BaselinesTest, MagiChunksAndLpt) {
  const int32_t n = 8;
  const std::vector<int64_t> lengths = Workload(LengthDistribution::kLognormal, n, 99);
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const Plan plan = MakeMagiPlan(lengths, Config("magi", n, MaskKind::kCausal));
  ASSERT_NO_THROW(ValidatePlan(plan));
  const int64_t chunk = (total + 8 * n - 1) / (8 * n);
  EXPECT_EQ(plan.block_size, chunk);
  std::vector<int32_t> chunks(n, 0);
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    ++chunks[plan.blocks[b].worker];
    if (b + 1 < plan.blocks.size()) {
      EXPECT_EQ(plan.blocks[b].tokens(), chunk);
    }
  }
  const auto [lo, hi] = std::minmax_element(chunks.begin(), chunks.end());
  EXPECT_LE(*hi - *lo, 1);
  EXPECT_LE(plan.forward.size(), 2u);
  for (size_t t = 1; t < plan.forward.size(); ++t) EXPECT_TRUE(plan.forward[t].send.empty());
  // LPT bound: the most loaded rank is within the largest chunk of the mean.
  const PlanMetrics m = ComputePlanMetrics(plan);
  EXPECT_LE(m.max_compute, m.total_forward_flops / n + m.compute_lower_bound);
}

// Magi's traffic as MagiAttention moves it: each rank receives exactly the
// key rows its chunks attend. N = 2, causal, sequences {2, 4, 58}: T = 64,
// chunks of ceil(64 / 16) = 4 tokens, 8 a rank:
//   c0 = s0[0,2) s1[0,2)   c1 = s1[2,4) s2[0,2)   c_k = s2[4k-6, 4k-2), k = 2..15
// Areas (causal pairs): c0 6, c1 10, c_k 16k - 14. LPT (largest first, least
// loaded rank, ties to the lower rank, at most 8 chunks a rank) gives
//   r0: c15 c12 c11 c8 c7 c4 c3 c0   r1: c14 c13 c10 c9 c6 c5 c2 c1.
// r0's last query (s2 token 57) attends s2[0,58): it receives c1's s2 rows
// [2,4) and r1's six whole s2 chunks plus c2: 2 + 7 x 4 = 30 tokens (32 as
// whole chunks). r1's s1 queries attend s1[0,2), c0's rows [2,4); its last
// s2 query (token 53) attends s2[0,54), r0's c3 c4 c7 c8 c11 c12 but not
// c15: 2 + 6 x 4 = 26 tokens (28 as whole chunks). dK/dV go back over the
// same rows.
TEST(BaselinesTest, MagiReceivesExactlyTheKeyRowsItsChunksAttend) {
  const Plan plan = MakeMagiPlan({2, 4, 58}, Config("magi", 2, MaskKind::kCausal));
  ASSERT_NO_THROW(ValidatePlan(plan));
  ASSERT_EQ(plan.blocks.size(), 16u);
  const std::vector<int32_t> r0 = {0, 3, 4, 7, 8, 11, 12, 15};
  for (int32_t c = 0; c < 16; ++c)
    EXPECT_EQ(plan.blocks[c].worker, std::count(r0.begin(), r0.end(), c) ? 0 : 1) << "chunk " << c;
  ASSERT_EQ(plan.forward.size(), 2u);
  for (const Transfer& t : plan.forward[0].send) {
    SCOPED_TRACE("chunk " + std::to_string(t.block) + " to " + std::to_string(t.dst));
    if (t.block == 0 || t.block == 1) {
      EXPECT_EQ(t.row_begin, 2);
      EXPECT_EQ(t.row_count, 2);
    } else {
      EXPECT_TRUE(t.all_rows());
    }
    EXPECT_NE(t.block, 15);  // attended by no query of r1
  }
  const PlanMetrics m = ComputePlanMetrics(plan);
  const int64_t kv_bytes_per_token = KvTransferBytes(plan.attention, 1);
  EXPECT_EQ(m.workers[0].bytes_received, 30 * kv_bytes_per_token);
  EXPECT_EQ(m.workers[1].bytes_received, 26 * kv_bytes_per_token);
  // The backward moves the same rows: K/V to the receiver, dK/dV back.
  int64_t kv_rows = 0, dkv_rows = 0;
  for (const BackwardStage& s : plan.backward) {
    for (const Transfer& t : s.send_kv) kv_rows += t.rows(plan.blocks[t.block].tokens());
    for (const Transfer& t : s.send_dkv) dkv_rows += t.rows(plan.blocks[t.block].tokens());
  }
  EXPECT_EQ(kv_rows, 30 + 26);
  EXPECT_EQ(dkv_rows, 30 + 26);
}

// The same on random batches: a rank receives, per sequence, exactly the
// keys some query of its chunks attends that it does not hold (counted
// token by token here), under causal and sliding-window masks; under a full
// mask at least that many (a chunk's first and last segments both attended
// are sent as one range, the rows between included), never more than whole
// chunks.
TEST(BaselinesTest, MagiReceivedRowsAreTheExactAttendedKeys) {
  uint64_t seed = 7;
  int32_t fewer_than_whole = 0;  // batches where the exact rows are fewer than whole chunks
  for (int32_t n : {2, 4, 8, 16})
    for (MaskKind kind : {MaskKind::kCausal, MaskKind::kSlidingWindow, MaskKind::kFull}) {
      const std::vector<int64_t> lengths = Workload(LengthDistribution::kLognormal, n, seed++);
      const PlannerConfig config = Config("magi", n, kind);
      const Plan plan = MakeMagiPlan(lengths, config);
      ASSERT_NO_THROW(ValidatePlan(plan));
      SCOPED_TRACE("N=" + std::to_string(n) + " " + MaskKindName(kind));
      std::vector<int64_t> exact(n, 0);
      for (int32_t w = 0; w < n; ++w)
        for (size_t s = 0; s < lengths.size(); ++s) {
          // Per query token q, the keys PLAN_FORMAT's mask rule lets it attend
          // (causal k <= q, full all, window q - W < k <= q), added up as a
          // difference array.
          std::vector<int64_t> attended(lengths[s] + 1, 0);
          std::vector<char> own(lengths[s], 0);
          for (const Block& b : plan.blocks)
            for (const Segment& x : b.segments) {
              if (x.seq != static_cast<int32_t>(s) || b.worker != w) continue;
              for (int64_t q = x.start; q < x.start + x.length; ++q) {
                own[q] = 1;
                const int64_t lo = kind == MaskKind::kSlidingWindow
                                       ? std::max<int64_t>(0, q - config.mask.window + 1)
                                       : 0;
                const int64_t hi = kind == MaskKind::kFull ? lengths[s] : q + 1;
                ++attended[lo];
                --attended[hi];
              }
            }
          int64_t depth = 0;
          for (int64_t k = 0; k < lengths[s]; ++k) {
            depth += attended[k];
            exact[w] += depth > 0 && !own[k];
          }
        }
      std::vector<int64_t> received(n, 0), whole(n, 0);
      for (const ForwardStage& st : plan.forward)
        for (const Transfer& t : st.send) {
          received[t.dst] += t.rows(plan.blocks[t.block].tokens());
          whole[t.dst] += plan.blocks[t.block].tokens();
        }
      for (int32_t w = 0; w < n; ++w) {
        if (kind == MaskKind::kFull) {
          EXPECT_GE(received[w], exact[w]) << "rank " << w;
        } else {
          EXPECT_EQ(received[w], exact[w]) << "rank " << w;
        }
        EXPECT_LE(received[w], whole[w]) << "rank " << w;
        fewer_than_whole += received[w] < whole[w];
      }
    }
  EXPECT_GT(fewer_than_whole, 10);
}

// ByteScale: a sequence that fits one worker's share is whole on one worker;
// a longer one is spread over ceil(L / share) workers.
TEST(BaselinesTest, ByteScaleGroupsByLength) {
  const int32_t n = 8;
  const std::vector<int64_t> lengths = {3000, 100, 200, 150, 50, 400, 300, 200, 600};
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const int64_t share = (total + n - 1) / n;
  const Plan plan = MakeByteScalePlan(lengths, Config("bytescale", n, MaskKind::kCausal));
  ASSERT_NO_THROW(ValidatePlan(plan));
  std::vector<std::vector<int32_t>> workers_of(lengths.size());
  for (const Block& b : plan.blocks)
    for (const Segment& s : b.segments) workers_of[s.seq].push_back(b.worker);
  for (size_t s = 0; s < lengths.size(); ++s) {
    std::sort(workers_of[s].begin(), workers_of[s].end());
    workers_of[s].erase(std::unique(workers_of[s].begin(), workers_of[s].end()),
                        workers_of[s].end());
    const int64_t group = std::min<int64_t>(n, (lengths[s] + share - 1) / share);
    EXPECT_EQ(static_cast<int64_t>(workers_of[s].size()), group) << "sequence " << s;
  }
  // The long sequence's group carries far more compute than the rest.
  EXPECT_GT(ComputePlanMetrics(plan).compute_imbalance, 0.3);
}

// WLB picks one of its two candidates, unchanged but for the name.
TEST(BaselinesTest, WlbIsRingOrByteScale) {
  for (uint64_t seed : {3, 4, 5}) {
    const std::vector<int64_t> lengths = Workload(LengthDistribution::kLognormal, 8, seed);
    Plan wlb = MakeWlbPlan(lengths, Config("wlb", 8, MaskKind::kCausal));
    Plan ring = MakeRingPlan(lengths, Config("ring", 8, MaskKind::kCausal));
    Plan bytescale = MakeByteScalePlan(lengths, Config("bytescale", 8, MaskKind::kCausal));
    ring.planner = bytescale.planner = "wlb";
    EXPECT_TRUE(wlb == ring || wlb == bytescale);
  }
}

// Ablations keep FCP's assignment and change only the stages.
TEST(BaselinesTest, AblationsKeepTheAssignment) {
  const std::vector<int64_t> lengths = Workload(LengthDistribution::kLognormal, 8, 11);
  const PlannerConfig pc = Config("fcp", 8, MaskKind::kCausal);
  const Plan fcp = MakeFcpPlan(lengths, pc);
  const Plan nopipe = MakeFcpNoPipelinePlan(lengths, pc);
  const Plan random = MakeFcpRandomOrderPlan(lengths, pc);
  EXPECT_EQ(nopipe.blocks, fcp.blocks);
  EXPECT_EQ(random.blocks, fcp.blocks);
  // No pipelining: one transfer stage, then one compute stage.
  ASSERT_EQ(nopipe.forward.size(), 2u);
  EXPECT_TRUE(nopipe.forward[0].compute.empty());
  EXPECT_TRUE(nopipe.forward[1].send.empty());
  // Random order: each receiver still gets at most c per stage.
  for (const ForwardStage& s : random.forward) {
    std::vector<int32_t> received(8, 0);
    for (const Transfer& t : s.send) EXPECT_LE(++received[t.dst], pc.coalesce);
  }
  EXPECT_EQ(MakeFcpNoCoalescePlan(lengths, pc).coalesce, 1);
  // Same transfers, whatever the order.
  EXPECT_EQ(ComputePlanMetrics(random).transfer_edges, ComputePlanMetrics(fcp).transfer_edges);
}

}  // namespace
}  // namespace fcp
