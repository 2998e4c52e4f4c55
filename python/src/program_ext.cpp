// fcp._fcp.Program: one rank's lowered program (fcp/lowering.h) as numpy
// tables, and the CPU attention kernel run over a stage of it on caller
// memory (torch tensors or numpy arrays, through DLPack, never copied).
//
// Tables (int64, one row per operation, `stage` first so one table holds a
// whole pass; `<table>_offsets[t]` is the first row of stage t, size
// stages + 1):
//   kv_recv   stage, block, src, pool_row, rows
//   kv_send   stage, block, dst, from_pool, row, rows
//   dkv_recv  stage, block, src, into_partial, row, rows          (backward)
//   dkv_send  stage, block, dst, partial_row, rows                (backward)
//   (the rows a message moves: its block's first row plus the transfer's
//   row_begin, docs/plan-format.md "Row ranges"; a slot itself always spans
//   the whole block)
//   compute   stage, q_block, kv_block, q_row, q_rows, kv_in_pool, kv_row,
//             kv_rows, dkv_in_partial, dkv_row, segment_begin, segment_end, early
//   segments  q_row, k_row, q_pos, k_pos, q_len, k_len (rows relative to the call's q_row / kv_row)
// and the input reshuffles' pieces (`reshuffle_in`, `do_in`; recv, send or
// self, in the program's posting order):
//   pieces    block, src, dst, rows, need_stage (the stage of ReshuffleNeed;
//             the pass's stage count when the owner never needs the block)
// with the pieces' dataloader rows (send, self) and local rows (recv, self)
// concatenated in piece order.
// Built once per Program, owned by it; views keep it alive.
//
// forward_stage / backward_stage run the stage's compute calls in order with
// the GIL released (communication threads keep running); forward_calls /
// backward_calls run the listed ones, in the list's order (the torch
// executor's schedule: the calls whose blocks are in). Buffers are
// C-contiguous, on the CPU: q, o [local_rows, heads_q, head_dim]; k, v
// [local_rows, heads_kv, head_dim]; the pools [pool_rows or partial_rows,
// heads_kv, head_dim]; lse, delta [local_rows, heads_q]. The inputs q, k, v,
// the K/V pools and do are float32 or bfloat16 (all the same, read in place
// by the kernel, fcp/attention_kernel.h); what the kernel writes (o, lse, dq,
// dk, dv, the dK/dV partials) and lse, delta are float32. Sizes and dtypes
// are checked; Error(kInvalidArgument) (ValueError) names the buffer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "fcp/attention_kernel.h"
#include "fcp/error.h"
#include "fcp/lowering.h"
#include "fcp/trace.h"
#include "program_ext.h"

namespace nb = nanobind;

