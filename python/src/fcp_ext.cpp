// fcp._fcp: the native core of the Python module (python/fcp/__init__.py wraps
// it with keyword defaults and docstrings).
//
// A PlanHandle owns one fcp::Plan for the lifetime of its Python object. Every
// array handed to Python is a read-only numpy view into memory the handle owns
// (the plan's own vectors where their layout allows, else a flattened copy
// built once, on first use); the view holds a reference to the handle, so it
// stays valid after the Plan wrapper is gone. Plans are immutable from Python.
// Per-worker and per-range token arrays are instead built fresh on each call
// (O(their size)) and owned by the array itself.
//
// Errors: fcp::Error becomes ValueError (bad argument), InfeasibleError,
// ParseError and InvalidPlanError (all ValueError subclasses), OSError (I/O)
// or RuntimeError (internal), carrying the message the command line prints.
// The GIL is released while planning, parsing, writing, validating and
// building the cached arrays; caches are built under std::call_once, so
// threads sharing a plan are safe.
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include "fcp/cost_model.h"
#include "fcp/error.h"
#include "fcp/fcp_tuning.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "fcp/plan_metrics.h"
#include "fcp/planner.h"
#include "fcp/planner_options.h"
#include "fcp/planner_registry.h"
#include "fcp/simulator.h"
#include "fcp/token_permutation.h"
#include "fcp/workload.h"
#include "program_ext.h"

namespace nb = nanobind;

