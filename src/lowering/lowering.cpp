#include "fcp/lowering.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <tuple>

#include "fcp/error.h"

namespace fcp {
namespace {

[[noreturn]] void Broken(const std::string& what) {
  throw Error(ErrorCode::kInvalidPlan, "lowering: " + what);
}

// Error(kInvalidPlan) unless `block` is a block of `plan`.
void CheckBlock(const Plan& plan, int32_t block, const std::string& where) {
  if (block < 0 || static_cast<size_t>(block) >= plan.blocks.size())
    Broken(where + ": block " + std::to_string(block) + " is not in [0, " +
           std::to_string(plan.blocks.size()) + ")");
}

// Every index the lowering follows, checked before it follows any: block
// owners, segments within their sequences, the blocks of every pair and
// transfer, the workers of every transfer, sequence lengths >= 0. With these in range the rest of
// the lowering indexes with [] (its other checks are of the stage rules).
// O(blocks + segments + pairs + transfers).
void CheckIndices(const Plan& plan) {
  const auto worker = [&](int32_t w, const std::string& where, const char* role) {
    if (w < 0 || w >= plan.workers)
      Broken(where + ": " + role + " " + std::to_string(w) + " is not in [0, " +
             std::to_string(plan.workers) + ")");
  };
  for (size_t s = 0; s < plan.sequences.size(); ++s)
    if (plan.sequences[s] < 0)
      Broken("sequence " + std::to_string(s) + " has length " + std::to_string(plan.sequences[s]));
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const std::string where = "block " + std::to_string(b);
    worker(plan.blocks[b].worker, where, "owner");
    for (const Segment& s : plan.blocks[b].segments) {
      if (s.seq < 0 || static_cast<size_t>(s.seq) >= plan.sequences.size())
        Broken(where + ": sequence " + std::to_string(s.seq) + " is not in [0, " +
               std::to_string(plan.sequences.size()) + ")");
      if (s.start < 0 || s.length < 0 || s.start + s.length > plan.sequences[s.seq])
        Broken(where + ": segment [" + std::to_string(s.start) + ", " +
               std::to_string(s.start + s.length) + ") is outside sequence " +
               std::to_string(s.seq) + " of " + std::to_string(plan.sequences[s.seq]) + " tokens");
    }
  }
  const auto pairs = [&](const std::vector<BlockPair>& compute, const std::string& where) {
    for (const BlockPair& pr : compute) {
      CheckBlock(plan, pr.q_block, where);
      CheckBlock(plan, pr.kv_block, where);
      if (pr.worker != kOwner) worker(pr.worker, where, "computing worker");
    }
  };
  const auto transfers = [&](const std::vector<Transfer>& sends, const std::string& where) {
    for (const Transfer& tr : sends) {
      CheckBlock(plan, tr.block, where);
      worker(tr.src, where, "source");
      worker(tr.dst, where, "destination");
      if (!tr.all_rows() && (tr.row_begin < 0 || tr.row_count < 1 ||
                             tr.row_count > plan.blocks[tr.block].tokens() - tr.row_begin))
        Broken(where + ": the rows of a transfer of block " + std::to_string(tr.block) +
               " are outside the block");
    }
  };
  // Query rows and partial outputs move whole blocks (docs/plan-format.md).
  const auto whole = [&](const std::vector<Transfer>& sends, const std::string& where,
                         const char* list) {
    transfers(sends, where);
    for (const Transfer& tr : sends)
      if (!tr.all_rows())
        Broken(where + ": " + list + " of block " + std::to_string(tr.block) +
               " carries a row range (only whole blocks)");
  };
  for (size_t t = 0; t < plan.forward.size(); ++t) {
    const std::string where = "forward stage " + std::to_string(t);
    pairs(plan.forward[t].compute, where);
    transfers(plan.forward[t].send, where);
    whole(plan.forward[t].send_q, where, "send_q");
    whole(plan.forward[t].send_o, where, "send_o");
  }
  for (size_t t = 0; t < plan.backward.size(); ++t) {
    const std::string where = "backward stage " + std::to_string(t);
    pairs(plan.backward[t].compute, where);
    transfers(plan.backward[t].send_kv, where);
    transfers(plan.backward[t].send_dkv, where);
    whole(plan.backward[t].send_q, where, "send_q");
    whole(plan.backward[t].send_dq, where, "send_dq");
  }
}

// First-fit placement of row intervals that live over a range of stages.
// Requests must come in non-decreasing order of their first stage.
class SlotAllocator {
 public:
  int64_t Allocate(int64_t rows, int64_t first_stage, int64_t last_stage) {
    std::erase_if(live_, [&](const Live& l) { return l.last_stage < first_stage; });
    std::sort(live_.begin(), live_.end(),
              [](const Live& a, const Live& b) { return a.row < b.row; });
    int64_t row = 0;
    for (const Live& l : live_) {
      if (l.row - row >= rows) break;
      row = std::max(row, l.row + l.rows);
    }
    live_.push_back({row, rows, last_stage});
    peak_rows_ = std::max(peak_rows_, row + rows);
    return row;
  }
  int64_t peak_rows() const { return peak_rows_; }