namespace fcp::python {
namespace {

using Table = nb::ndarray<nb::numpy, const int64_t, nb::ndim<2>>;
using Vector = nb::ndarray<nb::numpy, const int64_t, nb::ndim<1>>;
using Buffer = nb::ndarray<float, nb::c_contig, nb::device::cpu>;
using Input =
    nb::ndarray<nb::c_contig, nb::device::cpu>;  // float32 or bfloat16, checked at the call

constexpr nb::dlpack::dtype kBFloat16{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};

// A table of `cols` int64 columns per row, with per-stage row offsets.
struct StageTable {
  std::vector<int64_t> values;
  std::vector<int64_t> offsets{0};
  int64_t cols = 0;
  void Add(std::initializer_list<int64_t> row) { values.insert(values.end(), row); }
  void EndStage() { offsets.push_back(static_cast<int64_t>(values.size()) / cols); }
};

struct PassTables {
  StageTable kv_recv{{}, {0}, 5}, kv_send{{}, {0}, 6}, dkv_recv{{}, {0}, 6}, dkv_send{{}, {0}, 5},
      compute{{}, {0}, 13};
};

// One side (recv, send or self) of an input reshuffle, tabulated.
struct PieceTable {
  StageTable pieces{{}, {0}, 5};
  std::vector<int64_t> dataloader_rows, local_rows;
};

PieceTable TabulatePieces(const std::vector<ReshufflePiece>& list,
                          const std::vector<std::pair<int64_t, int64_t>>& need, int64_t stages) {
  PieceTable t;
  for (const ReshufflePiece& x : list) {
    const int64_t rows =
        static_cast<int64_t>(std::max(x.dataloader_rows.size(), x.local_rows.size()));
    t.pieces.Add({x.block, x.src, x.dst, rows, std::min(need[x.block].first, stages)});
    t.dataloader_rows.insert(t.dataloader_rows.end(), x.dataloader_rows.begin(),
                             x.dataloader_rows.end());
    t.local_rows.insert(t.local_rows.end(), x.local_rows.begin(), x.local_rows.end());
  }
  return t;
}

PassTables Tabulate(const PassProgram& pass) {
  PassTables t;
  for (size_t s = 0; s < pass.stages.size(); ++s) {
    const StageProgram& sp = pass.stages[s];
    const auto st = static_cast<int64_t>(s);
    // The rows a message moves: [row, row + rows) of a buffer that keeps K
    // and V apart (a transfer with a row range starts row_begin into its block).
    for (const KvRecv& r : sp.kv_recv)
      t.kv_recv.Add({st, r.block, r.src, r.pool_row + r.row_begin, r.rows});
    for (const KvSend& x : sp.kv_send)
      t.kv_send.Add({st, x.block, x.dst, x.from_pool, x.row + x.row_begin, x.rows});
    for (const DkvRecv& r : sp.dkv_recv)
      t.dkv_recv.Add({st, r.block, r.src, r.into_partial, r.row + r.row_begin, r.rows});
    for (const DkvSend& x : sp.dkv_send)
      t.dkv_send.Add({st, x.block, x.dst, x.partial_row + x.row_begin, x.rows});
    for (const ComputeCall& c : sp.compute)
      t.compute.Add({st, c.q_block, c.kv_block, c.q_row, c.q_rows, c.kv_in_pool, c.kv_row,
                     c.kv_rows, c.dkv_in_partial, c.dkv_row, c.segment_begin, c.segment_end,
                     c.early});
    for (StageTable* x : {&t.kv_recv, &t.kv_send, &t.dkv_recv, &t.dkv_send, &t.compute})
      x->EndStage();
  }
  return t;
}

// The lowering runs the remote-compute extension (the MPI executor does),
// but this program's tables and stage entry points, and so fcp.torch, carry
// no query rows or partial outputs yet: such a plan is refused, on every rank
// alike, before it is lowered.
RankProgram LowerWithoutRemoteCompute(const Plan& plan, int32_t rank) {
  if (UsesRemoteCompute(plan))
    throw Error(ErrorCode::kInvalidArgument,
                "fcp.torch: plan '" + plan.planner +
                    "' computes pairs away from their query block's owner (send_q / send_o / "
                    "send_dq, the remote-compute extension), which fcp.torch does not run yet "
                    "(fcp run does)");
  return LowerPlan(plan, rank);
}

class ProgramHandle {
 public:
  ProgramHandle(const Plan& plan, int32_t rank)
      : program_(LowerWithoutRemoteCompute(plan, rank)),
        mask_(plan.mask),
        dims_{plan.attention.heads_q, plan.attention.heads_kv, plan.attention.head_dim, 1.0f},
        forward_(Tabulate(program_.forward)),
        backward_(Tabulate(program_.backward)),
        kernel_(MakeCpuAttentionKernel()) {
    const auto fwd_need = ReshuffleNeed(plan, false), bwd_need = ReshuffleNeed(plan, true);
    const auto fwd_stages = static_cast<int64_t>(program_.forward.stages.size());
    const auto bwd_stages = static_cast<int64_t>(program_.backward.stages.size());
    for (const auto* r : {&program_.reshuffle_in, &program_.do_in}) {
      const auto& need = r == &program_.do_in ? bwd_need : fwd_need;
      const int64_t stages = r == &program_.do_in ? bwd_stages : fwd_stages;
      for (const auto* side : {&r->recv, &r->send, &r->self})
        pieces_.push_back(TabulatePieces(*side, need, stages));
    }
    for (const auto* v : {&program_.forward_final_stage, &program_.backward_dq_final_stage,
                          &program_.backward_dkv_final_stage})
      final_stages_.emplace_back(v->begin(), v->end());
    for (const SegmentPair& s : program_.segments)
      segments_.insert(segments_.end(), {s.q_row, s.k_row, s.q_pos, s.k_pos, s.q_len, s.k_len});
  }

