// fcp/planner.h — making a plan for a batch: the planner's settings
// (PlannerConfig, its validation and what a plan records of it) and the FCP
// planner. The registry of all planners, FCP and the baselines by name, is
// one layer up (fcp/planner_registry.h, target fcp_registry).
//
// MakeFcpPlan is pure and deterministic: all inputs are the lengths and the
// PlannerConfig; the same inputs give a byte-identical plan on every machine
// (ties broken by id, stable sorts, no hash-map order reaches the output).
// It runs parts of its work that need nothing from the main line on other
// threads (std::async, at most three at once besides the caller's, joined
// before their results are used; docs/planner.md, planning time), which share
// nothing mutable with the calling thread, so the plan does not depend on the
// threads either. It is safe to call from several threads at once.
//
// The FCP pipeline (DESIGN.md section 3; src/plan/):
//   1. shard: cut sequences into blocks of block_size tokens; pack the shorter
//      remainders into shared (varlen) blocks, a piece of a sequence cut at a
//      slot boundary being a block of its own; split blocks far heavier than
//      a worker's mean share, refilling them with tokens of light blocks;
//   2. assign: greedy starts (compute LPT, vector LPT over compute and K/V
//      traffic, and one that prices traffic by what a worker already holds
//      of the item's sequences) under slot limits that make the token cap
//      exact, each refined by a local search; with network_flops_per_byte
//      > 0, steps 1-2 also run with heavy blocks cut in at most two pieces
//      and the plan with the lower compute + traffic cost is kept (the
//      second is not assigned when it provably cannot be kept);
//   2b. with the reshuffle charged (reshuffle_locality, a network ratio)
//      and a nearly balanced dataloader layout (all-short batches): the
//      home layout, every item on its dataloader worker and moved only
//      where a search by compute + traffic + reshuffle lowers the most
//      loaded worker, replaces the balanced plan when its step cost with
//      the reshuffle is lower and its busiest reshuffle at most half;
//   2c. with the reshuffle charged, on any plan but the home layout: the
//      short sequences (those that fit one block) dealt back to their
//      dataloader workers where the compute allows, every worker keeping
//      its token count, kept when fewer tokens are away from home and no
//      largest compute or traffic rises;
//   3. transfer graph: one edge (owner(j) -> w) per K/V block j that worker w
//      needs and does not own; colour its edges into exactly Delta matchings;
//   4. coalesce c colours per stage (spread_stages: deal them round-robin
//      over the stages); compute the pairs of a block received in
//      stage t in stage t + 1, local pairs in stage 0 (a piece of a split
//      short sequence: in the stage of its remote pairs);
//   5. backward: the same K/V matchings, and each partial dK/dV returned to
//      its owner over the reversed matching two stages later.
//   6. node relays (node_relays): where several workers of a node receive a
//      block from a busy owner in another node, the later receipts come from
//      the first receiver over the node's links in their own stages, and
//      partials sent there earlier are summed at the node's last sender;
//      no stage, pair or congestion bound changes.
//   7. row ranges (row_ranges): each direct K/V transfer cut to the rows its
//      receiver attends, its partial dK/dV back the same rows; relayed
//      blocks stay whole; no stage changes.
// Complexity: O(P log P + K * C * D) for P required pairs, K blocks, C
// candidate workers per block and D dependencies per block, plus the
// colouring, O(E * path) with E transfer edges.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fcp/mask.h"
#include "fcp/plan.h"
#include "fcp/step_estimate.h"

