// planner_constants.h — the FCP planner's tuning constants in one table,
// in the pipeline's order (docs/planner.md, "Pipeline"), each with why it
// is what it is and what it was measured on (the measurements' numbers:
// docs/planner.md, "The planner's constants"). Private to src/plan.
//
// Not here: sentinels and data-structure sizes (kNone, kUnassigned,
// kArity, the load model's table sizes), the exchange engine's own pacing
// (assignment_exchange.cpp, assignment_parts.h), the locality and
// leveling passes' margins (assignment_locality.cpp), and the plan
// format's limits (plan_limits.h). Removed by the step estimate (issue
// 39): kShedReshuffleShare and the port proxy's kBackwardComputeRatio (the
// shed layout is ranked by the estimate, kShedEstimateMargin).
//
// Invariants: every value is a plain constant; the planner stays pure and
// deterministic.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fcp::detail {

// ---- sharding (sharding.h)
// Pieces of a split item hold at least this many query tokens, so their
// kernels (coalesced with the rest of the stage) stay efficient.
constexpr int64_t kMinPieceTokens = 256;

// ---- the greedy starts (assignment_greedy.cpp)
// Candidates examined per item: the lightest by compute and by traffic
// (the first feasible of at most kScanLimit entries each).
constexpr int kComputeCandidates = 4;
constexpr int kTrafficCandidates = 4;
constexpr int kScanLimit = 64;
// kAffinity start: workers already holding an item's sequence examined per
// sequence, and the weight of the item's added traffic in the score, which
// breaks the near-ties of a compute-bound choice toward less traffic.
constexpr size_t kAffinityCandidates = 8;
constexpr double kAffinityWeight = 0.25;

// ---- Better (assignment_portfolio.cpp)
// Costs this close (relative) are a tie in Better.
constexpr double kCostTie = 0.005;

// ---- the exact pruning (ComputeImbalanceLowerBound)
// Slack when a compute lower bound is compared with an imbalance: for
// Imbalance()'s rounding, so that the pruning stays exact.
constexpr double kBoundMargin = 1e-12;

// Heaviest items examined by ComputeImbalanceLowerBound (where it peaks:
// docs/planner.md, the planner's constants); a cap only weakens it.
constexpr size_t kBoundItems = 64;

// ---- piece sizing, the rescue and the home layout (MakeFcpPlan)
// Piece sizing rescues plans above this imbalance (or the configured bound,
// when lower).
constexpr double kResizeAbove = 0.05;
constexpr int kResizeRounds = 4;
// A round re-shards and searches again (a multiple of the planning time)
// only when the sizes promise to lower the largest compute by this much;
// smaller promises did not bring plans within the bound (docs/planner.md,
// the planner's constants).
constexpr double kMinResizeGain = 0.01;

// Rescue limits, in the order tried (docs/planner.md, step 6). Linear 4 is
// left out: beside the default's powers of two up to 4 it adds only the
// 3-piece cut, which the first limit tries (measured: docs/planner.md, the
// planner's constants).
constexpr int32_t kRescueLimits[] = {3, 5, 6, 8};
// Each rescue candidate costs about one planning of the batch, so beyond
// this many workers there is none: the rescue would take planning past its
// 1 s target (docs/planner.md, step 6).
constexpr int32_t kRescueMaxWorkers = 2048;

// The home layout is kept only where its busiest reshuffle is at most this
// share of the balanced plan's (MakeFcpPlan): home layouts that win
// reshuffle far less, those that still move most of the tokens are slower
// simulated (the shares measured: docs/planner.md, the planner's constants).
constexpr double kHomeReshuffleShare = 0.5;

// The home candidate is built only when the dataloader layout's compute
// imbalance is at most this: only all-short batches come below it, and the
// home layouts of the others never won (docs/planner.md, the home layout).
// It saves their planning time.
constexpr double kHomeMaxImbalance = 0.3;

// ---- piece sizing (piece_sizing.cpp)
// At most this many sweeps of the sizes.
constexpr int kMaxSweeps = 8;
// A sweep that moves no piece by more than this many tokens is the last
// (pieces are whole granules in the end).
constexpr double kSettledTokens = 4;
// Pieces are whole granules where the block size allows: tile-friendly
// kernels, and plans that do not hinge on the last bits of a float.
constexpr int64_t kGranuleTokens = 64;

