#include "fcp/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "fcp/error.h"

namespace fcp {
namespace {

constexpr int32_t kTagKv = 11;
constexpr int32_t kTagDkv = 12;
constexpr int32_t kTagReturnO = 13;
constexpr int32_t kTagReturnGrad = 14;

// Where this rank's rows live in the plan layout and how they move between
// the dataloader layout and the plan layout. Identical arithmetic on every
// rank, so both sides of every message agree on its rows without asking.
struct Layout {
  int32_t me = 0;
  int32_t workers = 1;
  int64_t total_tokens = 0;
  int64_t dl_begin = 0, dl_end = 0;            // my dataloader share
  std::vector<int64_t> block_row;               // first local row of each owned block (-1: not mine)
  std::vector<int32_t> owned_blocks;            // ascending ids
  int64_t local_rows = 0;
  std::vector<int64_t> local_row_block;         // block of each local row
  // Reshuffle in: my dataloader rows ordered by (owner, global token), with
  // counts per owner; the rows I own ordered by global token (which groups
  // them by source rank), with counts per source.
  std::vector<int64_t> in_send_rows;            // dataloader-local row indices
  std::vector<int64_t> in_send_counts;
  std::vector<int64_t> owned_by_token;          // local rows
  std::vector<int64_t> in_recv_counts;
};

Layout MakeLayout(const Plan& plan, int32_t me) {
  Layout L;
  L.me = me;
  L.workers = plan.workers;
  L.total_tokens = plan.total_tokens();
  L.dl_begin = DataloaderBegin(L.total_tokens, L.workers, me);
  L.dl_end = DataloaderBegin(L.total_tokens, L.workers, me + 1);
  const std::vector<int64_t> seq_offset = SequenceOffsets(plan.sequences);
  L.block_row.assign(plan.blocks.size(), -1);
  std::vector<std::pair<int64_t, int64_t>> owned_tokens;  // (global token, local row)
  std::vector<int32_t> dl_owner(static_cast<size_t>(L.dl_end - L.dl_begin), -1);
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const Block& block = plan.blocks[b];
    const bool mine = block.worker == me;
    if (mine) {
      L.owned_blocks.push_back(static_cast<int32_t>(b));
      L.block_row[b] = L.local_rows;
    }
    for (const Segment& s : block.segments) {
      const int64_t g0 = seq_offset[s.seq] + s.start;
      // Tokens of this segment inside my dataloader share: record their owner.
      const int64_t lo = std::max(g0, L.dl_begin), hi = std::min(g0 + s.length, L.dl_end);
      for (int64_t g = lo; g < hi; ++g) dl_owner[g - L.dl_begin] = block.worker;
      if (!mine) continue;
      for (int64_t t = 0; t < s.length; ++t) {
        owned_tokens.push_back({g0 + t, L.local_rows});
        L.local_row_block.push_back(static_cast<int32_t>(b));
        ++L.local_rows;
      }
    }
  }
  std::sort(owned_tokens.begin(), owned_tokens.end());
  L.in_recv_counts.assign(L.workers, 0);
  for (const auto& [g, row] : owned_tokens) {
    L.owned_by_token.push_back(row);
    ++L.in_recv_counts[DataloaderWorker(L.total_tokens, L.workers, g)];
  }
  L.in_send_counts.assign(L.workers, 0);
  for (int32_t w : dl_owner) {
    FCP_CHECK(w >= 0, "a dataloader token has no owner");
    ++L.in_send_counts[w];
  }
  std::vector<int64_t> next(L.workers, 0);
  for (int32_t w = 1; w < L.workers; ++w) next[w] = next[w - 1] + L.in_send_counts[w - 1];
  L.in_send_rows.resize(dl_owner.size());
  for (size_t r = 0; r < dl_owner.size(); ++r) L.in_send_rows[next[dl_owner[r]]++] = static_cast<int64_t>(r);
  return L;
}

// One column group of a row returned to the dataloader layout: `width`
// floats per row; rows land at dst + dataloader_row * width.
struct Field {
  int64_t width;
  float* dst;
};

// Rows [block_row, block_row + count) of a block are dataloader rows
// [dl_row, dl_row + count) of one rank.
struct RowRun {
  int64_t block_row;
  int64_t dl_row;
  int64_t count;
};

// Communication groups: stage transfers are awaited at the end of their
// stage; the others (reshuffles) when their data is needed.
enum FlightGroup : int32_t { kStageGroup = 0, kReshuffleInGroup = 1, kReturnOGroup = 2, kReturnGradGroup = 3 };

// Per-row offsets into data kept per owned block as [K rows; V rows].
struct BlockKv {
  const Plan* plan;
  const Layout* L;
  int64_t kv_row;
  int64_t Offset(int64_t local_row, bool v_part) const {
    const int32_t b = static_cast<int32_t>(L->local_row_block[local_row]);
    const int64_t first = L->block_row[b];
    const int64_t tokens = plan->blocks[b].tokens();
    return (2 * first + (v_part ? tokens : 0) + (local_row - first)) * kv_row;
  }
};

// A message in flight, observed by polling.
struct Flight {
  Communicator::Request request;
  std::string name;
  TraceLane lane;
  int32_t group;
  double start_us;
  double end_us = -1;
};

// Outputs of owned blocks going home to the dataloader layout, block by
// block, each as soon as it is final (after stage final_stage[block]);
// receivers post everything up front. Messages from one rank to another
// go in (final stage, block) order on both sides.
struct ReturnGroup {
  FlightGroup group;
  int32_t tag;
  std::string name;
  std::vector<Field> fields;
  int64_t width = 0;
  std::vector<int32_t> final_stage;  // per block; -1: final before the first stage
  std::function<const float*(size_t field, int64_t local_row)> row_ptr;
  std::deque<std::pair<int32_t, std::vector<float>>> incoming;  // (block, rows) in post order
  std::deque<std::vector<float>> outgoing;                      // alive until sent
};

using Incoming = std::vector<std::pair<int32_t, std::shared_ptr<std::vector<float>>>>;

class Runner {
 public:
  Runner(const Plan& plan, Communicator& comm, const ExecutorOptions& options, Trace* trace,
         ExecutorStats* stats)
      : plan_(plan), comm_(comm), options_(options), trace_(trace ? trace : &own_trace_), stats_(stats) {
    dims_ = {plan.attention.heads_q, plan.attention.heads_kv, plan.attention.head_dim,
             1.0f / std::sqrt(static_cast<float>(plan.attention.head_dim))};
    if (options.make_kernel) {
      kernel_ = options.make_kernel([this] { Poll(); });
    } else {
      CpuKernelOptions kopt = options.kernel;
      kopt.progress = [this] { Poll(); };
      kernel_ = MakeCpuAttentionKernel(kopt);
    }
    layout_ = MakeLayout(plan, comm.rank());
    seq_offset_ = SequenceOffsets(plan.sequences);
    qrow_ = dims_.q_row_floats();
    kvrow_ = dims_.kv_row_floats();
  }

