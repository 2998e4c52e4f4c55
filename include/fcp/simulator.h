// fcp/simulator.h — an event-driven simulator that executes any valid plan,
// forward and backward, on a model cluster described by a HardwareProfile.
//
// Execution model (docs/simulator.md has the worked examples):
//  * Each worker runs three streams, each through the stages in order:
//    compute, send groups and receive groups. Send group t opens when group
//    t-1 has been delivered; receive group t opens when group t-1 has arrived
//    and compute t-1 is done (double buffering: its buffer held the blocks
//    compute t-1 used); compute t starts when compute t-1 is done and receive
//    group t-1 has arrived. So stage t's transfers overlap stage t's compute,
//    and a block received in stage t is used from stage t+1.
//  * A transfer starts when the sender's send group and the receiver's
//    receive group of its stage are both open (NCCL-style rendezvous) and its
//    data is there: a forward block sent by its owner once the reshuffle has
//    brought it, a relayed block once the sender's receives of the stage
//    before have arrived, a dK/dV partial once the sender's compute of the
//    stage before is done. It is a fluid flow through the sender's out-port
//    and the receiver's in-port (NVLink ports inside a node, NIC ports across
//    nodes); concurrent flows share ports max-min fairly (progressive
//    filling, recomputed at each flow start and end); it is delivered
//    `latency` after its last byte.
//  * Compute: a worker's pairs of one stage form one kernel. Pairs are merged
//    per query segment; a query segment of q tokens with P allowed key tokens
//    in the stage runs at f(2P/q) (cost_model.h), plus one kernel launch per
//    stage. The compute stream runs the stage's pairs in plan order, each as
//    soon as its inputs have arrived (reshuffle), so local work overlaps the
//    reshuffle when the plan puts it first.
//  * Reshuffle (SimConfig::reshuffle): per block and dataloader worker, a flow
//    of Q, K, V (forward) or dO (backward) into the owner before use, and a
//    flow of O (forward) back once final; in the backward dQ (after the
//    block's last query compute) and dK, dV (after its last key compute on
//    the owner and the last partial it receives) go back apart. Outputs go
//    one message at a time per (owner, dataloader worker) pair, in the order
//    they become final, the next when the previous has drained; inflows all
//    start at once. kBlocking puts a barrier after the inbound all-to-all and
//    before the outbound one.
//  * The backward is simulated from time 0 like the forward (in training the
//    two are separated by the rest of the model); the total is their sum.
// Outputs count useful work and traffic independently of plan_metrics.h:
// compute imbalance from per-worker forward FLOPs, traffic imbalance from
// per-worker forward K/V bytes sent + received (the quantities
// ComputePlanMetrics counts, through a different code path).
//
// Determinism: same plan, profile and config give identical results (without
// a trace the two passes run on two threads; they share no state). Cost:
// O(sum over computed pairs of the distinct sequences of both blocks) for the
// kernels, plus per distinct flow event time a max-min recomputation linear
// in the active flows (SimConfig::network: exact, or fast with flows bundled
// per port pair; src/model/network.h).
// Precondition: ValidatePlan(plan) passes (indices are still range-checked:
// Error(kInvalidPlan) rather than a crash).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "fcp/chrome_trace.h"
#include "fcp/cost_model.h"
#include "fcp/lower_bounds.h"
#include "fcp/plan.h"

