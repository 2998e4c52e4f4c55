// The event-driven plan simulator (fcp/simulator.h). Numbered steps:
//   1. index the plan (segments per block by sequence, owners, token shares);
//   2. kernel costs per (stage, worker), memoised across the two passes;
//   3. one event loop per pass over compute streams, stage transfers and the
//      reshuffle flows, on the fluid Network;
//   4. per-worker statistics and the summary.
#include "fcp/simulator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <queue>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "fcp/error.h"
#include "fcp/mask.h"
#include "fcp/plan_metrics.h"  // Imbalance
#include "network.h"
#include "plan/buckets.h"
#include "plan/enum_names.h"

namespace fcp {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

[[noreturn]] void BadPlan(const std::string& what) {
  throw Error(ErrorCode::kInvalidPlan, "simulate: " + what);
}

// ---- 1. plan index ----------------------------------------------------------

// Each block's segments sorted by (seq, start), numbered globally so a query
// segment has one id; per block the runs of equal seq.
class SegmentIndex {
 public:
  struct Seg {
    int32_t seq;
    int64_t start;
    int64_t length;
  };
  struct Run {
    int32_t seq;
    int32_t begin;  // global segment ids [begin, end)
    int32_t end;
  };
  explicit SegmentIndex(const Plan& plan) : run_begin_(plan.blocks.size() + 1, 0) {
    for (size_t b = 0; b < plan.blocks.size(); ++b) {
      const size_t first = segs_.size();
      for (const Segment& s : plan.blocks[b].segments) {
        if (s.seq < 0 || static_cast<size_t>(s.seq) >= plan.sequences.size() || s.length <= 0)
          BadPlan("block " + std::to_string(b) + " has a segment outside the sequences");
        segs_.push_back({s.seq, s.start, s.length});
      }
      std::stable_sort(segs_.begin() + first, segs_.end(), [](const Seg& a, const Seg& c) {
        return a.seq != c.seq ? a.seq < c.seq : a.start < c.start;
      });
      for (size_t k = first; k < segs_.size(); ++k) {
        if (k == first || segs_[k].seq != segs_[k - 1].seq)
          runs_.push_back({segs_[k].seq, static_cast<int32_t>(k), static_cast<int32_t>(k + 1)});
        else
          runs_.back().end = static_cast<int32_t>(k + 1);
      }
      run_begin_[b + 1] = static_cast<int32_t>(runs_.size());
    }
  }
  const Seg& seg(int32_t id) const { return segs_[id]; }
  size_t segment_count() const { return segs_.size(); }
  const Run* runs_begin(int32_t block) const { return runs_.data() + run_begin_[block]; }
  const Run* runs_end(int32_t block) const { return runs_.data() + run_begin_[block + 1]; }

 private:
  std::vector<Seg> segs_;
  std::vector<Run> runs_;
  std::vector<int32_t> run_begin_;
};

// ---- 2. kernel costs --------------------------------------------------------

struct PairCost {
  double forward_s = 0;  // this pair's share of its stage kernel (no launch cost)
  int64_t token_pairs = 0;
};

// Costs the pairs one worker computes in one stage as one kernel: pairs are
// merged per query segment, each segment charged at f(2P/q).
class KernelCoster {
 public:
  KernelCoster(const Plan& plan, const HardwareProfile& profile)
      : plan_(plan), profile_(profile), index_(plan), segment_pairs_(index_.segment_count(), 0) {
    flops_per_pair_ = ForwardFlops(plan.attention, 1);
  }

  // Costs of `pairs` (one stage on one worker), memoised on the pair list.
  const std::vector<PairCost>& Cost(const std::vector<BlockPair>& pairs) {
    std::vector<uint64_t> key(pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i)
      key[i] = (static_cast<uint64_t>(static_cast<uint32_t>(pairs[i].q_block)) << 32) |
               static_cast<uint32_t>(pairs[i].kv_block);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    return memo_.emplace(std::move(key), Compute(pairs)).first->second;
  }

 private:
  struct Entry {
    int32_t pair;
    int32_t q_segment;
    int64_t token_pairs;
  };

  std::vector<PairCost> Compute(const std::vector<BlockPair>& pairs) {
    entries_.clear();
    for (size_t p = 0; p < pairs.size(); ++p) {
      // Merge-join the two blocks' sequence runs.
      const SegmentIndex::Run* a = index_.runs_begin(pairs[p].q_block);
      const SegmentIndex::Run* a_end = index_.runs_end(pairs[p].q_block);
      const SegmentIndex::Run* b = index_.runs_begin(pairs[p].kv_block);
      const SegmentIndex::Run* b_end = index_.runs_end(pairs[p].kv_block);
      while (a != a_end && b != b_end) {
        if (a->seq < b->seq) {
          ++a;
        } else if (b->seq < a->seq) {
          ++b;
        } else {
          for (int32_t qs = a->begin; qs < a->end; ++qs) {
            const SegmentIndex::Seg& q = index_.seg(qs);
            int64_t total = 0;
            for (int32_t ks = b->begin; ks < b->end; ++ks) {
              const SegmentIndex::Seg& k = index_.seg(ks);
              total += AllowedPairs(plan_.mask, {q.start, q.start + q.length},
                                    {k.start, k.start + k.length});
            }
            if (total > 0) entries_.push_back({static_cast<int32_t>(p), qs, total});
          }
          ++a;
          ++b;
        }
      }
    }
    touched_.clear();
    for (const Entry& e : entries_) {
      if (segment_pairs_[e.q_segment] == 0) touched_.push_back(e.q_segment);
      segment_pairs_[e.q_segment] += e.token_pairs;
    }
    // Seconds per token pair of each merged query segment, stored in place.
    seconds_per_pair_.resize(std::max(seconds_per_pair_.size(), index_.segment_count()));
    for (int32_t s : touched_) {
      const double kernel_tokens = EquivalentKernelTokens(index_.seg(s).length, segment_pairs_[s]);
      seconds_per_pair_[s] = AttentionTime_s(profile_, flops_per_pair_, kernel_tokens, false);
    }
    std::vector<PairCost> costs(pairs.size());
    for (const Entry& e : entries_) {
      costs[e.pair].forward_s +=
          static_cast<double>(e.token_pairs) * seconds_per_pair_[e.q_segment];
      costs[e.pair].token_pairs += e.token_pairs;
    }
    for (int32_t s : touched_) segment_pairs_[s] = 0;
    return costs;
  }

