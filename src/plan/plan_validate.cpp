// ValidatePlan: every rule of PLAN_FORMAT.md, first broken rule reported.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "fcp/error.h"
#include "fcp/plan.h"
#include "fcp/plan_limits.h"
#include "fcp/required_pairs.h"

namespace fcp {
namespace {

// kMaxWorkers, kMaxSequenceTokens, kMaxTotalTokens, kMaxTokenPairs:
// fcp/plan_limits.h.
// Forward K/V traffic, in tokens moved: with <= 2^22 bytes per token
// (AttentionShape::validate) every byte count of the metrics fits int64.
constexpr int64_t kMaxTransferredTokens = int64_t{1} << 40;

[[noreturn]] void Fail(const std::string& what) {
  throw Error(ErrorCode::kInvalidPlan, "plan: " + what);
}

uint64_t Key(int32_t worker, int32_t block) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(worker)) << 32) |
         static_cast<uint32_t>(block);
}

std::string TransferText(const Transfer& t) {
  return "[" + std::to_string(t.block) + ", " + std::to_string(t.src) + ", " +
         std::to_string(t.dst) + "]";
}

std::string RowsText(TokenRange r) {
  return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

// a holds every row of b (an empty b is held by anything).
bool Covers(TokenRange a, TokenRange b) {
  return b.empty() || (a.begin <= b.begin && b.end <= a.end);
}

TokenRange Union(TokenRange a, TokenRange b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {std::min(a.begin, b.begin), std::max(a.end, b.end)};
}

std::string PairText(const BlockPair& p) {
  return "[" + std::to_string(p.q_block) + ", " + std::to_string(p.kv_block) + "]";
}

void CheckHeader(const Plan& plan) {
  if (plan.workers < 1) Fail("workers must be >= 1, got " + std::to_string(plan.workers));
  // Per-worker tables are allocated from `workers`: reject absurd counts (a
  // hostile or corrupt file) before allocating. Same bound as PlannerConfig.
  if (plan.workers > kMaxWorkers)
    Fail("workers must be <= 2^20, got " + std::to_string(plan.workers));
  if (plan.coalesce < 1) Fail("coalesce must be >= 1, got " + std::to_string(plan.coalesce));
  if (plan.block_size < 1) Fail("block_size must be >= 1, got " + std::to_string(plan.block_size));
  if (plan.token_cap < 1) Fail("token_cap must be >= 1, got " + std::to_string(plan.token_cap));
  try {
    plan.mask.validate();
    plan.attention.validate();
  } catch (const Error& e) {
    Fail(e.what());
  }
  if (plan.sequences.empty()) Fail("sequences is empty");
  int64_t total = 0;
  __int128 squares = 0;
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    if (plan.sequences[s] < 1)
      Fail("sequence " + std::to_string(s) + " has length " + std::to_string(plan.sequences[s]) +
           " (must be >= 1)");
    if (plan.sequences[s] > kMaxSequenceTokens)
      Fail("sequence " + std::to_string(s) + " has length " + std::to_string(plan.sequences[s]) +
           " (must be <= 2^31)");
    total += plan.sequences[s];
    if (total > kMaxTotalTokens) Fail("sequences hold more than 2^40 tokens");
    // Allowed token pairs, summed over any set of block pairs, stay in int64.
    squares += static_cast<__int128>(plan.sequences[s]) * plan.sequences[s];
    if (squares > kMaxTokenPairs)
      Fail("sequences hold more than 2^62 token pairs (sum of length^2)");
  }
}

void CheckOwners(const Plan& plan) {
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const Block& block = plan.blocks[b];
    if (block.worker < 0 || block.worker >= plan.workers)
      Fail("block " + std::to_string(b) + ": worker " + std::to_string(block.worker) +
           " is not in [0, " + std::to_string(plan.workers) + ")");
    if (block.segments.empty()) Fail("block " + std::to_string(b) + " has no segments");
  }
}

