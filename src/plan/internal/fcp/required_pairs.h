// fcp/required_pairs.h — which block pairs a plan must compute, and how much
// work each is.
//
// Query block i requires key/value block j when some query token of i attends
// some key token of j under the mask (PLAN_FORMAT.md, "Required pairs").
// SequenceIndex maps every sequence to the segments that tile it, so the key
// segments a query segment needs are found by binary search rather than by
// scanning blocks. Cost of RequiredPairs: O(S log S + C + P log P) for S
// segments, C candidate (query segment, key piece) pairs and P required
// pairs; no token is ever enumerated. Memory: O(S + P + the largest row's
// candidates), so a ring plan (each row listing every K/V block once per
// chunk, C ~ 5e8 for P = 65536 at N = 256) fits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fcp/mask.h"
#include "fcp/plan.h"
#include "plan/buckets.h"

namespace fcp {

// Beyond this many required block pairs (bounded from above per query row by
// min(candidates, blocks)) the lists would take gigabytes (16 bytes a pair in
// RequiredPairs, more in a plan): a clear error instead of running out of
// memory. Every sequence gives at least one pair, so this also bounds
// the sequences of a plannable batch (kMaxSequences in fcp/workload.h).
inline constexpr int64_t kMaxRequiredPairs = int64_t{1} << 27;

struct RequiredPair {
  int32_t q_block = 0;
  int32_t kv_block = 0;
  int64_t token_pairs = 0;  // allowed (q, k) token pairs, > 0
  bool operator==(const RequiredPair&) const = default;
};

// Per sequence, its segments sorted by start: (start, length, block).
class SequenceIndex {
 public:
  struct Piece {
    int64_t start;
    int64_t length;
    int32_t block;
  };
  // Throws Error(kInvalidPlan) if the segments of `blocks` do not tile every
  // sequence exactly once (gap, overlap, out-of-range seq or token).
  SequenceIndex(const std::vector<int64_t>& sequences, const std::vector<Block>& blocks);
  std::span<const Piece> pieces(int32_t seq) const { return pieces_.row(seq); }

 private:
  // Row s: the pieces of sequence s. int64_t offsets: a plan file may hold
  // more segments than an int32_t counts.
  detail::Rows<Piece, int64_t> pieces_;
};

// Every required pair, sorted by (q_block, kv_block), each once.
// Error(kInvalidArgument) when the pairs could number more than 2^27 (sum over
// query blocks of min(candidates, blocks)): gigabytes, refused up front.
// From 2^17 candidate pairs, or any number with `spare_core` (the caller's
// second core idle meanwhile), the later half of the rows is listed on a
// thread of its own (std::async, joined before returning; the same pairs).
std::vector<RequiredPair> RequiredPairs(const std::vector<int64_t>& sequences,
                                        const std::vector<Block>& blocks, const Mask& mask,
                                        bool spare_core = false);
std::vector<RequiredPair> RequiredPairs(const std::vector<int64_t>& sequences,
                                        const std::vector<Block>& blocks, const Mask& mask,
                                        const SequenceIndex& index, bool spare_core = false);

// The smallest range of `kv`'s rows (its segments concatenated, in order)
// holding every key row that some query of `q` attends under `mask`; empty
// ({0, 0}) when none does. Exact for one query segment (AttendedKeys); a
// covering range when q's segments attend parts of kv that are not adjacent
// (a full mask reaching kv's first and last segments). Used for transfers
// that carry part of a block (docs/plan-format.md, "Row ranges").
// O(segments of q x segments of kv).
TokenRange AttendedRows(const std::vector<int64_t>& sequences, const Block& q, const Block& kv,
                        const Mask& mask);

// For every K/V block and every worker other than its owner that computes
// with it, the rows that worker's query blocks attend: the smallest range
// covering AttendedRows over its required pairs with the block. Sorted by
// (block, worker), each once. owner[b]: block b's worker; `required`: the
// blocks' required pairs. O(P + B + W log W per block) for P required
// pairs, B blocks and W receivers of a block, plus AttendedRows (segments
// of the two blocks) for each pair until its receiver's span is whole.
struct AttendedSpan {
  int32_t kv_block = 0;
  int32_t worker = 0;
  TokenRange rows;
};
std::vector<AttendedSpan> AttendedSpans(const std::vector<int64_t>& sequences,
                                        const std::vector<Block>& blocks,
                                        const std::vector<int32_t>& owner, const Mask& mask,
                                        const std::vector<RequiredPair>& required);

// Cuts every direct K/V transfer of a plan (a block sent by its owner
// straight to a worker that computes with it, its partial straight back) to
// the rows its receiver attends (AttendedSpans); the partial coming back
// gets the same rows. A transfer whose receiver attends every row stays
// whole, so a plan where no receiver can do with less is unchanged. A
// relayed block (some K/V send of it from a worker that does not own it,
// or a partial of it sent to one: node relays) keeps whole blocks on every
// hop, so that a forwarder always holds what it forwards. `required`: the
// plan's required pairs. O(required pairs x segments of their two blocks +
// transfers + receivers of a cut block per transfer of it).
void TrimTransfersToAttendedRows(Plan& plan, const std::vector<RequiredPair>& required);

}  // namespace fcp