 private:
  struct Live {
    int64_t row, rows, last_stage;
  };
  std::vector<Live> live_;
  int64_t peak_rows_ = 0;
};

// A K/V receipt of one rank in one pass: where its rows go and how long it lives.
struct Receipt {
  int32_t block;
  int64_t stage;
  int64_t last_use;
  int64_t pool_row = 0;
};

// The transfers of a stage that move K/V (forward send, backward send_kv).
const std::vector<Transfer>& KvSends(const ForwardStage& s) { return s.send; }
const std::vector<Transfer>& KvSends(const BackwardStage& s) { return s.send_kv; }
// The remote-compute extension's transfers: query rows, and partial outputs home.
const std::vector<Transfer>& PartialOutputSends(const ForwardStage& s) { return s.send_o; }
const std::vector<Transfer>& PartialOutputSends(const BackwardStage& s) { return s.send_dq; }

template <typename Stage>
class PassLowering {
 public:
  PassLowering(const Plan& plan, const std::vector<Stage>& stages, RankProgram& program,
               const char* pass)
      : plan_(plan), stages_(stages), p_(program), me_(program.rank), pass_(pass) {}

  // Receipts of K/V, their last uses, and their pool slots; fills kv_recv,
  // kv_send and the compute calls' K/V rows of `out`.
  void LowerKv(PassProgram& out) {
    out.stages.resize(stages_.size());
    std::map<int32_t, std::vector<size_t>> receipts_of;  // block -> receipt ids, by stage
    for (size_t t = 0; t < stages_.size(); ++t)
      for (const Transfer& tr : KvSends(stages_[t]))
        if (tr.dst == me_) {
          if (Owned(tr.block))
            Broken(Where(t) + ": rank " + std::to_string(me_) + " receives its own block " +
                   std::to_string(tr.block));
          receipts_of[tr.block].push_back(receipts_.size());
          receipts_.push_back({tr.block, static_cast<int64_t>(t), static_cast<int64_t>(t)});
        }
    // The receipt a use of `block` at stage t reads: the latest one before t.
    auto holding = [&](int32_t block, size_t t) -> Receipt& {
      auto it = receipts_of.find(block);
      const Receipt* found = nullptr;
      size_t id = 0;
      if (it != receipts_of.end())
        for (size_t r : it->second)
          if (receipts_[r].stage < static_cast<int64_t>(t)) {
            found = &receipts_[r];
            id = r;
          }
      if (!found)
        Broken(Where(t) + ": rank " + std::to_string(me_) + " uses K/V of block " +
               std::to_string(block) + " it does not hold");
      return receipts_[id];
    };
    for (size_t t = 0; t < stages_.size(); ++t) {
      for (const BlockPair& pr : stages_[t].compute)
        if (Computes(pr) && !Owned(pr.kv_block)) {
          Receipt& r = holding(pr.kv_block, t);
          r.last_use = std::max(r.last_use, static_cast<int64_t>(t));
        }
      for (const Transfer& tr : KvSends(stages_[t]))
        if (tr.src == me_ && !Owned(tr.block)) {
          Receipt& r = holding(tr.block, t);
          r.last_use = std::max(r.last_use, static_cast<int64_t>(t));
        }
    }
    SlotAllocator pool;
    for (Receipt& r : receipts_) r.pool_row = pool.Allocate(Tokens(r.block), r.stage, r.last_use);
    out.pool_rows = pool.peak_rows();
    for (size_t t = 0; t < stages_.size(); ++t) {
      int64_t live = 0;
      for (const Receipt& r : receipts_)
        live += r.stage <= static_cast<int64_t>(t) && static_cast<int64_t>(t) <= r.last_use;
      out.peak_slots = std::max(out.peak_slots, live);
    }
    size_t next_receipt = 0;
    for (size_t t = 0; t < stages_.size(); ++t) {
      StageProgram& sp = out.stages[t];
      for (const Transfer& tr : KvSends(stages_[t])) {
        if (tr.dst == me_) {
          const Receipt& r = receipts_[next_receipt++];
          sp.kv_recv.push_back({tr.block, tr.src, r.pool_row, tr.rows(Tokens(tr.block)),
                                tr.row_begin, Tokens(tr.block)});
        }
        if (tr.src == me_) {
          if (tr.dst == me_)
            Broken(Where(t) + ": block " + std::to_string(tr.block) + " sent to itself");
          const int64_t block_rows = Tokens(tr.block), rows = tr.rows(block_rows);
          if (Owned(tr.block))
            sp.kv_send.push_back(
                {tr.block, tr.dst, false, p_.block_row[tr.block], rows, tr.row_begin, block_rows});
          else
            sp.kv_send.push_back({tr.block, tr.dst, true, holding(tr.block, t).pool_row, rows,
                                  tr.row_begin, block_rows});
        }
      }
      for (const BlockPair& pr : stages_[t].compute) {
        if (!Computes(pr)) continue;
        ComputeCall c;
        c.q_block = pr.q_block;
        c.kv_block = pr.kv_block;
        c.q_row = p_.block_row[pr.q_block];  // remote compute: LowerRemoteCompute sets it
        c.q_rows = Tokens(pr.q_block);
        c.kv_rows = Tokens(pr.kv_block);
        c.kv_in_pool = !Owned(pr.kv_block);
        c.kv_row = c.kv_in_pool ? holding(pr.kv_block, t).pool_row : p_.block_row[pr.kv_block];
        c.dkv_row = c.kv_row;  // the backward's partial pass overrides this for remote blocks
        const std::vector<SegmentPair> segs = BlockPairSegments(plan_, pr.q_block, pr.kv_block);
        c.segment_begin = static_cast<int64_t>(p_.segments.size());
        p_.segments.insert(p_.segments.end(), segs.begin(), segs.end());
        c.segment_end = static_cast<int64_t>(p_.segments.size());
        sp.compute.push_back(c);
      }
    }
  }