  const RankProgram& program() const { return program_; }
  const PassTables& pass(const std::string& name) const {
    if (name == "forward") return forward_;
    if (name == "backward") return backward_;
    throw Error(ErrorCode::kInvalidArgument,
                "program: pass must be 'forward' or 'backward', got '" + name + "'");
  }
  const std::vector<int64_t>& segments() const { return segments_; }
  // forward_final_stage, backward_dq_final_stage, backward_dkv_final_stage.
  const std::vector<int64_t>& final_stage(size_t i) const { return final_stages_[i]; }
  const PieceTable& pieces(const std::string& name, const std::string& side) const {
    static const char* const kNames[] = {"reshuffle_in", "do_in"};
    static const char* const kSides[] = {"recv", "send", "self"};
    for (size_t n = 0; n < 2; ++n)
      for (size_t s = 0; s < 3; ++s)
        if (name == kNames[n] && side == kSides[s]) return pieces_[n * 3 + s];
    throw Error(ErrorCode::kInvalidArgument, "program.reshuffle: no reshuffle '" + name +
                                                 "' side '" + side +
                                                 "' (reshuffle_in or do_in; recv, send or self)");
  }

  // early: 0 every call, 1 only the early ones, 2 all but the early ones.
  void Forward(int64_t stage, float scale, int early, Input q, Input k, Input v, Input k_pool,
               Input v_pool, Buffer o, Buffer lse) {
    ForwardCalls("forward_stage", stage, Calls{early, nullptr}, scale, q, k, v, k_pool, v_pool, o,
                 lse);
  }
  void ForwardList(int64_t stage, const std::vector<int64_t>& calls, float scale, Input q, Input k,
                   Input v, Input k_pool, Input v_pool, Buffer o, Buffer lse) {
    ForwardCalls("forward_calls", stage, Calls{0, &calls}, scale, q, k, v, k_pool, v_pool, o, lse);
  }

  void Backward(int64_t stage, float scale, Input q, Input k, Input v, Input k_pool, Input v_pool,
                Input d_o, Buffer lse, Buffer delta, Buffer dq, Buffer dk, Buffer dv,
                Buffer dk_partial, Buffer dv_partial) {
    BackwardCalls("backward_stage", stage, Calls{0, nullptr}, scale, q, k, v, k_pool, v_pool, d_o,
                  lse, delta, dq, dk, dv, dk_partial, dv_partial);
  }
  void BackwardList(int64_t stage, const std::vector<int64_t>& calls, float scale, Input q, Input k,
                    Input v, Input k_pool, Input v_pool, Input d_o, Buffer lse, Buffer delta,
                    Buffer dq, Buffer dk, Buffer dv, Buffer dk_partial, Buffer dv_partial) {
    BackwardCalls("backward_calls", stage, Calls{0, &calls}, scale, q, k, v, k_pool, v_pool, d_o,
                  lse, delta, dq, dk, dv, dk_partial, dv_partial);
  }

 private:
  // Whether the inputs are bfloat16 (else float32); Error when they are
  // neither or not all the same.
  static bool IsBFloat16(const char* op,
                         std::initializer_list<std::pair<const char*, const Input*>> inputs) {
    const nb::dlpack::dtype first = inputs.begin()->second->dtype();
    const bool bf16 = first == kBFloat16;
    if (!bf16 && first != nb::dtype<float>())
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("program.") + op + ": " + inputs.begin()->first +
                      " must be float32 or bfloat16, got " + DtypeName(first));
    for (const auto& [name, b] : inputs)
      if (b->dtype() != first)
        throw Error(ErrorCode::kInvalidArgument,
                    std::string("program.") + op + ": " + name + " is " + DtypeName(b->dtype()) +
                        " but " + inputs.begin()->first + " is " + DtypeName(first));
    return bf16;
  }