  RankOutputs Run(const RankInputs& in);

 private:
  // ---- communication bookkeeping ----
  void Post(Communicator::Request r, std::string name, TraceLane lane, FlightGroup group = kStageGroup) {
    flights_.push_back({r, std::move(name), lane, group, trace_->NowUs()});
  }
  void Poll() {
    for (Flight& f : flights_)
      if (f.end_us < 0 && comm_.Test(f.request)) f.end_us = trace_->NowUs();
  }
  void Finish(Flight& f) {
    if (f.end_us < 0) {
      comm_.Wait(f.request);
      f.end_us = trace_->NowUs();
    }
  }
  void Record(const Flight& f) { trace_->Add(f.name, f.lane, f.start_us, f.end_us); }

  // Waits for every stage transfer in flight (not the reshuffles), records them.
  void FinishStage(double stage_start_us, const std::string& label) {
    const double wait_start = trace_->NowUs();
    double last_end = stage_start_us;
    bool any = false;
    for (Flight& f : flights_) {
      if (f.group != kStageGroup) continue;
      Finish(f);
      last_end = std::max(last_end, f.end_us);
      any = true;
    }
    const double wait_end = trace_->NowUs();
    if (any) {
      trace_->Add("wait " + label, TraceLane::kWait, wait_start, wait_end);
      stats_->exposed_wait_s += (wait_end - wait_start) * 1e-6;
      stats_->transfer_s += (last_end - stage_start_us) * 1e-6;
    }
    std::vector<Flight> keep;
    for (Flight& f : flights_) {
      if (f.group != kStageGroup) keep.push_back(f);
      else Record(f);
    }
    flights_ = std::move(keep);
  }
  // Waits for every flight of a reshuffle group and records them.
  void FinishGroup(FlightGroup group, const std::string& name) {
    const double wait_start = trace_->NowUs();
    double first_start = wait_start, last_end = 0;
    std::vector<Flight> keep;
    for (Flight& f : flights_) {
      if (f.group != group) {
        keep.push_back(f);
        continue;
      }
      Finish(f);
      first_start = std::min(first_start, f.start_us);
      last_end = std::max(last_end, f.end_us);
      Record(f);
    }
    flights_ = std::move(keep);
    const double wait_end = trace_->NowUs();
    trace_->Add("wait " + name, TraceLane::kWait, wait_start, wait_end);
    stats_->reshuffle_wait_s += (wait_end - wait_start) * 1e-6;
    if (last_end > first_start) stats_->reshuffle_s += (last_end - first_start) * 1e-6;
  }