 protected:
  bool Owned(int32_t block) const { return Owner(block) == me_; }
  bool Computes(const BlockPair& pr) const { return ComputeWorker(plan_.blocks, pr) == me_; }
  int32_t Owner(int32_t block) const { return plan_.blocks[block].worker; }
  int64_t Tokens(int32_t block) const { return plan_.blocks[block].tokens(); }
  std::string Where(size_t t) const { return std::string(pass_) + " stage " + std::to_string(t); }

  const Plan& plan_;
  const std::vector<Stage>& stages_;
  RankProgram& p_;
  const int32_t me_;
  const char* pass_;
  std::vector<Receipt> receipts_;
};

// The backward's dK/dV partials: one generation per (block, first write ..
// send), placed in the partial pool.
void LowerPartials(const Plan& plan, RankProgram& p) {
  const int32_t me = p.rank;
  struct Generation {
    int32_t block;
    int64_t first, last = -1;
    int64_t row = 0;
  };
  std::vector<Generation> gens;
  std::map<int32_t, size_t> open;  // block -> generation id
  // (stage, call index) -> generation; (stage, send index) -> generation; recvs likewise.
  std::vector<std::vector<int64_t>> call_gen(plan.backward.size()), send_gen(plan.backward.size()),
      recv_gen(plan.backward.size());
  auto open_gen = [&](int32_t block, size_t t) {
    auto it = open.find(block);
    if (it != open.end()) return it->second;
    gens.push_back({block, static_cast<int64_t>(t)});
    open[block] = gens.size() - 1;
    return gens.size() - 1;
  };
  const auto where = [](size_t t) { return "backward stage " + std::to_string(t); };
  for (size_t t = 0; t < plan.backward.size(); ++t) {
    const BackwardStage& s = plan.backward[t];
    for (const ComputeCall& c : p.backward.stages[t].compute)
      call_gen[t].push_back(c.kv_in_pool ? static_cast<int64_t>(open_gen(c.kv_block, t)) : -1);
    for (const Transfer& tr : s.send_dkv) {
      if (tr.src != me) continue;
      if (plan.blocks[tr.block].worker == me)
        Broken(where(t) + ": owner " + std::to_string(me) + " sends its own dK/dV of block " +
               std::to_string(tr.block));
      auto it = open.find(tr.block);
      if (it == open.end())
        Broken(where(t) + ": rank " + std::to_string(me) + " sends dK/dV of block " +
               std::to_string(tr.block) + " with no partial");
      gens[it->second].last = static_cast<int64_t>(t);
      send_gen[t].push_back(static_cast<int64_t>(it->second));
      open.erase(it);
    }
    for (const Transfer& tr : s.send_dkv) {
      if (tr.dst != me) continue;
      recv_gen[t].push_back(
          plan.blocks[tr.block].worker == me ? -1 : static_cast<int64_t>(open_gen(tr.block, t)));
    }
  }
  if (!open.empty())
    Broken("rank " + std::to_string(me) + " never returns its partial dK/dV of block " +
           std::to_string(open.begin()->first) + " to the owner");
  std::vector<size_t> order(gens.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return gens[a].first < gens[b].first; });
  SlotAllocator pool;
  for (size_t i : order)
    gens[i].row = pool.Allocate(plan.blocks[gens[i].block].tokens(), gens[i].first, gens[i].last);
  p.backward.partial_rows = pool.peak_rows();
  for (size_t t = 0; t < plan.backward.size(); ++t) {
    StageProgram& sp = p.backward.stages[t];
    for (size_t i = 0; i < sp.compute.size(); ++i)
      if (call_gen[t][i] >= 0) {
        sp.compute[i].dkv_in_partial = true;
        sp.compute[i].dkv_row = gens[call_gen[t][i]].row;
      }
    size_t si = 0, ri = 0;
    for (const Transfer& tr : plan.backward[t].send_dkv) {
      const int64_t block_rows = plan.blocks[tr.block].tokens(), rows = tr.rows(block_rows);
      if (tr.src == me)
        sp.dkv_send.push_back(
            {tr.block, tr.dst, gens[send_gen[t][si++]].row, rows, tr.row_begin, block_rows});
      if (tr.dst == me) {
        const int64_t g = recv_gen[t][ri++];
        sp.dkv_recv.push_back({tr.block, tr.src, g >= 0,
                               g >= 0 ? gens[g].row : p.block_row[tr.block], rows, tr.row_begin,
                               block_rows});
      }
    }
  }
}

