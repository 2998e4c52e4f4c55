#include "fcp/executor.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "fcp/error.h"
#include "fcp/lowering.h"

namespace fcp {
namespace {

constexpr int32_t kTagKv = 11;
constexpr int32_t kTagDkv = 12;
constexpr int32_t kTagReturnO = 13;
constexpr int32_t kTagReturnDq = 14;
constexpr int32_t kTagReturnDkv = 15;

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
// stage; the others (reshuffles) when their data is needed. Received dK/dV
// partials are no group: IncomingPartial.
enum FlightGroup : int32_t {
  kStageGroup = 0,
  kReshuffleInGroup = 1,
  kReturnOGroup = 2,
  kReturnDqGroup = 3,
  kReturnDkvGroup = 4,
};

// K/V (and dK/dV) are kept per block as [K rows; V rows]: the block (or
// pool slot) starting at row `row` with `rows` rows has K at 2 * row and V at
// 2 * row + rows, in units of kv rows. One message moves both.
struct KvRows {
  int64_t kv_row;  // floats per K (or V) row
  float* K(float* base, int64_t row) const { return base + 2 * row * kv_row; }
  const float* K(const float* base, int64_t row) const { return base + 2 * row * kv_row; }
  int64_t Floats(int64_t rows) const { return 2 * rows * kv_row; }
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

// A dK/dV partial received into a buffer of its own; nothing waits for it at
// its stage's end (fcp/lowering.h): it is added into its rows where they are
// needed (Runner::AbsorbPartials).
struct IncomingPartial {
  DkvRecv recv;
  std::vector<float> data;
  Flight flight;
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

class Runner {
 public:
  Runner(const Plan& plan, Communicator& comm, const ExecutorOptions& options, Trace* trace,
         ExecutorStats* stats)
      : plan_(plan),
        comm_(comm),
        options_(options),
        trace_(trace ? trace : &own_trace_),
        stats_(stats) {
    dims_ = {plan.attention.heads_q, plan.attention.heads_kv, plan.attention.head_dim,
             1.0f / std::sqrt(static_cast<float>(plan.attention.head_dim))};
    if (options.make_kernel) {
      kernel_ = options.make_kernel([this] { Poll(); });
    } else {
      CpuKernelOptions kopt = options.kernel;
      kopt.progress = [this] { Poll(); };
      kernel_ = MakeCpuAttentionKernel(kopt);
    }
    prog_ = LowerPlan(plan, comm.rank());
    seq_offset_ = SequenceOffsets(plan.sequences);
    qrow_ = dims_.q_row_floats();
    kvrow_ = dims_.kv_row_floats();
    kv_rows_ = {kvrow_};
    for (int32_t b : prog_.owned_blocks)
      local_row_block_.insert(local_row_block_.end(), static_cast<size_t>(plan.blocks[b].tokens()),
                              b);
  }

  RankOutputs Run(const RankInputs& in);

 private:
  // ---- the steps of Run ----
  void CheckInputs(const RankInputs& in) const;
  void ReshuffleIn(const RankInputs& in);
  void ForwardStages(ReturnGroup& ret_o);
  void BackwardStages(ReturnGroup& ret_dq, ReturnGroup& ret_dkv);
  ReturnGroup MakeReturn(FlightGroup group, int32_t tag, std::string name,
                         std::vector<Field> fields, const std::vector<int32_t>& final_stage,
                         std::function<const float*(size_t, int64_t)> row_ptr);