  // ---- data access ----
  const float* HeldKv(int32_t block) const {
    if (plan_.blocks[block].worker == layout_.me) return kv_.data() + 2 * layout_.block_row[block] * kvrow_;
    auto it = held_.find(block);
    FCP_CHECK(it != held_.end(), "plan uses K/V of block " + std::to_string(block) + " not held");
    return it->second->data();
  }
  int64_t KvFloats(int32_t block) const { return 2 * plan_.blocks[block].tokens() * kvrow_; }

  float* DkvAccumulator(int32_t block) {
    if (plan_.blocks[block].worker == layout_.me) return dkv_.data() + 2 * layout_.block_row[block] * kvrow_;
    auto& slot = partial_dkv_[block];
    if (!slot) slot = std::make_unique<std::vector<float>>(KvFloats(block), 0.0f);
    return slot->data();
  }

  void Compute(const BlockPair& p, bool backward, const std::string& label) {
    const double start = trace_->NowUs();
    const std::vector<SegmentPair> segs = BlockPairSegments(plan_, p.q_block, p.kv_block);
    const int64_t q0 = layout_.block_row[p.q_block];
    FCP_CHECK(q0 >= 0, "pair's query block not owned by this rank");
    const float* kv = HeldKv(p.kv_block);
    const int64_t kv_tokens = plan_.blocks[p.kv_block].tokens();
    if (!backward) {
      kernel_->Forward(dims_, plan_.mask, segs,
                       {q_.data() + q0 * qrow_, kv, kv + kv_tokens * kvrow_, o_.data() + q0 * qrow_,
                        lse_.data() + q0 * dims_.heads_q});
    } else {
      float* dkv = DkvAccumulator(p.kv_block);
      kernel_->Backward(dims_, plan_.mask, segs,
                        {q_.data() + q0 * qrow_, kv, kv + kv_tokens * kvrow_, do_.data() + q0 * qrow_,
                         lse_.data() + q0 * dims_.heads_q, delta_.data() + q0 * dims_.heads_q,
                         dq_.data() + q0 * qrow_, dkv, dkv + kv_tokens * kvrow_});
    }
    const double end = trace_->NowUs();
    trace_->Add(label + " q" + std::to_string(p.q_block) + " kv" + std::to_string(p.kv_block),
                TraceLane::kCompute, start, end);
    stats_->compute_s += (end - start) * 1e-6;
  }

  // Last stage (compute or send) at which this rank uses each received block.
  template <typename Stages, typename SendsOf>
  std::map<int32_t, size_t> LastUse(const Stages& stages, SendsOf sends_of) const {
    std::map<int32_t, size_t> last;
    for (size_t t = 0; t < stages.size(); ++t) {
      for (const BlockPair& p : stages[t].compute)
        if (plan_.blocks[p.q_block].worker == layout_.me) last[p.kv_block] = t;
      for (const Transfer& tr : sends_of(stages[t]))
        if (tr.src == layout_.me) last[tr.block] = t;
    }
    return last;
  }