// The remote-compute extension on rank p.rank in one pass: one query slot
// per block whose queries it receives, live from the receipt to the return
// of its partial output (one of each per block and pass), placed in the
// query pool; fills the stage's query messages and its remote calls' rows.
template <typename Stage>
void LowerRemoteCompute(const Plan& plan, const std::vector<Stage>& stages, const RankProgram& p,
                        PassProgram& out, const char* pass) {
  const int32_t me = p.rank;
  struct Slot {
    int64_t first, last_compute = -1, last = -1;
    int64_t row = 0;
  };
  std::map<int32_t, Slot> slots;  // block -> its slot on me
  const auto owner = [&](int32_t b) { return plan.blocks[b].worker; };
  const auto where = [&](size_t t) { return std::string(pass) + " stage " + std::to_string(t); };
  const auto name = [](const char* what, int32_t v) {
    return std::string(what) + std::to_string(v);
  };
  for (size_t t = 0; t < stages.size(); ++t) {
    const int64_t st = static_cast<int64_t>(t);
    for (const Transfer& tr : stages[t].send_q) {
      if (tr.src != owner(tr.block) || tr.dst == tr.src)
        Broken(where(t) + ": send_q of block " + std::to_string(tr.block) + " from " +
               name("rank ", tr.src) + " to " + name("rank ", tr.dst) +
               " (only its owner sends it, to another worker)");
      if (tr.dst != me) continue;
      if (slots.count(tr.block))
        Broken(where(t) + ": " + name("rank ", me) + " receives the queries of block " +
               std::to_string(tr.block) + " a second time in the pass");
      slots[tr.block] = {st};
    }
    for (const BlockPair& pr : stages[t].compute) {
      if (ComputeWorker(plan.blocks, pr) != me || owner(pr.q_block) == me) continue;
      const auto it = slots.find(pr.q_block);
      if (it == slots.end() || it->second.first >= st || it->second.last >= 0)
        Broken(where(t) + ": " + name("rank ", me) + " computes with the queries of block " +
               std::to_string(pr.q_block) + ", which it does not hold");
      it->second.last_compute = st;
    }
    for (const Transfer& tr : PartialOutputSends(stages[t])) {
      if (tr.dst != owner(tr.block) || tr.src == tr.dst)
        Broken(where(t) + ": the partial output of block " + std::to_string(tr.block) +
               " goes from " + name("rank ", tr.src) + " to " + name("rank ", tr.dst) +
               " (only to its owner, from another worker)");
      if (tr.src != me) continue;
      const auto it = slots.find(tr.block);
      if (it == slots.end() || it->second.last >= 0 || it->second.last_compute >= st)
        Broken(where(t) + ": " + name("rank ", me) + " returns a partial output of block " +
               std::to_string(tr.block) +
               " it does not hold, or in the stage of a compute with it");
      it->second.last = st;
    }
  }
  std::vector<std::pair<int64_t, int32_t>> order;  // (first stage, block)
  for (const auto& [block, slot] : slots) {
    if (slot.last < 0)
      Broken(name("rank ", me) + " never returns its partial output of block " +
             std::to_string(block) + " in the " + pass);
    order.push_back({slot.first, block});
  }
  std::sort(order.begin(), order.end());
  SlotAllocator pool;
  for (const auto& [first, block] : order) {
    Slot& slot = slots[block];
    slot.row = pool.Allocate(plan.blocks[block].tokens(), first, slot.last);
  }
  out.query_rows = pool.peak_rows();
  for (size_t t = 0; t < stages.size(); ++t) {
    StageProgram& sp = out.stages[t];
    const auto lower = [&](const std::vector<Transfer>& list, std::vector<QueryMessage>& recv,
                           std::vector<QueryMessage>& send) {
      for (const Transfer& tr : list) {
        const int64_t rows = plan.blocks[tr.block].tokens();
        const bool owned = owner(tr.block) == me;
        const int64_t row = owned ? p.block_row[tr.block] : slots[tr.block].row;
        if (tr.src == me) send.push_back({tr.block, tr.dst, row, rows});
        if (tr.dst == me) recv.push_back({tr.block, tr.src, row, rows});
      }
    };
    lower(stages[t].send_q, sp.q_recv, sp.q_send);
    lower(PartialOutputSends(stages[t]), sp.out_recv, sp.out_send);
    for (ComputeCall& c : sp.compute)
      if (owner(c.q_block) != me) {
        c.q_in_pool = true;
        c.q_row = slots[c.q_block].row;
      }
  }
}