  // ---- communication bookkeeping ----
  void Post(Communicator::Request r, std::string name, TraceLane lane,
            FlightGroup group = kStageGroup) {
    flights_.push_back({r, std::move(name), lane, group, trace_->NowUs()});
  }
  void Poll() {
    for (Flight& f : flights_)
      if (f.end_us < 0 && comm_.Test(f.request)) f.end_us = trace_->NowUs();
    for (IncomingPartial& p : partials_in_)
      if (p.flight.end_us < 0 && comm_.Test(p.flight.request)) p.flight.end_us = trace_->NowUs();
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
      if (f.group != kStageGroup)
        keep.push_back(f);
      else
        Record(f);
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

  // Waits for the received partials that `take` selects and adds each into
  // its rows, in the order they were posted (stage, then the plan's list
  // order), so the sums never depend on arrival times.
  template <class Take>
  void AbsorbPartials(Take take) {
    const double wait_start = trace_->NowUs();
    bool waited = false;
    std::deque<IncomingPartial> keep;
    for (IncomingPartial& p : partials_in_) {
      if (!take(p.recv)) {
        keep.push_back(std::move(p));
        continue;
      }
      waited = waited || p.flight.end_us < 0;
      Finish(p.flight);
      Record(p.flight);
      float* acc = kv_rows_.K(p.recv.into_partial ? partial_.data() : dkv_.data(), p.recv.row);
      for (size_t j = 0; j < p.data.size(); ++j) acc[j] += p.data[j];
    }
    partials_in_ = std::move(keep);
    if (waited) {
      const double wait_end = trace_->NowUs();
      trace_->Add("wait partials", TraceLane::kWait, wait_start, wait_end);
      stats_->exposed_wait_s += (wait_end - wait_start) * 1e-6;
    }
  }

  // ---- data access ----
  // K of local row `row` (V: v_part) in the per-block [K; V] storage.
  int64_t LocalKvOffset(int64_t row, bool v_part) const {
    const int32_t b = local_row_block_[row];
    const int64_t first = prog_.block_row[b];
    return (2 * first + (v_part ? plan_.blocks[b].tokens() : 0) + (row - first)) * kvrow_;
  }

  void Compute(const ComputeCall& c, bool backward, const std::string& label) {
    const double start = trace_->NowUs();
    const std::span<const SegmentPair> segs(prog_.segments.data() + c.segment_begin,
                                            static_cast<size_t>(c.segment_end - c.segment_begin));
    const int64_t q0 = c.q_row;
    const float* kv = kv_rows_.K(c.kv_in_pool ? pool_.data() : kv_.data(), c.kv_row);
    if (!backward) {
      kernel_->Forward(dims_, plan_.mask, segs,
                       {q_.data() + q0 * qrow_, kv, kv + c.kv_rows * kvrow_, o_.data() + q0 * qrow_,
                        lse_.data() + q0 * dims_.heads_q});
    } else {
      float* dkv = kv_rows_.K(c.dkv_in_partial ? partial_.data() : dkv_.data(), c.dkv_row);
      kernel_->Backward(
          dims_, plan_.mask, segs,
          {q_.data() + q0 * qrow_, kv, kv + c.kv_rows * kvrow_, do_.data() + q0 * qrow_,
           lse_.data() + q0 * dims_.heads_q, delta_.data() + q0 * dims_.heads_q,
           dq_.data() + q0 * qrow_, dkv, dkv + c.kv_rows * kvrow_});
    }
    const double end = trace_->NowUs();
    trace_->Add(label + " q" + std::to_string(c.q_block) + " kv" + std::to_string(c.kv_block),
                TraceLane::kCompute, start, end);
    stats_->compute_s += (end - start) * 1e-6;
  }

  // Posts the K/V receives (into their pool slots) and sends of one stage.
  // Both sides walk the plan's transfer list in order, so messages between
  // two ranks match in order.
  void PostKv(const StageProgram& sp, const std::string& label) {
    for (const KvRecv& r : sp.kv_recv)
      Post(comm_.Irecv(kv_rows_.K(pool_.data(), r.pool_row), kv_rows_.Floats(r.rows) * 4, r.src,
                       kTagKv),
           label + " recv kv" + std::to_string(r.block) + " from " + std::to_string(r.src),
           TraceLane::kRecv);
    for (const KvSend& s : sp.kv_send) {
      const int64_t bytes = kv_rows_.Floats(s.rows) * 4;
      stats_->bytes_sent += bytes;
      Post(comm_.Isend(kv_rows_.K(s.from_pool ? pool_.data() : kv_.data(), s.row), bytes, s.dst,
                       kTagKv),
           label + " send kv" + std::to_string(s.block) + " to " + std::to_string(s.dst),
           TraceLane::kSend);
    }
  }

  // ---- returning outputs to the dataloader layout ----
  // Rows of block b that dataloader rank d holds, in block row order.
  std::vector<RowRun> RunsFor(int32_t b, int32_t d) const {
    const int64_t lo = DataloaderBegin(prog_.total_tokens, prog_.workers, d);
    const int64_t hi = DataloaderBegin(prog_.total_tokens, prog_.workers, d + 1);
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
      if (owner == prog_.rank) continue;
      const int64_t rows = RunRows(RunsFor(b, prog_.rank));
      if (rows == 0) continue;
      g.incoming.push_back({b, std::vector<float>(static_cast<size_t>(rows * g.width))});
      Post(comm_.Irecv(g.incoming.back().second.data(), rows * g.width * 4, owner, g.tag),
           g.name + " b" + std::to_string(b) + " from " + std::to_string(owner),
           TraceLane::kReshuffle, g.group);
    }
  }