  const Plan& plan_;
  const HardwareProfile& profile_;
  SegmentIndex index_;
  double flops_per_pair_ = 0;
  std::vector<int64_t> segment_pairs_;
  std::vector<double> seconds_per_pair_;
  std::vector<int32_t> touched_;
  std::vector<Entry> entries_;
  std::map<std::vector<uint64_t>, std::vector<PairCost>> memo_;
};

// ---- 3. one pass --------------------------------------------------------------

// kQ and kPartial are the remote-compute extension's (docs/plan-format.md):
// query rows to a computing worker (forward Q; backward Q, O, dO, LSE), and
// its partial O and LSE (backward dQ) back to the owner.
enum class TransferKind { kKv, kDkv, kQ, kPartial };

struct StageTransfer {
  int32_t block, src, dst, stage;
  TransferKind kind;
  double bytes;
};

// Stage transfers go through channels per worker, each with send and receive
// groups in stage order: K/V on channel 0, dK/dV partials on channel 1, so
// compute never waits for a partial (it is added into the owner's gradients
// whenever it arrives). Query rows go with K/V, partial outputs with dK/dV.
constexpr int kChannels = 2;

struct PairTask {
  int32_t q_block, kv_block, worker, stage;
  double seconds;
  int64_t token_pairs;
};

// Outputs go home in two parts, each as soon as it is final (OutputKey): the
// query rows' part (O in the forward, dQ in the backward) after the block's
// last query compute, and in the backward dK/dV after its last key compute
// on the owner and the last partial the owner receives.
enum OutputPart : int32_t { kRowsPart = 0, kKvPart = 1 };

struct ReshuffleFlow {
  int32_t block, src, dst;
  double bytes;
  OutputPart part = kRowsPart;  // out flows only
};

struct PassInput {
  bool backward = false;
  int32_t stages = 0;
  std::vector<StageTransfer> transfers;
  std::vector<PairTask> pairs;
  std::vector<ReshuffleFlow> in_flows, out_flows;
};

struct PassOutput {
  double time_s = 0;
  std::vector<double> busy_s, last_activity_s;
};

// The quantized network's quantum for a pass (SimConfig::network_quantum).
double NetworkQuantum_s(const SimConfig& config, const HardwareProfile& profile,
                        const PassInput& in, int32_t workers) {
  double bytes = 0;
  size_t flows = in.transfers.size();
  for (const StageTransfer& t : in.transfers) bytes += t.bytes;
  if (flows == 0)
    for (const auto* list : {&in.in_flows, &in.out_flows})
      for (const ReshuffleFlow& f : *list) bytes += f.bytes, ++flows;
  const double mean_s =
      flows > 0 ? bytes / static_cast<double>(flows) / profile.nic_bytes_per_s : 0;
  // Any positive quantum where nothing flows.
  return mean_s > 0 ? NetworkQuantumFor(config, workers) * mean_s : 1;
}

// Tags of flows in the network: kind in the low 2 bits.
enum FlowKind : int64_t { kStageFlow = 0, kInFlow = 1, kOutFlow = 2 };
int64_t Tag(FlowKind kind, size_t index) { return static_cast<int64_t>(index) * 4 + kind; }

class PassSimulator {
 public:
  PassSimulator(const Plan& plan, const HardwareProfile& profile, const SimConfig& config,
                const PassInput& in, double trace_offset_s, std::vector<TraceEvent>* trace)
      : plan_(plan),
        profile_(profile),
        config_(config),
        in_(in),
        n_(plan.workers),
        net_(sim::MakeNetwork(config.network, profile, plan.workers,
                              NetworkQuantum_s(config, profile, in, plan.workers))),
        trace_offset_s_(trace_offset_s),
        trace_(trace) {}

  PassOutput Run() {
    Setup();
    for (int32_t w = 0; w < n_; ++w) Progress(w);
    std::vector<int64_t> drained;
    for (;;) {
      const double drain_time = net_->NextDrainTime();
      const double event_time = events_.empty() ? kInfinity : events_.top().time;
      if (drain_time == kInfinity && event_time == kInfinity) break;
      drained.clear();
      if (drain_time <= event_time) {
        net_->AdvanceTo(drain_time, drained);
        now_ = drain_time;
        HandleDrained(drained);
        continue;
      }
      net_->AdvanceTo(event_time, drained);
      now_ = event_time;
      HandleDrained(drained);
      while (!events_.empty() && events_.top().time <= now_) {
        const Event e = events_.top();
        events_.pop();
        Handle(e);
      }
    }
    for (int32_t w = 0; w < n_; ++w)
      if (workers_[w].c_done + 1 < in_.stages || Stalled(workers_[w].channel[0]) ||
          Stalled(workers_[w].channel[1]))
        throw Error(ErrorCode::kInternal, "simulate: worker " + std::to_string(w) +
                                              " stalled in stage " +
                                              std::to_string(workers_[w].c_stage));
    if (config_.on_progress) config_.on_progress(in_.backward ? 1 : 0, 1.0);
    PassOutput out;
    out.time_s = end_time_;
    out.busy_s.resize(n_);
    out.last_activity_s.resize(n_);
    for (int32_t w = 0; w < n_; ++w) {
      out.busy_s[w] = workers_[w].busy_s;
      out.last_activity_s[w] = workers_[w].last_activity_s;
    }
    return out;
  }

 private:
  enum class EventKind { kComputeDone, kDelivered };
  struct Event {
    double time;
    int64_t seq;
    EventKind kind;
    int64_t a;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  // A channel's send groups and receive groups, each running the stages in order.
  struct Channel {
    int32_t s_stage = -1;          // the send group in flight
    int32_t s_left = 0;            // its sends not yet delivered
    int32_t r_stage = -1;          // the last receive group opened
    int32_t r_done = -1;           // last stage whose receives (and all before) have arrived
    std::vector<int32_t> blocked;  // sends of its send group waiting for their data
  };
  // A compute stream and the channels of a worker.
  struct WorkerState {
    int32_t c_stage = 0;     // the compute stage running or next
    bool c_started = false;  // its pairs are loaded into `pending`
    int32_t c_done = -1;     // last stage whose compute is complete
    std::array<Channel, kChannels> channel;
    bool busy = false;
    bool launched = false;
    // Pair tasks of the current stage, in plan order; -1 once started, and
    // all before pending_head started (a stage's pairs mostly start in
    // order, so taking one is O(1), not an O(P) erase that makes a stage
    // O(P^2): docs/simulator.md, at scale).
    std::vector<int32_t> pending;
    size_t pending_head = 0;
    // Carried pairs: of earlier stages, with K/V of the worker's own blocks,
    // whose reshuffled inputs had not arrived when nothing else of their stage
    // was left (CarryWaitingPairs); each runs, ahead of the current stage's
    // pairs, once its inputs are in. In plan order.
    struct CarriedPair {
      int32_t pair;
      bool pays_launch;  // the first of its stage's kernel to run
    };
    std::vector<CarriedPair> carried;
    double busy_s = 0;
    double last_activity_s = 0;
    double run_start_s = -1, run_end_s = -1;  // current compute trace span
  };

  size_t Cell(int32_t stage, int32_t worker) const {
    return static_cast<size_t>(stage) * n_ + worker;
  }
  size_t Cell(int ch, int32_t stage, int32_t worker) const {
    return static_cast<size_t>(ch) * in_.stages * n_ + Cell(stage, worker);
  }
  int ChannelOf(const StageTransfer& t) const {
    return t.kind == TransferKind::kDkv || t.kind == TransferKind::kPartial ? 1 : 0;
  }
  // Key of a block's output part in out_left_ and the out-flow index.
  static size_t OutputKey(int32_t block, OutputPart part) {
    return 2 * static_cast<size_t>(block) + part;
  }
  bool Stalled(const Channel& c) const {
    return c.r_done + 1 < in_.stages || c.s_stage < in_.stages;
  }