namespace fcp {

// What the FCP planner minimises. Derived from two knobs (network ratio and
// imbalance bound, PlannerConfig::Objective) rather than stored, so that
// plans record the same options as before it had a name.
enum class PlannerObjective {
  // network_flops_per_byte == 0: the larger of the compute and traffic
  // imbalances; the batch is planned once, without the coarse split.
  kBalance,
  // A network ratio and max_imbalance < kNoImbalanceBound: the lowest
  // compute + traffic cost among plans within the imbalance bound.
  kBoundedCost,
  // A network ratio and max_imbalance >= kNoImbalanceBound: the lowest
  // cost whatever the balance (fastest planning: one greedy start).
  kTime,
};

// A max_imbalance at or above this bounds nothing (time mode): an imbalance
// (max - mean) / mean of 1 lets the busiest worker carry twice the mean.
inline constexpr double kNoImbalanceBound = 1.0;

// Every scalar field has a row in the table of fcp/planner_options.h, which
// makes its CLI flag, Python keyword, range check and recorded option: a new
// knob is a field here and a row there.
struct PlannerConfig {
  int32_t workers = 8;
  int64_t block_size = 4096;  // tokens per block (>= 1)
  int32_t coalesce = 16;      // colours (sub-stages) per stage (>= 1)
  Mask mask;
  AttentionShape attention;
  int64_t token_cap = 0;  // 0: ceil(T / workers); else must be >= ceil(T / workers)
  std::string planner = "fcp";
  // FCP only: a query block whose work exceeds heavy_fraction of the mean
  // work per worker is split into up to max_split pieces (each completed to a
  // full block with tokens of light blocks), so that one block at the end of
  // a very long causal sequence cannot outweigh a worker's share. 0 = off.
  double heavy_fraction = 0.1;
  int32_t max_split = 4;
  // FCP only: the cluster's balance point, attention FLOPs per byte of K/V
  // moved (FLOP/s of the attention kernel over network bytes/s per worker).
  // Splitting heavy blocks balances compute but every piece needs the K/V of
  // its whole sequence; when this is > 0 the planner also plans the batch
  // with at most two pieces per heavy block and keeps the plan whose worst
  // worker has the smaller compute FLOPs + bytes moved x this ratio.
  // 0 = plan once, exactly as heavy_fraction and max_split say. The default
  // is an H100 at ~60% of its 989 TFLOP/s behind one 400 Gb/s NIC (50 GB/s).
  double network_flops_per_byte = 12000;
  // FCP only, with a network ratio: the plan is the cheapest (by that cost)
  // of those whose compute and traffic imbalance are both within this bound;
  // if none is, the most balanced. >= kNoImbalanceBound: no bound
  // (PlannerObjective::kTime).
  double max_imbalance = 0.05;
  // FCP only: a plan still outside max_imbalance is planned again with heavy
  // blocks cut into any number of pieces up to 3, 5, 6, 8 in turn, not above
  // this, until one plan is within it (up to 2048 workers; each try costs
  // about one planning of the batch). 0 = never.
  int32_t rescue_max_split = 8;
  // FCP only: a plan within max_imbalance on compute but not on traffic gets
  // exchanges that lower the largest traffic, then raise the least, never
  // lifting the largest cost or traffic; the compute cap widens to a
  // quarter, half and all of the bound until the traffic is within it
  // (what it changes: docs/planner.md, step 6, traffic leveling).
  bool traffic_leveling = true;
  // FCP only: local-search moves/swaps after the greedy assignment (0 = off).
  int32_t local_search_rounds = 2;
  // FCP only: after the assignment, exchanges that bring blocks back to
  // their dataloader worker without raising the largest compute, traffic
  // or cost, so the reshuffle into the plan's layout moves fewer tokens
  // (how many fewer: docs/planner.md, step 7); with a network ratio also
  // the home layout (pipeline step 2b; all-short batches then reshuffle
  // nothing); and the short sequences re-dealt home (pipeline step 2c).
  // Off when the training loop feeds tokens in the plan's layout and
  // never reshuffles: the exchanges may leave traffic more uneven below
  // its maximum, the home layout compute.
  bool reshuffle_locality = true;
  // FCP only: workers per node (consecutive ids share a node's fast links;
  // 8 GPUs a node in the built-in profiles). The home layout places an item
  // that does not fit on its dataloader worker on the nearest worker of the
  // same node first, and its step cost charges only reshuffle tokens that
  // cross nodes. A plain number, so planning stays pure.
  int32_t node_workers = 8;
  // FCP only: where several workers of one node receive the same K/V block
  // from another node, the later ones get it from the first over the node's
  // links in the stage they got it before, and partial dK/dV returned to
  // another node are summed at the node's last sender first (node_relays.h;
  // docs/planner.md, step 11). Only owners whose network port is nearly as
  // busy as their compute (by network_flops_per_byte) relay. No stage, pair
  // or congestion bound changes. Off by default: it lowers the step on some
  // rows of the benchmark set and raises it on others (docs/planner.md, step
  // 11); `fcp plan --tune` tries it per batch (fcp/fcp_tuning.h).
  bool node_relays = false;
  // FCP only: each K/V transfer carries only the rows its receiver attends
  // (the span over its query blocks; plan-format.md, row ranges) and the
  // partial dK/dV coming back the same rows; the traffic terms the leveling
  // step compares count those rows. A relayed block (node_relays) moves
  // whole on every hop. Plans where every receiver attends whole blocks
  // (the causal mask) are unchanged. Off: every transfer moves whole blocks.
  bool row_ranges = true;
  // FCP only: short runs of the transfer graph's colours dealt round-robin
  // over the transfer stages instead of c consecutive colours a stage
  // (StageGrouping::kRoundRobin, src/plan/internal/fcp/schedule.h): the
  // same stages, bound and transfers, each worker's pulls spread over the
  // stages, so a busy receiver's senders are rarely busy with c others in
  // the same stage. Off by default: on the report card's rows it lowers the
  // step by up to 15% where the network binds at N = 256 and raises it by
  // up to 6% on some rows at N = 16 and 64 (a worker's pairs split into
  // more, shorter kernels; the reshuffle); `fcp plan --tune` tries it per
  // batch (docs/planner.md, step 9).
  bool spread_stages = false;
  // FCP only: the hardware the planner ranks its candidates for, by the
  // step estimate (fcp/step_estimate.h) of each. Defaults: the gpu-x
  // profile's (GpuXStepCosts), so that planning needs no profile; `fcp plan
  // --profile` and `fcp compare` fill them from theirs (StepCostsOf in
  // fcp/cost_model.h). Two fields are not read: node_workers (the planner's
  // own above) and reshuffle (reshuffle_locality: a plan for the
  // dataloader's layout is charged its reshuffle). Recorded in
  // plan.planner_options as "step_costs.<field>" (RecordedPlannerOptions).
  StepCosts step_costs = GpuXStepCosts();
  // Run ValidatePlan on the result (the debug self-check); throws kInternal if it fails.
  bool self_check = false;