  // Sends (or, for my own share, copies) the rows of my blocks that became
  // final in `stage`.
  void SendReturns(ReturnGroup& g, int32_t stage) {
    for (int32_t b : prog_.owned_blocks) {
      if (g.final_stage[b] != stage) continue;
      const int64_t first = prog_.block_row[b];
      for (int32_t d = 0; d < prog_.workers; ++d) {
        const std::vector<RowRun> runs = RunsFor(b, d);
        if (runs.empty()) continue;
        if (d == prog_.rank) {
          for (const RowRun& r : runs)
            for (int64_t i = 0; i < r.count; ++i)
              for (size_t fi = 0; fi < g.fields.size(); ++fi)
                std::copy_n(g.row_ptr(fi, first + r.block_row + i), g.fields[fi].width,
                            g.fields[fi].dst + (r.dl_row + i) * g.fields[fi].width);
          continue;
        }
        std::vector<float>& buf =
            g.outgoing.emplace_back(static_cast<size_t>(RunRows(runs) * g.width));
        float* out = buf.data();
        for (const RowRun& r : runs)
          for (int64_t i = 0; i < r.count; ++i)
            for (size_t fi = 0; fi < g.fields.size(); ++fi)
              out = std::copy_n(g.row_ptr(fi, first + r.block_row + i), g.fields[fi].width, out);
        Post(comm_.Isend(buf.data(), static_cast<int64_t>(buf.size() * 4), d, g.tag),
             g.name + " b" + std::to_string(b) + " to " + std::to_string(d), TraceLane::kReshuffle,
             g.group);
      }
    }
  }

  // Waits for the group and scatters the received rows into place.
  void FinishReturns(ReturnGroup& g) {
    FinishGroup(g.group, g.name);
    for (const auto& [b, rows] : g.incoming) {
      const float* in = rows.data();
      for (const RowRun& r : RunsFor(b, prog_.rank))
        for (int64_t i = 0; i < r.count; ++i)
          for (const Field& f : g.fields) {
            std::copy_n(in, f.width, f.dst + (r.dl_row + i) * f.width);
            in += f.width;
          }
    }
    g.incoming.clear();
    g.outgoing.clear();
  }