namespace fcp::python {
namespace {

template <typename T>
using Array = nb::ndarray<nb::numpy, const T>;

// A stage's transfer list is viewed in place as an (n, 3) int32 array: a
// Transfer's first fields are int32 and it is a whole number of int32s. Its
// row range (docs/plan-format.md) follows the three int32 fields and is not in
// the view (row strides skip it); TransferRowsArray copies it out.
static_assert(std::is_standard_layout_v<Transfer> && sizeof(Transfer) % sizeof(int32_t) == 0);
static_assert(offsetof(Transfer, block) == 0 && offsetof(Transfer, src) == 4 &&
              offsetof(Transfer, dst) == 8);

// Read-only view of `rows` x `cols` (cols == 0: a vector) elements at `data`,
// kept alive by `owner`. numpy wants a non-null pointer even for no elements.
template <typename T>
Array<T> View(const T* data, size_t rows, size_t cols, nb::handle owner) {
  static const T kEmpty{};
  if (rows == 0) data = &kEmpty;
  const size_t shape[2] = {rows, cols};
  return Array<T>(data, cols == 0 ? 1 : 2, shape, owner);
}

template <typename T>
Array<T> VectorView(const std::vector<T>& v, nb::handle owner) {
  return View(v.data(), v.size(), 0, owner);
}

// A stage's transfer list as an int32 array with one row per
// item and a column per leading int32 field (`cols` of them), rows
// sizeof(T) apart.
template <typename T>
Array<int32_t> StageListView(const std::vector<T>& list, size_t cols, nb::handle owner) {
  static_assert(std::is_standard_layout_v<T> && sizeof(T) % sizeof(int32_t) == 0);
  static const int32_t kEmpty = 0;
  const int32_t* data = list.empty() ? &kEmpty : reinterpret_cast<const int32_t*>(list.data());
  const size_t shape[2] = {list.size(), cols};
  const int64_t strides[2] = {static_cast<int64_t>(sizeof(T) / sizeof(int32_t)), 1};
  return Array<int32_t>(data, 2, shape, owner, strides);
}

// A fresh array that owns `values` (moved into a capsule): a vector, or with
// `cols` > 0 a [values.size() / cols, cols] matrix.
template <typename T>
nb::ndarray<nb::numpy, T> OwnedArray(std::vector<T> values, size_t cols = 0) {
  auto* heap = new std::vector<T>(std::move(values));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  static T empty{};
  T* data = heap->empty() ? &empty : heap->data();
  const size_t shape[2] = {cols == 0 ? heap->size() : heap->size() / cols, cols};
  return nb::ndarray<nb::numpy, T>(data, cols == 0 ? 1 : 2, shape, owner);
}

// A stage's pairs as int32 [pairs, 3] rows (q_block, kv_block, worker), the
// worker that computes each resolved (the query block's owner unless the
// remote-compute extension names another): a copy, since the plan stores
// kOwner for the usual case.
nb::ndarray<nb::numpy, int32_t> ComputeArray(const Plan& plan,
                                             const std::vector<BlockPair>& pairs) {
  std::vector<int32_t> rows;
  rows.reserve(3 * pairs.size());
  for (const BlockPair& p : pairs)
    rows.insert(rows.end(), {p.q_block, p.kv_block, ComputeWorker(plan.blocks, p)});
  return OwnedArray(std::move(rows), 3);
}

// A stage's transfers as int64 [sends, 5] rows (block, src, dst, row_begin,
// rows): the block's rows [row_begin, row_begin + rows) it carries, the whole
// block (0, its tokens) unless the plan cuts it (docs/plan-format.md).
nb::ndarray<nb::numpy, int64_t> TransferRowsArray(const Plan& plan,
                                                  const std::vector<Transfer>& sends) {
  std::vector<int64_t> rows;
  rows.reserve(5 * sends.size());
  for (const Transfer& t : sends)
    rows.insert(rows.end(),
                {t.block, t.src, t.dst, t.row_begin, t.rows(plan.blocks[t.block].tokens())});
  return OwnedArray(std::move(rows), 5);
}

// Blocks flattened to arrays (Block holds a vector, so no in-place view).
struct FlatBlocks {
  std::vector<int32_t> owner;            // [blocks]
  std::vector<int64_t> tokens;           // [blocks]
  std::vector<int64_t> segment_offsets;  // [blocks + 1] into `segments` rows
  std::vector<int64_t> segments;         // [segments x 4]: block, seq, start, length
};

FlatBlocks Flatten(const Plan& plan) {
  FlatBlocks f;
  const size_t n = plan.blocks.size();
  f.owner.reserve(n);
  f.tokens.reserve(n);
  f.segment_offsets.reserve(n + 1);
  f.segment_offsets.push_back(0);
  for (size_t b = 0; b < n; ++b) {
    const Block& block = plan.blocks[b];
    f.owner.push_back(block.worker);
    f.tokens.push_back(block.tokens());
    for (const Segment& s : block.segments)
      f.segments.insert(f.segments.end(), {static_cast<int64_t>(b), s.seq, s.start, s.length});
    f.segment_offsets.push_back(static_cast<int64_t>(f.segments.size() / 4));
  }
  return f;
}

// Per-worker metrics as one contiguous array per field.
struct WorkerColumns {
  std::vector<int64_t> tokens, kv_blocks_sent, kv_blocks_received, bytes_sent, bytes_received;
  std::vector<int64_t> nic_bytes_sent, nic_bytes_received, reshuffle_tokens_in,
      reshuffle_tokens_out;
  std::vector<double> forward_flops;
};

WorkerColumns Columns(const PlanMetrics& m) {
  WorkerColumns c;
  for (const WorkerMetrics& w : m.workers) {
    c.tokens.push_back(w.tokens);
    c.forward_flops.push_back(w.forward_flops);
    c.kv_blocks_sent.push_back(w.kv_blocks_sent);
    c.kv_blocks_received.push_back(w.kv_blocks_received);
    c.bytes_sent.push_back(w.bytes_sent);
    c.bytes_received.push_back(w.bytes_received);
    c.nic_bytes_sent.push_back(w.nic_bytes_sent);
    c.nic_bytes_received.push_back(w.nic_bytes_received);
    c.reshuffle_tokens_in.push_back(w.reshuffle_tokens_in);
    c.reshuffle_tokens_out.push_back(w.reshuffle_tokens_out);
  }
  return c;
}

// Builds `value` once, the first time it is asked for; a throwing build is
// retried on the next call (std::call_once semantics).
template <typename T>
class Lazy {
 public:
  template <typename Build>
  const T& get(Build build) {
    std::call_once(once_, [&] { value_.emplace(build()); });
    return *value_;
  }

 private:
  std::once_flag once_;
  std::optional<T> value_;
};

class PlanHandle {
 public:
  // `known_valid`: the plan comes from a planner (whose contract is a valid
  // plan); a parsed plan is validated before anything indexes through it.
  PlanHandle(Plan plan, bool known_valid, double planning_seconds)
      : plan_(std::move(plan)), valid_(known_valid), planning_seconds_(planning_seconds) {}