  // Which of a stage's calls run: those listed (in that order), else all by `early` (above).
  struct Calls {
    int early = 0;
    const std::vector<int64_t>* list = nullptr;
  };
  void ForwardCalls(const char* op, int64_t stage, Calls calls, float scale, Input& q, Input& k,
                    Input& v, Input& k_pool, Input& v_pool, Buffer& o, Buffer& lse) {
    if (IsBFloat16(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"k_pool", &k_pool}, {"v_pool", &v_pool}}))
      ForwardOf<BFloat16>(op, stage, calls, scale, q, k, v, k_pool, v_pool, o, lse);
    else
      ForwardOf<float>(op, stage, calls, scale, q, k, v, k_pool, v_pool, o, lse);
  }
  void BackwardCalls(const char* op, int64_t stage, Calls calls, float scale, Input& q, Input& k,
                     Input& v, Input& k_pool, Input& v_pool, Input& d_o, Buffer& lse, Buffer& delta,
                     Buffer& dq, Buffer& dk, Buffer& dv, Buffer& dk_partial, Buffer& dv_partial) {
    if (IsBFloat16(op, {{"q", &q},
                        {"k", &k},
                        {"v", &v},
                        {"k_pool", &k_pool},
                        {"v_pool", &v_pool},
                        {"do", &d_o}}))
      BackwardOf<BFloat16>(op, stage, calls, scale, q, k, v, k_pool, v_pool, d_o, lse, delta, dq,
                           dk, dv, dk_partial, dv_partial);
    else
      BackwardOf<float>(op, stage, calls, scale, q, k, v, k_pool, v_pool, d_o, lse, delta, dq, dk,
                        dv, dk_partial, dv_partial);
  }
  // The indices of the calls of `sp` that `calls` selects, in running order.
  static std::vector<size_t> Selected(const StageProgram& sp, Calls calls, const char* op) {
    std::vector<size_t> out;
    if (calls.list == nullptr) {
      for (size_t i = 0; i < sp.compute.size(); ++i)
        if (!((calls.early == 1 && !sp.compute[i].early) ||
              (calls.early == 2 && sp.compute[i].early)))
          out.push_back(i);
      return out;
    }
    for (const int64_t i : *calls.list) {
      if (i < 0 || i >= static_cast<int64_t>(sp.compute.size()))
        throw Error(ErrorCode::kInvalidArgument, std::string("program.") + op + ": call " +
                                                     std::to_string(i) + " is not in [0, " +
                                                     std::to_string(sp.compute.size()) + ")");
      out.push_back(static_cast<size_t>(i));
    }
    return out;
  }
  // "float32", "bfloat16", "int64", ... (DLPack's type code and bits).
  static std::string DtypeName(nb::dlpack::dtype d) {
    static const char* const kCodes[] = {"int",    "uint",    "float", "opaque",
                                         "bfloat", "complex", "bool"};
    const std::string base =
        d.code < std::size(kCodes) ? kCodes[d.code] : "code" + std::to_string(d.code);
    return base + std::to_string(d.bits) + (d.lanes != 1 ? "x" + std::to_string(d.lanes) : "");
  }
  template <class T>
  static const T* Data(const Input& b) {
    return static_cast<const T*>(b.data());
  }

  template <class T>
  void ForwardOf(const char* op, int64_t stage, Calls calls, float scale, const Input& q,
                 const Input& k, const Input& v, const Input& k_pool, const Input& v_pool,
                 Buffer& o, Buffer& lse) {
    const StageProgram& sp = Stage(program_.forward, stage, op);
    const std::vector<size_t> selected = Selected(sp, calls, op);
    const AttentionDims dims = Dims(scale);
    const int64_t local = program_.local_rows, pool = program_.forward.pool_rows;
    Check("q", q, local, dims.q_row_floats());
    Check("o", o, local, dims.q_row_floats());
    Check("lse", lse, local, dims.heads_q);
    Check("k", k, local, dims.kv_row_floats());
    Check("v", v, local, dims.kv_row_floats());
    Check("k_pool", k_pool, pool, dims.kv_row_floats());
    Check("v_pool", v_pool, pool, dims.kv_row_floats());
    nb::gil_scoped_release release;
    for (const size_t i : selected) {
      const ComputeCall& c = sp.compute[i];
      const T* kb = Data<T>(c.kv_in_pool ? k_pool : k);
      const T* vb = Data<T>(c.kv_in_pool ? v_pool : v);
      kernel_->Forward(dims, mask_, Segments(c),
                       ForwardBuffersOf<T>{Data<T>(q) + c.q_row * dims.q_row_floats(),
                                           kb + c.kv_row * dims.kv_row_floats(),
                                           vb + c.kv_row * dims.kv_row_floats(),
                                           o.data() + c.q_row * dims.q_row_floats(),
                                           lse.data() + c.q_row * dims.heads_q});
    }
  }

  template <class T>
  void BackwardOf(const char* op, int64_t stage, Calls calls, float scale, const Input& q,
                  const Input& k, const Input& v, const Input& k_pool, const Input& v_pool,
                  const Input& d_o, Buffer& lse, Buffer& delta, Buffer& dq, Buffer& dk, Buffer& dv,
                  Buffer& dk_partial, Buffer& dv_partial) {
    const StageProgram& sp = Stage(program_.backward, stage, op);
    const std::vector<size_t> selected = Selected(sp, calls, op);
    const AttentionDims dims = Dims(scale);
    const int64_t local = program_.local_rows, pool = program_.backward.pool_rows;
    const int64_t partial = program_.backward.partial_rows;
    for (auto [name, b] : {std::pair{"q", &q}, {"do", &d_o}})
      Check(name, *b, local, dims.q_row_floats());
    Check("dq", dq, local, dims.q_row_floats());
    for (auto [name, b] : {std::pair{"lse", &lse}, {"delta", &delta}})
      Check(name, *b, local, dims.heads_q);
    for (auto [name, b] : {std::pair{"k", &k}, {"v", &v}})
      Check(name, *b, local, dims.kv_row_floats());
    for (auto [name, b] : {std::pair{"dk", &dk}, {"dv", &dv}})
      Check(name, *b, local, dims.kv_row_floats());
    Check("k_pool", k_pool, pool, dims.kv_row_floats());
    Check("v_pool", v_pool, pool, dims.kv_row_floats());
    Check("dk_partial", dk_partial, partial, dims.kv_row_floats());
    Check("dv_partial", dv_partial, partial, dims.kv_row_floats());
    nb::gil_scoped_release release;
    const int64_t qr = dims.q_row_floats(), kr = dims.kv_row_floats();
    for (const size_t i : selected) {
      const ComputeCall& c = sp.compute[i];
      const T* kb = Data<T>(c.kv_in_pool ? k_pool : k);
      const T* vb = Data<T>(c.kv_in_pool ? v_pool : v);
      float* dkb = c.dkv_in_partial ? dk_partial.data() : dk.data();
      float* dvb = c.dkv_in_partial ? dv_partial.data() : dv.data();
      kernel_->Backward(
          dims, mask_, Segments(c),
          BackwardBuffersOf<T>{Data<T>(q) + c.q_row * qr, kb + c.kv_row * kr, vb + c.kv_row * kr,
                               Data<T>(d_o) + c.q_row * qr, lse.data() + c.q_row * dims.heads_q,
                               delta.data() + c.q_row * dims.heads_q, dq.data() + c.q_row * qr,
                               dkb + c.dkv_row * kr, dvb + c.dkv_row * kr});
    }
  }

  AttentionDims Dims(float scale) const {
    AttentionDims d = dims_;
    d.scale = scale;
    return d;
  }
  static const StageProgram& Stage(const PassProgram& pass, int64_t stage, const char* op) {
    if (stage < 0 || stage >= static_cast<int64_t>(pass.stages.size()))
      throw Error(ErrorCode::kInvalidArgument, std::string("program.") + op + ": stage " +
                                                   std::to_string(stage) + " is not in [0, " +
                                                   std::to_string(pass.stages.size()) + ")");
    return pass.stages[stage];
  }
  template <class Array>
  static void Check(const char* name, const Array& b, int64_t rows, int64_t row_floats) {
    const int64_t want = rows * row_floats;
    const int64_t have = static_cast<int64_t>(b.size());
    if (have != want || (b.ndim() > 0 && rows > 0 && b.shape(0) != static_cast<size_t>(rows)))
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("program: buffer ") + name + " has " + std::to_string(have) +
                      " elements (first dimension " + std::to_string(b.ndim() ? b.shape(0) : 0) +
                      "), expected " + std::to_string(rows) + " rows of " +
                      std::to_string(row_floats));
  }
  std::span<const SegmentPair> Segments(const ComputeCall& c) const {
    return {program_.segments.data() + c.segment_begin,
            static_cast<size_t>(c.segment_end - c.segment_begin)};
  }

  const RankProgram program_;
  const Mask mask_;
  const AttentionDims dims_;
  const PassTables forward_, backward_;
  std::vector<std::vector<int64_t>>
      final_stages_;  // RankProgram's *_final_stage, as int64 for vector()
  std::vector<int64_t> segments_;
  std::vector<PieceTable> pieces_;  // reshuffle_in recv, send, self; do_in recv, send, self
  std::unique_ptr<AttentionKernel> kernel_;  // one thread at a time: calls hold the handle
};

