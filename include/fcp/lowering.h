// fcp/lowering.h — one rank's program for a plan: the operations an executor
// issues, in order, with every buffer row resolved. Both executors (MPI,
// src/runtime/executor.cpp, and torch.distributed, python/fcp/torch) run this
// program, so the stage rules of PLAN_FORMAT.md are applied here only.
//
// Buffers on rank r (rows are tokens; a K/V row is heads_kv * head_dim values):
//  - local rows: the Q, K, V (and O, dQ, dK, dV) rows of the blocks r owns, in
//    the plan layout (fcp/token_permutation.h: blocks by id, segments in block
//    order). `block_row[b]` is block b's first local row.
//  - the receive pool (per pass): `pool_rows` rows of K and of V. Every K/V
//    receipt gets a slot of block-many rows, live from the stage it is
//    received in to the last stage that reads it (compute or relay send);
//    slots whose lives overlap never overlap in rows (first-fit), so the pool
//    is the peak of what r holds, not the sum of what it receives.
//  - the partial pool (backward): `partial_rows` rows of dK and of dV, for the
//    partial gradients of blocks r computes with (or relays) but does not own.
//    A partial lives from its first write to the stage that sends it; the pool
//    starts zeroed and an executor zeroes a partial's rows once its send is
//    complete, so a reused slot starts at zero.
//
// A stage, forward or backward, runs as: post kv_recv and dkv_recv, post
// kv_send and dkv_send, run `compute` in order, wait for the K/V transfers
// and the sends, zero the sent partials. A received dK/dV goes into a buffer
// of its own and nothing waits for it at the stage's end: it is added into
// its target rows (in the plan's stage and list order, so the sums do not
// depend on timing) before those rows are needed: before a relay sends the
// partial on, before the owner sends the block's dk, dv home (after
// backward_dkv_final_stage), and at the end of the pass. A received K/V slot
// is first read in a later stage (double buffering).
//
// Compute calls: query rows [q_row, q_row + tokens(q_block)) against K/V rows
// at kv_row (local rows or the pool), backward accumulating dK/dV at dkv_row
// (local rows when r owns kv_block, else the partial pool); the kernel's
// segment pairs are segments[segment_begin, segment_end), rows relative to
// q_row and kv_row. Merge order of the forward is the order of the calls:
// the plan's, except that forward stage 0 lists its `early` calls first.
// A pair computed remotely (the remote-compute extension) is a call on the
// worker that computes it, with its query rows in the query pool
// (QueryMessage). Such a stage also receives (q_recv, out_recv) and sends
// (q_send, out_send) query rows and partial outputs, posted with its K/V and
// awaited at its end; the owner then merges each received partial into its
// block's rows (forward: the log-sum-exp rule; backward: dQ added), in list
// order, before the block's output goes home.
//
// Reshuffle, as one all-to-all (fcp.torch on CUDA, dispatch/undispatch): dataloader rows
// in_send_rows (grouped by destination, counts in_send_counts) arrive at
// local rows in_recv_rows (grouped by source, counts in_recv_counts). The way
// back is the same tables reversed.
//
// Reshuffle, as messages (the MPI executor; the simulator's flows): one
// piece per (block, dataloader rank holding some of its tokens), the
// block's rows of that share in the block's row order. `reshuffle_in`
// carries Q|K|V before the forward, `do_in` dO before the backward; each
// lists the pieces r receives and sends in the order they are posted: by
// when the owner first needs the block (ReshuffleNeed), so the blocks needed
// first arrive first. Both sides of a rank pair derive that order from the
// plan, so their messages match under MPI's non-overtaking rule.
//
// Invariants (checked by lowering_test): every plan pair r computes is one
// call, in the plan's stage and list order (stage 0: early calls
// first, each part in that order); every row of r's blocks is in exactly
// one reshuffle piece of each InputReshuffle, and what a rank sends another
// is, message by message, what that rank receives from it; a call reads
// only slots received in an earlier stage and not yet freed; live slots
// never share rows. Cost: O(blocks + segments + transfers + pairs + local and dataloader
// rows), slot allocation O(live slots) per receipt, the reshuffle pieces
// sorted in O(P log P). Pure: same plan and rank, same program.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "fcp/attention_kernel.h"
#include "fcp/plan.h"