  void Setup() {
    const size_t cells = static_cast<size_t>(in_.stages) * n_;
    // Pair tasks per (stage, worker), in input order.
    pairs_by_cell_ = detail::BucketBy(cells, in_.pairs.size(), [&](int32_t i) {
      return Cell(in_.pairs[i].stage, in_.pairs[i].worker);
    });
    // Sends (by src) and receives (by dst) per (channel, stage, worker).
    const size_t channel_cells = kChannels * cells;
    sends_by_cell_ = detail::BucketBy(channel_cells, in_.transfers.size(), [&](int32_t i) {
      const StageTransfer& t = in_.transfers[i];
      return Cell(ChannelOf(t), t.stage, t.src);
    });
    recvs_by_cell_ = detail::BucketBy(channel_cells, in_.transfers.size(), [&](int32_t i) {
      const StageTransfer& t = in_.transfers[i];
      return Cell(ChannelOf(t), t.stage, t.dst);
    });
    recv_left_.assign(channel_cells, 0);
    arrivals_.assign(in_.transfers.size(), 0);
    started_.assign(in_.transfers.size(), 0);
    CountPartialPairs();
    transfer_start_s_.assign(in_.transfers.size(), 0);
    workers_.assign(n_, WorkerState{});
    const size_t blocks = plan_.blocks.size();
    waiting_.assign(blocks, {});

    // Inputs arriving by reshuffle.
    in_ready_.assign(blocks, 1);
    in_left_.assign(blocks, 0);
    in_flows_left_ = 0;
    if (config_.reshuffle != ReshuffleMode::kNone) {
      for (size_t i = 0; i < in_.in_flows.size(); ++i) {
        const ReshuffleFlow& f = in_.in_flows[i];
        in_ready_[f.block] = 0;
        ++in_left_[f.block];
        ++in_flows_left_;
        StartFlow(f.src, f.dst, f.bytes, Tag(kInFlow, i));
      }
      if (config_.reshuffle == ReshuffleMode::kBlocking && in_flows_left_ > 0)
        std::fill(in_ready_.begin(), in_ready_.end(), 0);
    }
    // Outputs leaving by reshuffle once final.
    // Per output part (OutputKey): the computes and partial receipts it waits for.
    const size_t keys = 2 * blocks;
    out_left_.assign(keys, 0);
    for (const PairTask& p : in_.pairs) {
      ++out_left_[OutputKey(p.q_block, kRowsPart)];
      if (in_.backward && plan_.blocks[p.kv_block].worker == p.worker)
        ++out_left_[OutputKey(p.kv_block, kKvPart)];
    }
    if (in_.backward)
      for (const StageTransfer& t : in_.transfers)
        if (t.kind == TransferKind::kDkv && t.dst == plan_.blocks[t.block].worker)
          ++out_left_[OutputKey(t.block, kKvPart)];
    // A query block's output is final once every partial of it is home.
    for (const StageTransfer& t : in_.transfers)
      if (t.kind == TransferKind::kPartial) ++out_left_[OutputKey(t.block, kRowsPart)];
    out_flows_by_key_ = detail::BucketBy(keys, in_.out_flows.size(), [&](int32_t i) {
      return OutputKey(in_.out_flows[i].block, in_.out_flows[i].part);
    });
    out_start_s_.assign(in_.out_flows.size(), 0);
    SetupConnections();
    parts_not_final_ = 0;
    for (size_t k = 0; k < keys; ++k)
      if (out_left_[k] > 0) ++parts_not_final_;
    for (size_t k = 0; k < keys; ++k)
      if (out_left_[k] == 0) OutputFinal(k);
  }

  // Per-block partial return (PartialReturn): a dK/dV partial sent in stage
  // t waits for the sender's pairs of stage t-1 on its block (and for every
  // earlier stage's compute, where a partial may have gathered more), not
  // for the whole stage's compute, as an output goes home once final.
  // O(pairs x partials sent per stage and worker).
  void CountPartialPairs() {
    per_block_partials_ =
        in_.backward && PartialReturnFor(config_, plan_.planner) == PartialReturn::kPerBlock;
    partial_pairs_left_.assign(in_.transfers.size(), 0);
    partial_of_pair_.assign(in_.pairs.size(), -1);
    if (!per_block_partials_) return;
    for (size_t i = 0; i < in_.transfers.size(); ++i) {
      const StageTransfer& t = in_.transfers[i];
      if (t.kind != TransferKind::kDkv || t.stage < 1) continue;
      for (int32_t p : pairs_by_cell_.row(Cell(t.stage - 1, t.src)))
        if (in_.pairs[p].kv_block == t.block) {
          partial_of_pair_[p] = static_cast<int32_t>(i);
          ++partial_pairs_left_[i];
        }
    }
  }

  void StartFlow(int32_t src, int32_t dst, double bytes, int64_t tag) {
    net_->Start(src, dst, bytes, tag);
  }

  void Push(double time, EventKind kind, int64_t a) { events_.push({time, next_seq_++, kind, a}); }

  void Touch(int32_t w, double t) {
    workers_[w].last_activity_s = std::max(workers_[w].last_activity_s, t);
    end_time_ = std::max(end_time_, t);
  }

  // Data condition of a send beyond the two groups having started.
  bool SourceReady(const StageTransfer& t) const {
    const WorkerState& src = workers_[t.src];
    const Channel& in = src.channel[ChannelOf(t)];
    // A partial is final after its compute (and any relay in): the stage
    // before's whole compute, or per block its pairs there (CountPartialPairs).
    if (t.kind == TransferKind::kPartial)  // after the stage before's whole compute
      return in.r_done >= t.stage - 1 && src.c_done >= t.stage - 1;
    if (t.kind == TransferKind::kDkv) {
      if (in.r_done < t.stage - 1) return false;
      if (!per_block_partials_) return src.c_done >= t.stage - 1;
      return src.c_done >= t.stage - 2 && partial_pairs_left_[&t - in_.transfers.data()] == 0;
    }
    if (t.src != plan_.blocks[t.block].worker)  // a relay: what arrived in the stage before
      return in.r_done >= t.stage - 1;
    // The forward's owner needs the block's K/V from the reshuffle first.
    return in_.backward || in_ready_[t.block] != 0;
  }

  // Starts transfer t if its send and receive groups are open and its data is there.
  void TryStartTransfer(int32_t t) {
    const StageTransfer& x = in_.transfers[t];
    if (arrivals_[t] < 2 || started_[t]) return;
    if (!SourceReady(x)) {
      if (!in_.backward && (x.kind == TransferKind::kKv || x.kind == TransferKind::kQ) &&
          x.src == plan_.blocks[x.block].worker)
        waiting_[x.block].push_back(t);
      else
        workers_[x.src].channel[ChannelOf(x)].blocked.push_back(t);
      return;
    }
    started_[t] = 1;
    transfer_start_s_[t] = now_;
    StartFlow(x.src, x.dst, x.bytes, Tag(kStageFlow, t));
  }

  void OpenSendGroup(int32_t w, int ch, int32_t stage) {
    Channel& s = workers_[w].channel[ch];
    s.s_stage = stage;
    if (stage >= in_.stages) return;
    const auto sends = sends_by_cell_.row(Cell(ch, stage, w));
    s.s_left = static_cast<int32_t>(sends.size());
    for (int32_t t : sends) {
      ++arrivals_[t];
      TryStartTransfer(t);
    }
  }

  // Whether receive group t of channel ch may open.
  //  * K/V (channel 0): group t-1 has arrived (one group in flight: more
  //    would only share the in-port with the group needed first) and its
  //    buffer is free. The groups use two buffers in turn, so group t reuses
  //    group t-2's, which compute t-1 read; group 1 has a fresh one (compute
  //    0 reads no received block).
  //  * dK/dV partials (channel 1) have buffers of their own and are added
  //    into the owner's gradients on arrival. Pulled: one group at a time,
  //    as K/V: opened all at once, the partials share the in-port with the
  //    K/V that compute waits for (measured: docs/simulator.md, runtime
  //    rules, unserialised pulled partials). Grouped (the MPI executor):
  //    the receiver posts group t when it enters stage t, whether or not
  //    group t-1 has arrived.
  bool MayOpenReceives(const WorkerState& s, int ch, int32_t t) const {
    const Channel& x = s.channel[ch];
    if (ch == 1)
      return config_.transfers == TransferMode::kPull ? x.r_done >= t - 1 : s.c_done >= t - 1;
    return x.r_done >= t - 1 && (t <= 1 || s.c_done >= t - 1);
  }