// Precondition: the segments tile the sequences (SequenceIndex), so every sum
// below is bounded by the total token count.
void CheckTokenCap(const Plan& plan) {
  std::vector<int64_t> tokens(plan.workers, 0);
  for (const Block& block : plan.blocks) tokens[block.worker] += block.tokens();
  for (int32_t w = 0; w < plan.workers; ++w)
    if (tokens[w] > plan.token_cap)
      Fail("worker " + std::to_string(w) + " owns " + std::to_string(tokens[w]) +
           " tokens, above token_cap " + std::to_string(plan.token_cap));
}

// The rows of its block a transfer carries (precondition: inside the block).
TokenRange TransferRows(const Plan& plan, const Transfer& t) {
  return t.all_rows() ? TokenRange{0, plan.blocks[t.block].tokens()}
                      : TokenRange{t.row_begin, t.row_begin + t.row_count};
}

// Tracks which worker holds which rows of which K/V blocks during one pass:
// the owner all of them, any other worker the rows of its latest receipt of
// the block (a receipt replaces the one before: the executors read the
// latest; docs/plan-format.md, "Row ranges").
class Holdings {
 public:
  explicit Holdings(const Plan& plan) : plan_(plan) {}
  // Empty when `worker` holds none of the block.
  TokenRange rows(int32_t worker, int32_t block) const {
    if (plan_.blocks[block].worker == worker) return {0, plan_.blocks[block].tokens()};
    const auto it = received_.find(Key(worker, block));
    return it == received_.end() ? TokenRange{0, 0} : it->second;
  }
  bool holds(int32_t worker, int32_t block) const {
    return plan_.blocks[block].worker == worker || received_.count(Key(worker, block)) > 0;
  }
  // Returns false if `worker` already held some of it.
  bool receive(int32_t worker, int32_t block, TokenRange rows) {
    const bool held = holds(worker, block);
    if (plan_.blocks[block].worker != worker) received_[Key(worker, block)] = rows;
    return !held;
  }
  // Whether `worker` holds every row of kv_block that q_block attends. The
  // attended rows are worked out only when it holds part of the block.
  bool holds_attended(int32_t worker, int32_t q_block, int32_t kv_block) const {
    if (plan_.blocks[kv_block].worker == worker) return true;
    const auto it = received_.find(Key(worker, kv_block));
    if (it == received_.end()) return false;
    if (it->second.begin == 0 && it->second.end == plan_.blocks[kv_block].tokens()) return true;
    return Covers(it->second, AttendedRows(plan_.sequences, plan_.blocks[q_block],
                                           plan_.blocks[kv_block], plan_.mask));
  }

 private:
  const Plan& plan_;
  std::unordered_map<uint64_t, TokenRange> received_;
};

// Checks one stage's transfers for ranges, src != dst and congestion.
void CheckTransfers(const Plan& plan, const std::vector<Transfer>& transfers,
                    const std::string& where, std::vector<int32_t>& send_count,
                    std::vector<int32_t>& recv_count) {
  // The counters are all zero on entry and reset below by walking the
  // transfers again: O(transfers) per stage, not O(workers), so many empty
  // stages on many workers stay cheap.
  const int32_t n_blocks = static_cast<int32_t>(plan.blocks.size());
  for (const Transfer& t : transfers) {
    // The context is built only to report a failure: building its string
    // for every transfer would dominate a large plan's validation.
    const auto w = [&] { return where + " " + TransferText(t) + ": "; };
    if (t.block < 0 || t.block >= n_blocks) Fail(w() + "block does not exist");
    if (t.src < 0 || t.src >= plan.workers) Fail(w() + "src is not a worker");
    if (t.dst < 0 || t.dst >= plan.workers) Fail(w() + "dst is not a worker");
    if (t.src == t.dst) Fail(w() + "src == dst");
    if (!t.all_rows()) {
      const int64_t tokens = plan.blocks[t.block].tokens();
      if (t.row_begin < 0 || t.row_count < 1 || t.row_count > tokens - t.row_begin)
        Fail(w() + "rows [" + std::to_string(t.row_begin) + ", +" + std::to_string(t.row_count) +
             ") are not inside block " + std::to_string(t.block) + "'s " + std::to_string(tokens) +
             " rows");
    }
    if (++send_count[t.src] > plan.coalesce)
      Fail(w() + "worker " + std::to_string(t.src) + " sends more than coalesce = " +
           std::to_string(plan.coalesce) + " blocks in this stage");
    if (++recv_count[t.dst] > plan.coalesce)
      Fail(w() + "worker " + std::to_string(t.dst) + " receives more than coalesce = " +
           std::to_string(plan.coalesce) + " blocks in this stage");
  }
  for (const Transfer& t : transfers) send_count[t.src] = recv_count[t.dst] = 0;
}