  const Plan& plan() const { return plan_; }
  double planning_seconds() const { return planning_seconds_; }

  // Everything below derives arrays by indexing with the plan's ids, which is
  // only safe once the plan is known to be valid.
  void EnsureValid() {
    if (!valid_) Validate({});
  }
  // Threads racing here may both validate: harmless, ValidatePlan is pure.
  void Validate(const ValidateOptions& options) {
    ValidatePlan(plan_, options);
    valid_ = true;
  }
  const FlatBlocks& blocks() {
    return blocks_.get([&] { return Flatten(plan_); });
  }
  const PlanMetrics& metrics() {
    EnsureValid();
    return metrics_.get([&] { return ComputePlanMetrics(plan_); });
  }
  const WorkerColumns& worker_columns() {
    return columns_.get([&] { return Columns(metrics()); });
  }
  const TokenLayout& layout() {
    EnsureValid();
    return layout_.get([&] { return TokenLayout(plan_); });
  }
  const std::vector<int64_t>& order() {
    return order_.get([&] { return layout().Order(); });
  }
  const std::vector<int64_t>& inverse() {
    return inverse_.get([&] { return layout().PlannedPositions(0, layout().total_tokens()); });
  }

 private:
  const Plan plan_;
  std::atomic<bool> valid_;
  const double planning_seconds_;
  Lazy<FlatBlocks> blocks_;
  Lazy<PlanMetrics> metrics_;
  Lazy<WorkerColumns> columns_;
  Lazy<TokenLayout> layout_;
  Lazy<std::vector<int64_t>> order_;    // all workers' planned orders, concatenated
  Lazy<std::vector<int64_t>> inverse_;  // planned position of every global token
};

// Runs `f` with the GIL released: for work that touches only C++ data.
template <typename F>
decltype(auto) WithoutGil(F&& f) {
  nb::gil_scoped_release release;
  return f();
}

// Python integers are 64-bit here; fields that are 32-bit in C++ are checked
// rather than truncated. `operation` prefixes the message ("plan", "workload").
int32_t ToInt32(const char* operation, const char* what, int64_t value) {
  if (value < INT32_MIN || value > INT32_MAX)
    throw Error(ErrorCode::kInvalidArgument, std::string(operation) + ": " + what + " = " +
                                                 std::to_string(value) +
                                                 " does not fit a 32-bit integer");
  return static_cast<int32_t>(value);
}

using Lengths = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Lengths from a list or tuple of Python integers (what a dataloader usually
// has), read directly: a detour through numpy costs more than some plans.
std::vector<int64_t> LengthsFromSequence(nb::handle sequence) {
  // A tuple: an item's __index__ runs Python code, which could shrink a list
  // (and free the items read here) while the loop walks it; the tuple holds
  // its own references. Only a list is copied.
  nb::object snapshot = nb::borrow(sequence);
  if (PyList_CheckExact(sequence.ptr())) snapshot = nb::steal(PySequence_Tuple(sequence.ptr()));
  if (!snapshot.is_valid()) throw nb::python_error();
  PyObject* fast = snapshot.ptr();
  const Py_ssize_t size = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  std::vector<int64_t> values(static_cast<size_t>(size));
  for (Py_ssize_t i = 0; i < size; ++i) {
    PyObject* item = items[i];
    const auto fail = [&](const std::string& what) {
      throw Error(ErrorCode::kInvalidArgument, "plan: lengths[" + std::to_string(i) + "] " + what);
    };
    if (PyBool_Check(item)) fail("must be an integer, got bool");
    // numpy integer scalars and other integer-like objects go through __index__.
    nb::object index = nb::steal(PyNumber_Index(item));
    if (!index.is_valid()) {
      // Not an integer: our message; anything else __index__ raised
      // (KeyboardInterrupt, its own errors) goes up as it is.
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
      PyErr_Clear();
      fail(std::string("must be an integer, got ") + Py_TYPE(item)->tp_name);
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0) fail("does not fit a 64-bit integer");
    values[i] = v;
  }
  return values;
}

std::vector<int64_t> LengthsFrom(nb::handle lengths) {
  if (PyList_CheckExact(lengths.ptr()) || PyTuple_CheckExact(lengths.ptr()))
    return LengthsFromSequence(lengths);
  // fcp.plan made it int64, 1-D and contiguous. Without conversion: a cast
  // that converted would read a float array's lengths truncated.
  Lengths array;
  if (!nb::try_cast<Lengths>(lengths, array, /*convert=*/false))
    throw nb::type_error("plan: lengths must be a list, a tuple or a contiguous 1-D int64 array");
  return std::vector<int64_t>(array.data(), array.data() + array.shape(0));
}

// fcp.plan's keywords from the planner's table (fcp/planner_options.h), each
// already converted by fcp.plan to the row's Python type (int, float, bool),
// set on `config`; a 32-bit field is checked rather than truncated.
void SetPlannerOptions(PlannerConfig& config, const nb::dict& options) {
  for (const auto& [key, value] : options) {
    const std::string keyword = nb::cast<std::string>(key);
    const PlannerOption* option = FindPlannerOption(keyword);
    if (option == nullptr || PythonKeyword(*option) != keyword)
      throw nb::type_error(("plan: unknown keyword '" + keyword + "'").c_str());
    std::visit(
        [&](auto field) {
          using T = std::remove_reference_t<decltype(field(config))>;
          if constexpr (std::is_same_v<T, int32_t>)
            field(config) = ToInt32("plan", keyword.c_str(), nb::cast<int64_t>(value));
          else
            field(config) = nb::cast<T>(value);
        },
        option->ref);
  }
}

// `tune`: "" plans once; else the profile (built-in name or JSON file)
// TuneFcpPlan simulates FCP's candidates on (fcp/fcp_tuning.h, FcpTuningFor).
// `profile`: the one FCP ranks its candidates for (PlannerConfig::step_costs);
// "": tune's, else the default (gpu-x's).
std::unique_ptr<PlanHandle> MakePlanHandle(nb::handle lengths, const std::string& mask,
                                           int64_t window, const std::string& planner, bool check,
                                           const nb::dict& options, const std::string& tune,
                                           const std::string& profile) {
  PlannerConfig config;
  config.mask.kind = ParseMaskKind(mask);
  config.mask.window = window;
  config.planner = planner;
  config.self_check = check;
  SetPlannerOptions(config, options);  // unset keywords keep the library's defaults
  const std::vector<int64_t> values = LengthsFrom(lengths);
  const std::string ranked_for = profile.empty() ? tune : profile;
  if (!ranked_for.empty()) config.step_costs = StepCostsOf(ResolveProfile(ranked_for), false);
  FcpTuning tuning;
  if (!tune.empty()) tuning = FcpTuningFor(ResolveProfile(tune), config);
  return WithoutGil([&] {
    const auto start = std::chrono::steady_clock::now();
    Plan plan = tune.empty() ? MakePlan(values, config) : TuneFcpPlan(values, config, tuning).plan;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::make_unique<PlanHandle>(std::move(plan), /*known_valid=*/true, seconds);
  });
}

// The table's rows for fcp.plan: (keyword, field, type, default, help, recorded).
nb::list PlannerOptionRows() {
  nb::list rows;
  PlannerConfig defaults;
  for (const PlannerOption& o : PlannerOptions()) {
    const nb::object value =
        std::visit([&](auto field) { return nb::cast(field(defaults)); }, o.ref);
    rows.append(
        nb::make_tuple(PythonKeyword(o), o.field, OptionTypeName(o), value, o.help, o.recorded));
  }
  return rows;
}

nb::dict MetricsDict(const PlanMetrics& m) {
  nb::dict d;
  d["total_tokens"] = m.total_tokens;
  d["max_tokens"] = m.max_tokens;
  d["total_forward_flops"] = m.total_forward_flops;
  d["max_pair_flops"] = m.max_pair_flops;
  d["required_pairs"] = m.required_pairs;
  d["transfer_edges"] = m.transfer_edges;
  d["max_degree"] = m.max_degree;
  d["forward_stages"] = m.forward_stages;
  d["forward_transfer_stages"] = m.forward_transfer_stages;
  d["transfer_stage_lower_bound"] = m.transfer_stage_lower_bound;
  d["backward_stages"] = m.backward_stages;
  d["compute_imbalance"] = m.compute_imbalance;
  d["traffic_imbalance"] = m.traffic_imbalance;
  d["send_imbalance"] = m.send_imbalance;
  d["receive_imbalance"] = m.receive_imbalance;
  d["token_imbalance"] = m.token_imbalance;
  d["compute_lower_bound"] = m.compute_lower_bound;
  d["max_compute"] = m.max_compute;
  d["traffic_lower_bound_bytes"] = m.traffic_lower_bound_bytes;
  d["max_traffic_bytes"] = m.max_traffic_bytes;
  d["reshuffle_tokens"] = m.reshuffle_tokens;
  d["reshuffle_bytes"] = m.reshuffle_bytes;
  d["max_worker_reshuffle_tokens"] = m.max_worker_reshuffle_tokens;
  d["max_worker_reshuffle_bytes_in"] = m.max_worker_reshuffle_bytes_in;
  d["max_worker_reshuffle_bytes_out"] = m.max_worker_reshuffle_bytes_out;
  d["reshuffle_floor_tokens"] = m.reshuffle_floor.tokens;
  d["reshuffle_floor_shed_tokens"] = m.reshuffle_floor.shed_tokens;
  d["reshuffle_floor_replacement_tokens"] = m.reshuffle_floor.replacement_tokens;
  d["max_bytes_sent"] = m.max_bytes_sent;
  d["max_bytes_received"] = m.max_bytes_received;
  d["gpus_per_node"] = m.gpus_per_node;
  d["nvlink_bytes"] = m.nvlink_bytes;
  d["nic_bytes"] = m.nic_bytes;
  d["max_nic_bytes_sent"] = m.max_nic_bytes_sent;
  d["max_nic_bytes_received"] = m.max_nic_bytes_received;
  d["nic_send_imbalance"] = m.nic_send_imbalance;
  d["nic_receive_imbalance"] = m.nic_receive_imbalance;
  return d;
}

template <typename Stage>
const Stage& StageAt(const std::vector<Stage>& stages, int64_t stage, const char* pass) {
  if (stage < 0 || stage >= static_cast<int64_t>(stages.size()))
    throw nb::index_error((std::string("plan: ") + pass + " stage " + std::to_string(stage) +
                           " is not in [0, " + std::to_string(stages.size()) + ")")
                              .c_str());
  return stages[stage];
}

// Exception types of the module, created at import.
struct ExceptionTypes {
  PyObject* invalid_plan = nullptr;
  PyObject* infeasible = nullptr;
  PyObject* parse = nullptr;
};

PyObject* PythonTypeFor(const ExceptionTypes& types, ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return PyExc_ValueError;
    case ErrorCode::kInfeasible:
      return types.infeasible;
    case ErrorCode::kParse:
      return types.parse;
    case ErrorCode::kInvalidPlan:
      return types.invalid_plan;
    case ErrorCode::kIo:
      return PyExc_OSError;
    case ErrorCode::kBackend:
    case ErrorCode::kInternal:
      return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

// Exception types of the module, created at import; the translator maps each
// fcp::Error code to one (PythonTypeFor).
ExceptionTypes& Exceptions() {
  static ExceptionTypes types;
  return types;
}

void RegisterExceptions(nb::module_& m) {
  ExceptionTypes& types = Exceptions();
  const auto new_type = [&m](const char* name, const char* doc) {
    PyObject* type = PyErr_NewExceptionWithDoc((std::string("fcp.") + name).c_str(), doc,
                                               PyExc_ValueError, nullptr);
    if (!type) throw nb::python_error();
    m.attr(name) = nb::handle(type);  // the module keeps the reference for good
    return type;
  };
  types.invalid_plan =
      new_type("InvalidPlanError", "A plan that breaks a rule of the plan format.");
  types.infeasible =
      new_type("InfeasibleError", "Valid inputs that admit no plan (e.g. token_cap too small).");
  types.parse = new_type("ParseError", "Malformed plan JSON.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(PythonTypeFor(Exceptions(), e.code()), e.what());
    }
  });
}

using PlanClass = nb::class_<PlanHandle>;

// The header fields, counts, validation and serialisation of a plan.
void BindPlanHeader(PlanClass& cls) {
  cls.def_prop_ro("planner", [](PlanHandle& h) { return h.plan().planner; })
      .def_prop_ro("workers", [](PlanHandle& h) { return h.plan().workers; })
      .def_prop_ro("mask",
                   [](PlanHandle& h) { return std::string(MaskKindName(h.plan().mask.kind)); })
      .def_prop_ro("window", [](PlanHandle& h) { return h.plan().mask.window; })
      .def_prop_ro("heads_q", [](PlanHandle& h) { return h.plan().attention.heads_q; })
      .def_prop_ro("heads_kv", [](PlanHandle& h) { return h.plan().attention.heads_kv; })
      .def_prop_ro("head_dim", [](PlanHandle& h) { return h.plan().attention.head_dim; })
      .def_prop_ro("dtype_bytes", [](PlanHandle& h) { return h.plan().attention.dtype_bytes; })
      .def_prop_ro("block_size", [](PlanHandle& h) { return h.plan().block_size; })
      .def_prop_ro("coalesce", [](PlanHandle& h) { return h.plan().coalesce; })
      .def_prop_ro("token_cap", [](PlanHandle& h) { return h.plan().token_cap; })
      .def_prop_ro("total_tokens",
                   [](PlanHandle& h) {
                     // A parsed plan is not validated yet: if its sum overflows,
                     // the validator's message names the first broken rule.
                     try {
                       return h.plan().total_tokens();
                     } catch (const Error&) {
                       h.EnsureValid();
                       throw;
                     }
                   })
      .def("ensure_valid",
           [](PlanHandle& h) {
             WithoutGil([&] {
               h.EnsureValid();
               return 0;
             });
           })
      .def_prop_ro("num_blocks", [](PlanHandle& h) { return h.plan().blocks.size(); })
      .def_prop_ro("num_forward_stages", [](PlanHandle& h) { return h.plan().forward.size(); })
      .def_prop_ro("num_backward_stages", [](PlanHandle& h) { return h.plan().backward.size(); })
      .def_prop_ro("planning_seconds", [](PlanHandle& h) { return h.planning_seconds(); })
      .def("equals", [](PlanHandle& a, PlanHandle& b) { return a.plan() == b.plan(); })
      .def("to_json",
           [](PlanHandle& h) { return WithoutGil([&] { return WritePlanJson(h.plan()); }); })
      .def("validate", [](PlanHandle& h, bool forbid_redundant_transfers) {
        WithoutGil([&] {
          h.Validate({.forbid_redundant_transfers = forbid_redundant_transfers});
          return 0;
        });
      });
}

// The plan's flat block arrays, built (once, without the GIL) on first use.
const FlatBlocks& BlocksOf(PlanHandle& h) {
  return WithoutGil([&]() -> const FlatBlocks& { return h.blocks(); });
}

// Blocks, segments and stages: read-only views into the plan.
void BindPlanArrays(PlanClass& cls) {
  cls.def("sequences", [](PlanHandle& h) { return VectorView(h.plan().sequences, nb::find(&h)); })
      .def("block_owner", [](PlanHandle& h) { return VectorView(BlocksOf(h).owner, nb::find(&h)); })
      .def("block_tokens",
           [](PlanHandle& h) { return VectorView(BlocksOf(h).tokens, nb::find(&h)); })
      .def("block_segment_offsets",
           [](PlanHandle& h) { return VectorView(BlocksOf(h).segment_offsets, nb::find(&h)); })
      .def("segments",
           [](PlanHandle& h) {
             const FlatBlocks& f = BlocksOf(h);
             return View(f.segments.data(), f.segments.size() / 4, 4, nb::find(&h));
           })
      // Transfer lists: (stage) -> int32 [n, 3] views (block, src, dst), or
      // with rows=True int64 [n, 5] copies that add the rows each carries.
      .def("stage_transfers",
           [](PlanHandle& h, const std::string& list, int64_t stage, bool rows) -> nb::object {
             const Plan& plan = h.plan();
             const std::vector<Transfer>* sends = nullptr;
             if (list == "forward_send") sends = &StageAt(plan.forward, stage, "forward").send;
             if (list == "forward_send_q") sends = &StageAt(plan.forward, stage, "forward").send_q;
             if (list == "forward_send_o") sends = &StageAt(plan.forward, stage, "forward").send_o;
             if (list == "backward_send_kv")
               sends = &StageAt(plan.backward, stage, "backward").send_kv;
             if (list == "backward_send_dkv")
               sends = &StageAt(plan.backward, stage, "backward").send_dkv;
             if (list == "backward_send_q")
               sends = &StageAt(plan.backward, stage, "backward").send_q;
             if (list == "backward_send_dq")
               sends = &StageAt(plan.backward, stage, "backward").send_dq;
             if (sends == nullptr)
               throw nb::value_error(("plan: no transfer list named '" + list + "'").c_str());
             if (rows) return nb::cast(TransferRowsArray(plan, *sends));
             return nb::cast(StageListView(*sends, 3, nb::find(&h)));
           })
      .def("forward_compute",
           [](PlanHandle& h, int64_t stage) {
             return ComputeArray(h.plan(), StageAt(h.plan().forward, stage, "forward").compute);
           })
      .def("backward_compute", [](PlanHandle& h, int64_t stage) {
        return ComputeArray(h.plan(), StageAt(h.plan().backward, stage, "backward").compute);
      });
}

// Plan-wide and per-worker metrics, and the text of `fcp inspect`.
void BindPlanMetrics(PlanClass& cls) {
  cls.def("metrics",
          [](PlanHandle& h) {
            const PlanMetrics& m = WithoutGil([&]() -> const PlanMetrics& { return h.metrics(); });
            return MetricsDict(m);
          })
      .def("worker_metrics",
           [](PlanHandle& h) {
             const WorkerColumns& c =
                 WithoutGil([&]() -> const WorkerColumns& { return h.worker_columns(); });
             nb::object owner = nb::find(&h);
             nb::dict d;
             d["tokens"] = VectorView(c.tokens, owner);
             d["forward_flops"] = VectorView(c.forward_flops, owner);
             d["kv_blocks_sent"] = VectorView(c.kv_blocks_sent, owner);
             d["kv_blocks_received"] = VectorView(c.kv_blocks_received, owner);
             d["bytes_sent"] = VectorView(c.bytes_sent, owner);
             d["bytes_received"] = VectorView(c.bytes_received, owner);
             d["nic_bytes_sent"] = VectorView(c.nic_bytes_sent, owner);
             d["nic_bytes_received"] = VectorView(c.nic_bytes_received, owner);
             d["reshuffle_tokens_in"] = VectorView(c.reshuffle_tokens_in, owner);
             d["reshuffle_tokens_out"] = VectorView(c.reshuffle_tokens_out, owner);
             return d;
           })
      .def("summary", [](PlanHandle& h) {
        return WithoutGil(
            [&] { return FormatPlanSummary(h.plan(), h.metrics(), h.planning_seconds()); });
      });
}

// Where every token lives: the plan's token permutation and its inverse.
void BindTokenLayout(PlanClass& cls) {
  cls.def("token_order",
          [](PlanHandle& h) {
            return VectorView(WithoutGil([&]() -> const auto& { return h.order(); }), nb::find(&h));
          })
      .def("inverse_token_order",
           [](PlanHandle& h) {
             return VectorView(WithoutGil([&]() -> const auto& { return h.inverse(); }),
                               nb::find(&h));
           })
      .def("token_offsets",
           [](PlanHandle& h) {
             const TokenLayout& layout = WithoutGil([&]() -> const auto& { return h.layout(); });
             return VectorView(layout.worker_offsets(), nb::find(&h));
           })
      // Per worker or per token range: fresh arrays of O(their size), so one
      // rank never pays for the whole batch.
      .def("worker_token_order",
           [](PlanHandle& h, int64_t worker) {
             return OwnedArray(WithoutGil(
                 [&] { return h.layout().WorkerOrder(ToInt32("plan", "worker", worker)); }));
           })
      .def("planned_positions",
           [](PlanHandle& h, int64_t begin, int64_t end) {
             return OwnedArray(WithoutGil([&] { return h.layout().PlannedPositions(begin, end); }));
           })
      .def("placement", [](PlanHandle& h, int64_t begin, int64_t end) {
        TokenLayout::Placement p = WithoutGil([&] { return h.layout().Place(begin, end); });
        return nb::make_tuple(OwnedArray(std::move(p.owner)), OwnedArray(std::move(p.index)));
      });
}

// Making plans: the planner, parsing, and the tables fcp.plan is built from.
void BindPlanning(nb::module_& m) {
  m.def("plan", &MakePlanHandle, nb::arg("lengths"), nb::arg("mask"), nb::arg("window"),
        nb::arg("planner"), nb::arg("check"), nb::arg("options"), nb::arg("tune"),
        nb::arg("profile"));

  m.def("from_json", [](const std::string& text) {
    return WithoutGil([&] {
      return std::make_unique<PlanHandle>(ReadPlanJson(text), /*known_valid=*/false,
                                          /*planning_seconds=*/-1.0);
    });
  });

  m.def("planners", [] {
    nb::list out;
    for (const PlannerInfo& p : Planners()) out.append(nb::make_tuple(p.name, p.description));
    return out;
  });

  m.def("planner_options", &PlannerOptionRows);
}

void BindSimulate(nb::module_& m) {
  // The result crosses as SimResultJson's text, the exact JSON of
  // `fcp simulate --json --per-worker`, so both stay one definition.
  m.def(
      "simulate",
      [](PlanHandle& h, const std::string& profile, const std::string& reshuffle,
         const std::string& transfers, const std::string& network,
         std::optional<double> network_quantum, int64_t dkv_bytes, std::optional<std::string> trace,
         const std::string& partials) {
        return WithoutGil([&] {
          const HardwareProfile hardware = ResolveProfile(profile);
          SimConfig config;
          config.reshuffle = ParseReshuffleMode(reshuffle);
          config.transfers = ParseTransferMode(transfers);
          config.partial_return = ParsePartialReturn(partials);
          config.network = ParseNetworkModel(network);
          config.network_quantum = network_quantum;
          config.dkv_dtype_bytes = ToInt32("simulate", "dkv_bytes", dkv_bytes);
          config.record_trace = trace.has_value();
          h.EnsureValid();
          const SimResult result = Simulate(h.plan(), hardware, config);
          if (trace) WriteChromeTraceFile(result, *trace);
          return SimResultJson(result, /*per_worker=*/true);
        });
      },
      nb::arg("plan"), nb::arg("profile"), nb::arg("reshuffle"), nb::arg("transfers"),
      nb::arg("network"), nb::arg("network_quantum").none(), nb::arg("dkv_bytes"),
      nb::arg("trace").none(), nb::arg("partials"));
}

void BindWorkload(nb::module_& m) {
  m.def(
      "workload",
      [](const std::string& dist, int64_t workers, int64_t tokens_per_worker, int64_t max_len,
         int64_t min_len, double mu, double sigma, double pareto_alpha, int64_t pareto_scale,
         uint64_t seed) {
        WorkloadConfig config;
        config.dist = ParseLengthDistribution(dist);
        config.workers = ToInt32("workload", "workers", workers);
        config.tokens_per_worker = tokens_per_worker;
        config.max_len = max_len;
        config.min_len = min_len;
        config.lognormal_mu = mu;
        config.lognormal_sigma = sigma;
        config.pareto_alpha = pareto_alpha;
        config.pareto_scale = pareto_scale;
        config.seed = seed;
        return OwnedArray(WithoutGil([&] { return GenerateWorkload(config); }));
      },
      nb::arg("dist"), nb::arg("workers"), nb::arg("tokens_per_worker"), nb::arg("max_len"),
      nb::arg("min_len"), nb::arg("mu"), nb::arg("sigma"), nb::arg("pareto_alpha"),
      nb::arg("pareto_scale"), nb::arg("seed"));
}

}  // namespace
}  // namespace fcp::python

NB_MODULE(_fcp, m) {
  using namespace fcp;
  using namespace fcp::python;
  m.doc() = "Native core of the fcp Python module (use the 'fcp' package).";
  RegisterExceptions(m);
  PlanClass plan_class(m, "PlanHandle", "One plan, owned by C++; use fcp.Plan.");
  BindPlanHeader(plan_class);
  BindPlanArrays(plan_class);
  BindPlanMetrics(plan_class);
  BindTokenLayout(plan_class);
  BindPlanning(m);
  BindSimulate(m);
  RegisterProgramBindings(m, [](nb::handle h) -> const Plan& {
    PlanHandle& handle = nb::cast<PlanHandle&>(h);
    handle.EnsureValid();
    return handle.plan();
  });
  BindWorkload(m);
}