  void AdvanceReceived(int32_t w, int ch) {
    Channel& x = workers_[w].channel[ch];
    while (x.r_done < x.r_stage && recv_left_[Cell(ch, x.r_done + 1, w)] == 0) ++x.r_done;
  }

  void OpenRecvGroup(int32_t w, int ch, int32_t stage) {
    Channel& s = workers_[w].channel[ch];
    s.r_stage = stage;
    const size_t c = Cell(ch, stage, w);
    const auto receives = recvs_by_cell_.row(c);
    recv_left_[c] = static_cast<int32_t>(receives.size());
    AdvanceReceived(w, ch);
    for (int32_t t : receives) {
      ++arrivals_[t];
      TryStartTransfer(t);
    }
  }

  bool PairReady(const PairTask& p) const {
    if (!in_ready_[p.q_block]) return false;
    if (!in_.backward && plan_.blocks[p.kv_block].worker == p.worker && !in_ready_[p.kv_block])
      return false;
    return true;
  }

  // Runs worker w's streams forward as far as they go at the current time:
  //  * send group t of a channel opens when its group t-1 has been delivered
  //    (grouped transfers; pulled ones need no send group: all are open);
  //  * receive group t opens when its buffer is free (MayOpenReceives);
  //  * compute t starts when compute t-1 is done and channel 0's receive
  //    group t-1 has arrived, each pair as soon as its reshuffled inputs are there.
  void Progress(int32_t w) {
    WorkerState& s = workers_[w];
    for (;;) {
      bool moved = false;
      for (int ch = 0; ch < kChannels; ++ch) {
        Channel& x = s.channel[ch];
        if (!x.blocked.empty()) {  // sends whose data may have arrived meanwhile
          std::vector<int32_t> retry;
          retry.swap(x.blocked);
          for (int32_t t : retry) TryStartTransfer(t);
        }
        // Pulled transfers wait only for their receiver and data: every send group is open.
        while (x.s_stage < in_.stages &&
               (x.s_stage < 0 || x.s_left == 0 || config_.transfers == TransferMode::kPull)) {
          OpenSendGroup(w, ch, x.s_stage + 1);
          moved = true;
        }
        while (x.r_stage + 1 < in_.stages && MayOpenReceives(s, ch, x.r_stage + 1)) {
          OpenRecvGroup(w, ch, x.r_stage + 1);
          moved = true;
        }
      }
      if (!s.busy && !s.carried.empty()) {
        const auto it = std::find_if(s.carried.begin(), s.carried.end(),
                                     [&](const auto& c) { return PairReady(in_.pairs[c.pair]); });
        if (it != s.carried.end()) {
          const WorkerState::CarriedPair c = *it;
          s.carried.erase(it);
          StartPair(w, c.pair, c.pays_launch);
        }
      }
      if (!s.busy && s.c_stage < in_.stages) {
        if (!s.c_started && s.c_done == s.c_stage - 1 && s.channel[0].r_done >= s.c_stage - 1) {
          const auto pairs = pairs_by_cell_.row(Cell(s.c_stage, w));
          s.pending.assign(pairs.begin(), pairs.end());
          s.pending_head = 0;
          s.c_started = true;
          s.launched = false;
        }
        if (s.c_started) {
          const auto head = s.pending.begin() + static_cast<std::ptrdiff_t>(s.pending_head);
          const auto it = std::find_if(
              head, s.pending.end(), [&](int32_t p) { return p >= 0 && PairReady(in_.pairs[p]); });
          if (it != s.pending.end()) {
            const int32_t p = *it;
            *it = -1;
            while (s.pending_head < s.pending.size() && s.pending[s.pending_head] < 0)
              ++s.pending_head;
            StartPair(w, p, !s.launched);
            s.launched = true;
          } else if (s.pending_head == s.pending.size() || CarryWaitingPairs(w)) {
            if (trace_) FlushRun(w);
            s.c_done = s.c_stage++;
            s.c_started = false;
            moved = true;
          }
        }
      }
      if (!moved) return;
    }
  }

  // Pair p starts on worker w now; `launch`: it is the first of its stage's
  // kernel to run, and pays the launch.
  void StartPair(int32_t w, int32_t p, bool launch) {
    WorkerState& s = workers_[w];
    const double seconds = in_.pairs[p].seconds + (launch ? profile_.kernel_launch_s : 0.0);
    s.busy = true;
    s.busy_s += seconds;
    if (trace_) {
      if (s.run_end_s != now_) FlushRun(w);
      if (s.run_start_s < 0) s.run_start_s = now_;
      s.run_end_s = now_ + seconds;
    }
    Push(now_ + seconds, EventKind::kComputeDone, p);
  }

  // None of the current stage's remaining pairs is ready. If every one of
  // them reads K/V of the worker's own blocks (it waits only for reshuffled
  // rows, holds no receive slot and sends no partial) and a later stage
  // exists, they are carried past the stage, so that the next stage's
  // received K/V need not wait for them: true. The last stage waits.
  bool CarryWaitingPairs(int32_t w) {
    WorkerState& s = workers_[w];
    if (config_.reshuffle != ReshuffleMode::kOverlapped || s.c_stage + 1 >= in_.stages)
      return false;
    const auto head = s.pending.begin() + static_cast<std::ptrdiff_t>(s.pending_head);
    const bool all_own = std::all_of(head, s.pending.end(), [&](int32_t p) {
      return p < 0 || plan_.blocks[in_.pairs[p].kv_block].worker == w;
    });
    if (!all_own) return false;
    for (auto p = head; p != s.pending.end(); ++p) {
      if (*p < 0) continue;
      s.carried.push_back({*p, !s.launched});
      s.launched = true;
    }
    s.pending_head = s.pending.size();
    return true;
  }

  void FlushRun(int32_t w) {
    WorkerState& s = workers_[w];
    if (s.run_start_s >= 0 && s.run_end_s > s.run_start_s)
      trace_->push_back({w, 0,
                         std::string(in_.backward ? "backward" : "forward") + " stage " +
                             std::to_string(s.c_stage),
                         trace_offset_s_ + s.run_start_s, trace_offset_s_ + s.run_end_s});
    s.run_start_s = -1;
    s.run_end_s = -1;
  }

  void HandleDrained(const std::vector<int64_t>& drained) {
    for (int64_t tag : drained) {
      const size_t index = static_cast<size_t>(tag / 4);
      int32_t src = 0, dst = 0;
      if (tag % 4 == kStageFlow) {
        src = in_.transfers[index].src;
        dst = in_.transfers[index].dst;
      } else if (tag % 4 == kInFlow) {
        src = in_.in_flows[index].src;
        dst = in_.in_flows[index].dst;
      } else {
        src = in_.out_flows[index].src;
        dst = in_.out_flows[index].dst;
      }
      Push(now_ + LinkLatency_s(profile_, src, dst), EventKind::kDelivered, tag);
    }
    for (int64_t tag : drained)
      if (tag % 4 == kOutFlow) OutDrained(static_cast<int32_t>(tag / 4));
  }