void CheckPairsComputedOnce(std::vector<BlockPair> computed,
                            const std::vector<RequiredPair>& required, const char* pass) {
  std::sort(computed.begin(), computed.end(), [](const BlockPair& a, const BlockPair& b) {
    return a.q_block != b.q_block ? a.q_block < b.q_block : a.kv_block < b.kv_block;
  });
  size_t r = 0;
  for (size_t c = 0; c < computed.size(); ++c) {
    if (c > 0 && computed[c] == computed[c - 1])
      Fail(std::string(pass) + ": pair " + PairText(computed[c]) + " is computed more than once");
    while (r < required.size() && (required[r].q_block < computed[c].q_block ||
                                   (required[r].q_block == computed[c].q_block &&
                                    required[r].kv_block < computed[c].kv_block)))
      Fail(std::string(pass) + ": required pair [" + std::to_string(required[r].q_block) + ", " +
           std::to_string(required[r].kv_block) + "] is never computed");
    if (r == required.size() || required[r].q_block != computed[c].q_block ||
        required[r].kv_block != computed[c].kv_block)
      Fail(std::string(pass) + ": pair " + PairText(computed[c]) +
           " is computed but not required by the mask");
    ++r;
  }
  if (r < required.size())
    Fail(std::string(pass) + ": required pair [" + std::to_string(required[r].q_block) + ", " +
         std::to_string(required[r].kv_block) + "] is never computed");
}

// The remote-compute extension (docs/plan-format.md) in one pass: which
// workers hold which query blocks (received by `send_q`), and the partial
// outputs (forward O, backward dQ) each worker holds and has not yet
// returned. A query block comes only from its owner; a partial goes only to
// the owner, exactly once, in a stage after the worker's last compute with it.
class RemoteQueries {
 public:
  RemoteQueries(const Plan& plan, const char* partial) : plan_(plan), partial_(partial) {}
  bool holds(int32_t worker, int32_t block) const {
    return plan_.blocks[block].worker == worker || held_.count(Key(worker, block)) > 0;
  }
  // A stage's returns, before its compute.
  void Return(const std::vector<Transfer>& returns, const std::string& where) {
    for (const Transfer& t : returns) {
      const auto w = [&] { return where + " " + TransferText(t) + ": "; };
      if (!t.all_rows()) Fail(w() + "a partial output carries all of its block's rows");
      if (t.dst != plan_.blocks[t.block].worker)
        Fail(w() + "a partial " + partial_ + " goes to the owner of block " +
             std::to_string(t.block) + ", worker " + std::to_string(plan_.blocks[t.block].worker));
      if (pending_.erase(Key(t.src, t.block)) == 0)
        Fail(w() + "worker " + std::to_string(t.src) + " holds no unreturned partial " + partial_ +
             " of block " + std::to_string(t.block) + " before this stage");
      returned_.insert(Key(t.src, t.block));
    }
  }
  // A compute by `worker`, after CheckCompute.
  void Compute(const BlockPair& p, int32_t worker, const std::string& where) {
    if (worker == plan_.blocks[p.q_block].worker) return;
    if (returned_.count(Key(worker, p.q_block)))
      Fail(where + " compute " + PairText(p) + ": worker " + std::to_string(worker) +
           " already returned its partial " + partial_ + " of block " + std::to_string(p.q_block));
    pending_.insert(Key(worker, p.q_block));
  }
  // A stage's send_q, after its compute (usable from the next stage).
  void Receive(const std::vector<Transfer>& send_q, const std::string& where) {
    for (const Transfer& t : send_q) {
      const auto w = [&] { return where + " " + TransferText(t) + ": "; };
      if (!t.all_rows()) Fail(w() + "a query block moves with all of its rows");
      if (t.src != plan_.blocks[t.block].worker)
        Fail(w() + "only the owner of block " + std::to_string(t.block) + ", worker " +
             std::to_string(plan_.blocks[t.block].worker) + ", sends its queries");
      held_.insert(Key(t.dst, t.block));
    }
  }
  void CheckDone(const char* pass) const {
    if (pending_.empty()) return;
    uint64_t first = *pending_.begin();
    for (uint64_t key : pending_) first = std::min(first, key);
    Fail(std::string(pass) + ": worker " + std::to_string(first >> 32) +
         " never returns its partial " + partial_ + " of block " +
         std::to_string(static_cast<uint32_t>(first)) + " to the owner");
  }