  const Plan& plan_;
  Communicator& comm_;
  ExecutorOptions options_;
  Trace own_trace_;
  Trace* trace_;
  ExecutorStats* stats_;
  AttentionDims dims_;
  std::unique_ptr<AttentionKernel> kernel_;
  RankProgram prog_;
  std::vector<int32_t> local_row_block_;  // block of each local row
  std::vector<int64_t> seq_offset_;
  int64_t qrow_ = 0, kvrow_ = 0;
  KvRows kv_rows_{0};
  std::vector<float> q_, do_, o_, lse_, delta_, dq_, kv_, dkv_;
  std::vector<float> pool_;     // the pass's K/V receive pool
  std::vector<float> partial_;  // the backward's dK/dV partial pool
  std::vector<Flight> flights_;
  std::deque<IncomingPartial> partials_in_;  // in posting order
};

void Runner::CheckInputs(const RankInputs& in) const {
  const int64_t dl_rows = prog_.dataloader_end - prog_.dataloader_begin;
  auto check_size = [&](const std::vector<float>& x, int64_t width, const char* what) {
    if (static_cast<int64_t>(x.size()) != dl_rows * width)
      throw Error(ErrorCode::kInvalidArgument, std::string("executor: input ") + what + " has " +
                                                   std::to_string(x.size()) + " floats, expected " +
                                                   std::to_string(dl_rows * width));
  };
  check_size(in.q, qrow_, "q");
  check_size(in.k, kvrow_, "k");
  check_size(in.v, kvrow_, "v");
  if (options_.backward) check_size(in.d_o, qrow_, "do");
}

// 1. Reshuffle in: q | k | v | do rows to their owners with one all-to-all-v;
// while it flies, the stage-0 calls on my own dataloader tokens.
void Runner::ReshuffleIn(const RankInputs& in) {
  const RankProgram& P = prog_;
  const int64_t dl_rows = P.dataloader_end - P.dataloader_begin;
  const bool bwd = options_.backward;
  q_.assign(static_cast<size_t>(P.local_rows * qrow_), 0.0f);
  kv_.assign(static_cast<size_t>(2 * P.local_rows * kvrow_), 0.0f);
  if (bwd) do_.assign(q_.size(), 0.0f);
  const int64_t in_width = qrow_ + 2 * kvrow_ + (bwd ? qrow_ : 0);
  std::vector<float> in_send(static_cast<size_t>(dl_rows * in_width));
  {
    float* out = in_send.data();
    for (int64_t r : P.in_send_rows) {
      out = std::copy_n(in.q.data() + r * qrow_, qrow_, out);
      out = std::copy_n(in.k.data() + r * kvrow_, kvrow_, out);
      out = std::copy_n(in.v.data() + r * kvrow_, kvrow_, out);
      if (bwd) out = std::copy_n(in.d_o.data() + r * qrow_, qrow_, out);
    }
  }
  std::vector<float> in_recv(static_cast<size_t>(P.local_rows * in_width));
  Post(comm_.Ialltoallv(in_send.data(), P.in_send_counts, in_recv.data(), P.in_recv_counts,
                        in_width * 4),
       "reshuffle in", TraceLane::kReshuffle, kReshuffleInGroup);
  // Unpacks rows [first, first + count) of the in_recv_rows order.
  auto unpack_in = [&](const float* rows, int64_t first, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t row = P.in_recv_rows[first + i];
      const float* src = rows + i * in_width;
      std::copy_n(src, qrow_, q_.data() + row * qrow_);
      std::copy_n(src + qrow_, kvrow_, kv_.data() + LocalKvOffset(row, false));
      std::copy_n(src + qrow_ + kvrow_, kvrow_, kv_.data() + LocalKvOffset(row, true));
      if (bwd) std::copy_n(src + qrow_ + 2 * kvrow_, qrow_, do_.data() + row * qrow_);
    }
  };
  // My own rows need no network: take them from the send buffer now.
  int64_t self_send_first = 0, self_recv_first = 0;
  for (int32_t w = 0; w < P.rank; ++w) {
    self_send_first += P.in_send_counts[w];
    self_recv_first += P.in_recv_counts[w];
  }
  unpack_in(in_send.data() + self_send_first * in_width, self_recv_first, P.in_recv_counts[P.rank]);

  o_.assign(q_.size(), 0.0f);
  lse_.assign(static_cast<size_t>(P.local_rows * dims_.heads_q), 0.0f);
  InitForwardOutput(dims_, P.local_rows, o_.data(), lse_.data());