  void Handle(const Event& e) {
    if (e.kind == EventKind::kComputeDone) {
      const PairTask& p = in_.pairs[e.a];
      WorkerState& s = workers_[p.worker];
      s.busy = false;
      Touch(p.worker, now_);
      PairDone(p);
      if (const int32_t partial = partial_of_pair_[e.a]; partial >= 0)
        --partial_pairs_left_[partial];  // Progress below retries its send
      ReportProgress();
      Progress(p.worker);
      return;
    }
    const size_t index = static_cast<size_t>(e.a / 4);
    switch (e.a % 4) {
      case kStageFlow: {
        const StageTransfer& t = in_.transfers[index];
        Touch(t.src, now_);
        Touch(t.dst, now_);
        if (trace_) {
          static constexpr const char* kNames[] = {"kv ", "dkv ", "q ", "partial "};
          const std::string name = kNames[static_cast<int>(t.kind)] + std::to_string(t.block);
          trace_->push_back({t.src, 1, name + " -> " + std::to_string(t.dst),
                             trace_offset_s_ + transfer_start_s_[index], trace_offset_s_ + now_});
          trace_->push_back({t.dst, 2, name + " <- " + std::to_string(t.src),
                             trace_offset_s_ + transfer_start_s_[index], trace_offset_s_ + now_});
        }
        if (t.kind == TransferKind::kDkv && in_.backward && t.dst == plan_.blocks[t.block].worker)
          OutputProgress(OutputKey(t.block, kKvPart));
        if (t.kind == TransferKind::kPartial) OutputProgress(OutputKey(t.block, kRowsPart));
        --workers_[t.src].channel[ChannelOf(t)].s_left;
        --recv_left_[Cell(ChannelOf(t), t.stage, t.dst)];
        AdvanceReceived(t.dst, ChannelOf(t));
        Progress(t.src);
        Progress(t.dst);
        break;
      }
      case kInFlow: {
        const ReshuffleFlow& f = in_.in_flows[index];
        Touch(f.src, now_);
        Touch(f.dst, now_);
        if (trace_)
          trace_->push_back({f.dst, 2, "reshuffle in " + std::to_string(f.block), trace_offset_s_,
                             trace_offset_s_ + now_});
        --in_flows_left_;
        if (config_.reshuffle == ReshuffleMode::kBlocking) {
          if (in_flows_left_ == 0)
            for (size_t b = 0; b < plan_.blocks.size(); ++b) BlockArrived(static_cast<int32_t>(b));
        } else if (--in_left_[f.block] == 0) {
          BlockArrived(f.block);
        }
        break;
      }
      default: {
        const ReshuffleFlow& f = in_.out_flows[index];
        Touch(f.src, now_);
        Touch(f.dst, now_);
        if (trace_)
          trace_->push_back({f.src, 1, "reshuffle out " + std::to_string(f.block),
                             trace_offset_s_ + out_start_s_[index], trace_offset_s_ + now_});
        break;
      }
    }
  }

  // SimConfig::on_progress, each time another 1% of the pass's pairs is
  // done (the end is reported by Run).
  void ReportProgress() {
    if (!config_.on_progress) return;
    const auto pairs = static_cast<int64_t>(in_.pairs.size());
    const int64_t step = std::max<int64_t>(1, (pairs + 99) / 100);  // >= 1% of them
    if (++pairs_done_ % step != 0 || pairs_done_ >= pairs) return;
    config_.on_progress(in_.backward ? 1 : 0,
                        static_cast<double>(pairs_done_) / static_cast<double>(pairs));
  }

  void BlockArrived(int32_t b) {
    in_ready_[b] = 1;
    std::vector<int32_t> waiting;
    waiting.swap(waiting_[b]);
    for (int32_t t : waiting) TryStartTransfer(t);
    Progress(plan_.blocks[b].worker);
  }

  void PairDone(const PairTask& p) {
    OutputProgress(OutputKey(p.q_block, kRowsPart));
    if (in_.backward && plan_.blocks[p.kv_block].worker == p.worker)
      OutputProgress(OutputKey(p.kv_block, kKvPart));
  }

  void OutputProgress(size_t key) {
    if (--out_left_[key] == 0) {
      --parts_not_final_;
      OutputFinal(key);
    }
  }

  // An output part (O; dQ; dK/dV) of a block is final: send it back to the dataloader layout.
  void OutputFinal(size_t key) {
    if (config_.reshuffle == ReshuffleMode::kNone) return;
    if (config_.reshuffle == ReshuffleMode::kOverlapped) {
      for (int32_t i : out_flows_by_key_.row(key)) StartOut(i);
      return;
    }
    if (parts_not_final_ > 0 || all_out_started_) return;
    all_out_started_ = true;  // the barrier before the outbound all-to-all
    for (size_t i = 0; i < in_.out_flows.size(); ++i) StartOut(static_cast<int32_t>(i));
  }

  // Outputs travel one message at a time per (owner, dataloader worker)
  // pair, in the order they become final (the MPI executor posts the next
  // once the previous send has completed); different pairs share the ports
  // max-min fairly. Each pair's outputs then take one share of the owner's
  // out-port and the receiver's in-port instead of one per message, leaving
  // more to the stage transfers that compute waits for (docs/simulator.md,
  // runtime rules: outputs one at a time per pair).
  void SetupConnections() {
    const size_t flows = in_.out_flows.size();
    std::vector<std::pair<uint64_t, int32_t>> keyed(flows);
    for (size_t i = 0; i < flows; ++i)
      keyed[i] = {static_cast<uint64_t>(in_.out_flows[i].src) * n_ + in_.out_flows[i].dst,
                  static_cast<int32_t>(i)};
    std::sort(keyed.begin(), keyed.end());
    connection_of_.assign(flows, 0);
    int32_t connections = 0;
    for (size_t i = 0; i < flows; ++i) {
      if (i > 0 && keyed[i].first != keyed[i - 1].first) ++connections;
      connection_of_[keyed[i].second] = connections;
    }
    connections_.assign(flows > 0 ? connections + 1 : 0, Connection{});
    queued_next_.assign(flows, -1);
  }

  void StartOut(int32_t i) {
    Connection& c = connections_[connection_of_[i]];
    if (!c.busy) {
      c.busy = true;
      SendOut(i);
    } else if (c.tail < 0) {
      c.head = c.tail = i;
    } else {
      queued_next_[c.tail] = i;
      c.tail = i;
    }
  }

  void SendOut(int32_t i) {
    const ReshuffleFlow& f = in_.out_flows[i];
    out_start_s_[i] = now_;
    StartFlow(f.src, f.dst, f.bytes, Tag(kOutFlow, i));
  }

  // Out flow i has drained: its pair's next output, if any, starts now.
  void OutDrained(int32_t i) {
    Connection& c = connections_[connection_of_[i]];
    if (c.head < 0) {
      c.busy = false;
      return;
    }
    const int32_t next = c.head;
    c.head = queued_next_[next];
    if (c.head < 0) c.tail = -1;
    SendOut(next);
  }

  const Plan& plan_;
  const HardwareProfile& profile_;
  const SimConfig& config_;
  const PassInput& in_;
  const int32_t n_;
  std::unique_ptr<sim::FlowNetwork> net_;
  double trace_offset_s_;
  std::vector<TraceEvent>* trace_;

