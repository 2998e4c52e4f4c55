// fcp/plan.h — the plan: how one batch is computed by context-parallel
// attention on N workers. The in-memory twin of ../shared/PLAN_FORMAT.md
// (`fcp-plan` version 1); every field has exactly the meaning given there.
//
// Planners (FCP and the baselines) produce a Plan; the simulator and the
// runtime consume one. The project's optional extensions (row ranges, remote
// compute: docs/plan-format.md) live in the same structs and are empty or at
// their defaults when unused. A Plan is a plain value: no invariants are
// enforced by construction. ValidatePlan() checks every rule of the format
// and reports the first one broken. Its JSON text (WritePlanJson /
// ReadPlanJson, which round-trip byte-identically) is one layer up, in
// fcp/plan_json.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "fcp/mask.h"

namespace fcp {

// A contiguous token range [start, start + length) of sequence `seq`.
struct Segment {
  int32_t seq = 0;
  int64_t start = 0;
  int64_t length = 0;
  bool operator==(const Segment&) const = default;
};

struct Block {
  int32_t worker = 0;             // owner: holds this block's Q, K, V rows
  std::vector<Segment> segments;  // in the order the block stores its rows
  int64_t tokens() const;
  bool operator==(const Block&) const = default;
};

// A transfer's row_count when it carries every row of its block.
inline constexpr int64_t kAllRows = -1;

// `src` sends block `block`'s K/V (or partial dK/dV) to `dst`: all of its
// rows (row_count == kAllRows, the format's transfer), or only the rows
// [row_begin, row_begin + row_count) of the block in its row order (its
// segments concatenated): the row-range extension, docs/plan-format.md.
struct Transfer {
  int32_t block = 0;
  int32_t src = 0;
  int32_t dst = 0;
  int64_t row_begin = 0;
  int64_t row_count = kAllRows;
  Transfer() = default;
  Transfer(int32_t block_id, int32_t from, int32_t to, int64_t first_row = 0,
           int64_t rows = kAllRows)
      : block(block_id), src(from), dst(to), row_begin(first_row), row_count(rows) {}
  bool all_rows() const { return row_count == kAllRows; }
  // The rows it carries of a block of `block_tokens` tokens.
  int64_t rows(int64_t block_tokens) const { return all_rows() ? block_tokens : row_count; }
  bool operator==(const Transfer&) const = default;
};

// Query block `q_block` is computed against `kv_block` by the owner of
// `q_block` (worker == kOwner, the format's compute), or by another worker
// `worker` that received the query block by `send_q` and returns its partial
// result by `send_o` / `send_dq` (the remote-compute extension,
// docs/plan-format.md).
inline constexpr int32_t kOwner = -1;
struct BlockPair {
  int32_t q_block = 0;
  int32_t kv_block = 0;
  int32_t worker = kOwner;
  bool operator==(const BlockPair&) const = default;
};

// Remote-compute extension (docs/plan-format.md): `send_q` moves a query
// block's Q rows (backward: Q, O, dO and LSE) from its owner to a worker that
// computes with it; `send_o` (backward `send_dq`) returns that worker's
// partial O and LSE (backward partial dQ) to the owner. Empty in plans
// without the extension.
struct ForwardStage {
  std::vector<Transfer> send;
  std::vector<BlockPair> compute;
  std::vector<Transfer> send_q{};  // (initialized: aggregates may omit them)
  std::vector<Transfer> send_o{};
  bool operator==(const ForwardStage&) const = default;
};

struct BackwardStage {
  std::vector<Transfer> send_kv;
  std::vector<Transfer> send_dkv;
  std::vector<BlockPair> compute;
  std::vector<Transfer> send_q{};
  std::vector<Transfer> send_dq{};
  bool operator==(const BackwardStage&) const = default;
};

// The worker that computes pair p (its own worker, or the q block's owner).
inline int32_t ComputeWorker(const std::vector<Block>& blocks, const BlockPair& p) {
  return p.worker == kOwner ? blocks[p.q_block].worker : p.worker;
}

// Shapes of the attention layer: the costs of pairs and transfers derive from it.
struct AttentionShape {
  int32_t heads_q = 64;
  int32_t heads_kv = 8;
  int32_t head_dim = 128;
  int32_t dtype_bytes = 2;
  // Throws Error(kInvalidArgument): non-positive values, heads_q % heads_kv != 0.
  void validate() const;
  bool operator==(const AttentionShape&) const = default;
};

struct Plan {
  std::string planner = "fcp";
  int32_t workers = 1;
  Mask mask;
  AttentionShape attention;
  int64_t block_size = 4096;  // informational
  int32_t coalesce = 16;      // the congestion bound c of every stage
  int64_t token_cap = 0;      // max tokens any one worker may own
  // The planner's own settings beyond the fields above, (name, value) sorted
  // by name, so that a plan says how it was made (`fcp inspect` re-plans with
  // them). Written as the optional object "planner_options", an extra field
  // that PLAN_FORMAT.md lets readers ignore; empty = omitted.
  std::vector<std::pair<std::string, double>> planner_options;
  std::vector<int64_t> sequences;  // lengths, in dataloader (global token) order
  std::vector<Block> blocks;
  std::vector<ForwardStage> forward;
  std::vector<BackwardStage> backward;