void LowerLayout(const Plan& plan, RankProgram& p) {
  const int32_t me = p.rank;
  const std::vector<int64_t> seq_offset = SequenceOffsets(plan.sequences);
  p.block_row.assign(plan.blocks.size(), -1);
  std::vector<std::pair<int64_t, int64_t>> owned_tokens;  // (global token, local row)
  std::vector<int32_t> dl_owner(static_cast<size_t>(p.dataloader_end - p.dataloader_begin), -1);
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const Block& block = plan.blocks[b];  // owner in range (CheckIndices)
    const bool mine = block.worker == me;
    if (mine) {
      p.owned_blocks.push_back(static_cast<int32_t>(b));
      p.block_row[b] = p.local_rows;
    }
    for (const Segment& s : block.segments) {
      const int64_t g0 = seq_offset[s.seq] + s.start;
      const int64_t lo = std::max(g0, p.dataloader_begin),
                    hi = std::min(g0 + s.length, p.dataloader_end);
      for (int64_t g = lo; g < hi; ++g) dl_owner[g - p.dataloader_begin] = block.worker;
      if (!mine) continue;
      for (int64_t t = 0; t < s.length; ++t) {
        owned_tokens.push_back({g0 + t, p.local_rows});
        p.local_token.push_back(g0 + t);
        p.local_position.push_back(s.start + t);
        ++p.local_rows;
      }
    }
  }
  std::sort(owned_tokens.begin(), owned_tokens.end());
  p.in_recv_counts.assign(p.workers, 0);
  for (const auto& [g, row] : owned_tokens) {
    p.in_recv_rows.push_back(row);
    ++p.in_recv_counts[DataloaderWorker(p.total_tokens, p.workers, g)];
  }
  p.in_send_counts.assign(p.workers, 0);
  for (int32_t w : dl_owner) {
    if (w < 0)
      Broken("a token of rank " + std::to_string(me) + "'s dataloader share is in no block");
    ++p.in_send_counts[w];
  }
  std::vector<int64_t> next(p.workers, 0);
  for (int32_t w = 1; w < p.workers; ++w) next[w] = next[w - 1] + p.in_send_counts[w - 1];
  p.in_send_rows.resize(dl_owner.size());
  for (size_t r = 0; r < dl_owner.size(); ++r)
    p.in_send_rows[next[dl_owner[r]]++] = static_cast<int64_t>(r);
}