  double now_ = 0, end_time_ = 0;
  bool all_out_started_ = false;
  std::vector<double> out_start_s_;
  int64_t next_seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<WorkerState> workers_;
  // Indices into in_.pairs and in_.transfers per (stage, worker) and per
  // (channel, stage, worker) cell, in input order.
  detail::Buckets pairs_by_cell_, sends_by_cell_, recvs_by_cell_;
  int64_t pairs_done_ = 0;          // ReportProgress
  std::vector<int32_t> recv_left_;  // per (channel, stage, worker): receives not yet arrived
  std::vector<int32_t> arrivals_;
  bool per_block_partials_ = false;          // the backward, PartialReturn::kPerBlock
  std::vector<int32_t> partial_pairs_left_;  // per partial: its pairs not yet done (per block)
  std::vector<int32_t> partial_of_pair_;     // per pair: the partial it adds to, or -1
  std::vector<char> started_;
  std::vector<double> transfer_start_s_;
  std::vector<std::vector<int32_t>> waiting_;  // transfers waiting for a block's reshuffle
  std::vector<char> in_ready_;
  std::vector<int32_t> in_left_, out_left_;
  detail::Buckets out_flows_by_key_;  // indices into in_.out_flows per OutputKey
  // One per (src, dst) pair of the out flows: whether an output is in flight
  // on it, and the queue of those waiting (a list through queued_next_).
  struct Connection {
    bool busy = false;
    int32_t head = -1, tail = -1;
  };
  std::vector<Connection> connections_;
  std::vector<int32_t> connection_of_, queued_next_;  // per out flow
  int64_t in_flows_left_ = 0, parts_not_final_ = 0;
};

// ---- building the passes --------------------------------------------------------

// Per block, the tokens it holds from each dataloader worker other than its owner.
std::vector<ReshuffleFlow> ReshufflePieces(const Plan& plan, double bytes_per_token, bool inbound) {
  std::vector<ReshuffleFlow> flows;
  const std::vector<int64_t> offsets = SequenceOffsets(plan.sequences);
  std::map<int32_t, int64_t> by_worker;
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    by_worker.clear();
    const int32_t owner = plan.blocks[b].worker;
    for (const Segment& s : plan.blocks[b].segments)
      ForEachDataloaderRun(s, offsets, plan.workers, [&](int32_t r, int64_t tokens) {
        if (r != owner) by_worker[r] += tokens;
      });
    for (const auto& [r, tokens] : by_worker) {
      const double bytes = bytes_per_token * static_cast<double>(tokens);
      flows.push_back(inbound ? ReshuffleFlow{static_cast<int32_t>(b), r, owner, bytes}
                              : ReshuffleFlow{static_cast<int32_t>(b), owner, r, bytes});
    }
  }
  return flows;
}

void CheckTransfer(const Plan& plan, const Transfer& t, const char* where) {
  const int32_t blocks = static_cast<int32_t>(plan.blocks.size());
  if (t.block < 0 || t.block >= blocks || t.src < 0 || t.src >= plan.workers || t.dst < 0 ||
      t.dst >= plan.workers || t.src == t.dst)
    BadPlan(std::string(where) + ": transfer [" + std::to_string(t.block) + ", " +
            std::to_string(t.src) + ", " + std::to_string(t.dst) + "] is out of range");
  if (!t.all_rows() && (t.row_begin < 0 || t.row_count < 1 ||
                        t.row_count > plan.blocks[t.block].tokens() - t.row_begin))
    BadPlan(std::string(where) + ": transfer [" + std::to_string(t.block) + ", " +
            std::to_string(t.src) + ", " + std::to_string(t.dst) +
            "]'s rows are outside its block");
}

void CheckPair(const Plan& plan, const BlockPair& p, const char* where) {
  const int32_t blocks = static_cast<int32_t>(plan.blocks.size());
  if (p.q_block < 0 || p.q_block >= blocks || p.kv_block < 0 || p.kv_block >= blocks ||
      (p.worker != kOwner && (p.worker < 0 || p.worker >= plan.workers)))
    BadPlan(std::string(where) + ": pair [" + std::to_string(p.q_block) + ", " +
            std::to_string(p.kv_block) + "] is out of range");
}

// Adds one stage's pairs as tasks, grouped per worker in plan order.
void AddStagePairs(const Plan& plan, KernelCoster& coster, const std::vector<BlockPair>& compute,
                   int32_t stage, double scale, PassInput& pass) {
  std::vector<std::vector<BlockPair>> per_worker(plan.workers);
  for (const BlockPair& p : compute) {
    CheckPair(plan, p, "compute");
    per_worker[ComputeWorker(plan.blocks, p)].push_back(p);
  }
  for (int32_t w = 0; w < plan.workers; ++w) {
    if (per_worker[w].empty()) continue;
    const std::vector<PairCost>& costs = coster.Cost(per_worker[w]);
    for (size_t i = 0; i < per_worker[w].size(); ++i)
      pass.pairs.push_back({per_worker[w][i].q_block, per_worker[w][i].kv_block, w, stage,
                            costs[i].forward_s * scale, costs[i].token_pairs});
  }
}

// The pass's bounds from its inputs, not from the event loop: each worker's
// kernel times plus one launch per stage it computes in (what its compute
// stream must run), and every stage and reshuffle flow.
PassBounds PassLowerBounds(const Plan& plan, const HardwareProfile& profile,
                           const PassInput& pass) {
  std::vector<double> busy_s(plan.workers, 0);
  std::vector<int32_t> last_stage(plan.workers, -1);
  for (const PairTask& p : pass.pairs) {
    busy_s[p.worker] += p.seconds;
    if (last_stage[p.worker] != p.stage) busy_s[p.worker] += profile.kernel_launch_s;
    last_stage[p.worker] = p.stage;
  }
  std::vector<PortFlow> flows;
  flows.reserve(pass.transfers.size() + pass.in_flows.size() + pass.out_flows.size());
  for (const StageTransfer& t : pass.transfers) flows.push_back({t.src, t.dst, t.bytes});
  for (const auto* list : {&pass.in_flows, &pass.out_flows})
    for (const ReshuffleFlow& f : *list) flows.push_back({f.src, f.dst, f.bytes});
  return ComputePassBounds(profile, busy_s, flows);
}

}  // namespace

constexpr detail::EnumName<ReshuffleMode> kReshuffleModeNames[] = {
    {ReshuffleMode::kNone, "none"},
    {ReshuffleMode::kBlocking, "blocking"},
    {ReshuffleMode::kOverlapped, "overlap"},
};
constexpr detail::EnumName<TransferMode> kTransferModeNames[] = {
    {TransferMode::kPull, "pull"},
    {TransferMode::kGrouped, "grouped"},
};
constexpr detail::EnumName<PartialReturn> kPartialReturnNames[] = {
    {PartialReturn::kPerBlock, "block"},
    {PartialReturn::kPerStage, "stage"},
};
constexpr detail::EnumName<NetworkModel> kNetworkModelNames[] = {
    {NetworkModel::kExact, "exact"},
    {NetworkModel::kFast, "fast"},
    {NetworkModel::kQuantized, "quantized"},
    {NetworkModel::kAuto, "auto"},
};

const char* ReshuffleModeName(ReshuffleMode mode) {
  return detail::NameOf(kReshuffleModeNames, mode);
}

const char* TransferModeName(TransferMode mode) { return detail::NameOf(kTransferModeNames, mode); }

TransferMode ParseTransferMode(const std::string& name) {
  return detail::ValueNamed(kTransferModeNames, name, "simulate: unknown transfer mode");
}

const char* PartialReturnName(PartialReturn mode) {
  return detail::NameOf(kPartialReturnNames, mode);
}

std::optional<PartialReturn> ParsePartialReturn(const std::string& name) {
  constexpr detail::EnumName<std::optional<PartialReturn>> kSettings[] = {
      {std::nullopt, "auto"},
      {PartialReturn::kPerBlock, kPartialReturnNames[0].name},
      {PartialReturn::kPerStage, kPartialReturnNames[1].name},
  };
  return detail::ValueNamed(kSettings, name, "simulate: unknown partial return");
}

PartialReturn PartialReturnOf(const std::string& planner) {
  for (const char* per_stage : {"bytescale", "magi", "magi-dynamic", "ring", "wlb", "fcp-nopipe"})
    if (planner == per_stage) return PartialReturn::kPerStage;
  return PartialReturn::kPerBlock;
}

PartialReturn PartialReturnFor(const SimConfig& config, const std::string& planner) {
  return config.partial_return ? *config.partial_return : PartialReturnOf(planner);
}