  if (!P.forward.stages.empty())
    for (const ComputeCall& c : P.forward.stages[0].compute)
      if (c.early) Compute(c, false, "fwd s0 early");
  FinishGroup(kReshuffleInGroup, "reshuffle in");
  int64_t first = 0;
  for (int32_t w = 0; w < P.workers; ++w) {
    if (w != P.rank) unpack_in(in_recv.data() + first * in_width, first, P.in_recv_counts[w]);
    first += P.in_recv_counts[w];
  }
}

ReturnGroup Runner::MakeReturn(FlightGroup group, int32_t tag, std::string name,
                               std::vector<Field> fields, const std::vector<int32_t>& final_stage,
                               std::function<const float*(size_t, int64_t)> row_ptr) {
  ReturnGroup g;
  g.group = group;
  g.tag = tag;
  g.name = std::move(name);
  g.fields = std::move(fields);
  g.final_stage = final_stage;
  g.row_ptr = std::move(row_ptr);
  PostReturnReceives(g);
  SendReturns(g, -1);
  return g;
}

// 2. Forward stages; each block's (o, lse) heads home once final.
void Runner::ForwardStages(ReturnGroup& ret_o) {
  const RankProgram& P = prog_;
  pool_.assign(static_cast<size_t>(kv_rows_.Floats(P.forward.pool_rows)), 0.0f);
  stats_->peak_received_blocks = P.forward.peak_slots;
  for (size_t t = 0; t < P.forward.stages.size(); ++t) {
    if (options_.before_forward_stage) options_.before_forward_stage(static_cast<int32_t>(t));
    const StageProgram& sp = P.forward.stages[t];
    const std::string label = "fwd s" + std::to_string(t);
    const double stage_start = trace_->NowUs();
    PostKv(sp, label);
    for (const ComputeCall& c : sp.compute) {
      if (t == 0 && c.early) continue;
      Compute(c, false, label);
      Poll();
    }
    FinishStage(stage_start, label);
    SendReturns(ret_o, static_cast<int32_t>(t));
  }
  pool_ = {};
}

// 4. Backward stages; dq and dk, dv head home apart, each once final.
void Runner::BackwardStages(ReturnGroup& ret_dq, ReturnGroup& ret_dkv) {
  const RankProgram& P = prog_;
  pool_.assign(static_cast<size_t>(kv_rows_.Floats(P.backward.pool_rows)), 0.0f);
  partial_.assign(static_cast<size_t>(kv_rows_.Floats(P.backward.partial_rows)), 0.0f);
  stats_->peak_received_blocks = std::max(stats_->peak_received_blocks, P.backward.peak_slots);
  for (size_t t = 0; t < P.backward.stages.size(); ++t) {
    const int32_t stage = static_cast<int32_t>(t);
    const StageProgram& sp = P.backward.stages[t];
    const std::string label = "bwd s" + std::to_string(t);
    const double stage_start = trace_->NowUs();
    PostKv(sp, label);
    for (const DkvRecv& r : sp.dkv_recv) {
      IncomingPartial& in = partials_in_.emplace_back();
      in.recv = r;
      in.data.resize(static_cast<size_t>(kv_rows_.Floats(r.rows)));
      in.flight = {comm_.Irecv(in.data.data(), kv_rows_.Floats(r.rows) * 4, r.src, kTagDkv),
                   label + " recv dkv" + std::to_string(r.block) + " from " + std::to_string(r.src),
                   TraceLane::kRecv, kStageGroup, trace_->NowUs()};
    }
    for (const DkvSend& s : sp.dkv_send) {
      // A relay forwards what it received for the block with its own share.
      AbsorbPartials([&](const DkvRecv& r) {
        return r.into_partial && r.block == s.block && r.row == s.partial_row;
      });
      stats_->bytes_sent += kv_rows_.Floats(s.rows) * 4;
      Post(comm_.Isend(kv_rows_.K(partial_.data(), s.partial_row), kv_rows_.Floats(s.rows) * 4,
                       s.dst, kTagDkv),
           label + " send dkv" + std::to_string(s.block) + " to " + std::to_string(s.dst),
           TraceLane::kSend);
    }
    for (const ComputeCall& c : sp.compute) {
      Compute(c, true, label);
      Poll();
    }
    FinishStage(stage_start, label);
    // A sent partial's rows start the next partial that reuses them at zero.
    for (const DkvSend& s : sp.dkv_send)
      std::fill_n(kv_rows_.K(partial_.data(), s.partial_row), kv_rows_.Floats(s.rows), 0.0f);
    SendReturns(ret_dq, stage);
    AbsorbPartials([&](const DkvRecv& r) {
      return !r.into_partial && P.backward_dkv_final_stage[r.block] == stage;
    });
    SendReturns(ret_dkv, stage);
  }
  AbsorbPartials([](const DkvRecv&) { return true; });  // none is left in a valid plan
  pool_ = {};
  partial_ = {};
}

RankOutputs Runner::Run(const RankInputs& in) {
  const RankProgram& P = prog_;
  const int64_t dl_rows = P.dataloader_end - P.dataloader_begin;
  CheckInputs(in);
  const double run_start = trace_->NowUs();
  ReshuffleIn(in);

  RankOutputs out;
  out.o.resize(static_cast<size_t>(dl_rows * qrow_));
  out.lse.resize(static_cast<size_t>(dl_rows * dims_.heads_q));
  ReturnGroup ret_o =
      MakeReturn(kReturnOGroup, kTagReturnO, "return o",
                 {{qrow_, out.o.data()}, {dims_.heads_q, out.lse.data()}}, P.forward_final_stage,
                 [this](size_t fi, int64_t row) -> const float* {
                   return fi == 0 ? o_.data() + row * qrow_ : lse_.data() + row * dims_.heads_q;
                 });
  ForwardStages(ret_o);
  stats_->forward_s = (trace_->NowUs() - run_start) * 1e-6;

  // 3. The output's trip home stays in flight during the backward.
  if (!options_.backward) {
    FinishReturns(ret_o);
    return out;
  }

  const double bwd_start = trace_->NowUs();
  delta_.resize(lse_.size());
  ComputeDelta(dims_, P.local_rows, o_.data(), do_.data(), delta_.data());
  dq_.assign(q_.size(), 0.0f);
  dkv_.assign(kv_.size(), 0.0f);
  out.dq.resize(static_cast<size_t>(dl_rows * qrow_));
  out.dk.resize(static_cast<size_t>(dl_rows * kvrow_));
  out.dv.resize(out.dk.size());
  ReturnGroup ret_dq =
      MakeReturn(kReturnDqGroup, kTagReturnDq, "return dq", {{qrow_, out.dq.data()}},
                 P.backward_dq_final_stage,
                 [this](size_t, int64_t row) -> const float* { return dq_.data() + row * qrow_; });
  ReturnGroup ret_dkv =
      MakeReturn(kReturnDkvGroup, kTagReturnDkv, "return dkv",
                 {{kvrow_, out.dk.data()}, {kvrow_, out.dv.data()}}, P.backward_dkv_final_stage,
                 [this](size_t fi, int64_t row) -> const float* {
                   return dkv_.data() + LocalKvOffset(row, fi == 1);
                 });
  BackwardStages(ret_dq, ret_dkv);

  // 5. The last outputs' trip home.
  FinishReturns(ret_o);
  FinishReturns(ret_dq);
  FinishReturns(ret_dkv);
  stats_->backward_s = (trace_->NowUs() - bwd_start) * 1e-6;
  return out;
}

}  // namespace

RankOutputs ExecutePlan(const Plan& plan, Communicator& comm, const RankInputs& inputs,
                        const ExecutorOptions& options, Trace* trace, ExecutorStats* stats) {
  if (plan.workers != comm.size())
    throw Error(ErrorCode::kInvalidArgument,
                "executor: plan is for " + std::to_string(plan.workers) +
                    " workers but the job has " + std::to_string(comm.size()) + " ranks");
  ExecutorStats local_stats;
  Runner runner(plan, comm, options, trace, stats ? stats : &local_stats);
  return runner.Run(inputs);
}

}  // namespace fcp