namespace fcp {

// Every message moves `rows` rows of its block starting at the block's row
// `row_begin` (all of them: row_begin 0, rows == block_rows; part of them for
// a transfer with a row range, docs/plan-format.md). The row fields
// (pool_row, row, partial_row) are the block's first row in its buffer, so
// the rows moved are [that + row_begin, + rows) in a buffer that keeps K and
// V apart (fcp.torch), and in the MPI executor's per-block [K; V] storage the
// K rows at that + row_begin and the V rows block_rows further.
struct KvRecv {
  int32_t block = 0;
  int32_t src = 0;
  int64_t pool_row = 0;  // first row of its slot (block_rows rows) in the receive pool
  int64_t rows = 0;
  int64_t row_begin = 0;
  int64_t block_rows = 0;
  bool operator==(const KvRecv&) const = default;
};

struct KvSend {
  int32_t block = 0;
  int32_t dst = 0;
  bool from_pool = false;  // false: local rows (r owns the block); true: a relay from the pool
  int64_t row = 0;
  int64_t rows = 0;
  int64_t row_begin = 0;
  int64_t block_rows = 0;
  bool operator==(const KvSend&) const = default;
};

struct DkvRecv {
  int32_t block = 0;
  int32_t src = 0;
  // false: add into local rows (r owns the block); true: into a partial (a relay).
  bool into_partial = false;
  int64_t row = 0;
  int64_t rows = 0;
  int64_t row_begin = 0;
  int64_t block_rows = 0;
  bool operator==(const DkvRecv&) const = default;
};

struct DkvSend {
  int32_t block = 0;
  int32_t dst = 0;
  // The partial's slot starts at partial_row; the rows sent are zeroed after the send.
  int64_t partial_row = 0;
  int64_t rows = 0;
  int64_t row_begin = 0;
  int64_t block_rows = 0;
  bool operator==(const DkvSend&) const = default;
};

// Remote compute (docs/plan-format.md): one send_q (query rows: forward Q;
// backward Q, O, dO, LSE) or one returned partial output (forward send_o: O
// and LSE; backward send_dq: dQ), always its whole block of `rows` rows. On
// the owner of the block `row` is the block's first local row; on the
// worker that computes with it, the first row of its slot in the query pool,
// which holds the received rows and the partial output computed from them
// (forward: starts as InitForwardOutput; backward: zeros) from the stage
// the rows are received in to the stage that returns the partial, after
// which an executor resets the partial's rows once the send is complete.
struct QueryMessage {
  int32_t block = 0;
  int32_t peer = 0;  // the destination of a send, the source of a receive
  int64_t row = 0;
  int64_t rows = 0;
  bool operator==(const QueryMessage&) const = default;
};

struct ComputeCall {
  int32_t q_block = 0;
  int32_t kv_block = 0;
  int64_t q_row = 0;  // local rows, or the query pool's (q_in_pool)
  int64_t q_rows = 0;
  // Remote compute: r does not own q_block; its query rows and the partial
  // output the call accumulates into are the query pool's rows at q_row.
  bool q_in_pool = false;
  bool kv_in_pool = false;
  int64_t kv_row = 0;
  int64_t kv_rows = 0;
  bool dkv_in_partial = false;  // backward only
  int64_t dkv_row = 0;          // backward only
  int64_t segment_begin = 0, segment_end = 0;
  // Forward stage 0 only: both blocks hold only tokens of r's own dataloader
  // share, so the call can run before the reshuffle in has arrived (fcp.torch
  // on CUDA runs these while its all-to-all is in flight).
  bool early = false;
  bool operator==(const ComputeCall&) const = default;
};

struct StageProgram {
  std::vector<KvRecv> kv_recv;  // in the plan's transfer order
  std::vector<KvSend> kv_send;
  std::vector<DkvRecv> dkv_recv;  // backward only
  std::vector<DkvSend> dkv_send;  // backward only
  std::vector<ComputeCall> compute;
  // Remote compute, in the plan's list order: send_q, and send_o (forward)
  // or send_dq (backward).
  std::vector<QueryMessage> q_recv, q_send, out_recv, out_send;
  bool operator==(const StageProgram&) const = default;
};

struct PassProgram {
  int64_t pool_rows = 0;
  int64_t partial_rows = 0;  // backward only
  int64_t peak_slots = 0;    // most K/V receipts live in one stage
  int64_t query_rows = 0;    // remote compute: rows of the query pool
  std::vector<StageProgram> stages;
  bool operator==(const PassProgram&) const = default;
};

// One message of an input reshuffle: the rows of `block` that dataloader
// rank `src` holds, for the block's owner `dst`, in the block's row order.
// dataloader_rows (0-based in src's share) is filled on src, local_rows on
// dst; a piece with src == dst is a local copy with both.
struct ReshufflePiece {
  int32_t block = 0;
  int32_t src = 0;
  int32_t dst = 0;
  std::vector<int64_t> dataloader_rows;
  std::vector<int64_t> local_rows;
  bool operator==(const ReshufflePiece&) const = default;
};

// One input reshuffle (Q|K|V, or dO) of rank r. `recv` holds the pieces of
// r's blocks from other ranks, the pieces of one block adjacent (by source
// rank), blocks in need order; `recv_begin[b]`, `recv_end[b]` delimit block
// b's (empty when r does not own b or has all its tokens). `send` holds r's
// pieces for other ranks sorted by (the owner's need of the block, owner,
// block). `self` the pieces r keeps, by block id.
struct InputReshuffle {
  std::vector<ReshufflePiece> recv, send, self;
  std::vector<int64_t> recv_begin, recv_end;  // per plan block
  bool operator==(const InputReshuffle&) const = default;
};

struct RankProgram {
  int32_t rank = 0;
  int32_t workers = 1;
  int64_t total_tokens = 0;
  int64_t dataloader_begin = 0, dataloader_end = 0;  // r's dataloader share
  int64_t local_rows = 0;
  std::vector<int32_t> owned_blocks;    // ascending
  std::vector<int64_t> block_row;       // per plan block; -1: not owned
  std::vector<int64_t> local_token;     // per local row: its global token
  std::vector<int64_t> local_position;  // per local row: its position in its sequence (RoPE)
  std::vector<int64_t> in_send_rows;    // dataloader rows (0-based in the share), by destination
  std::vector<int64_t> in_send_counts;  // per rank
  std::vector<int64_t> in_recv_rows;    // local rows, by source rank (and global token)
  std::vector<int64_t> in_recv_counts;  // per rank
  InputReshuffle reshuffle_in;          // Q|K|V, before the forward
  InputReshuffle do_in;                 // dO, before the backward
  std::vector<SegmentPair> segments;    // of all calls, both passes
  PassProgram forward, backward;
  // Per plan block (any owner): the stage after which its (o, lse), its dq,
  // and its dk, dv at the owner are final (-1: before the first stage). The
  // executors send each home as soon as it is final, dq and dk/dv apart.
  std::vector<int32_t> forward_final_stage, backward_dq_final_stage, backward_dkv_final_stage;
  bool operator==(const RankProgram&) const = default;
};

// The program of `rank`. Precondition for a correct program: ValidatePlan(plan)
// passed. Safe on any plan: every index it follows (owners, sequences,
// segments, the blocks and workers of pairs and transfers) is checked up
// front and the stage rules it relies on as it goes, each failure an
// Error(kInvalidPlan) naming the stage, block or value, never an
// out-of-range access; Error(kInvalidArgument) for a rank outside
// [0, workers). Callers: the MPI executor (ExecutePlan; `fcp run`
// validates the plan first, tools/fcp/cmd_run.cpp) and fcp.Program
// (python/src/program_ext.cpp, on a plan its handle has validated).
RankProgram LowerPlan(const Plan& plan, int32_t rank);

// When the owner of each block first needs it from an input reshuffle, as
// (stage, position), per plan block; (INT64_MAX, 0) when never. Forward
// (Q|K|V): the first stage that sends the block (position: its index among
// the owner's sends of the stage, which are posted when the stage begins) or
// computes with it as query or local key (position: the owner's send count
// of the stage plus the call's index among the owner's calls). Backward
// (dO): the first call with the block as query. Pieces are posted in
// (need, block) order. O(pairs + transfers).
std::vector<std::pair<int64_t, int64_t>> ReshuffleNeed(const Plan& plan, bool backward);

// The kernel's segment pairs of plan pair (q_block, kv_block), rows relative
// to the first row of each block (rows of a block follow its segment order).
std::vector<SegmentPair> BlockPairSegments(const Plan& plan, int32_t q_block, int32_t kv_block);

}  // namespace fcp
