#include "fcp/executor.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "fcp/error.h"
#include "fcp/lowering.h"

namespace fcp {
namespace {

constexpr int32_t kTagKv = 11;
constexpr int32_t kTagReturnO = 13;
constexpr int32_t kTagReturnDq = 14;
constexpr int32_t kTagReturnDkv = 15;
constexpr int32_t kTagReshuffleIn = 16;
constexpr int32_t kTagReshuffleDo = 17;
// Remote compute: query rows (send_q) and partial outputs (send_o / send_dq).
constexpr int32_t kTagQuery = 18;
constexpr int32_t kTagPartialOut = 19;
// dK/dV partials of one backward stage between two ranks: the k-th message in
// the plan's list order has tag kTagDkvFirst + k, so a partial sent as soon
// as it is final (maybe ahead of one listed before it) still meets its own
// receive. Stages need no tags of their own: both sides post a stage's
// partials after the stage before's, and one tag matches in posting order.
// MPI guarantees tags up to 32767.
constexpr int32_t kTagDkvFirst = 64;
constexpr int32_t kTagUpperBound = 32767;

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

// Communication groups: stage transfers (K/V, and the stage's dK/dV partial
// sends) are awaited at the end of their stage; the others (reshuffles) when
// their data is needed. Partials posted ahead of their stage join its group
// when it begins: awaited at the end of the stage they were posted in, each
// would wait for a receiver that posts it only on entering the next. Received
// dK/dV partials are no group (IncomingPartial), nor are the input
// reshuffles' receives until their reshuffle ends (Arrivals).
enum FlightGroup : int32_t {
  kStageGroup = 0,
  kReshuffleInGroup = 1,
  kReturnOGroup = 2,
  kReturnDqGroup = 3,
  kReturnDkvGroup = 4,
  kReshuffleDoGroup = 5,
  kPartialSendGroup = 6,   // the running backward stage's partial sends
  kEarlyPartialGroup = 7,  // the next stage's, posted once final
};
bool IsStageTransfer(int32_t group) { return group == kStageGroup || group == kPartialSendGroup; }

// Per message of `list` (a backward stage's dkv_send or dkv_recv, in the
// plan's order): its tag, kTagDkvFirst + its index among the messages with
// the same peer rank. Both ends compute the same tags from one list.
template <class Message, class PeerOf>
std::vector<int32_t> PartialTags(const std::vector<Message>& list, int32_t ranks, PeerOf peer_of,
                                 size_t stage) {
  std::vector<int32_t> next(static_cast<size_t>(ranks), kTagDkvFirst);
  std::vector<int32_t> tags;
  tags.reserve(list.size());
  for (const Message& m : list) {
    int32_t& tag = next[peer_of(m)];
    if (tag > kTagUpperBound)
      throw Error(ErrorCode::kInvalidPlan,
                  "executor: backward stage " + std::to_string(stage) + " moves more than " +
                      std::to_string(kTagUpperBound - kTagDkvFirst + 1) +
                      " dK/dV partials between one pair of ranks (one MPI tag each)");
    tags.push_back(tag++);
  }
  return tags;
}

// K/V (and dK/dV) are kept per block as [K rows; V rows]: the block (or
// pool slot) starting at row `row` with `rows` rows has K at 2 * row and V at
// 2 * row + rows, in units of kv rows. One message moves both.
struct KvRows {
  int64_t kv_row;  // floats per K (or V) row
  float* K(float* base, int64_t row) const { return base + 2 * row * kv_row; }
  const float* K(const float* base, int64_t row) const { return base + 2 * row * kv_row; }
  int64_t Floats(int64_t rows) const { return 2 * rows * kv_row; }
  // The K (v_part: V) rows [row_begin, row_begin + rows) of a block of
  // block_rows rows whose [K; V] storage starts at row `first`: a message
  // that carries part of its block (fcp/lowering.h) moves these two runs.
  float* Part(float* base, int64_t first, int64_t block_rows, int64_t row_begin,
              bool v_part) const {
    return base + (2 * first + (v_part ? block_rows : 0) + row_begin) * kv_row;
  }
};

// Whether a message of the lowered program carries all of its block's rows:
// then K and V are one contiguous run of the block's storage, one message;
// else two, the K rows then the V rows, with the same tag (MPI keeps their
// order).
template <class Message>
bool WholeBlock(const Message& m) {
  return m.row_begin == 0 && m.rows == m.block_rows;
}

// Rows of query blocks with their outputs, [rows, heads_q, head_dim] (lse,
// delta: [rows, heads_q]). Backward only: d_o, delta, dq.
struct QueryRows {
  std::vector<float> q, o, lse, d_o, delta, dq;
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
  std::vector<float> data;  // K rows, then V rows
  Flight flight;
  std::optional<Flight> v_flight;  // the V rows' message when the partial covers part of its block
  bool arrived() const { return flight.end_us >= 0 && (!v_flight || v_flight->end_us >= 0); }
};

// An input reshuffle (fcp/lowering.h, InputReshuffle) on this rank: its
// receives, each piece into a buffer of its own, unpacked into the local rows
// when a call or a send first asks for the block (Runner::Arrived), and the
// buffers of its sends, alive until they complete.
struct Arrivals {
  const InputReshuffle* spec = nullptr;
  std::string name;
  FlightGroup group = kReshuffleInGroup;
  int64_t width = 0;  // floats per row
  std::function<void(int64_t local_row, const float* row)> unpack;
  std::vector<std::vector<float>> data;  // per receive piece
  std::vector<Flight> flights;           // per receive piece
  std::vector<char> unpacked;            // per receive piece
  std::vector<size_t> in_flight;         // receive pieces not yet seen complete
  std::vector<int64_t> missing;          // per plan block: pieces not yet unpacked
  std::deque<std::vector<float>> outgoing;
};

// Outputs of owned blocks going home to the dataloader layout, block by
// block, each as soon as it is final (after stage final_stage[block], and
// after any call of it carried past that stage); receivers post everything
// up front. Messages from one rank to another go in (final stage, block)
// order on both sides: a block still waiting for a carried call holds back
// the later ones to the same rank.
struct ReturnGroup {
  FlightGroup group;
  int32_t tag;
  std::string name;
  std::vector<Field> fields;
  int64_t width = 0;
  std::vector<int32_t> final_stage;  // per block; -1: final before the first stage
  // Per block: calls carried past their stage that write these rows
  // (Runner::RunCalls); a block is sent once final and none is left.
  const std::vector<int32_t>* carried = nullptr;
  std::vector<int32_t> send_order;  // owned blocks by (final stage, block): the receivers' order
  std::vector<size_t> next_send;    // per destination rank: its next position in send_order
  std::function<const float*(size_t field, int64_t local_row)> row_ptr;
  std::deque<std::pair<int32_t, std::vector<float>>> incoming;  // (block, rows) in post order
  std::deque<std::vector<float>> outgoing;                      // alive until sent
};

// The outputs this rank sends one destination rank, one message in flight at
// a time, the others queued in the order they became final (the simulator's
// rule, docs/runtime.md step 3): a destination's outputs take one share of
// the ports instead of one per message, whatever the transport does with
// concurrent messages. Within one tag the order is the posting order, so the
// receives, posted up front in that order, still match.
struct ReturnLink {
  struct Queued {
    const float* data;
    int64_t bytes;
    int32_t tag;
    std::string name;
    FlightGroup group;
  };
  std::deque<Queued> queue;
  bool busy = false;
  Flight flight;  // the message in flight when busy
};

// The partial sends of the next backward stage, each posted as soon as it is
// final (Runner::PostFinalPartials).
struct PartialSends {
  const StageProgram* sp = nullptr;  // the next stage; null: none
  std::string label;
  std::vector<int32_t> tags;        // per send (PartialTags)
  std::vector<int32_t> calls_left;  // per send: the running stage's calls still to add into it
  std::vector<char> posted;         // per send
  size_t left = 0;                  // sends not yet posted
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
    send_blocked_.assign(static_cast<size_t>(prog_.workers), 0);
    return_links_.resize(static_cast<size_t>(prog_.workers));
    q_blocked_.assign(plan.blocks.size(), 0);
    kv_blocked_.assign(plan.blocks.size(), 0);
    carried_q_.assign(plan.blocks.size(), 0);
    carried_kv_.assign(plan.blocks.size(), 0);
  }