  // Posts the K/V receives and sends of one stage. Both sides walk the
  // stage's list in order, so messages between two ranks match in order.
  void PostKv(const std::vector<Transfer>& sends, const std::string& label, Incoming* incoming) {
    for (const Transfer& tr : sends) {
      if (tr.dst != layout_.me) continue;
      auto buf = std::make_shared<std::vector<float>>(KvFloats(tr.block));
      incoming->push_back({tr.block, buf});
      Post(comm_.Irecv(buf->data(), static_cast<int64_t>(buf->size() * 4), tr.src, kTagKv),
           label + " recv kv" + std::to_string(tr.block) + " from " + std::to_string(tr.src), TraceLane::kRecv);
    }
    for (const Transfer& tr : sends) {
      if (tr.src != layout_.me) continue;
      const int64_t bytes = KvFloats(tr.block) * 4;
      stats_->bytes_sent += bytes;
      Post(comm_.Isend(HeldKv(tr.block), bytes, tr.dst, kTagKv),
           label + " send kv" + std::to_string(tr.block) + " to " + std::to_string(tr.dst), TraceLane::kSend);
    }
  }

  void AdoptIncoming(Incoming& incoming) {
    const int64_t in_flight = static_cast<int64_t>(held_.size() + incoming.size());
    stats_->peak_received_blocks = std::max(stats_->peak_received_blocks, in_flight);
    for (auto& [block, buf] : incoming) held_[block] = std::move(buf);
    incoming.clear();
  }
  void ReleaseUsed(const std::map<int32_t, size_t>& last_use, size_t t) {
    for (auto it = held_.begin(); it != held_.end();) {
      auto lu = last_use.find(it->first);
      if (lu == last_use.end() || lu->second <= t) it = held_.erase(it);
      else ++it;
    }
  }

  // ---- returning outputs to the dataloader layout ----
  // Rows of block b that dataloader rank d holds, in block row order.
  std::vector<RowRun> RunsFor(int32_t b, int32_t d) const {
    const int64_t lo = DataloaderBegin(layout_.total_tokens, layout_.workers, d);
    const int64_t hi = DataloaderBegin(layout_.total_tokens, layout_.workers, d + 1);
    std::vector<RowRun> runs;
    int64_t row = 0;
    for (const Segment& s : plan_.blocks[b].segments) {
      const int64_t g0 = seq_offset_[s.seq] + s.start;
      const int64_t a = std::max(g0, lo), e = std::min(g0 + s.length, hi);
      if (a < e) runs.push_back({row + a - g0, a - lo, e - a});
      row += s.length;
    }
    return runs;
  }
  static int64_t RunRows(const std::vector<RowRun>& runs) {
    int64_t n = 0;
    for (const RowRun& r : runs) n += r.count;
    return n;
  }