  // Error(kInvalidArgument) naming the bad field. Needs the lengths for the
  // cap and the size limits; validate_settings checks what needs no lengths.
  // Neither checks that `planner` names a planner: the registry does
  // (FindPlanner, MakePlan in fcp/planner_registry.h).
  void validate(const std::vector<int64_t>& lengths) const;
  void validate_settings() const;
  // The effective cap: token_cap, or ceil(T / workers) when token_cap == 0.
  int64_t EffectiveTokenCap(const std::vector<int64_t>& lengths) const;
  // The objective network_flops_per_byte and max_imbalance select; every
  // mode test goes through it.
  PlannerObjective Objective() const {
    if (network_flops_per_byte == 0) return PlannerObjective::kBalance;
    return max_imbalance >= kNoImbalanceBound ? PlannerObjective::kTime
                                              : PlannerObjective::kBoundedCost;
  }
};

// A plan with the header fields set from `config` (workers, mask, attention,
// block size, coalesce, effective token cap) and the sequences, no blocks or
// stages yet: where every planner starts.
Plan PlanHeader(const std::vector<int64_t>& lengths, const PlannerConfig& config,
                const std::string& planner);

// The settings MakeFcpPlan records in plan.planner_options beyond the header
// fields (the table's recorded rows, fcp/planner_options.h, and the step
// costs as "step_costs.<field>" and "step_costs.efficiency.<i>.tokens" /
// ".efficiency"), (name, value) sorted by name; PlannerConfigOf reads them
// back (a plan without step costs: the defaults). Both in planner_options.cpp.
std::vector<std::pair<std::string, double>> RecordedPlannerOptions(const PlannerConfig& config);

// The config that re-makes `plan`: the inverse of PlanHeader, plus the
// settings the planner recorded in plan.planner_options (names this version
// does not know are ignored; MakePlan then tells by a different plan).
PlannerConfig PlannerConfigOf(const Plan& plan);

// The FCP planner itself.
Plan MakeFcpPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config);

// A floor on the compute imbalance, (max - mean) / max, of every assignment
// of the items MakeFcpPlan's first candidate cuts the batch into (its heavy
// split as `config` sets it): 0 where nothing forces one. With
// heavy_fraction 0 it says how well whole zig-zag items can be balanced at
// best. Error(kInvalidArgument) as MakeFcpPlan. O(S + I log I) for S
// segments and I items.
double FcpComputeImbalanceFloor(const std::vector<int64_t>& lengths, const PlannerConfig& config);

}  // namespace fcp