using Need = std::pair<int64_t, int64_t>;

// Every reshuffle piece that touches rank p.rank (it holds the tokens or owns
// the block), blocks by id, a block's pieces by source rank. Needs
// p.block_row. O(blocks + segments + dataloader runs + rows of the pieces).
std::vector<ReshufflePiece> ReshufflePieces(const Plan& plan, const RankProgram& p) {
  const int32_t me = p.rank;
  const std::vector<int64_t> offsets = SequenceOffsets(plan.sequences);
  std::vector<ReshufflePiece> out;
  std::vector<ReshufflePiece> pieces;  // of one block
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const int32_t owner = plan.blocks[b].worker;
    const bool mine = owner == me;
    pieces.clear();
    int64_t row = 0;  // within the block
    for (const Segment& s : plan.blocks[b].segments) {
      int64_t g = offsets[s.seq] + s.start;
      ForEachDataloaderRun(s, offsets, plan.workers, [&](int32_t d, int64_t n) {
        if (mine || d == me) {
          auto it = std::find_if(pieces.begin(), pieces.end(),
                                 [&](const ReshufflePiece& x) { return x.src == d; });
          if (it == pieces.end()) {
            pieces.push_back({static_cast<int32_t>(b), d, owner, {}, {}});
            it = pieces.end() - 1;
          }
          for (int64_t i = 0; i < n; ++i) {
            if (d == me) it->dataloader_rows.push_back(g + i - p.dataloader_begin);
            if (mine) it->local_rows.push_back(p.block_row[b] + row + i);
          }
        }
        g += n;
        row += n;
      });
    }
    std::sort(pieces.begin(), pieces.end(),
              [](const ReshufflePiece& a, const ReshufflePiece& c) { return a.src < c.src; });
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

// The pieces split into recv, send and self, each in its posting order.
InputReshuffle OrderReshuffle(const std::vector<ReshufflePiece>& pieces, int32_t me,
                              const std::vector<Need>& need) {
  InputReshuffle r;
  for (const ReshufflePiece& x : pieces)
    (x.src == me && x.dst == me ? r.self : x.dst == me ? r.recv : r.send).push_back(x);
  // Stable: a block's pieces stay adjacent, by source rank.
  std::stable_sort(r.recv.begin(), r.recv.end(),
                   [&](const ReshufflePiece& a, const ReshufflePiece& b) {
                     return std::pair(need[a.block], a.block) < std::pair(need[b.block], b.block);
                   });
  std::stable_sort(r.send.begin(), r.send.end(),
                   [&](const ReshufflePiece& a, const ReshufflePiece& b) {
                     return std::tuple(need[a.block], a.dst, a.block) <
                            std::tuple(need[b.block], b.dst, b.block);
                   });
  r.recv_begin.assign(need.size(), 0);
  r.recv_end.assign(need.size(), 0);
  for (size_t i = r.recv.size(); i-- > 0;) {
    const int32_t b = r.recv[i].block;
    if (r.recv_end[b] == 0) r.recv_end[b] = static_cast<int64_t>(i) + 1;
    r.recv_begin[b] = static_cast<int64_t>(i);
  }
  return r;
}

}  // namespace

