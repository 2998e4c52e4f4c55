// fcp/executor.h — runs any valid plan (PLAN_FORMAT.md) on the ranks of a
// Communicator, exactly: every rank computes the attention of the tokens it
// holds in the dataloader layout as one device computing the whole batch
// would (up to float32 rounding order).
//
// Each rank runs its program (fcp/lowering.h, LowerPlan), which resolves the
// plan's stage rules into buffer rows. Steps on each rank r (N ranks, T tokens):
//  1. reshuffle in: rows of the dataloader share [DataloaderBegin(r),
//     DataloaderBegin(r+1)) go to the owners of their tokens in the plan, one
//     message of q|k|v rows per (block, dataloader rank), posted at the start
//     in the order the owners need them (RankProgram::reshuffle_in). Each
//     call runs as soon as its own blocks are in, overtaking earlier calls
//     that still wait unless it writes their output rows (so results do not
//     depend on arrival order); an owned block's stage send starts once the
//     block is in.
//  2. forward stages: receive buffers of stage t are posted, sends of stage t
//     start, the stage's pairs are computed (the kernel drives MPI progress
//     between tiles), then the stage's transfers are awaited. A received
//     block's pool slot is reused after its last use on this rank (compute
//     or relay), so a plan that uses each received block in the next stage
//     holds at most 2 * coalesce received blocks (the peak is in the stats).
//     A pair computed away from its query block's owner (the remote-compute
//     extension, docs/plan-format.md) runs on its worker with the query rows
//     it received (send_q); the partial output goes home once (send_o) and
//     the owner merges it by the log-sum-exp rule (backward: send_dq, added).
//  3. outputs go home block by block: once a block's (o, lse) is final (after
//     the last forward stage that computes it), its rows are sent to the
//     dataloader ranks that hold its tokens; receivers post all receives up
//     front and collect them at the end, so the trip overlaps the remaining
//     forward and the whole backward.
//  4. backward stages: dO comes in at the backward's start by the same
//     pieces (RankProgram::do_in), each call waiting for its query block's;
//     then as forward with send_kv, plus send_dkv of partial
//     dK/dV. The receiver takes a partial into a buffer of its own that no
//     stage end waits for, and adds it into its own (owner or relay) where
//     that is needed, in posting order (so the sums do not depend on timing).
//  5. gradients go home the same way, in two parts, each once final at its
//     owner: dq after the block's last query compute; dk, dv after its last
//     local key compute and the last partial received.
// Preconditions: ValidatePlan(plan) passed, plan.workers == comm.size(), the
// inputs hold this rank's dataloader rows. Every rank must call with the same
// plan and options. Cost: the plan's FLOPs and bytes plus O(T) bookkeeping.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "fcp/attention_kernel.h"
#include "fcp/communicator.h"
#include "fcp/lowering.h"  // the per-rank program it runs; BlockPairSegments
#include "fcp/plan.h"
#include "fcp/trace.h"

namespace fcp {

// This rank's rows of the dataloader layout, [rows, heads, head_dim] each.
struct RankInputs {
  std::vector<float> q, k, v;
  std::vector<float> d_o;  // needed only for the backward
};

struct RankOutputs {
  std::vector<float> o, lse;      // always
  std::vector<float> dq, dk, dv;  // with backward
};

struct ExecutorOptions {
  bool backward = false;
  CpuKernelOptions kernel;  // tile sizes; its progress hook is set by the executor
  // Builds the kernel the executor computes with (e.g. the CUDA backend of
  // fcp/cuda_attention.h), given the progress hook the kernel should call
  // while it computes. Empty: the CPU kernel with `kernel`'s tile sizes.
  std::function<std::unique_ptr<AttentionKernel>(std::function<void()> progress)> make_kernel;
  // Called on this rank at the start of each forward stage, with the
  // stage's index, before any of its transfers is posted. Empty: nothing.
  // The library itself never exits; `fcp run --debug-exit-rank` (the
  // liveness tests' fault injection) sets a hook that does.
  std::function<void(int32_t stage)> before_forward_stage;
  // Called on this rank before it posts each message of the input reshuffle
  // (the Q|K|V rows of `block` it holds, for the block's owner `dst`), in
  // posting order. Empty: nothing. Tests delay a message with it.
  std::function<void(int32_t block, int32_t dst)> before_reshuffle_send;
  // The same for the dO reshuffle before the backward.
  std::function<void(int32_t block, int32_t dst)> before_do_send;
};

struct ExecutorStats {
  double forward_s = 0;        // reshuffle in + forward stages
  double backward_s = 0;       // dO in + backward stages + reshuffle out
  double compute_s = 0;        // time inside the kernel
  double transfer_s = 0;       // per stage: first post to last transfer completion, summed
  double exposed_wait_s = 0;   // per stage: time blocked waiting for its K/V transfers, summed
  double partials_wait_s = 0;  // time blocked waiting for dK/dV partials to add (not in transfer_s)
  double reshuffle_s = 0;      // each reshuffle's messages, first post to last completion, summed
  double reshuffle_wait_s = 0;       // time blocked on them (calls waiting for their inputs too)
  int64_t peak_received_blocks = 0;  // K/V blocks held in receive buffers at once
  int64_t carried_calls = 0;         // calls carried past their stage, waiting for reshuffled rows
  int64_t partials_sent_early = 0;   // dK/dV partials posted in the stage before theirs, once final
  int64_t bytes_sent = 0;            // stage transfers only
};

RankOutputs ExecutePlan(const Plan& plan, Communicator& comm, const RankInputs& inputs,
                        const ExecutorOptions& options, Trace* trace, ExecutorStats* stats);

}  // namespace fcp