  // Sum of `sequences`. Throws kInvalidArgument if it overflows int64 (a
  // parsed plan that is not validated yet may hold any lengths).
  int64_t total_tokens() const;
  bool operator==(const Plan&) const = default;
};

// Whether the plan uses the remote-compute extension anywhere (a compute on a
// worker other than its query block's owner, or a send_q / send_o / send_dq).
bool UsesRemoteCompute(const Plan& plan);

// ---- costs (PLAN_FORMAT.md, "Costs") ------------------------------------

// Forward FLOPs of `allowed_token_pairs` pairs: 4 * heads_q * head_dim * pairs.
double ForwardFlops(const AttentionShape& shape, int64_t allowed_token_pairs);
// Bytes of one K/V transfer of `tokens` tokens: 2 * heads_kv * head_dim * dtype_bytes * tokens.
int64_t KvTransferBytes(const AttentionShape& shape, int64_t tokens);

// Remote-compute extension (docs/plan-format.md). Bytes of one `send_q` of
// `tokens` tokens: forward Q, heads_q * head_dim * dtype_bytes * tokens;
// backward Q, O and dO plus the float32 LSE, (3 * heads_q * head_dim *
// dtype_bytes + 4 * heads_q) * tokens.
int64_t QueryTransferBytes(const AttentionShape& shape, int64_t tokens, bool backward);
// Bytes of one forward `send_o`: the partial O plus its float32 LSE,
// (heads_q * head_dim * dtype_bytes + 4 * heads_q) * tokens. A backward
// `send_dq` moves heads_q * head_dim elements per token in the runtime's
// accumulation type.
int64_t PartialOutputBytes(const AttentionShape& shape, int64_t tokens);

// First global token of each sequence, plus the total at the end (size + 1).
std::vector<int64_t> SequenceOffsets(const std::vector<int64_t>& sequences);

// The dataloader layout: worker r holds global tokens
// [floor(r*T/N), floor((r+1)*T/N)) (shares may be empty when T < N).
// Inline: the planner asks for every segment's runs several times per plan.
namespace dataloader_detail {
// a * b / d rounded toward zero, in 64 bits when the product fits (the
// common case; a 128-bit division is a library call).
inline int64_t MulDiv(int64_t a, int64_t b, int64_t d) {
  int64_t product;
  if (!__builtin_mul_overflow(a, b, &product)) return product / d;
  return static_cast<int64_t>((static_cast<__int128>(a) * b) / d);
}
}  // namespace dataloader_detail
// Returns r's first token (r in [0, N]); exact for every int64 T (MulDiv
// falls back to 128 bits). Here and below: T >= 1, N >= 1, 0 <= token < T.
inline int64_t DataloaderBegin(int64_t total_tokens, int32_t workers, int32_t worker) {
  return dataloader_detail::MulDiv(worker, total_tokens, workers);
}
// The worker whose dataloader share holds global token `token` (the largest
// r with DataloaderBegin(r) <= token), and DataloaderBegin(r + 1), where the
// next share starts. Three divisions.
struct DataloaderShare {
  int32_t worker;
  int64_t next_begin;
};
inline DataloaderShare DataloaderShareOf(int64_t total_tokens, int32_t workers, int64_t token) {
  int32_t r = static_cast<int32_t>(dataloader_detail::MulDiv(token, workers, total_tokens));
  int64_t next = DataloaderBegin(total_tokens, workers, r + 1);
  while (r + 1 < workers && next <= token) next = DataloaderBegin(total_tokens, workers, ++r + 1);
  // (floor(token N / T) never overshoots in exact arithmetic; the guard is kept.)
  for (int64_t begin = DataloaderBegin(total_tokens, workers, r); r > 0 && begin > token;
       begin = DataloaderBegin(total_tokens, workers, --r))
    next = begin;
  return {r, next};
}
// The worker whose dataloader share holds global token `token`.
inline int32_t DataloaderWorker(int64_t total_tokens, int32_t workers, int64_t token) {
  return DataloaderShareOf(total_tokens, workers, token).worker;
}
// Calls visit(dataloader worker, tokens) for each run of segment s's tokens
// that one dataloader worker holds, in token order (offsets: SequenceOffsets
// of the plan's sequences). O(runs + empty shares crossed) (shares are empty
// only when T < N): after the first, each run's worker is the next
// non-empty share's.
template <typename Visit>
void ForEachDataloaderRun(const Segment& s, const std::vector<int64_t>& offsets, int32_t workers,
                          Visit visit) {
  const int64_t total = offsets.back();
  int64_t token = offsets[s.seq] + s.start;
  const int64_t end = token + s.length;
  if (token >= end) return;
  DataloaderShare share = DataloaderShareOf(total, workers, token);
  while (true) {
    const int64_t stop = std::min(end, share.next_begin);
    visit(share.worker, stop - token);
    token = stop;
    if (token >= end) return;
    // token = the next share's first token: the largest r with begin(r) <= token.
    ++share.worker;
    share.next_begin = DataloaderBegin(total, workers, share.worker + 1);
    while (share.worker + 1 < workers && share.next_begin <= token)
      share.next_begin = DataloaderBegin(total, workers, ++share.worker + 1);
  }
}

// ---- validation -----------------------------------------------------------

struct ValidateOptions {
  // Also check that forward stages send K/V only to workers that compute
  // with it and never twice (no redundant traffic). The format permits relays
  // (a worker forwarding a block it received) and redundancy; FCP plans
  // have no redundancy.
  bool forbid_redundant_transfers = false;
};

// Checks every rule of PLAN_FORMAT.md: header fields, token coverage (every
// token in exactly one segment of one block), token cap, per-stage holding,
// every required pair computed exactly once in each pass and no other, dK/dV
// partials returned to owners after last use, congestion (<= coalesce sends
// and receives per worker per stage), and those of the project's extensions
// (docs/plan-format.md: row ranges; remote compute: queries held by the
// computing worker, partial O / dQ returned to the owner exactly once after
// its last compute). Throws Error(kInvalidPlan) naming the first broken
// rule. Cost: O(blocks + segments + transfers + pairs) plus the required-pair
// enumeration.
void ValidatePlan(const Plan& plan, const ValidateOptions& options = {});

}  // namespace fcp