 private:
  const Plan& plan_;
  const char* partial_;
  std::unordered_set<uint64_t> held_, pending_, returned_;
};

void CheckCompute(const Plan& plan, const Holdings& holdings, const RemoteQueries& queries,
                  const BlockPair& p, const std::string& where) {
  const int32_t n_blocks = static_cast<int32_t>(plan.blocks.size());
  const auto w = [&] { return where + " compute " + PairText(p) + ": "; };
  if (p.q_block < 0 || p.q_block >= n_blocks) Fail(w() + "q_block does not exist");
  if (p.kv_block < 0 || p.kv_block >= n_blocks) Fail(w() + "kv_block does not exist");
  if (p.worker != kOwner) {
    if (p.worker < 0 || p.worker >= plan.workers)
      Fail(w() + "worker " + std::to_string(p.worker) + " is not a worker");
    if (p.worker == plan.blocks[p.q_block].worker)
      Fail(w() + "names the owner of block " + std::to_string(p.q_block) +
           " as its worker (write [q_block, kv_block])");
    if (!queries.holds(p.worker, p.q_block))
      Fail(w() + "worker " + std::to_string(p.worker) + " does not hold block " +
           std::to_string(p.q_block) + "'s queries at this stage");
  }
  const int32_t worker = ComputeWorker(plan.blocks, p);
  if (!holdings.holds(worker, p.kv_block))
    Fail(w() + "worker " + std::to_string(worker) + " does not hold block " +
         std::to_string(p.kv_block) + "'s keys/values at this stage");
  if (!holdings.holds_attended(worker, p.q_block, p.kv_block))
    Fail(w() + "worker " + std::to_string(worker) + " holds rows " +
         RowsText(holdings.rows(worker, p.kv_block)) + " of block " + std::to_string(p.kv_block) +
         ", not every row block " + std::to_string(p.q_block) + " attends " +
         RowsText(AttendedRows(plan.sequences, plan.blocks[p.q_block], plan.blocks[p.kv_block],
                               plan.mask)));
}