std::vector<Need> ReshuffleNeed(const Plan& plan, bool backward) {
  CheckIndices(plan);
  std::vector<Need> need(plan.blocks.size(), Need{INT64_MAX, 0});
  auto use = [&](int32_t b, int64_t t, int64_t pos) { need[b] = std::min(need[b], Need{t, pos}); };
  const auto owner = [&](int32_t b) { return plan.blocks[b].worker; };
  std::vector<int64_t> sends(plan.workers), calls(plan.workers);
  const size_t stages = backward ? plan.backward.size() : plan.forward.size();
  for (size_t st = 0; st < stages; ++st) {
    const int64_t t = static_cast<int64_t>(st);
    std::fill(sends.begin(), sends.end(), 0);
    std::fill(calls.begin(), calls.end(), 0);
    const std::vector<BlockPair>& compute =
        backward ? plan.backward[st].compute : plan.forward[st].compute;
    if (!backward)
      for (const Transfer& tr : plan.forward[st].send) {
        if (tr.src == owner(tr.block)) use(tr.block, t, sends[tr.src]);
        ++sends[tr.src];
      }
    // Remote compute: the owner sends a block's query rows (forward Q,
    // backward dO with them) when the stage begins; the computing worker
    // needs its own key blocks.
    for (const Transfer& tr : backward ? plan.backward[st].send_q : plan.forward[st].send_q)
      use(tr.block, t, sends[tr.src]++);
    for (const BlockPair& pr : compute) {
      const int32_t w = ComputeWorker(plan.blocks, pr);
      const int64_t pos = sends[w] + calls[w]++;
      if (w == owner(pr.q_block)) use(pr.q_block, t, pos);
      if (!backward && owner(pr.kv_block) == w) use(pr.kv_block, t, pos);
    }
  }
  return need;
}

std::vector<SegmentPair> BlockPairSegments(const Plan& plan, int32_t q_block, int32_t kv_block) {
  std::vector<SegmentPair> out;
  CheckBlock(plan, q_block, "segment pairs");
  CheckBlock(plan, kv_block, "segment pairs");
  const Block& qb = plan.blocks[q_block];
  const Block& kb = plan.blocks[kv_block];
  int64_t q_row = 0;
  for (const Segment& qs : qb.segments) {
    int64_t k_row = 0;
    for (const Segment& ks : kb.segments) {
      if (ks.seq == qs.seq && AllowedPairs(plan.mask, {qs.start, qs.start + qs.length},
                                           {ks.start, ks.start + ks.length}) > 0)
        out.push_back({q_row, k_row, qs.start, ks.start, qs.length, ks.length});
      k_row += ks.length;
    }
    q_row += qs.length;
  }
  return out;
}