const char* NetworkModelName(NetworkModel model) {
  return detail::NameOf(kNetworkModelNames, model);
}

NetworkModel ParseNetworkModel(const std::string& name) {
  return detail::ValueNamed(kNetworkModelNames, name, "simulate: unknown network model");
}

double NetworkQuantumFor(const SimConfig& config, int32_t workers) {
  if (config.network_quantum) return *config.network_quantum;
  return workers <= kAutoExactMaxWorkers ? kSmallPlanNetworkQuantum : kLargePlanNetworkQuantum;
}

NetworkModel ResolveNetworkModel(NetworkModel model, int32_t workers) {
  if (model != NetworkModel::kAuto) return model;
  return workers <= kAutoExactMaxWorkers ? NetworkModel::kExact : NetworkModel::kQuantized;
}

ReshuffleMode ParseReshuffleMode(const std::string& name) {
  return detail::ValueNamed(kReshuffleModeNames, name, "simulate: unknown reshuffle mode");
}

void SimConfig::validate() const {
  if (dkv_dtype_bytes < 0)
    throw Error(ErrorCode::kInvalidArgument,
                "simulate: dkv_dtype_bytes must be >= 0 (0 = the plan's dtype), got " +
                    std::to_string(dkv_dtype_bytes));
  if (network_quantum && (!(*network_quantum > 0) || !std::isfinite(*network_quantum)))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("simulate: network_quantum must be a positive number, got {:g}",
                            *network_quantum));
}

namespace {

// Memory safety without ValidatePlan (--no-validate): a valid profile and
// configuration, every block owned by a worker and every segment inside its
// sequence.
void CheckSimInputs(const Plan& plan, const HardwareProfile& profile, const SimConfig& config) {
  profile.validate();
  config.validate();
  if (plan.workers < 1) BadPlan("workers must be >= 1");
  plan.attention.validate();
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    if (plan.blocks[b].worker < 0 || plan.blocks[b].worker >= plan.workers)
      BadPlan("block " + std::to_string(b) + " has no valid owner");
    // Compared without overflowing start + length.
    for (const Segment& s : plan.blocks[b].segments)
      if (s.seq < 0 || static_cast<size_t>(s.seq) >= plan.sequences.size() || s.start < 0 ||
          s.length < 0 || s.length > plan.sequences[s.seq] ||
          s.start > plan.sequences[s.seq] - s.length)
        BadPlan("block " + std::to_string(b) + " has a segment outside its sequence");
  }
}

std::vector<double> BlockTokens(const Plan& plan) {
  std::vector<double> block_tokens(plan.blocks.size());
  for (size_t b = 0; b < plan.blocks.size(); ++b)
    block_tokens[b] = static_cast<double>(plan.blocks[b].tokens());
  return block_tokens;
}

// The tokens a transfer moves: its block's, or its row range's.
double TransferTokens(const Transfer& x, const std::vector<double>& block_tokens) {
  return x.all_rows() ? block_tokens[x.block] : static_cast<double>(x.row_count);
}

// The forward pass's stage transfers (K/V) and pair tasks.
PassInput ForwardPassInput(const Plan& plan, KernelCoster& coster,
                           const std::vector<double>& block_tokens) {
  const double kv_bytes_per_token = static_cast<double>(KvTransferBytes(plan.attention, 1));
  PassInput fwd;
  fwd.stages = static_cast<int32_t>(plan.forward.size());
  for (int32_t t = 0; t < fwd.stages; ++t) {
    for (const Transfer& x : plan.forward[t].send) {
      CheckTransfer(plan, x, "forward send");
      fwd.transfers.push_back({x.block, x.src, x.dst, t, TransferKind::kKv,
                               kv_bytes_per_token * TransferTokens(x, block_tokens)});
    }
    for (const Transfer& x : plan.forward[t].send_q) {
      CheckTransfer(plan, x, "forward send_q");
      fwd.transfers.push_back({x.block, x.src, x.dst, t, TransferKind::kQ,
                               static_cast<double>(QueryTransferBytes(plan.attention, 1, false)) *
                                   block_tokens[x.block]});
    }
    for (const Transfer& x : plan.forward[t].send_o) {
      CheckTransfer(plan, x, "forward send_o");
      fwd.transfers.push_back(
          {x.block, x.src, x.dst, t, TransferKind::kPartial,
           static_cast<double>(PartialOutputBytes(plan.attention, 1)) * block_tokens[x.block]});
    }
    AddStagePairs(plan, coster, plan.forward[t].compute, t, 1.0, fwd);
  }
  return fwd;
}

// The backward pass's stage transfers (K/V and dK/dV partials) and pair tasks.
PassInput BackwardPassInput(const Plan& plan, const HardwareProfile& profile,
                            const SimConfig& config, KernelCoster& coster,
                            const std::vector<double>& block_tokens) {
  const AttentionShape& a = plan.attention;
  const double kv_bytes_per_token = static_cast<double>(KvTransferBytes(a, 1));
  const double backward_scale = kBackwardFlopsFactor / profile.backward_efficiency_ratio;
  PassInput bwd;
  bwd.backward = true;
  bwd.stages = static_cast<int32_t>(plan.backward.size());
  for (int32_t t = 0; t < bwd.stages; ++t) {
    const BackwardStage& s = plan.backward[t];
    for (const Transfer& x : s.send_kv) {
      CheckTransfer(plan, x, "backward send_kv");
      bwd.transfers.push_back({x.block, x.src, x.dst, t, TransferKind::kKv,
                               kv_bytes_per_token * TransferTokens(x, block_tokens)});
    }
    const int32_t element_bytes =
        config.dkv_dtype_bytes > 0 ? config.dkv_dtype_bytes : a.dtype_bytes;
    for (const Transfer& x : s.send_dkv) {
      CheckTransfer(plan, x, "backward send_dkv");
      const double bytes =
          2.0 * a.heads_kv * a.head_dim * element_bytes * TransferTokens(x, block_tokens);
      bwd.transfers.push_back({x.block, x.src, x.dst, t, TransferKind::kDkv, bytes});
    }
    for (const Transfer& x : s.send_q) {
      CheckTransfer(plan, x, "backward send_q");
      bwd.transfers.push_back(
          {x.block, x.src, x.dst, t, TransferKind::kQ,
           static_cast<double>(QueryTransferBytes(a, 1, true)) * block_tokens[x.block]});
    }
    for (const Transfer& x : s.send_dq) {  // dQ in the partials' accumulation type, as dK/dV
      CheckTransfer(plan, x, "backward send_dq");
      bwd.transfers.push_back(
          {x.block, x.src, x.dst, t, TransferKind::kPartial,
           1.0 * a.heads_q * a.head_dim * element_bytes * block_tokens[x.block]});
    }
    AddStagePairs(plan, coster, s.compute, t, backward_scale, bwd);
  }
  return bwd;
}

// The reshuffle's flows of both passes, when it is charged.
void AddReshuffleFlows(const Plan& plan, const SimConfig& config, PassInput& fwd, PassInput& bwd) {
  const AttentionShape& a = plan.attention;
  const double qkv_bytes =
      static_cast<double>(a.heads_q + 2 * a.heads_kv) * a.head_dim * a.dtype_bytes;
  const double o_bytes = static_cast<double>(a.heads_q) * a.head_dim * a.dtype_bytes;
  if (config.reshuffle != ReshuffleMode::kNone && plan.total_tokens() > 0) {
    fwd.in_flows = ReshufflePieces(plan, qkv_bytes, true);                       // Q, K, V in
    fwd.out_flows = ReshufflePieces(plan, o_bytes, false);                       // O out
    bwd.in_flows = ReshufflePieces(plan, o_bytes, true);                         // dO in
    bwd.out_flows = ReshufflePieces(plan, o_bytes, false);                       // dQ out
    for (ReshuffleFlow f : ReshufflePieces(plan, qkv_bytes - o_bytes, false)) {  // dK, dV out
      f.part = kKvPart;
      bwd.out_flows.push_back(f);
    }
  }
}