Table TableView(const StageTable& t, nb::handle owner) {
  static const int64_t kEmpty = 0;
  const size_t shape[2] = {t.values.size() / static_cast<size_t>(t.cols),
                           static_cast<size_t>(t.cols)};
  return Table(t.values.empty() ? &kEmpty : t.values.data(), 2, shape, owner);
}

Vector VecView(const std::vector<int64_t>& v, nb::handle owner) {
  static const int64_t kEmpty = 0;
  const size_t shape[1] = {v.size()};
  return Vector(v.empty() ? &kEmpty : v.data(), 1, shape, owner);
}

auto Buf(const char* name) { return nb::arg(name).noconvert(); }

}  // namespace

// One rank's recorded intervals: (lane, name, start_s, end_s).
using RankEvents = std::vector<std::tuple<int32_t, std::string, double, double>>;

void RegisterProgramBindings(nb::module_& m, PlanOf plan_of) {
  // fcp.torch's trace, written like `fcp run --trace` (fcp/trace.h): the
  // same layout (lanes, names, "cat"), so scripts/trace_overlap.py reads both.
  m.def(
      "trace_lanes", [] { return RuntimeTraceLayout().tracks; },
      "The runtime trace's lane names; an event's lane is an index into them.");
  m.def(
      "runtime_trace_document",
      [](const std::vector<RankEvents>& ranks) {
        const int32_t lanes = static_cast<int32_t>(RuntimeTraceLayout().tracks.size());
        std::vector<std::string> texts;
        for (size_t r = 0; r < ranks.size(); ++r) {
          std::vector<TraceEvent> events;
          for (const auto& [lane, name, start_s, end_s] : ranks[r]) {
            if (lane < 0 || lane >= lanes || !(start_s <= end_s))
              throw Error(ErrorCode::kInvalidArgument,
                          "runtime_trace_document: rank " + std::to_string(r) + " event '" + name +
                              "' has lane " + std::to_string(lane) + " (lanes 0.." +
                              std::to_string(lanes - 1) + ") or ends before it starts");
            events.push_back({static_cast<int32_t>(r), lane, name, start_s, end_s});
          }
          texts.push_back(ChromeCompleteEvents(events, RuntimeTraceLayout()));
        }
        return ChromeTraceDocument(texts);
      },
      nb::arg("ranks"), "A Chrome trace document of per-rank (lane, name, start_s, end_s) events.");
  nb::class_<ProgramHandle>(m, "Program", "One rank's lowered program of a plan (fcp/lowering.h).")
      .def(
          "__init__",
          [plan_of](ProgramHandle* self, nb::handle plan, int64_t rank) {
            const Plan& p = plan_of(plan);
            if (rank < 0 || rank >= p.workers)
              throw Error(ErrorCode::kInvalidArgument, "program: rank " + std::to_string(rank) +
                                                           " is not in [0, " +
                                                           std::to_string(p.workers) + ")");
            nb::gil_scoped_release release;
            new (self) ProgramHandle(p, static_cast<int32_t>(rank));
          },
          nb::arg("plan"), nb::arg("rank"))
      .def_prop_ro("rank", [](ProgramHandle& h) { return h.program().rank; })
      .def_prop_ro("workers", [](ProgramHandle& h) { return h.program().workers; })
      .def_prop_ro("total_tokens", [](ProgramHandle& h) { return h.program().total_tokens; })
      .def_prop_ro("dataloader_begin",
                   [](ProgramHandle& h) { return h.program().dataloader_begin; })
      .def_prop_ro("dataloader_end", [](ProgramHandle& h) { return h.program().dataloader_end; })
      .def_prop_ro("local_rows", [](ProgramHandle& h) { return h.program().local_rows; })
      .def("pool_rows",
           [](ProgramHandle& h, const std::string& pass) {
             return pass == "backward" ? h.program().backward.pool_rows
                                       : (h.pass(pass), h.program().forward.pool_rows);
           })
      .def_prop_ro("partial_rows",
                   [](ProgramHandle& h) { return h.program().backward.partial_rows; })
      .def("num_stages",
           [](ProgramHandle& h, const std::string& pass) {
             return pass == "backward" ? h.program().backward.stages.size()
                                       : (h.pass(pass), h.program().forward.stages.size());
           })
      .def("vector",
           [](ProgramHandle& h, const std::string& name) {
             const RankProgram& p = h.program();
             const std::pair<const char*, const std::vector<int64_t>*> vectors[] = {
                 {"block_row", &p.block_row},
                 {"local_token", &p.local_token},
                 {"local_position", &p.local_position},
                 {"in_send_rows", &p.in_send_rows},
                 {"in_send_counts", &p.in_send_counts},
                 {"in_recv_rows", &p.in_recv_rows},
                 {"in_recv_counts", &p.in_recv_counts},
                 {"forward_final_stage", &h.final_stage(0)},
                 {"backward_dq_final_stage", &h.final_stage(1)},
                 {"backward_dkv_final_stage", &h.final_stage(2)}};
             for (const auto& [n, v] : vectors)
               if (name == n) return VecView(*v, nb::find(&h));
             throw Error(ErrorCode::kInvalidArgument, "program.vector: no vector '" + name + "'");
           })
      .def("segments",
           [](ProgramHandle& h) {
             static const int64_t kEmpty = 0;
             const size_t shape[2] = {h.segments().size() / 6, 6};
             return Table(h.segments().empty() ? &kEmpty : h.segments().data(), 2, shape,
                          nb::find(&h));
           })
      .def(
          "table",
          [](ProgramHandle& h, const std::string& pass, const std::string& name) {
            const PassTables& t = h.pass(pass);
            const std::pair<const char*, const StageTable*> tables[] = {{"kv_recv", &t.kv_recv},
                                                                        {"kv_send", &t.kv_send},
                                                                        {"dkv_recv", &t.dkv_recv},
                                                                        {"dkv_send", &t.dkv_send},
                                                                        {"compute", &t.compute}};
            for (const auto& [n, tab] : tables)
              if (name == n)
                return nb::make_tuple(TableView(*tab, nb::find(&h)),
                                      VecView(tab->offsets, nb::find(&h)));
            throw Error(ErrorCode::kInvalidArgument, "program.table: no table '" + name + "'");
          },
          nb::arg("pass"), nb::arg("name"), "(rows, per-stage offsets) of one table of a pass.")
      .def(
          "reshuffle",
          [](ProgramHandle& h, const std::string& name, const std::string& side) {
            const PieceTable& t = h.pieces(name, side);
            return nb::make_tuple(TableView(t.pieces, nb::find(&h)),
                                  VecView(t.dataloader_rows, nb::find(&h)),
                                  VecView(t.local_rows, nb::find(&h)));
          },
          nb::arg("name"), nb::arg("side"),
          "(pieces, dataloader rows, local rows) of one side of an input reshuffle.")
      // noconvert: a buffer of another dtype or layout is an error, never a
      // silent temporary copy (the kernel would write into the copy).
      .def("forward_stage", &ProgramHandle::Forward, nb::arg("stage"), nb::arg("scale"),
           nb::arg("early"), Buf("q"), Buf("k"), Buf("v"), Buf("k_pool"), Buf("v_pool"), Buf("o"),
           Buf("lse"))
      .def("forward_calls", &ProgramHandle::ForwardList, nb::arg("stage"), nb::arg("calls"),
           nb::arg("scale"), Buf("q"), Buf("k"), Buf("v"), Buf("k_pool"), Buf("v_pool"), Buf("o"),
           Buf("lse"))
      .def("backward_stage", &ProgramHandle::Backward, nb::arg("stage"), nb::arg("scale"), Buf("q"),
           Buf("k"), Buf("v"), Buf("k_pool"), Buf("v_pool"), Buf("do"), Buf("lse"), Buf("delta"),
           Buf("dq"), Buf("dk"), Buf("dv"), Buf("dk_partial"), Buf("dv_partial"))
      .def("backward_calls", &ProgramHandle::BackwardList, nb::arg("stage"), nb::arg("calls"),
           nb::arg("scale"), Buf("q"), Buf("k"), Buf("v"), Buf("k_pool"), Buf("v_pool"), Buf("do"),
           Buf("lse"), Buf("delta"), Buf("dq"), Buf("dk"), Buf("dv"), Buf("dk_partial"),
           Buf("dv_partial"));
}

}  // namespace fcp::python