RankProgram LowerPlan(const Plan& plan, int32_t rank) {
  if (rank < 0 || rank >= plan.workers)
    throw Error(ErrorCode::kInvalidArgument, "lowering: rank " + std::to_string(rank) +
                                                 " is not in [0, " + std::to_string(plan.workers) +
                                                 ")");
  CheckIndices(plan);
  RankProgram p;
  p.rank = rank;
  p.workers = plan.workers;
  p.total_tokens = plan.total_tokens();
  p.dataloader_begin = DataloaderBegin(p.total_tokens, p.workers, rank);
  p.dataloader_end = DataloaderBegin(p.total_tokens, p.workers, rank + 1);
  LowerLayout(plan, p);
  {
    const std::vector<ReshufflePiece> pieces = ReshufflePieces(plan, p);
    p.reshuffle_in = OrderReshuffle(pieces, rank, ReshuffleNeed(plan, false));
    p.do_in = OrderReshuffle(pieces, rank, ReshuffleNeed(plan, true));
  }

  PassLowering<ForwardStage>(plan, plan.forward, p, "forward").LowerKv(p.forward);
  PassLowering<BackwardStage>(plan, plan.backward, p, "backward").LowerKv(p.backward);
  LowerPartials(plan, p);
  LowerRemoteCompute(plan, plan.forward, p, p.forward, "forward");
  LowerRemoteCompute(plan, plan.backward, p, p.backward, "backward");

  // Forward stage 0 calls on tokens r already has (no reshuffle needed).
  const std::vector<int64_t> seq_offset = SequenceOffsets(plan.sequences);
  auto self_sourced = [&](int32_t b) {
    if (plan.blocks[b].worker != rank) return false;
    for (const Segment& s : plan.blocks[b].segments) {
      const int64_t g0 = seq_offset[s.seq] + s.start;
      if (g0 < p.dataloader_begin || g0 + s.length > p.dataloader_end) return false;
    }
    return true;
  };
  // They go first: no reshuffle holds them up, and both executors merge in
  // call order (the merge order the MPI executor has always had).
  if (!p.forward.stages.empty()) {
    std::vector<ComputeCall>& calls = p.forward.stages[0].compute;
    for (ComputeCall& c : calls) c.early = self_sourced(c.q_block) && self_sourced(c.kv_block);
    std::stable_partition(calls.begin(), calls.end(), [](const ComputeCall& c) { return c.early; });
  }

  // Final stages, for every block (receivers order their returns by them).
  p.forward_final_stage.assign(plan.blocks.size(), -1);
  // (A block computed remotely is final once its last partial is home: send_o.)
  for (size_t t = 0; t < plan.forward.size(); ++t) {
    for (const BlockPair& pr : plan.forward[t].compute)
      p.forward_final_stage[pr.q_block] = static_cast<int32_t>(t);
    for (const Transfer& tr : plan.forward[t].send_o)
      p.forward_final_stage[tr.block] = static_cast<int32_t>(t);
  }
  // The backward's outputs go home in two parts: dq after the block's last
  // query compute; dk, dv after its last key compute on the owner and the
  // last partial the owner receives.
  p.backward_dq_final_stage.assign(plan.blocks.size(), -1);
  p.backward_dkv_final_stage.assign(plan.blocks.size(), -1);
  auto& dq_last = p.backward_dq_final_stage;
  auto& dkv_last = p.backward_dkv_final_stage;
  for (size_t t = 0; t < plan.backward.size(); ++t) {
    const int32_t st = static_cast<int32_t>(t);
    for (const BlockPair& pr : plan.backward[t].compute) {
      dq_last[pr.q_block] = std::max(dq_last[pr.q_block], st);
      if (ComputeWorker(plan.blocks, pr) == plan.blocks[pr.kv_block].worker)
        dkv_last[pr.kv_block] = std::max(dkv_last[pr.kv_block], st);
    }
    for (const Transfer& tr : plan.backward[t].send_dq)
      dq_last[tr.block] = std::max(dq_last[tr.block], st);
    for (const Transfer& tr : plan.backward[t].send_dkv)
      if (tr.dst == plan.blocks[tr.block].worker)
        dkv_last[tr.block] = std::max(dkv_last[tr.block], st);
  }
  return p;
}

}  // namespace fcp