  // Posts every receive of the group: from each other rank, its blocks with
  // rows in my dataloader share, in (final stage, block) order.
  void PostReturnReceives(ReturnGroup& g) {
    g.width = 0;
    for (const Field& f : g.fields) g.width += f.width;
    std::vector<int32_t> order(plan_.blocks.size());
    for (size_t b = 0; b < order.size(); ++b) order[b] = static_cast<int32_t>(b);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return g.final_stage[a] < g.final_stage[b]; });
    for (int32_t b : order) {
      const int32_t owner = plan_.blocks[b].worker;
      if (owner == layout_.me) continue;
      const int64_t rows = RunRows(RunsFor(b, layout_.me));
      if (rows == 0) continue;
      g.incoming.push_back({b, std::vector<float>(static_cast<size_t>(rows * g.width))});
      Post(comm_.Irecv(g.incoming.back().second.data(), rows * g.width * 4, owner, g.tag),
           g.name + " b" + std::to_string(b) + " from " + std::to_string(owner), TraceLane::kReshuffle, g.group);
    }
  }

  // Sends (or, for my own share, copies) the rows of my blocks that became
  // final in `stage`.
  void SendReturns(ReturnGroup& g, int32_t stage) {
    for (int32_t b : layout_.owned_blocks) {
      if (g.final_stage[b] != stage) continue;
      const int64_t first = layout_.block_row[b];
      for (int32_t d = 0; d < layout_.workers; ++d) {
        const std::vector<RowRun> runs = RunsFor(b, d);
        if (runs.empty()) continue;
        if (d == layout_.me) {
          for (const RowRun& r : runs)
            for (int64_t i = 0; i < r.count; ++i)
              for (size_t fi = 0; fi < g.fields.size(); ++fi)
                std::copy_n(g.row_ptr(fi, first + r.block_row + i), g.fields[fi].width,
                            g.fields[fi].dst + (r.dl_row + i) * g.fields[fi].width);
          continue;
        }
        std::vector<float>& buf = g.outgoing.emplace_back(static_cast<size_t>(RunRows(runs) * g.width));
        float* out = buf.data();
        for (const RowRun& r : runs)
          for (int64_t i = 0; i < r.count; ++i)
            for (size_t fi = 0; fi < g.fields.size(); ++fi)
              out = std::copy_n(g.row_ptr(fi, first + r.block_row + i), g.fields[fi].width, out);
        Post(comm_.Isend(buf.data(), static_cast<int64_t>(buf.size() * 4), d, g.tag),
             g.name + " b" + std::to_string(b) + " to " + std::to_string(d), TraceLane::kReshuffle, g.group);
      }
    }
  }

  // Waits for the group and scatters the received rows into place.
  void FinishReturns(ReturnGroup& g) {
    FinishGroup(g.group, g.name);
    for (const auto& [b, rows] : g.incoming) {
      const float* in = rows.data();
      for (const RowRun& r : RunsFor(b, layout_.me))
        for (int64_t i = 0; i < r.count; ++i)
          for (const Field& f : g.fields) {
            std::copy_n(in, f.width, f.dst + (r.dl_row + i) * f.width);
            in += f.width;
          }
    }
    g.incoming.clear();
    g.outgoing.clear();
  }

  // The stage after which each block's forward output is final.
  std::vector<int32_t> ForwardFinalStages() const {
    std::vector<int32_t> last(plan_.blocks.size(), -1);
    for (size_t t = 0; t < plan_.forward.size(); ++t)
      for (const BlockPair& p : plan_.forward[t].compute) last[p.q_block] = static_cast<int32_t>(t);
    return last;
  }
  // The stage after which each block's dq, dk, dv are final at its owner:
  // its last query compute, its last key compute on the owner, and the last
  // partial dK/dV the owner receives for it.
  std::vector<int32_t> BackwardFinalStages() const {
    std::vector<int32_t> last(plan_.blocks.size(), -1);
    for (size_t t = 0; t < plan_.backward.size(); ++t) {
      const int32_t st = static_cast<int32_t>(t);
      for (const BlockPair& p : plan_.backward[t].compute) {
        last[p.q_block] = std::max(last[p.q_block], st);
        if (plan_.blocks[p.q_block].worker == plan_.blocks[p.kv_block].worker)
          last[p.kv_block] = std::max(last[p.kv_block], st);
      }
      for (const Transfer& tr : plan_.backward[t].send_dkv)
        if (tr.dst == plan_.blocks[tr.block].worker) last[tr.block] = std::max(last[tr.block], st);
    }
    return last;
  }

  const Plan& plan_;
  Communicator& comm_;
  ExecutorOptions options_;
  Trace own_trace_;
  Trace* trace_;
  ExecutorStats* stats_;
  AttentionDims dims_;
  std::unique_ptr<AttentionKernel> kernel_;
  Layout layout_;
  std::vector<int64_t> seq_offset_;
  int64_t qrow_ = 0, kvrow_ = 0;
  std::vector<float> q_, do_, o_, lse_, delta_, dq_, kv_, dkv_;
  std::map<int32_t, std::shared_ptr<std::vector<float>>> held_;
  std::map<int32_t, std::unique_ptr<std::vector<float>>> partial_dkv_;
  std::vector<Flight> flights_;
};