// Applies a stage's K/V transfers after checking that each sender holds the
// block; with `forbid_redundant`, a receiver must not already hold it.
void ApplyKvTransfers(const Plan& plan, const std::vector<Transfer>& transfers, Holdings& holdings,
                      const std::string& where, bool forbid_redundant) {
  for (const Transfer& t : transfers) {
    if (!holdings.holds(t.src, t.block))
      Fail(where + " " + TransferText(t) + ": worker " + std::to_string(t.src) +
           " does not hold block " + std::to_string(t.block) + " at this stage");
    if (!t.all_rows() && !Covers(holdings.rows(t.src, t.block), TransferRows(plan, t)))
      Fail(where + " " + TransferText(t) + ": worker " + std::to_string(t.src) + " holds rows " +
           RowsText(holdings.rows(t.src, t.block)) + " of block " + std::to_string(t.block) +
           ", not the rows " + RowsText(TransferRows(plan, t)) + " it sends");
  }
  for (const Transfer& t : transfers)
    if (!holdings.receive(t.dst, t.block, TransferRows(plan, t)) && forbid_redundant)
      Fail(where + " " + TransferText(t) + ": worker " + std::to_string(t.dst) +
           " already holds block " + std::to_string(t.block) + " (redundant transfer)");
}

void CheckForward(const Plan& plan, const std::vector<RequiredPair>& required,
                  const ValidateOptions& options) {
  Holdings holdings(plan);
  RemoteQueries queries(plan, "O");
  std::vector<int32_t> send_count(plan.workers), recv_count(plan.workers);
  std::vector<BlockPair> computed;
  int64_t transferred_tokens = 0;
  for (size_t t = 0; t < plan.forward.size(); ++t) {
    const ForwardStage& stage = plan.forward[t];
    const std::string where = "forward stage " + std::to_string(t);
    CheckTransfers(plan, stage.send, where + " send", send_count, recv_count);
    for (const Transfer& s : stage.send) {
      transferred_tokens += s.rows(plan.blocks[s.block].tokens());  // each <= 2^40: no overflow
      if (transferred_tokens > kMaxTransferredTokens)
        Fail(where + ": forward transfers move more than 2^40 tokens in all");
    }
    CheckTransfers(plan, stage.send_q, where + " send_q", send_count, recv_count);
    CheckTransfers(plan, stage.send_o, where + " send_o", send_count, recv_count);
    queries.Return(stage.send_o, where + " send_o");
    for (const BlockPair& p : stage.compute) {
      CheckCompute(plan, holdings, queries, p, where);
      queries.Compute(p, ComputeWorker(plan.blocks, p), where);
    }
    computed.insert(computed.end(), stage.compute.begin(), stage.compute.end());
    ApplyKvTransfers(plan, stage.send, holdings, where + " send",
                     options.forbid_redundant_transfers);
    queries.Receive(stage.send_q, where + " send_q");
  }
  queries.CheckDone("forward");
  CheckPairsComputedOnce(std::move(computed), required, "forward");
}