  RankOutputs Run(const RankInputs& in);

 private:
  // ---- the steps of Run ----
  void CheckInputs(const RankInputs& in) const;
  void ReshuffleIn(const RankInputs& in);
  void ReshuffleDo(const RankInputs& in);
  void ForwardStages(ReturnGroup& ret_o);
  void BackwardStages(ReturnGroup& ret_dq, ReturnGroup& ret_dkv);
  ReturnGroup MakeReturn(FlightGroup group, int32_t tag, std::string name,
                         std::vector<Field> fields, const std::vector<int32_t>& final_stage,
                         const std::vector<int32_t>* carried,
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
      for (Flight* f : {&p.flight, p.v_flight ? &*p.v_flight : nullptr})
        if (f && f->end_us < 0 && comm_.Test(f->request)) f->end_us = trace_->NowUs();
    for (int32_t d : links_pending_) PumpReturns(d);
    std::erase_if(links_pending_, [&](int32_t d) {
      return !return_links_[d].busy && return_links_[d].queue.empty();
    });
    for (Arrivals* a : {&qkv_in_, &do_in_})
      std::erase_if(a->in_flight, [&](size_t i) {
        Flight& f = a->flights[i];
        if (f.end_us < 0 && comm_.Test(f.request)) f.end_us = trace_->NowUs();
        return f.end_us >= 0;
      });
    PostReadySends(false);
    PostFinalPartials();
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
    RunCarriedUntil([&] {
      return std::none_of(flights_.begin(), flights_.end(),
                          [](const Flight& f) { return IsStageTransfer(f.group) && f.end_us < 0; });
    });
    const double wait_start = trace_->NowUs();
    double last_end = stage_start_us;
    bool any = false;
    for (Flight& f : flights_) {
      if (!IsStageTransfer(f.group)) continue;
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
      if (!IsStageTransfer(f.group))
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
      waited = waited || !p.arrived();
      for (Flight* f : {&p.flight, p.v_flight ? &*p.v_flight : nullptr})
        if (f) {
          Finish(*f);
          Record(*f);
        }
      float* base = p.recv.into_partial ? partial_.data() : dkv_.data();
      if (WholeBlock(p.recv)) {
        float* acc = kv_rows_.K(base, p.recv.row);
        for (size_t j = 0; j < p.data.size(); ++j) acc[j] += p.data[j];
      } else {
        const size_t half = p.data.size() / 2;
        for (const bool v : {false, true}) {
          float* acc = kv_rows_.Part(base, p.recv.row, p.recv.block_rows, p.recv.row_begin, v);
          for (size_t j = 0; j < half; ++j) acc[j] += p.data[(v ? half : 0) + j];
        }
      }
    }
    partials_in_ = std::move(keep);
    if (waited) {
      const double wait_end = trace_->NowUs();
      trace_->Add("wait partials", TraceLane::kWait, wait_start, wait_end);
      stats_->partials_wait_s += (wait_end - wait_start) * 1e-6;
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
    // A remote compute's query rows and partial output are in the query pool.
    QueryRows& rows = c.q_in_pool ? query_pool_ : local_;
    float* q = rows.q.data() + q0 * qrow_;
    float* lse = rows.lse.data() + q0 * dims_.heads_q;
    if (!backward) {
      kernel_->Forward(dims_, plan_.mask, segs,
                       {q, kv, kv + c.kv_rows * kvrow_, rows.o.data() + q0 * qrow_, lse});
    } else {
      float* dkv = kv_rows_.K(c.dkv_in_partial ? partial_.data() : dkv_.data(), c.dkv_row);
      kernel_->Backward(dims_, plan_.mask, segs,
                        {q, kv, kv + c.kv_rows * kvrow_, rows.d_o.data() + q0 * qrow_, lse,
                         rows.delta.data() + q0 * dims_.heads_q, rows.dq.data() + q0 * qrow_, dkv,
                         dkv + c.kv_rows * kvrow_});
    }
    const double end = trace_->NowUs();
    trace_->Add(label + " q" + std::to_string(c.q_block) + " kv" + std::to_string(c.kv_block),
                TraceLane::kCompute, start, end);
    stats_->compute_s += (end - start) * 1e-6;
  }

  // Posts the K/V receives (into their pool slots) of one stage and starts
  // its sends (PostReadySends). Both sides walk the plan's transfer list in
  // order, so messages between two ranks match in order.
  void PostKv(const StageProgram& sp, const std::string& label) {
    for (const KvRecv& r : sp.kv_recv) {
      const std::string name =
          label + " recv kv" + std::to_string(r.block) + " from " + std::to_string(r.src);
      if (WholeBlock(r)) {
        Post(comm_.Irecv(kv_rows_.K(pool_.data(), r.pool_row), kv_rows_.Floats(r.rows) * 4, r.src,
                         kTagKv),
             name, TraceLane::kRecv);
        continue;
      }
      for (const bool v : {false, true})
        Post(comm_.Irecv(kv_rows_.Part(pool_.data(), r.pool_row, r.block_rows, r.row_begin, v),
                         kv_rows_.Floats(r.rows) * 2, r.src, kTagKv),
             name + (v ? " (V rows)" : " (K rows)"), TraceLane::kRecv);
    }
    sends_ = {&sp, label, std::vector<char>(sp.kv_send.size(), 0), sp.kv_send.size()};
    PostReadySends(false);
  }

  // Posts the current stage's K/V sends whose data is here: an owned block
  // once the reshuffle has brought it (the simulator's rule), a relay at
  // once; never one ahead of an earlier send to the same rank, whose
  // receives were posted in list order. `wait`: waits for each block instead.
  void PostReadySends(bool wait) {
    if (sends_.left == 0) return;
    // This scan's stamp: a scan that runs inside it (waiting, carried calls
    // poll, and Poll scans) stamps with its own.
    const int64_t epoch = ++send_epoch_;
    const StageProgram& sp = *sends_.sp;
    for (size_t i = 0; i < sp.kv_send.size(); ++i) {
      const KvSend& s = sp.kv_send[i];
      if (sends_.posted[i] || send_blocked_[s.dst] == epoch) continue;
      if (!s.from_pool && !Arrived(qkv_in_, s.block)) {
        if (!wait) {
          send_blocked_[s.dst] = epoch;
          continue;
        }
        RunCarriedUntil([&] { return Arrived(qkv_in_, s.block); });
        if (sends_.posted[i]) continue;  // posted by a scan inside the wait
        Await(qkv_in_, s.block);
      }
      sends_.posted[i] = 1;
      --sends_.left;
      const int64_t bytes = kv_rows_.Floats(s.rows) * 4;
      stats_->bytes_sent += bytes;
      float* base = s.from_pool ? pool_.data() : kv_.data();
      const std::string name =
          sends_.label + " send kv" + std::to_string(s.block) + " to " + std::to_string(s.dst);
      if (WholeBlock(s)) {
        Post(comm_.Isend(kv_rows_.K(base, s.row), bytes, s.dst, kTagKv), name, TraceLane::kSend);
        continue;
      }
      for (const bool v : {false, true})
        Post(comm_.Isend(kv_rows_.Part(base, s.row, s.block_rows, s.row_begin, v), bytes / 2, s.dst,
                         kTagKv),
             name + (v ? " (V rows)" : " (K rows)"), TraceLane::kSend);
    }
  }

  // ---- remote compute (docs/plan-format.md): query rows and partial outputs ----
  // The columns a query message moves, as (owner's rows, query pool's rows,
  // floats per row): send_q forward Q; backward Q, O, dO and LSE. Partial
  // outputs: forward O and LSE; backward dQ.
  struct QueryColumns {
    float* local;
    float* pool;
    int64_t width;
  };
  std::vector<QueryColumns> QueryMessageColumns(bool backward) {
    const int64_t h = dims_.heads_q;
    if (!backward) return {{local_.q.data(), query_pool_.q.data(), qrow_}};
    return {{local_.q.data(), query_pool_.q.data(), qrow_},
            {local_.o.data(), query_pool_.o.data(), qrow_},
            {local_.d_o.data(), query_pool_.d_o.data(), qrow_},
            {local_.lse.data(), query_pool_.lse.data(), h}};
  }
  std::vector<QueryColumns> PartialOutputColumns(bool backward) {
    if (!backward)
      return {{local_.o.data(), query_pool_.o.data(), qrow_},
              {local_.lse.data(), query_pool_.lse.data(), dims_.heads_q}};
    return {{local_.dq.data(), query_pool_.dq.data(), qrow_}};
  }

  // The pass's query pool: received query rows, and partial outputs that
  // start as InitForwardOutput (forward) or zero (backward).
  void StartQueryPool(int64_t rows, bool backward) {
    const auto sized = [&](int64_t width) {
      return std::vector<float>(static_cast<size_t>(rows * width), 0.0f);
    };
    query_pool_ = {sized(qrow_), sized(qrow_), sized(dims_.heads_q), {}, {}, {}};
    if (backward) {
      query_pool_.d_o = sized(qrow_);
      query_pool_.delta = sized(dims_.heads_q);
      query_pool_.dq = sized(qrow_);
    } else {
      InitForwardOutput(dims_, rows, query_pool_.o.data(), query_pool_.lse.data());
    }
  }

  // Posts a stage's query rows and partial outputs, receives and sends, in
  // the plan's list order (several messages of one transfer go in column
  // order with one tag, which MPI keeps). The owner sends a block's rows
  // once its reshuffled rows are here (backward: its dO; Q, O and LSE are
  // since the forward). Received partials go into buffers of their own.
  void PostQueries(const StageProgram& sp, const std::string& label, bool backward) {
    const auto post = [&](const QueryMessage& m, const std::vector<QueryColumns>& columns,
                          bool from_local, const char* what, int32_t tag) {
      for (const QueryColumns& col : columns) {
        float* rows = (from_local ? col.local : col.pool) + m.row * col.width;
        const int64_t bytes = m.rows * col.width * 4;
        stats_->bytes_sent += bytes;
        Post(comm_.Isend(rows, bytes, m.peer, tag),
             label + " send " + what + std::to_string(m.block) + " to " + std::to_string(m.peer),
             TraceLane::kSend);
      }
    };
    const std::vector<QueryColumns> query = QueryMessageColumns(backward);
    const std::vector<QueryColumns> partial = PartialOutputColumns(backward);
    for (const QueryMessage& m : sp.q_recv)
      for (const QueryColumns& col : query)
        Post(comm_.Irecv(col.pool + m.row * col.width, m.rows * col.width * 4, m.peer, kTagQuery),
             label + " recv q" + std::to_string(m.block) + " from " + std::to_string(m.peer),
             TraceLane::kRecv);
    partials_out_in_.clear();
    for (const QueryMessage& m : sp.out_recv) {
      int64_t width = 0;
      for (const QueryColumns& col : partial) width += col.width;
      std::vector<float>& buf = partials_out_in_.emplace_back(static_cast<size_t>(m.rows * width));
      float* at = buf.data();
      for (const QueryColumns& col : partial) {
        Post(comm_.Irecv(at, m.rows * col.width * 4, m.peer, kTagPartialOut),
             label + " recv partial output " + std::to_string(m.block) + " from " +
                 std::to_string(m.peer),
             TraceLane::kRecv);
        at += m.rows * col.width;
      }
    }
    for (const QueryMessage& m : sp.q_send) {
      Await(backward ? do_in_ : qkv_in_, m.block);
      post(m, query, true, "q", kTagQuery);
    }
    for (const QueryMessage& m : sp.out_send)
      post(m, partial, false, "partial output ", kTagPartialOut);
  }

  // After a stage's transfers: the owner merges each received partial into
  // its block's rows in list order (forward: the log-sum-exp rule, as the
  // kernel merges successive pairs; backward: dQ added); a sent partial's
  // rows start afresh; received backward queries get their delta.
  void FinishQueries(const StageProgram& sp, bool backward) {
    for (size_t i = 0; i < sp.out_recv.size(); ++i) {
      const QueryMessage& m = sp.out_recv[i];
      const float* in = partials_out_in_[i].data();
      if (!backward) {
        MergeForwardPartial(dims_, m.rows, in, in + m.rows * qrow_, local_.o.data() + m.row * qrow_,
                            local_.lse.data() + m.row * dims_.heads_q);
        continue;
      }
      float* dq = local_.dq.data() + m.row * qrow_;
      for (int64_t j = 0; j < m.rows * qrow_; ++j) dq[j] += in[j];
    }
    partials_out_in_.clear();
    for (const QueryMessage& m : sp.out_send) {
      if (!backward)
        InitForwardOutput(dims_, m.rows, query_pool_.o.data() + m.row * qrow_,
                          query_pool_.lse.data() + m.row * dims_.heads_q);
      else
        std::fill_n(query_pool_.dq.data() + m.row * qrow_, m.rows * qrow_, 0.0f);
    }
    if (backward)
      for (const QueryMessage& m : sp.q_recv)
        ComputeDelta(dims_, m.rows, query_pool_.o.data() + m.row * qrow_,
                     query_pool_.d_o.data() + m.row * qrow_,
                     query_pool_.delta.data() + m.row * dims_.heads_q);
  }

  // ---- dK/dV partials: each sent once final (docs/runtime.md, step 4) ----
  // A partial of the next backward stage is posted during the running one
  // once (a) the running stage's calls that add into it have run (a call
  // into a partial is never carried, so none is left from earlier stages),
  // (b) any partial it relays has arrived, and (c) the running stage's own
  // partial sends have completed: the simulator's per-block partial return
  // with grouped send groups. Those not posted by the stage's end go when
  // the next stage begins (SendStagePartials).
  static bool RelaysInto(const DkvRecv& r, const DkvSend& s) {
    return r.into_partial && r.block == s.block && r.row == s.partial_row;
  }

  // Adds any relayed partials into s's rows (waiting for them) and posts s.
  void SendPartial(const DkvSend& s, int32_t tag, const std::string& label, FlightGroup group) {
    AbsorbPartials([&](const DkvRecv& r) { return RelaysInto(r, s); });
    const int64_t bytes = kv_rows_.Floats(s.rows) * 4;
    stats_->bytes_sent += bytes;
    const std::string name =
        label + " send dkv" + std::to_string(s.block) + " to " + std::to_string(s.dst);
    if (WholeBlock(s)) {
      Post(comm_.Isend(kv_rows_.K(partial_.data(), s.partial_row), bytes, s.dst, tag), name,
           TraceLane::kSend, group);
      return;
    }
    for (const bool v : {false, true})
      Post(comm_.Isend(kv_rows_.Part(partial_.data(), s.partial_row, s.block_rows, s.row_begin, v),
                       bytes / 2, s.dst, tag),
           name + (v ? " (V rows)" : " (K rows)"), TraceLane::kSend, group);
  }

  // Sets up the partial sends of backward stage `next`, whose stage before
  // runs `calls` now, and posts those already final. The receives of the
  // running stage are posted, so a relayed partial is in partials_in_.
  void PrepareNextPartials(size_t next, const std::vector<ComputeCall>& calls) {
    PartialSends& n = next_partials_;
    n = {};
    call_partial_.assign(calls.size(), -1);
    if (next >= prog_.backward.stages.size()) return;
    n.sp = &prog_.backward.stages[next];
    n.label = "bwd s" + std::to_string(next);
    const std::vector<DkvSend>& sends = n.sp->dkv_send;
    n.tags = PartialTags(
        sends, prog_.workers, [](const DkvSend& x) { return x.dst; }, next);
    n.calls_left.assign(sends.size(), 0);
    n.posted.assign(sends.size(), 0);
    n.left = sends.size();
    // Partials alive together occupy disjoint rows, so a row names one.
    std::unordered_map<int64_t, int32_t> send_of_row;
    for (size_t i = 0; i < sends.size(); ++i)
      send_of_row[sends[i].partial_row] = static_cast<int32_t>(i);
    for (size_t j = 0; j < calls.size(); ++j) {
      if (!calls[j].dkv_in_partial) continue;
      const auto it = send_of_row.find(calls[j].dkv_row);
      if (it == send_of_row.end()) continue;
      call_partial_[j] = it->second;
      ++n.calls_left[it->second];
    }
    PostFinalPartials();
  }

  // Call `call` of the running backward stage has run.
  void PartialCallDone(size_t call) {
    if (call < call_partial_.size() && call_partial_[call] >= 0)
      --next_partials_.calls_left[call_partial_[call]];
  }

  // Posts the next stage's partials that are final (see above), any order:
  // each has a tag of its own.
  void PostFinalPartials() {
    PartialSends& n = next_partials_;
    if (n.left == 0) return;
    if (std::any_of(flights_.begin(), flights_.end(),
                    [](const Flight& f) { return f.group == kPartialSendGroup && f.end_us < 0; }))
      return;
    for (size_t i = 0; i < n.posted.size(); ++i) {
      const DkvSend& s = n.sp->dkv_send[i];
      if (n.posted[i] || n.calls_left[i] > 0) continue;
      const bool relayed_arrived = std::none_of(
          partials_in_.begin(), partials_in_.end(),
          [&](const IncomingPartial& p) { return RelaysInto(p.recv, s) && !p.arrived(); });
      if (!relayed_arrived) continue;
      n.posted[i] = 1;
      --n.left;
      ++stats_->partials_sent_early;
      SendPartial(s, n.tags[i], n.label, kEarlyPartialGroup);
    }
  }

  // At the start of a backward stage, whose sends PrepareNextPartials set
  // up: the partials posted early join the stage's transfers, and the rest
  // are posted now, in list order.
  void SendStagePartials(const std::string& label) {
    for (Flight& f : flights_)
      if (f.group == kEarlyPartialGroup) f.group = kPartialSendGroup;
    const PartialSends n = std::move(next_partials_);
    next_partials_ = {};
    for (size_t i = 0; i < n.posted.size(); ++i)
      if (!n.posted[i]) SendPartial(n.sp->dkv_send[i], n.tags[i], label, kPartialSendGroup);
  }

  // ---- input reshuffles: one message per (block, dataloader rank) ----
  // Posts the receives of `spec`, then packs and posts its sends, each in
  // the lowering's order (the owner's need), then copies the rows that stay.
  // pack(dataloader_row, out) writes one row of `width` floats.
  template <class Pack>
  void StartReshuffle(Arrivals& a, const InputReshuffle& spec, std::string name, FlightGroup group,
                      int32_t tag, int64_t width, Pack pack,
                      std::function<void(int64_t, const float*)> unpack) {
    a = {};
    a.spec = &spec;
    a.name = std::move(name);
    a.group = group;
    a.width = width;
    a.unpack = std::move(unpack);
    a.data.resize(spec.recv.size());
    a.unpacked.assign(spec.recv.size(), 0);
    a.missing.assign(plan_.blocks.size(), 0);
    for (size_t i = 0; i < spec.recv.size(); ++i) {
      const ReshufflePiece& x = spec.recv[i];
      const int64_t rows = static_cast<int64_t>(x.local_rows.size());
      a.data[i].resize(static_cast<size_t>(rows * width));
      a.flights.push_back(
          {comm_.Irecv(a.data[i].data(), rows * width * 4, x.src, tag),
           a.name + " b" + std::to_string(x.block) + " from " + std::to_string(x.src),
           TraceLane::kReshuffle, group, trace_->NowUs()});
      a.in_flight.push_back(i);
      ++a.missing[x.block];
    }
    for (const ReshufflePiece& x : spec.send) {
      const auto& hook =
          tag == kTagReshuffleIn ? options_.before_reshuffle_send : options_.before_do_send;
      if (hook) hook(x.block, x.dst);
      std::vector<float>& buf = a.outgoing.emplace_back(x.dataloader_rows.size() * width);
      for (size_t i = 0; i < x.dataloader_rows.size(); ++i)
        pack(x.dataloader_rows[i], buf.data() + i * width);
      Post(comm_.Isend(buf.data(), static_cast<int64_t>(buf.size() * 4), x.dst, tag),
           a.name + " b" + std::to_string(x.block) + " to " + std::to_string(x.dst),
           TraceLane::kReshuffle, group);
    }
    std::vector<float> row(static_cast<size_t>(width));
    for (const ReshufflePiece& x : spec.self)
      for (size_t i = 0; i < x.dataloader_rows.size(); ++i) {
        pack(x.dataloader_rows[i], row.data());
        a.unpack(x.local_rows[i], row.data());
      }
  }

  // True when every piece of block b has arrived; unpacks those that have.
  bool Arrived(Arrivals& a, int32_t b) {
    if (a.missing.empty() || a.missing[b] == 0) return true;
    for (int64_t i = a.spec->recv_begin[b]; i < a.spec->recv_end[b]; ++i) {
      if (a.unpacked[i] || a.flights[i].end_us < 0) continue;
      const ReshufflePiece& x = a.spec->recv[i];
      for (size_t r = 0; r < x.local_rows.size(); ++r)
        a.unpack(x.local_rows[r], a.data[i].data() + r * a.width);
      a.unpacked[i] = 1;
      a.data[i] = {};
      --a.missing[b];
    }
    return a.missing[b] == 0;
  }
  // Blocks (each wait has the communicator's deadline) until block b's
  // pieces have arrived, and unpacks them. `record`: the wait goes into the
  // trace and the stats (RunCalls records its own).
  void Await(Arrivals& a, int32_t b, bool record = true) {
    if (Arrived(a, b)) return;
    const double wait_start = trace_->NowUs();
    for (int64_t i = a.spec->recv_begin[b]; i < a.spec->recv_end[b]; ++i) Finish(a.flights[i]);
    Arrived(a, b);
    if (!record) return;
    const double wait_end = trace_->NowUs();
    trace_->Add("wait " + a.name + " b" + std::to_string(b), TraceLane::kWait, wait_start,
                wait_end);
    stats_->reshuffle_wait_s += (wait_end - wait_start) * 1e-6;
  }
  // Waits for the rest of the reshuffle, receives and sends, and records it.
  void FinishArrivals(Arrivals& a) {
    if (!a.spec) return;
    for (size_t b = 0; b < a.missing.size(); ++b) Await(a, static_cast<int32_t>(b));
    for (Flight& f : a.flights) flights_.push_back(f);
    FinishGroup(a.group, a.name);
    a = {};
  }

  bool InputsReady(const ComputeCall& c, bool backward) {
    if (backward) return Arrived(do_in_, c.q_block);
    return Arrived(qkv_in_, c.q_block) && (c.kv_in_pool || Arrived(qkv_in_, c.kv_block));
  }
  void AwaitInputs(const ComputeCall& c, bool backward) {
    if (backward) return Await(do_in_, c.q_block, false);
    Await(qkv_in_, c.q_block, false);
    if (!c.kv_in_pool) Await(qkv_in_, c.kv_block, false);
  }

  // The first call from `head` on that may run now: its inputs are here and
  // no earlier call still to run writes its output rows (forward: o, lse of
  // the query block; backward: dq of the query block, dK/dV of the key
  // block). calls.size(): none.
  size_t FirstRunnable(const std::vector<ComputeCall>& calls, const std::vector<char>& done,
                       size_t head, bool backward) {
    ++call_epoch_;
    for (size_t i = head; i < calls.size(); ++i) {
      if (done[i]) continue;
      const ComputeCall& c = calls[i];
      const bool free = q_blocked_[c.q_block] != call_epoch_ &&
                        (!backward || kv_blocked_[c.kv_block] != call_epoch_);
      if (free && InputsReady(c, backward)) return i;
      q_blocked_[c.q_block] = call_epoch_;
      if (backward) kv_blocked_[c.kv_block] = call_epoch_;
    }
    return calls.size();
  }

  // With nothing to run, how long the rank polls without a reshuffle piece
  // arriving before it blocks (RunCalls, RunCarriedUntil).
  static constexpr double kStallUs = 200e3;
  size_t PiecesInFlight() const { return qkv_in_.in_flight.size() + do_in_.in_flight.size(); }

  // Runs one call (its delta first, backward); `carried`: it was counted in
  // carried_q_, carried_kv_ when carried.
  void RunCall(const ComputeCall& c, bool backward, const std::string& label, bool carried) {
    if (backward && !c.q_in_pool) EnsureDelta(c.q_block);  // a remote one's: FinishQueries
    Compute(c, backward, label);
    if (!carried) return;
    --carried_q_[c.q_block];
    --carried_kv_[c.kv_block];
  }

  // A call that reads K/V of an owned block (and, backward, adds into its
  // dK/dV) with the queries of an owned block: it holds no pool slot and
  // sends no partial, so it may wait for its reshuffled rows past its
  // stage's end.
  static bool Carriable(const ComputeCall& c, bool backward) {
    return !c.kv_in_pool && !c.q_in_pool && !(backward && c.dkv_in_partial);
  }

  // Runs a stage's calls, after those carried from earlier stages, as their
  // inputs arrive: in plan order, except that a call whose inputs are here
  // goes ahead of earlier ones still waiting when it writes none of their
  // output rows (FirstRunnable). So every output row takes its calls in plan
  // order and the results do not depend on arrival times. With nothing
  // runnable: if `may_carry` (a later stage exists) and every call left is
  // Carriable, they are carried to the next stage, whose received K/V then
  // need not wait for them (the simulator's rule, docs/runtime.md step 1);
  // otherwise it polls while reshuffle pieces keep arriving, and after
  // kStallUs without one it blocks on the first waiting call's inputs, so
  // the communicator's deadline bounds the wait.
  void RunCalls(const std::vector<ComputeCall>& stage_calls, bool backward,
                const std::string& label, bool may_carry) {
    std::vector<ComputeCall> calls = std::move(carried_);
    std::vector<std::string> carried_labels = std::move(carried_labels_);
    carried_.clear();
    carried_labels_.clear();
    const size_t carried_in = calls.size();  // counted in carried_q_, carried_kv_
    calls.insert(calls.end(), stage_calls.begin(), stage_calls.end());
    std::vector<char> done(calls.size(), 0);
    size_t head = 0;
    while (head < calls.size()) {
      size_t run = FirstRunnable(calls, done, head, backward);
      if (run == calls.size() && may_carry &&
          CarryRest(calls, done, head, carried_labels, label, backward))
        return;
      if (run == calls.size()) {
        const double wait_start = trace_->NowUs();
        double last_arrival = wait_start;
        size_t in_flight = PiecesInFlight();
        while (run == calls.size()) {
          Poll();
          run = FirstRunnable(calls, done, head, backward);
          const size_t now_in_flight = PiecesInFlight();
          if (now_in_flight != in_flight) {
            in_flight = now_in_flight;
            last_arrival = trace_->NowUs();
          } else if (run == calls.size() && trace_->NowUs() - last_arrival > kStallUs) {
            AwaitInputs(calls[head], backward);
            run = head;
          }
        }
        const double wait_end = trace_->NowUs();
        trace_->Add("wait inputs " + label, TraceLane::kWait, wait_start, wait_end);
        stats_->reshuffle_wait_s += (wait_end - wait_start) * 1e-6;
      }
      const bool carried = run < carried_in;
      RunCall(calls[run], backward, carried ? carried_labels[run] : label, carried);
      if (backward && !carried) PartialCallDone(run - carried_in);
      done[run] = 1;
      Poll();
      while (head < calls.size() && done[head]) ++head;
    }
  }

  // Carries the calls from `head` on that are not done into carried_ (each
  // keeps its stage's label), in plan order, if every one is Carriable: true.
  // The first carried_labels.size() calls were carried in.
  bool CarryRest(const std::vector<ComputeCall>& calls, const std::vector<char>& done, size_t head,
                 const std::vector<std::string>& carried_labels, const std::string& label,
                 bool backward) {
    for (size_t i = head; i < calls.size(); ++i)
      if (!done[i] && !Carriable(calls[i], backward)) return false;
    carried_backward_ = backward;
    for (size_t i = head; i < calls.size(); ++i) {
      if (done[i]) continue;
      carried_.push_back(calls[i]);
      const bool carried_in = i < carried_labels.size();
      carried_labels_.push_back(carried_in ? carried_labels[i] : label);
      if (carried_in) continue;  // counted when first carried
      ++carried_q_[calls[i].q_block];
      ++carried_kv_[calls[i].kv_block];
      ++stats_->carried_calls;
    }
    return true;
  }

  // While `done()` is false and calls are carried: runs each carried call
  // whose inputs arrive (FirstRunnable's order: carried calls are in plan
  // order), polling in between, so a carried call does not wait behind the
  // stage's blocking waits (its sends' blocks, its transfers): the
  // simulator's carried pairs run whenever the worker is free. After
  // kStallUs with neither a call run nor an arrival it returns, and the
  // caller's blocking wait (with the communicator's deadline) follows.
  template <class Done>
  void RunCarriedUntil(Done done) {
    if (carried_.empty()) return;
    Poll();
    double last_progress = trace_->NowUs();
    size_t in_flight = PiecesInFlight();
    // No carried call is done (each leaves carried_ as it runs, and none
    // joins while this runs), so one all-zero vector serves every poll.
    const std::vector<char> none(carried_.size(), 0);
    while (!carried_.empty() && !done()) {
      const size_t run = FirstRunnable(carried_, none, 0, carried_backward_);
      if (run < carried_.size()) {
        const ComputeCall call = carried_[run];
        const std::string label = carried_labels_[run];
        carried_.erase(carried_.begin() + static_cast<std::ptrdiff_t>(run));
        carried_labels_.erase(carried_labels_.begin() + static_cast<std::ptrdiff_t>(run));
        RunCall(call, carried_backward_, label, /*carried=*/true);
        last_progress = trace_->NowUs();
      }
      Poll();
      const size_t now_in_flight = PiecesInFlight();
      if (now_in_flight != in_flight) {
        in_flight = now_in_flight;
        last_progress = trace_->NowUs();
      } else if (trace_->NowUs() - last_progress > kStallUs) {
        return;
      }
    }
  }

  // delta = rowsum(o * do) of block b's rows, once its dO is here.
  void EnsureDelta(int32_t b) {
    if (delta_done_[b]) return;
    const int64_t row = prog_.block_row[b];
    ComputeDelta(dims_, plan_.blocks[b].tokens(), local_.o.data() + row * qrow_,
                 local_.d_o.data() + row * qrow_, local_.delta.data() + row * dims_.heads_q);
    delta_done_[b] = 1;
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

  // Sends (or, for my own share, copies) the rows of my blocks that are
  // final by the end of `stage` and wait for no carried call, to each rank
  // in (final stage, block) order, as far as that order allows.
  void SendReturns(ReturnGroup& g, int32_t stage) {
    for (int32_t d = 0; d < prog_.workers; ++d) {
      for (size_t& i = g.next_send[d]; i < g.send_order.size(); ++i) {
        const int32_t b = g.send_order[i];
        const std::vector<RowRun> runs = RunsFor(b, d);
        if (runs.empty()) continue;
        if (g.final_stage[b] > stage || (*g.carried)[b] > 0) break;
        const int64_t first = prog_.block_row[b];
        if (d == prog_.rank) {
          for (const RowRun& r : runs)
            for (int64_t k = 0; k < r.count; ++k)
              for (size_t fi = 0; fi < g.fields.size(); ++fi)
                std::copy_n(g.row_ptr(fi, first + r.block_row + k), g.fields[fi].width,
                            g.fields[fi].dst + (r.dl_row + k) * g.fields[fi].width);
          continue;
        }
        std::vector<float>& buf =
            g.outgoing.emplace_back(static_cast<size_t>(RunRows(runs) * g.width));
        float* out = buf.data();
        for (const RowRun& r : runs)
          for (int64_t k = 0; k < r.count; ++k)
            for (size_t fi = 0; fi < g.fields.size(); ++fi)
              out = std::copy_n(g.row_ptr(fi, first + r.block_row + k), g.fields[fi].width, out);
        ReturnLink& link = return_links_[d];
        if (!link.busy && link.queue.empty()) links_pending_.push_back(d);
        link.queue.push_back({buf.data(), static_cast<int64_t>(buf.size() * 4), g.tag,
                              g.name + " b" + std::to_string(b) + " to " + std::to_string(d),
                              g.group});
        PumpReturns(d);
      }
    }
  }

  // Destination d's link: once its message in flight has completed (it
  // joins flights_, to be recorded with its group), the next queued one is
  // sent.
  void PumpReturns(int32_t d) {
    ReturnLink& link = return_links_[d];
    if (link.busy) {
      if (link.flight.end_us < 0 && comm_.Test(link.flight.request))
        link.flight.end_us = trace_->NowUs();
      if (link.flight.end_us < 0) return;
      flights_.push_back(link.flight);
      link.busy = false;
    }
    if (link.queue.empty()) return;
    ReturnLink::Queued& q = link.queue.front();
    link.flight = {comm_.Isend(q.data, q.bytes, d, q.tag), std::move(q.name), TraceLane::kReshuffle,
                   q.group, trace_->NowUs()};
    link.busy = true;
    link.queue.pop_front();
  }

  // Sends everything queued on every link, each message once the one before
  // it to the same rank has completed.
  void DrainReturns() {
    for (int32_t d : links_pending_) {
      ReturnLink& link = return_links_[d];
      while (link.busy || !link.queue.empty()) {
        if (link.busy) Finish(link.flight);
        PumpReturns(d);
      }
    }
    links_pending_.clear();
  }

  // Waits for the group (its sends, and whatever is queued before them) and
  // scatters the received rows into place.
  void FinishReturns(ReturnGroup& g) {
    DrainReturns();
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
  // Query rows and outputs: of the blocks this rank owns (local rows), and
  // of the blocks it computes with remotely (the query pool of the pass).
  QueryRows local_, query_pool_;
  std::deque<std::vector<float>> partials_out_in_;  // the stage's received partial outputs
  std::vector<float> kv_, dkv_;
  std::vector<float> pool_;     // the pass's K/V receive pool
  std::vector<float> partial_;  // the backward's dK/dV partial pool
  std::vector<Flight> flights_;
  std::vector<ReturnLink> return_links_;     // per destination rank
  std::vector<int32_t> links_pending_;       // ranks whose link is busy or has a queue
  std::deque<IncomingPartial> partials_in_;  // in posting order
  PartialSends next_partials_;               // the next backward stage's partial sends
  // Per call of the running backward stage: the next stage's send it adds into, or -1.
  std::vector<int32_t> call_partial_;
  Arrivals qkv_in_, do_in_;
  // The current stage's K/V sends (PostReadySends).
  struct StageSends {
    const StageProgram* sp = nullptr;
    std::string label;
    std::vector<char> posted;
    size_t left = 0;
  } sends_;
  std::vector<int64_t> send_blocked_;            // per rank: stamp of the scan that blocked it
  std::vector<int64_t> q_blocked_, kv_blocked_;  // per block: stamp of the RunCalls scan
  std::vector<ComputeCall> carried_;             // calls carried into the next stage, in plan order
  std::vector<std::string> carried_labels_;      // their stages' labels ("fwd s0")
  bool carried_backward_ = false;                // the pass they belong to
  // Per block: carried calls with it as query block (they write its o, lse or
  // dq) and as key block (backward: its dk, dv).
  std::vector<int32_t> carried_q_, carried_kv_;
  int64_t send_epoch_ = 0, call_epoch_ = 0;
  std::vector<char> delta_done_;  // per block
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

// 1. Reshuffle in: the q | k | v rows of each (block, dataloader rank) pair
// to the block's owner as one message, posted in the order the owner needs
// them; the forward's calls and sends take each block as it arrives.
void Runner::ReshuffleIn(const RankInputs& in) {
  const RankProgram& P = prog_;
  local_.q.assign(static_cast<size_t>(P.local_rows * qrow_), 0.0f);
  kv_.assign(static_cast<size_t>(2 * P.local_rows * kvrow_), 0.0f);
  StartReshuffle(
      qkv_in_, P.reshuffle_in, "reshuffle in", kReshuffleInGroup, kTagReshuffleIn,
      qrow_ + 2 * kvrow_,
      [&](int64_t r, float* out) {
        out = std::copy_n(in.q.data() + r * qrow_, qrow_, out);
        out = std::copy_n(in.k.data() + r * kvrow_, kvrow_, out);
        std::copy_n(in.v.data() + r * kvrow_, kvrow_, out);
      },
      [this](int64_t row, const float* src) {
        std::copy_n(src, qrow_, local_.q.data() + row * qrow_);
        std::copy_n(src + qrow_, kvrow_, kv_.data() + LocalKvOffset(row, false));
        std::copy_n(src + qrow_ + kvrow_, kvrow_, kv_.data() + LocalKvOffset(row, true));
      });
  local_.o.assign(local_.q.size(), 0.0f);
  local_.lse.assign(static_cast<size_t>(P.local_rows * dims_.heads_q), 0.0f);
  InitForwardOutput(dims_, P.local_rows, local_.o.data(), local_.lse.data());
}

// The backward's input: dO rows by the same pieces, in the order the
// backward's calls need them (the first call with the block as query).
void Runner::ReshuffleDo(const RankInputs& in) {
  local_.d_o.assign(local_.q.size(), 0.0f);
  local_.delta.assign(local_.lse.size(), 0.0f);
  delta_done_.assign(plan_.blocks.size(), 0);
  StartReshuffle(
      do_in_, prog_.do_in, "reshuffle do", kReshuffleDoGroup, kTagReshuffleDo, qrow_,
      [&](int64_t r, float* out) { std::copy_n(in.d_o.data() + r * qrow_, qrow_, out); },
      [this](int64_t row, const float* src) {
        std::copy_n(src, qrow_, local_.d_o.data() + row * qrow_);
      });
}

ReturnGroup Runner::MakeReturn(FlightGroup group, int32_t tag, std::string name,
                               std::vector<Field> fields, const std::vector<int32_t>& final_stage,
                               const std::vector<int32_t>* carried,
                               std::function<const float*(size_t, int64_t)> row_ptr) {
  ReturnGroup g;
  g.group = group;
  g.tag = tag;
  g.name = std::move(name);
  g.fields = std::move(fields);
  g.final_stage = final_stage;
  g.carried = carried;
  g.send_order = prog_.owned_blocks;
  std::stable_sort(g.send_order.begin(), g.send_order.end(),
                   [&](int32_t a, int32_t b) { return final_stage[a] < final_stage[b]; });
  g.next_send.assign(static_cast<size_t>(prog_.workers), 0);
  g.row_ptr = std::move(row_ptr);
  PostReturnReceives(g);
  SendReturns(g, -1);
  return g;
}

// 2. Forward stages; each block's (o, lse) heads home once final.
void Runner::ForwardStages(ReturnGroup& ret_o) {
  const RankProgram& P = prog_;
  pool_.assign(static_cast<size_t>(kv_rows_.Floats(P.forward.pool_rows)), 0.0f);
  StartQueryPool(P.forward.query_rows, false);
  stats_->peak_received_blocks = P.forward.peak_slots;
  for (size_t t = 0; t < P.forward.stages.size(); ++t) {
    if (options_.before_forward_stage) options_.before_forward_stage(static_cast<int32_t>(t));
    const StageProgram& sp = P.forward.stages[t];
    const std::string label = "fwd s" + std::to_string(t);
    const double stage_start = trace_->NowUs();
    PostKv(sp, label);
    PostQueries(sp, label, false);
    RunCalls(sp.compute, false, label, t + 1 < P.forward.stages.size());
    PostReadySends(true);
    FinishStage(stage_start, label);
    FinishQueries(sp, false);
    SendReturns(ret_o, static_cast<int32_t>(t));
  }
  FinishArrivals(qkv_in_);  // pieces of blocks no stage used
  pool_ = {};
  query_pool_ = {};
}

// 4. Backward stages; dq and dk, dv head home apart, each once final.
void Runner::BackwardStages(ReturnGroup& ret_dq, ReturnGroup& ret_dkv) {
  const RankProgram& P = prog_;
  pool_.assign(static_cast<size_t>(kv_rows_.Floats(P.backward.pool_rows)), 0.0f);
  partial_.assign(static_cast<size_t>(kv_rows_.Floats(P.backward.partial_rows)), 0.0f);
  StartQueryPool(P.backward.query_rows, true);
  // Stage 0 sends no partial (ValidatePlan: each needs the compute of a
  // stage before it), so no call is awaited.
  PrepareNextPartials(0, {});
  stats_->peak_received_blocks = std::max(stats_->peak_received_blocks, P.backward.peak_slots);
  for (size_t t = 0; t < P.backward.stages.size(); ++t) {
    const int32_t stage = static_cast<int32_t>(t);
    const StageProgram& sp = P.backward.stages[t];
    const std::string label = "bwd s" + std::to_string(t);
    const double stage_start = trace_->NowUs();
    PostKv(sp, label);
    const std::vector<int32_t> recv_tags = PartialTags(
        sp.dkv_recv, prog_.workers, [](const DkvRecv& r) { return r.src; }, t);
    for (size_t i = 0; i < sp.dkv_recv.size(); ++i) {
      const DkvRecv& r = sp.dkv_recv[i];
      IncomingPartial& in = partials_in_.emplace_back();
      in.recv = r;
      in.data.resize(static_cast<size_t>(kv_rows_.Floats(r.rows)));
      const std::string name =
          label + " recv dkv" + std::to_string(r.block) + " from " + std::to_string(r.src);
      if (WholeBlock(r)) {
        in.flight = {comm_.Irecv(in.data.data(), kv_rows_.Floats(r.rows) * 4, r.src, recv_tags[i]),
                     name, TraceLane::kRecv, kStageGroup, trace_->NowUs()};
        continue;
      }
      // Part of the block: its K rows, then its V rows, two messages into one buffer.
      const int64_t half = kv_rows_.Floats(r.rows) / 2;
      in.flight = {comm_.Irecv(in.data.data(), half * 4, r.src, recv_tags[i]), name + " (K rows)",
                   TraceLane::kRecv, kStageGroup, trace_->NowUs()};
      in.v_flight = Flight{comm_.Irecv(in.data.data() + half, half * 4, r.src, recv_tags[i]),
                           name + " (V rows)", TraceLane::kRecv, kStageGroup, trace_->NowUs()};
    }
    PostQueries(sp, label, true);
    SendStagePartials(label);
    PrepareNextPartials(t + 1, sp.compute);
    RunCalls(sp.compute, true, label, t + 1 < P.backward.stages.size());
    PostReadySends(true);
    FinishStage(stage_start, label);
    FinishQueries(sp, true);
    // A sent partial's rows start the next partial that reuses them at zero.
    for (const DkvSend& s : sp.dkv_send)
      for (const bool v : {false, true})  // the rows it sent; the others are zero (ValidatePlan)
        std::fill_n(kv_rows_.Part(partial_.data(), s.partial_row, s.block_rows, s.row_begin, v),
                    kv_rows_.Floats(s.rows) / 2, 0.0f);
    SendReturns(ret_dq, stage);
    AbsorbPartials([&](const DkvRecv& r) {
      return !r.into_partial && P.backward_dkv_final_stage[r.block] <= stage &&
             carried_kv_[r.block] == 0;
    });
    SendReturns(ret_dkv, stage);
  }
  AbsorbPartials([](const DkvRecv&) { return true; });  // none is left in a valid plan
  FinishArrivals(do_in_);
  pool_ = {};
  partial_ = {};
  query_pool_ = {};
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
  ReturnGroup ret_o = MakeReturn(
      kReturnOGroup, kTagReturnO, "return o",
      {{qrow_, out.o.data()}, {dims_.heads_q, out.lse.data()}}, P.forward_final_stage, &carried_q_,
      [this](size_t fi, int64_t row) -> const float* {
        return fi == 0 ? local_.o.data() + row * qrow_ : local_.lse.data() + row * dims_.heads_q;
      });
  ForwardStages(ret_o);
  stats_->forward_s = (trace_->NowUs() - run_start) * 1e-6;

  // 3. The output's trip home stays in flight during the backward.
  if (!options_.backward) {
    FinishReturns(ret_o);
    return out;
  }

  const double bwd_start = trace_->NowUs();
  ReshuffleDo(in);
  local_.dq.assign(local_.q.size(), 0.0f);
  dkv_.assign(kv_.size(), 0.0f);
  out.dq.resize(static_cast<size_t>(dl_rows * qrow_));
  out.dk.resize(static_cast<size_t>(dl_rows * kvrow_));
  out.dv.resize(out.dk.size());
  ReturnGroup ret_dq = MakeReturn(
      kReturnDqGroup, kTagReturnDq, "return dq", {{qrow_, out.dq.data()}},
      P.backward_dq_final_stage, &carried_q_,
      [this](size_t, int64_t row) -> const float* { return local_.dq.data() + row * qrow_; });
  ReturnGroup ret_dkv =
      MakeReturn(kReturnDkvGroup, kTagReturnDkv, "return dkv",
                 {{kvrow_, out.dk.data()}, {kvrow_, out.dv.data()}}, P.backward_dkv_final_stage,
                 &carried_kv_, [this](size_t fi, int64_t row) -> const float* {
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