RankOutputs Runner::Run(const RankInputs& in) {
  const Layout& L = layout_;
  const int64_t dl_rows = L.dl_end - L.dl_begin;
  const bool bwd = options_.backward;
  auto check_size = [&](const std::vector<float>& x, int64_t width, const char* what) {
    if (static_cast<int64_t>(x.size()) != dl_rows * width)
      throw Error(ErrorCode::kInvalidArgument, std::string("executor: input ") + what + " has " +
                                                   std::to_string(x.size()) + " floats, expected " +
                                                   std::to_string(dl_rows * width));
  };
  check_size(in.q, qrow_, "q");
  check_size(in.k, kvrow_, "k");
  check_size(in.v, kvrow_, "v");
  if (bwd) check_size(in.d_o, qrow_, "do");

  const double run_start = trace_->NowUs();
  // 1. Reshuffle in: q | k | v | do rows to their owners.
  q_.assign(static_cast<size_t>(L.local_rows * qrow_), 0.0f);
  kv_.assign(static_cast<size_t>(2 * L.local_rows * kvrow_), 0.0f);
  if (bwd) do_.assign(q_.size(), 0.0f);
  const BlockKv kv_at{&plan_, &L, kvrow_};
  const int64_t in_width = qrow_ + 2 * kvrow_ + (bwd ? qrow_ : 0);
  std::vector<float> in_send(static_cast<size_t>(dl_rows * in_width));
  {
    float* out = in_send.data();
    for (int64_t r : L.in_send_rows) {
      out = std::copy_n(in.q.data() + r * qrow_, qrow_, out);
      out = std::copy_n(in.k.data() + r * kvrow_, kvrow_, out);
      out = std::copy_n(in.v.data() + r * kvrow_, kvrow_, out);
      if (bwd) out = std::copy_n(in.d_o.data() + r * qrow_, qrow_, out);
    }
  }
  std::vector<float> in_recv(static_cast<size_t>(L.local_rows * in_width));
  Post(comm_.Ialltoallv(in_send.data(), L.in_send_counts, in_recv.data(), L.in_recv_counts, in_width * 4),
       "reshuffle in", TraceLane::kReshuffle, kReshuffleInGroup);
  // Unpacks rows [first, first + count) of the owned_by_token order.
  auto unpack_in = [&](const float* rows, int64_t first, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t row = L.owned_by_token[first + i];
      const float* src = rows + i * in_width;
      std::copy_n(src, qrow_, q_.data() + row * qrow_);
      std::copy_n(src + qrow_, kvrow_, kv_.data() + kv_at.Offset(row, false));
      std::copy_n(src + qrow_ + kvrow_, kvrow_, kv_.data() + kv_at.Offset(row, true));
      if (bwd) std::copy_n(src + qrow_ + 2 * kvrow_, qrow_, do_.data() + row * qrow_);
    }
  };
  // My own rows need no network: take them from the send buffer now.
  int64_t self_send_first = 0, self_recv_first = 0;
  for (int32_t w = 0; w < L.me; ++w) {
    self_send_first += L.in_send_counts[w];
    self_recv_first += L.in_recv_counts[w];
  }
  unpack_in(in_send.data() + self_send_first * in_width, self_recv_first, L.in_recv_counts[L.me]);

  o_.assign(q_.size(), 0.0f);
  lse_.assign(static_cast<size_t>(L.local_rows * dims_.heads_q), 0.0f);
  InitForwardOutput(dims_, L.local_rows, o_.data(), lse_.data());

  // While the reshuffle flies: stage-0 pairs whose blocks hold only my own
  // dataloader tokens (their rows are already in place).
  const std::vector<int64_t>& seq_offset = seq_offset_;
  auto self_sourced = [&](int32_t b) {
    if (plan_.blocks[b].worker != L.me) return false;
    for (const Segment& s : plan_.blocks[b].segments) {
      const int64_t g0 = seq_offset[s.seq] + s.start;
      if (g0 < L.dl_begin || g0 + s.length > L.dl_end) return false;
    }
    return true;
  };
  std::vector<bool> done_early;
  if (!plan_.forward.empty()) {
    const auto& pairs = plan_.forward[0].compute;
    done_early.assign(pairs.size(), false);
    for (size_t i = 0; i < pairs.size(); ++i)
      if (self_sourced(pairs[i].q_block) && self_sourced(pairs[i].kv_block)) {
        Compute(pairs[i], false, "fwd s0 early");
        done_early[i] = true;
      }
  }
  FinishGroup(kReshuffleInGroup, "reshuffle in");
  {
    int64_t first = 0;
    for (int32_t w = 0; w < L.workers; ++w) {
      if (w != L.me) unpack_in(in_recv.data() + first * in_width, first, L.in_recv_counts[w]);
      first += L.in_recv_counts[w];
    }
  }
  in_recv = {};
  in_send = {};

  // 2. Forward stages; each block's (o, lse) heads home once final.
  RankOutputs out;
  out.o.resize(static_cast<size_t>(dl_rows * qrow_));
  out.lse.resize(static_cast<size_t>(dl_rows * dims_.heads_q));
  ReturnGroup ret_o;
  ret_o.group = kReturnOGroup;
  ret_o.tag = kTagReturnO;
  ret_o.name = "return o";
  ret_o.fields = {{qrow_, out.o.data()}, {dims_.heads_q, out.lse.data()}};
  ret_o.final_stage = ForwardFinalStages();
  ret_o.row_ptr = [this](size_t fi, int64_t row) {
    return fi == 0 ? o_.data() + row * qrow_ : lse_.data() + row * dims_.heads_q;
  };
  PostReturnReceives(ret_o);
  SendReturns(ret_o, -1);
  const auto fwd_last =
      LastUse(plan_.forward, [](const ForwardStage& s) -> const std::vector<Transfer>& { return s.send; });
  Incoming incoming;
  for (size_t t = 0; t < plan_.forward.size(); ++t) {
    if (options_.debug_exit_rank == L.me && options_.debug_exit_stage == static_cast<int32_t>(t))
      std::_Exit(3);  // fault injection: die without a word, as a crashed process would
    const ForwardStage& stage = plan_.forward[t];
    const std::string label = "fwd s" + std::to_string(t);
    const double stage_start = trace_->NowUs();
    PostKv(stage.send, label, &incoming);
    for (size_t i = 0; i < stage.compute.size(); ++i) {
      if (plan_.blocks[stage.compute[i].q_block].worker != L.me) continue;
      if (t == 0 && done_early[i]) continue;
      Compute(stage.compute[i], false, label);
      Poll();
    }
    FinishStage(stage_start, label);
    SendReturns(ret_o, static_cast<int32_t>(t));
    AdoptIncoming(incoming);
    ReleaseUsed(fwd_last, t);
  }
  held_.clear();
  stats_->forward_s = (trace_->NowUs() - run_start) * 1e-6;

  // 3. The output's trip home stays in flight during the backward.
  if (!bwd) {
    FinishReturns(ret_o);
    return out;
  }

  // 4. Backward stages.
  const double bwd_start = trace_->NowUs();
  delta_.resize(lse_.size());
  ComputeDelta(dims_, L.local_rows, o_.data(), do_.data(), delta_.data());
  dq_.assign(q_.size(), 0.0f);
  dkv_.assign(kv_.size(), 0.0f);
  out.dq.resize(static_cast<size_t>(dl_rows * qrow_));
  out.dk.resize(static_cast<size_t>(dl_rows * kvrow_));
  out.dv.resize(out.dk.size());
  ReturnGroup ret_g;
  ret_g.group = kReturnGradGroup;
  ret_g.tag = kTagReturnGrad;
  ret_g.name = "return grads";
  ret_g.fields = {{qrow_, out.dq.data()}, {kvrow_, out.dk.data()}, {kvrow_, out.dv.data()}};
  ret_g.final_stage = BackwardFinalStages();
  ret_g.row_ptr = [this, kv_at](size_t fi, int64_t row) -> const float* {
    if (fi == 0) return dq_.data() + row * qrow_;
    return dkv_.data() + kv_at.Offset(row, fi == 2);
  };
  PostReturnReceives(ret_g);
  SendReturns(ret_g, -1);
  const auto bwd_last =
      LastUse(plan_.backward, [](const BackwardStage& s) -> const std::vector<Transfer>& { return s.send_kv; });
  for (size_t t = 0; t < plan_.backward.size(); ++t) {
    const BackwardStage& stage = plan_.backward[t];
    const std::string label = "bwd s" + std::to_string(t);
    const double stage_start = trace_->NowUs();
    PostKv(stage.send_kv, label, &incoming);
    std::vector<std::pair<int32_t, std::vector<float>>> dkv_in;
    dkv_in.reserve(stage.send_dkv.size());  // no reallocation: receive buffers stay put
    for (const Transfer& tr : stage.send_dkv) {
      if (tr.dst != L.me) continue;
      dkv_in.push_back({tr.block, std::vector<float>(KvFloats(tr.block))});
      Post(comm_.Irecv(dkv_in.back().second.data(), KvFloats(tr.block) * 4, tr.src, kTagDkv),
           label + " recv dkv" + std::to_string(tr.block) + " from " + std::to_string(tr.src), TraceLane::kRecv);
    }
    std::vector<int32_t> sent_partials;
    for (const Transfer& tr : stage.send_dkv) {
      if (tr.src != L.me) continue;
      FCP_CHECK(plan_.blocks[tr.block].worker != L.me, "owner sends its own dK/dV");
      auto it = partial_dkv_.find(tr.block);
      FCP_CHECK(it != partial_dkv_.end(), "send_dkv of block " + std::to_string(tr.block) + " with no partial");
      stats_->bytes_sent += KvFloats(tr.block) * 4;
      Post(comm_.Isend(it->second->data(), KvFloats(tr.block) * 4, tr.dst, kTagDkv),
           label + " send dkv" + std::to_string(tr.block) + " to " + std::to_string(tr.dst), TraceLane::kSend);
      sent_partials.push_back(tr.block);
    }
    for (const BlockPair& p : stage.compute) {
      if (plan_.blocks[p.q_block].worker != L.me) continue;
      Compute(p, true, label);
      Poll();
    }
    FinishStage(stage_start, label);
    // Sent partials go first: a partial received this stage starts a new one.
    for (int32_t b : sent_partials) partial_dkv_.erase(b);
    for (auto& [block, buf] : dkv_in) {
      float* acc = DkvAccumulator(block);
      for (size_t i = 0; i < buf.size(); ++i) acc[i] += buf[i];
    }
    SendReturns(ret_g, static_cast<int32_t>(t));
    AdoptIncoming(incoming);
    ReleaseUsed(bwd_last, t);
  }
  held_.clear();
  FCP_CHECK(partial_dkv_.empty(), "partial dK/dV never returned to its owner");

  // 5. The last gradients' trip home.
  FinishReturns(ret_o);
  FinishReturns(ret_g);
  stats_->backward_s = (trace_->NowUs() - bwd_start) * 1e-6;
  return out;
}

}  // namespace