void CheckBackward(const Plan& plan, const std::vector<RequiredPair>& required,
                   const ValidateOptions& options) {
  Holdings holdings(plan);
  RemoteQueries queries(plan, "dQ");
  std::vector<int32_t> send_count(plan.workers), recv_count(plan.workers);
  std::vector<BlockPair> computed;
  // Partial dK/dV of block j held by worker w and not yet sent on: (w, j),
  // with the span of its rows that may be non-zero (the rows its computes
  // attend and the rows of partials relayed into it). The spans are worked
  // out only when some partial transfer carries part of its block: then it
  // must carry that whole span.
  std::unordered_map<uint64_t, TokenRange> pending;
  bool rows_matter = false;
  for (const BackwardStage& stage : plan.backward)
    for (const Transfer& d : stage.send_dkv) rows_matter = rows_matter || !d.all_rows();
  // (w, j) for which w has sent its partial: w may not compute with j again.
  std::unordered_set<uint64_t> sent;
  // (w, j) for which w holds a partial relayed to it: sent on whole, as relays
  // are (docs/plan-format.md, "Row ranges": the executors match a relayed
  // partial to the send that forwards it by its rows).
  std::unordered_set<uint64_t> relay_in;
  for (size_t t = 0; t < plan.backward.size(); ++t) {
    const BackwardStage& stage = plan.backward[t];
    const std::string where = "backward stage " + std::to_string(t);
    CheckTransfers(plan, stage.send_kv, where + " send_kv", send_count, recv_count);
    CheckTransfers(plan, stage.send_dkv, where + " send_dkv", send_count, recv_count);
    CheckTransfers(plan, stage.send_q, where + " send_q", send_count, recv_count);
    CheckTransfers(plan, stage.send_dq, where + " send_dq", send_count, recv_count);
    queries.Return(stage.send_dq, where + " send_dq");
    std::vector<Transfer> relayed;
    for (const Transfer& d : stage.send_dkv) {
      const auto w = [&] { return where + " send_dkv " + TransferText(d) + ": "; };
      const int32_t owner = plan.blocks[d.block].worker;
      if (d.src == owner) Fail(w() + "the owner of a block never sends its dK/dV");
      const auto partial = pending.find(Key(d.src, d.block));
      if (partial == pending.end())
        Fail(w() + "worker " + std::to_string(d.src) + " holds no unsent partial dK/dV of block " +
             std::to_string(d.block) + " before this stage");
      if (!d.all_rows() && (d.dst != owner || relay_in.count(Key(d.src, d.block))))
        Fail(w() + "a relayed partial dK/dV carries all of its block's rows");
      if (!d.all_rows() && !Covers(TransferRows(plan, d), partial->second))
        Fail(w() + "it sends rows " + RowsText(TransferRows(plan, d)) +
             " of the partial, whose rows " + RowsText(partial->second) + " may be non-zero");
      pending.erase(partial);
      sent.insert(Key(d.src, d.block));
      if (d.dst != owner) relayed.push_back(d);
    }
    for (const BlockPair& p : stage.compute) {
      CheckCompute(plan, holdings, queries, p, where);
      const int32_t worker = ComputeWorker(plan.blocks, p);
      queries.Compute(p, worker, where);
      if (worker == plan.blocks[p.kv_block].worker) continue;
      if (sent.count(Key(worker, p.kv_block)))
        Fail(where + " compute " + PairText(p) + ": worker " + std::to_string(worker) +
             " already sent its partial dK/dV of block " + std::to_string(p.kv_block));
      TokenRange& span = pending[Key(worker, p.kv_block)];
      if (rows_matter)
        span = Union(span, AttendedRows(plan.sequences, plan.blocks[p.q_block],
                                        plan.blocks[p.kv_block], plan.mask));
    }
    computed.insert(computed.end(), stage.compute.begin(), stage.compute.end());
    for (const Transfer& d : relayed) {
      if (sent.count(Key(d.dst, d.block)))
        Fail(where + " send_dkv " + TransferText(d) + ": relay target " + std::to_string(d.dst) +
             " already sent its partial dK/dV of block " + std::to_string(d.block));
      TokenRange& span = pending[Key(d.dst, d.block)];
      if (rows_matter) span = Union(span, TransferRows(plan, d));
      relay_in.insert(Key(d.dst, d.block));
    }
    ApplyKvTransfers(plan, stage.send_kv, holdings, where + " send_kv",
                     options.forbid_redundant_transfers);
    queries.Receive(stage.send_q, where + " send_q");
  }
  queries.CheckDone("backward");
  if (!pending.empty()) {
    // Report the smallest (worker, block) so the message is deterministic.
    uint64_t first = pending.begin()->first;
    for (const auto& [key, span] : pending) first = std::min(first, key);
    Fail("backward: worker " + std::to_string(first >> 32) +
         " never returns its partial dK/dV of block " +
         std::to_string(static_cast<uint32_t>(first)) + " to the owner");
  }
  CheckPairsComputedOnce(std::move(computed), required, "backward");
}

}  // namespace

void ValidatePlan(const Plan& plan, const ValidateOptions& options) {
  CheckHeader(plan);
  CheckOwners(plan);
  const SequenceIndex index(plan.sequences, plan.blocks);
  CheckTokenCap(plan);
  const std::vector<RequiredPair> required =
      RequiredPairs(plan.sequences, plan.blocks, plan.mask, index);
  CheckForward(plan, required, options);
  CheckBackward(plan, required, options);
}

}  // namespace fcp