namespace fcp {

enum class ReshuffleMode {
  kNone,        // the dataloader already gives the plan's layout (intrusive baselines)
  kBlocking,    // all-to-all in, barrier, attention, barrier, all-to-all out
  kOverlapped,  // per-block: compute starts on blocks that have arrived
};
const char* ReshuffleModeName(ReshuffleMode mode);          // "none", "blocking", "overlap"
ReshuffleMode ParseReshuffleMode(const std::string& name);  // Error(kInvalidArgument)

// How a runtime moves a plan's stage transfers.
enum class TransferMode {
  // The paper's runtime (communication on dedicated SMs): a receiver pulls a
  // K/V block once its buffer for the stage is free (one-sided read, the
  // sender takes no part), and dK/dV partials are pushed into the owner's
  // receive buffer once final, on a stream of their own that compute never
  // waits for.
  kPull,
  // One batched send/receive call per worker and stage (NCCL group, the MPI
  // executor): the sends of stage t start once the worker's sends of stage
  // t-1 are delivered (K/V and partials apart; a partial, kPerBlock, maybe
  // while compute t-1 runs). dK/dV partials are received into buffers of their
  // own, posted when the receiver enters the stage, and compute never waits
  // for them.
  kGrouped,
};
const char* TransferModeName(TransferMode mode);          // "pull", "grouped"
TransferMode ParseTransferMode(const std::string& name);  // Error(kInvalidArgument)

// When a dK/dV partial may leave its sender. A property of the system whose
// runtime runs the plan, so SimConfig leaves it unset by default and each
// plan gets its planner's (PartialReturnOf).
enum class PartialReturn {
  // Once the sender's pairs on its block in the stage before are done: FCP's
  // runtime interleaves pulls, computes and pushes block by block (the
  // paper's block-level sub-stages; the MPI executor posts each partial
  // with a tag of its own), so a partial goes as soon as it is final, while
  // the stage's other pairs compute.
  kPerBlock,
  // Once the sender's whole compute of the stage before is done: a stage is
  // one kernel followed by one reduction of its partials (MagiAttention's
  // GroupReduce, ring attention's per-step send, fcp.torch's stage group,
  // FCP without block-level pipelining).
  kPerStage,
};
const char* PartialReturnName(PartialReturn mode);  // "block", "stage"
// "auto" (unset: PartialReturnFor decides), "block" or "stage"; Error(kInvalidArgument).
std::optional<PartialReturn> ParsePartialReturn(const std::string& name);
// The partial return of the runtime that comes with `planner` (a plan's
// planner field): kPerStage for the baselines (bytescale, magi,
// magi-dynamic, ring, wlb) and the fcp-nopipe ablation, kPerBlock for FCP's
// planners and any other (hand-written) plan.
PartialReturn PartialReturnOf(const std::string& planner);

// How the simulator's network computes the max-min fair rates (exact and
// fast compute the same allocation and round differently; quantized
// approximates it).
enum class NetworkModel {
  // Every flow brought up to date at every rate recomputation; the reference
  // whose outputs the simulator comparison cases are saved with.
  kExact,
  // Flows on one (out-port, in-port) pair as one bundle (they always share
  // one rate) and only bundles whose rate changed updated: the same
  // allocation up to rounding, step times within ~1e-9 of kExact's
  // (docs/simulator.md), 13-35% less CPU at N = 64..1024.
  kFast,
  // The max-min allocation recomputed at most once per quantum of simulated
  // time (SimConfig::network_quantum); between recomputations a new flow
  // takes what its ports have left and a drained flow's rate goes to the
  // flows on its two ports that have room, the rest waiting for the next
  // one (src/model/network.h). An approximation: step times within 0.5% of
  // kExact's on the comparison cases at the default quantum, and at N = 512
  // and 1024 as close to kExact's as kExact's own to a 1e-4 change of the
  // NIC bandwidth (docs/simulator.md).
  kQuantized,
  // kExact for plans of up to kAutoExactMaxWorkers workers, kQuantized for
  // larger ones: the reference where it takes seconds, the approximation
  // where exact takes minutes (N = 1024: 160-185 s against 7 s of CPU;
  // docs/simulator.md). Every comparison case has N <= 256, so its outputs
  // are exact's, byte for byte.
  kAuto,
};
inline constexpr int32_t kAutoExactMaxWorkers = 256;
// "exact", "fast", "quantized", "auto"
const char* NetworkModelName(NetworkModel model);
NetworkModel ParseNetworkModel(const std::string& name);  // Error(kInvalidArgument)
// The engine that simulates a plan of `workers` workers: `model` itself,
// or for kAuto the one it stands for at that size.
NetworkModel ResolveNetworkModel(NetworkModel model, int32_t workers);

// kQuantized's default quantum (SimConfig::network_quantum unset): up to
// kAutoExactMaxWorkers workers the largest measured with every comparison
// case within 0.5% of kExact; above, ten times that, whose error against
// kExact at N = 512 and 1024 (12 plans and profiles) is no larger than the
// small one's, both within what kExact itself moves when the NIC bandwidth
// moves by 1e-4 (docs/simulator.md), for 5x less CPU at N = 1024.
inline constexpr double kSmallPlanNetworkQuantum = 0.02;
inline constexpr double kLargePlanNetworkQuantum = 0.2;

struct SimConfig {
  ReshuffleMode reshuffle = ReshuffleMode::kOverlapped;
  // Bytes per element of a partial dK/dV transfer; 0 = the plan's dtype_bytes
  // (partials cast to the activation type before sending, as K/V are). Set 4
  // to model fp32 partials.
  int32_t dkv_dtype_bytes = 0;
  TransferMode transfers = TransferMode::kPull;
  // Unset: the plan's planner's (PartialReturnOf), with either transfer
  // mode (the MPI executor posts each partial once final too; fcp.torch
  // posts a stage's together: kPerStage).
  std::optional<PartialReturn> partial_return;
  NetworkModel network = NetworkModel::kAuto;
  // kQuantized's quantum as a fraction of the pass's mean stage transfer
  // (its bytes at NIC bandwidth; of a mean reshuffle flow in a pass without
  // transfers), so that small and large N get the same relative error. > 0
  // where set; unset, the default for the plan's size (NetworkQuantumFor).
  std::optional<double> network_quantum;
  bool record_trace = false;  // fill SimResult::trace (Chrome trace events)
  // Called as the passes progress, for display only (`fcp simulate` draws a
  // progress line with it on a terminal): pass 0 is the forward, 1 the
  // backward; done is the share of the pass's pair computations finished,
  // at every further 1% of them, and 1 once at the pass's end. Without a
  // trace the passes run on two threads, so it may be called from both at
  // once. The results do not depend on it.
  std::function<void(int pass, double done)> on_progress;
  void validate() const;  // Error(kInvalidArgument) naming the field
};

// The quantum fraction a plan of `workers` workers is simulated with by
// kQuantized: config.network_quantum where set, else
// kSmallPlanNetworkQuantum up to kAutoExactMaxWorkers workers and
// kLargePlanNetworkQuantum above.
double NetworkQuantumFor(const SimConfig& config, int32_t workers);

// The partial return a plan by `planner` is simulated with:
// config.partial_return where set, else PartialReturnOf(planner).
PartialReturn PartialReturnFor(const SimConfig& config, const std::string& planner);

struct WorkerSimStats {
  double busy_s = 0;          // compute stream busy (both passes)
  double exposed_comm_s = 0;  // before its own last activity, not computing
  double idle_s = 0;          // after its own last activity, waiting for the slowest worker
  double forward_flops = 0;   // useful attention FLOPs of the pairs it computes
  double backward_flops = 0;
  double forward_kv_bytes_sent = 0;  // forward K/V transfers (PLAN_FORMAT costs)
  double forward_kv_bytes_received = 0;
  double bytes_sent = 0;  // everything: K/V, dK/dV, both passes (no reshuffle)
  double bytes_received = 0;
  double reshuffle_bytes_sent = 0;
  double reshuffle_bytes_received = 0;
};

struct SimResult {
  std::string planner;
  std::string profile;
  PartialReturn partial_return = PartialReturn::kPerBlock;  // the one simulated (PartialReturnFor)
  int32_t workers = 0;
  double forward_time_s = 0;
  double backward_time_s = 0;
  double total_time_s = 0;
  double forward_flops = 0;  // useful work (each required pair once)
  double backward_flops = 0;
  // (forward + backward FLOPs) / (N * peak * total time).
  double mfu = 0;
  // mfu / f at saturation (the best a single GPU reaches on long sequences).
  double normalized_mfu = 0;
  // What one GPU reaches on this batch unsharded (each sequence one causal
  // kernel of its own length, all SMs): total FLOPs / sum of their times, / peak.
  double reference_efficiency = 0;
  double batch_normalized_mfu = 0;     // mfu / reference_efficiency
  double compute_imbalance = 0;        // of forward FLOPs per worker
  double traffic_imbalance = 0;        // of forward K/V bytes sent + received per worker
  double total_traffic_imbalance = 0;  // of all bytes sent + received (both passes)
  double max_exposed_comm_s = 0;
  double mean_exposed_comm_s = 0;
  double mean_busy_s = 0;
  int64_t transfers = 0;  // flows simulated (stage transfers)
  int64_t reshuffle_flows = 0;
  // Lower bounds (lower_bounds.h) from each worker's busy compute and every
  // flow of the pass, the reshuffle's included when charged; the step's bound
  // is the sum of the two, and total_time_s / bound_s (>= 1; 0 when the bound
  // is 0) says how far the schedule is from it.
  PassBounds forward_bounds;
  PassBounds backward_bounds;
  double bound_s = 0;
  double bound_ratio = 0;
  std::vector<WorkerSimStats> worker_stats;
  std::vector<TraceEvent>
      trace;  // when SimConfig::record_trace; tracks 0 compute, 1 send, 2 receive
};

SimResult Simulate(const Plan& plan, const HardwareProfile& profile, const SimConfig& config = {});

// Summary (no per-worker arrays unless `per_worker`) as one JSON object.
std::string SimResultJson(const SimResult& result, bool per_worker);

// Chrome trace-event JSON (Perfetto / chrome://tracing): one process per
// worker with compute, send and receive threads; times in microseconds.
void WriteChromeTrace(const SimResult& result, std::ostream& out);
void WriteChromeTraceFile(const SimResult& result, const std::string& path);  // Error(kIo)

}  // namespace fcp