std::vector<SegmentPair> BlockPairSegments(const Plan& plan, int32_t q_block, int32_t kv_block) {
  std::vector<SegmentPair> out;
  const Block& qb = plan.blocks.at(q_block);
  const Block& kb = plan.blocks.at(kv_block);
  int64_t q_row = 0;
  for (const Segment& qs : qb.segments) {
    int64_t k_row = 0;
    for (const Segment& ks : kb.segments) {
      if (ks.seq == qs.seq &&
          AllowedPairs(plan.mask, {qs.start, qs.start + qs.length}, {ks.start, ks.start + ks.length}) > 0)
        out.push_back({q_row, k_row, qs.start, ks.start, qs.length, ks.length});
      k_row += ks.length;
    }
    q_row += qs.length;
  }
  return out;
}

RankOutputs ExecutePlan(const Plan& plan, Communicator& comm, const RankInputs& inputs,
                        const ExecutorOptions& options, Trace* trace, ExecutorStats* stats) {
  if (plan.workers != comm.size())
    throw Error(ErrorCode::kInvalidArgument, "executor: plan is for " + std::to_string(plan.workers) +
                                                 " workers but the job has " + std::to_string(comm.size()) +
                                                 " ranks");
  ExecutorStats local_stats;
  Runner runner(plan, comm, options, trace, stats ? stats : &local_stats);
  return runner.Run(inputs);
}

}  // namespace fcp