// Runs both passes. They share no state (the backward is simulated from time
// 0), so without a trace, whose events must come in pass order, they run on
// two threads: the same results as one after the other.
std::pair<PassOutput, PassOutput> RunPasses(const Plan& plan, const HardwareProfile& profile,
                                            const SimConfig& config, const PassInput& fwd,
                                            const PassInput& bwd, std::vector<TraceEvent>* trace) {
  PassOutput f_out, b_out;
  std::future<PassOutput> backward;
  if (!trace) {
    try {
      backward = std::async(std::launch::async, [&] {
        return PassSimulator(plan, profile, config, bwd, 0, nullptr).Run();
      });
    } catch (const std::system_error&) {  // no thread to be had: one after the other
    }
  }
  f_out = PassSimulator(plan, profile, config, fwd, 0, trace).Run();
  b_out = backward.valid() ? backward.get()  // rethrows the backward pass's error
                           : PassSimulator(plan, profile, config, bwd, f_out.time_s, trace).Run();
  return {std::move(f_out), std::move(b_out)};
}

// Per-worker FLOPs and bytes, counted from the passes' inputs, and the
// transfer and flow counts.
void CountWorkAndTraffic(const Plan& plan, const PassInput& fwd, const PassInput& bwd,
                         SimResult& r) {
  r.worker_stats.resize(plan.workers);
  const double flops_per_pair = ForwardFlops(plan.attention, 1);
  for (const PairTask& p : fwd.pairs)
    r.worker_stats[p.worker].forward_flops += flops_per_pair * p.token_pairs;
  for (const PairTask& p : bwd.pairs)
    r.worker_stats[p.worker].backward_flops +=
        kBackwardFlopsFactor * flops_per_pair * p.token_pairs;
  for (const StageTransfer& t : fwd.transfers) {
    if (t.kind != TransferKind::kKv) continue;  // Q and partial O count in bytes_sent below
    r.worker_stats[t.src].forward_kv_bytes_sent += t.bytes;
    r.worker_stats[t.dst].forward_kv_bytes_received += t.bytes;
  }
  for (const PassInput* pass : {&fwd, &bwd}) {
    for (const StageTransfer& t : pass->transfers) {
      r.worker_stats[t.src].bytes_sent += t.bytes;
      r.worker_stats[t.dst].bytes_received += t.bytes;
    }
    for (const auto* flows : {&pass->in_flows, &pass->out_flows})
      for (const ReshuffleFlow& f : *flows) {
        r.worker_stats[f.src].reshuffle_bytes_sent += f.bytes;
        r.worker_stats[f.dst].reshuffle_bytes_received += f.bytes;
      }
    r.transfers += static_cast<int64_t>(pass->transfers.size());
    r.reshuffle_flows += static_cast<int64_t>(pass->in_flows.size() + pass->out_flows.size());
  }
}

// Busy / exposed / idle time per worker from the passes' timelines, the
// totals and means, and the compute and traffic imbalances.
void SummarizeWorkers(int32_t n, const PassOutput& f_out, const PassOutput& b_out, SimResult& r) {
  std::vector<double> compute(n), traffic(n), total_traffic(n);
  for (int32_t w = 0; w < n; ++w) {
    WorkerSimStats& s = r.worker_stats[w];
    for (const PassOutput* o : {&f_out, &b_out}) {
      s.busy_s += o->busy_s[w];
      s.exposed_comm_s += std::max(0.0, o->last_activity_s[w] - o->busy_s[w]);
      s.idle_s += o->time_s - std::max(o->last_activity_s[w], o->busy_s[w]);
    }
    r.forward_flops += s.forward_flops;
    r.backward_flops += s.backward_flops;
    compute[w] = s.forward_flops;
    traffic[w] = s.forward_kv_bytes_sent + s.forward_kv_bytes_received;
    total_traffic[w] = s.bytes_sent + s.bytes_received;
    r.max_exposed_comm_s = std::max(r.max_exposed_comm_s, s.exposed_comm_s);
    r.mean_exposed_comm_s += s.exposed_comm_s / n;
    r.mean_busy_s += s.busy_s / n;
  }
  r.compute_imbalance = Imbalance(compute);
  r.traffic_imbalance = Imbalance(traffic);
  r.total_traffic_imbalance = Imbalance(total_traffic);
}

// What one GPU reaches on the batch's sequences unsharded: every sequence one
// causal (or masked) kernel of its own length; 0 for an empty batch.
double ReferenceEfficiency(const Plan& plan, const HardwareProfile& profile) {
  double reference_s = 0, reference_flops = 0;
  for (int64_t len : plan.sequences) {
    const int64_t pairs = AllowedPairs(plan.mask, {0, len}, {0, len});
    const double f = ForwardFlops(plan.attention, pairs);
    const double kernel_tokens = EquivalentKernelTokens(len, pairs);
    const double rate = profile.peak_flops * KernelEfficiency(profile, kernel_tokens);
    reference_s += f / rate + kBackwardFlopsFactor * f / (rate * profile.backward_efficiency_ratio);
    reference_flops += (1 + kBackwardFlopsFactor) * f;
  }
  return reference_s > 0 ? reference_flops / (profile.peak_flops * reference_s) : 0;
}

}  // namespace

SimResult Simulate(const Plan& plan, const HardwareProfile& profile, const SimConfig& config) {
  CheckSimInputs(plan, profile, config);
  const int32_t n = plan.workers;
  KernelCoster coster(plan, profile);  // shared: the passes run the same pair lists
  const std::vector<double> block_tokens = BlockTokens(plan);
  PassInput fwd = ForwardPassInput(plan, coster, block_tokens);
  PassInput bwd = BackwardPassInput(plan, profile, config, coster, block_tokens);
  AddReshuffleFlows(plan, config, fwd, bwd);

  SimResult r;
  r.planner = plan.planner;
  r.partial_return = PartialReturnFor(config, plan.planner);
  r.profile = profile.name;
  r.workers = n;
  const auto [f_out, b_out] =
      RunPasses(plan, profile, config, fwd, bwd, config.record_trace ? &r.trace : nullptr);
  r.forward_time_s = f_out.time_s;
  r.backward_time_s = b_out.time_s;
  r.total_time_s = f_out.time_s + b_out.time_s;
  CountWorkAndTraffic(plan, fwd, bwd, r);
  SummarizeWorkers(n, f_out, b_out, r);
  r.forward_bounds = PassLowerBounds(plan, profile, fwd);
  r.backward_bounds = PassLowerBounds(plan, profile, bwd);
  r.bound_s = r.forward_bounds.bound_s + r.backward_bounds.bound_s;
  if (r.bound_s > 0) r.bound_ratio = r.total_time_s / r.bound_s;
  const double useful = r.forward_flops + r.backward_flops;
  if (r.total_time_s > 0) r.mfu = useful / (n * profile.peak_flops * r.total_time_s);
  r.normalized_mfu = r.mfu / SaturatedEfficiency(profile);
  r.reference_efficiency = ReferenceEfficiency(plan, profile);
  if (r.reference_efficiency > 0) r.batch_normalized_mfu = r.mfu / r.reference_efficiency;
  return r;
}

}  // namespace fcp