// ---- the reshuffle's weight in the step proxy (StepCostOf; home layout)
// The transparent reshuffle moves, per token away from its dataloader
// worker, Q, K and V in and O out (forward), dO in and dQ, dK, dV out
// (backward): 4 (Hq + Hkv) D dtype bytes, 18 K/V tokens (2 Hkv D bytes each)
// for Llama-3-70B heads. The cost's traffic term is a forward load (the
// step is about 3.5 forwards of compute); a worker's reshuffle is counted
// as tokens in + out, on a full-duplex NIC (half); and the simulated step
// (gpu-x, gpu-y, N = 16 and 64, the measurement log (docs/planner.md)) exposed about 0.75
// of the busiest worker's port time, the rest overlapping its compute.
// So one token in or out weighs as this many forward K/V tokens.
constexpr double kReshuffleExposed = 0.75;

// ---- home packing's budget (home_packing.h)
// Tokens away from home the balance may reach: at most this share of the
// batch and this multiple of the reshuffle floor (ComputeReshuffleFloor
// with the cap; issue 17: all-short batches move at most 5%, every batch
// at most twice its floor).
constexpr double kPackMovedShare = 0.05;
constexpr double kPackFloorMultiple = 2.0;
// The balance stops within this share above the mean work.
constexpr double kPackSlack = 0.001;

// ---- home packing (home_packing.cpp)
// Shortest sequences tried as a replacement prefix, first sequences of a
// two-sequence completion after it, and matches looked at per completion
// (equal lengths weigh the same under every mask); sequences of the most
// loaded worker offered per step, densest first; exchanges per worker.
// The bounds keep a step O(1) in the sequences a worker holds (1,000 of
// up to 64 tokens took 14 s to plan at N = 64 without them).
constexpr size_t kPrefixSequences = 12;
constexpr size_t kPairFirsts = 8;
constexpr int kMatches = 2;
constexpr size_t kOffered = 32;
constexpr size_t kStepsPerWorker = 4;

// ---- whole packing (home_packing.cpp)
// Partners of the most loaded worker in a PackWhole exchange: the least
// loaded workers of the batch (ties by id). The lowest peak is found with
// the lightest, and the exact pruning below skips the rest once a peak is
// found; more partners widen the choice of exact token matches.
constexpr size_t kWholePartners = 16;

// ---- whole packing's refill (home_packing.cpp)
// Whole: the most sequences each worker with room gives back before the
// rooms are refilled exactly, and the most pool sequences one room's
// refill looks at (half the longest that fit, half the shortest), which
// keeps a refill O(kRefillItems x room / 64) word operations. On the
// uniform 64-2048 batches (seed 0) 3 back filled every room at N = 16 and
// 64, 4 at N = 256 (docs/planner.md, step 7, whole packing).
constexpr size_t kRefillSequences = 4;
constexpr size_t kRefillItems = 192;
// The largest subset-sum table a refill builds (64-bit words: 32 MiB). On
// the benchmark's batches a table is at most 193 x 160 words; a room of
// many blocks (a cap far above the share) is left unfilled instead.
constexpr double kRefillMaxWords = 1 << 22;

// ---- the shed layouts (MakeFcpPlan)
// A shed layout (issue 17, part 2; built where the home candidate is not)
// replaces the balanced plan only where its step estimate (with the
// reshuffle) is lower by more than this share: the estimate ranks 84% of
// candidate pairs as the simulator does, and at no margin, or at 2-3%,
// it picked shed layouts that simulated up to 18% slower on the benchmark
// set (docs/planner.md, the planner's constants).
constexpr double kShedEstimateMargin = 0.01;
// The shed candidate is built up to this many workers: above it, it
// changed almost no plan for much more planning time (docs/planner.md,
// the shed layout).
constexpr int32_t kShedMaxWorkers = 256;

// ---- short-sequence rehoming (short_rehoming.cpp)
// The repair (step 3): exchanges per worker, its longest sequences offered
// per exchange, and partners (the least computing) tried for each; the
// bounds keep it O(1) exchanges of O(sequences a partner holds) each.
constexpr size_t kRepairExchanges = 64;
constexpr size_t kRepairOffers = 64;
constexpr size_t kRepairPartners = 64;

// ---- node relays (node_relays.cpp)
// The backward's attention work over the forward's (PLAN_FORMAT.md, "Costs").
constexpr double kBackwardWork = 2.5;
// An owner's crossings are relayed where its network port's bytes x the
// network ratio exceed this share of its compute in the pass. Measured on
// gpu-x (docs/planner.md, step 11): at 1 only lognormal seed 0 at N = 256
// relayed (-0.4%); at 0.5 lognormal seed 0 at N = 64 relayed too and its
// step rose 1.0%; at 0.75 neither rises and N = 256 gains 1.6%.
constexpr double kHotPortShare = 0.75;

}  // namespace fcp::detail
