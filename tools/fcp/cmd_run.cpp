// fcp run | make-inputs | check: execute a plan under mpirun, make random
// inputs for it, and compare outputs with the float64 reference.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "fcp/communicator.h"
#include "fcp/error.h"
#include "fcp/executor.h"
#include "fcp/file_io.h"
#include "fcp/npy.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "fcp/reference_attention.h"
#ifdef FCP_WITH_CUDA
#include "cuda_plugin.h"
#endif

namespace fcp::cli {
namespace {

std::string InPath(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / (std::string(name) + ".npy")).string();
}

// Where the ranks of `fcp run` write an output before rank 0 renames it into
// place: hidden, in the same folder, the same name on every rank.
std::string PartialPath(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / ("." + std::string(name) + ".npy.partial")).string();
}

constexpr const char* kRunOutputs[] = {"o", "lse", "dq", "dk", "dv"};

// Removes `path` if it is there; Error(kIo) naming the cause if it cannot.
void RemoveIfPresent(const std::string& path, const std::string& command) {
  std::error_code error;
  std::filesystem::remove(path, error);
  if (error)
    throw Error(ErrorCode::kIo, command + ": cannot remove '" + path + "': " + error.message());
}

// Creates `dir` (and its parents) for a command's outputs.
void CreateOutputDirectory(const std::string& dir, const std::string& command) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir))
    throw Error(ErrorCode::kIo, command + ": cannot create the output directory '" + dir + "'" +
                                    (error ? ": " + error.message() : ": a file is in the way"));
}

AttentionDims DimsOf(const Plan& plan) {
  return {plan.attention.heads_q, plan.attention.heads_kv, plan.attention.head_dim,
          1.0f / std::sqrt(static_cast<float>(plan.attention.head_dim))};
}

Plan ReadValidPlan(const std::string& path) {
  try {
    Plan plan = ReadPlanJsonFile(path);
    ValidatePlan(plan);
    return plan;
  } catch (const Error& e) {
    throw Error(e.code(), "plan file " + path + ": " + e.what());
  }
}

// Checks that an input file has shape [T, heads, head_dim]; returns its header.
NpyHeader CheckedHeader(const std::string& path, int64_t tokens, int32_t heads, int32_t head_dim) {
  const NpyHeader h = ReadNpyHeader(path);
  const std::vector<int64_t> want = {tokens, heads, head_dim};
  if (h.shape != want) {
    std::string got;
    for (int64_t d : h.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("input {}: shape ({}) does not match the plan's [T={}, {}, {}]", path,
                            got, tokens, heads, head_dim));
  }
  return h;
}

// Rows every rank reads from each input, the same on all ranks, whose hash
// is compared: ranks whose input files differ (another node's copy, a
// stale file) disagree on them. Costs kSampledRows small reads per file.
constexpr int64_t kSampledRows = 16;
std::string SampledRows(const std::string& path, const NpyHeader& h) {
  const int64_t rows = h.shape.empty() ? 0 : h.shape[0];
  std::string bytes;
  for (int64_t i = 0; i < kSampledRows && rows > 0; ++i) {
    const int64_t row = i * (rows - 1) / std::max<int64_t>(1, kSampledRows - 1);
    const std::vector<float> data = ReadNpyRows(path, h, row, row + 1);
    bytes.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  }
  return bytes;
}

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- fcp check --------------------------------------------------------------

struct CheckResult {
  std::vector<std::pair<std::string, double>> errors;  // name, relative error
  bool passed = true;
};

CheckResult CheckOutputs(const Plan& plan, const std::string& inputs, const std::string& outputs,
                         double tolerance) {
  const int64_t T = plan.total_tokens();
  const AttentionDims dims = DimsOf(plan);
  auto read = [&](const std::string& path, int32_t heads, int32_t width) {
    const NpyHeader h = ReadNpyHeader(path);
    const std::vector<int64_t> want =
        width > 0 ? std::vector<int64_t>{T, heads, width} : std::vector<int64_t>{T, heads};
    if (h.shape != want)
      throw Error(ErrorCode::kInvalidArgument, "check: " + path + " has the wrong shape");
    return ReadNpyRows(path, h, 0, T);
  };
  const int32_t hq = dims.heads_q, hkv = dims.heads_kv, hd = dims.head_dim;
  const auto q = read(InPath(inputs, "q"), hq, hd);
  const auto k = read(InPath(inputs, "k"), hkv, hd);
  const auto v = read(InPath(inputs, "v"), hkv, hd);
  const bool backward = std::filesystem::exists(InPath(outputs, "dq"));
  std::vector<float> d_o;
  if (backward) d_o = read(InPath(inputs, "do"), hq, hd);
  const ReferenceAttentionResult ref =
      ReferenceAttention(plan.sequences, plan.mask, dims, q.data(), k.data(), v.data(),
                         backward ? d_o.data() : nullptr);
  CheckResult result;
  auto compare = [&](const char* name, int32_t heads, int32_t width,
                     const std::vector<double>& want) {
    const auto got = read(InPath(outputs, name), heads, width);
    const double err = RelativeError(got.data(), want.data(), static_cast<int64_t>(want.size()));
    result.errors.push_back({name, err});
    if (!(err <= tolerance)) result.passed = false;
  };
  compare("o", hq, hd, ref.o);
  compare("lse", hq, 0, ref.lse);
  if (backward) {
    compare("dq", hq, hd, ref.dq);
    compare("dk", hkv, hd, ref.dk);
    compare("dv", hkv, hd, ref.dv);
  }
  return result;
}

void PrintCheck(const CheckResult& r, double tolerance) {
  std::string line;
  for (const auto& [name, err] : r.errors) line += fmt::format(" {} {:.2e}", name, err);
  fmt::print("check: relative error vs float64 reference:{} (tolerance {:.0e}): {}\n", line,
             tolerance, r.passed ? "matched the reference" : "MISMATCH");
}

// ---- fcp run ---------------------------------------------------------------

constexpr int32_t kMaxTileRows = 1 << 16;

struct RunOptions {
  std::string plan_path, inputs, out, trace_path;
  bool backward = false;
  bool check = false;
  double tolerance = 1e-4;
  double timeout_s = 60;
  int32_t q_tile = 64, kv_tile = 128;
  int32_t debug_exit_rank = -1, debug_exit_stage = 0;
  std::string device = "cpu";  // cpu | cuda
  bool in_process = false;     // workers are threads of this process (no mpirun)
};

// An error every rank raised together (see Agreed): all ranks are alive and
// about to exit, so they can wait for each other to print.
struct AgreedError : Error {
  using Error::Error;
};

// Runs `step` on every rank; if it throws on any rank, every rank throws the
// first failing rank's message, so the job fails with one clear error
// everywhere instead of some ranks waiting forever for the others.
void Agreed(Communicator& comm, const std::function<void()>& step) {
  std::string error;
  try {
    step();
  } catch (const std::exception& e) {
    error = e.what();
  }
  int64_t first = error.empty() ? comm.size() : comm.rank();
  comm.AllreduceMin(std::span(&first, 1));
  if (first == comm.size()) return;
  std::vector<char> text(1024, '\0');
  if (comm.rank() == first) std::strncpy(text.data(), error.c_str(), text.size() - 1);
  comm.Broadcast(text.data(), static_cast<int64_t>(text.size()), static_cast<int32_t>(first));
  throw AgreedError(
      ErrorCode::kInvalidArgument,
      fmt::format("run: rank {}: {} (reported by rank {})", comm.rank(), text.data(), first));
}

// All ranks hold equal values of `value`, or an error naming `what`.
void AgreeEqual(Communicator& comm, uint64_t value, const std::string& what) {
  int64_t lo = static_cast<int64_t>(value), hi = lo;
  comm.AllreduceMin(std::span(&lo, 1));
  comm.AllreduceMax(std::span(&hi, 1));
  if (lo != hi)
    throw AgreedError(ErrorCode::kInvalidArgument,
                      fmt::format("run: rank {}: the ranks disagree on {}", comm.rank(), what));
}

void WriteTrace(Communicator& comm, const Trace& trace, const std::string& path) {
  const std::string mine = trace.ChromeEvents(comm.rank());
  if (comm.rank() != 0) {
    int64_t size = static_cast<int64_t>(mine.size());
    comm.Wait(comm.Isend(&size, 8, 0, 90));
    comm.Wait(comm.Isend(mine.data(), size, 0, 91));
    return;
  }
  std::vector<std::string> all = {mine};
  for (int32_t r = 1; r < comm.size(); ++r) {
    int64_t size = 0;
    comm.Wait(comm.Irecv(&size, 8, r, 90));
    std::string text(static_cast<size_t>(size), '\0');
    comm.Wait(comm.Irecv(text.data(), size, r, 91));
    all.push_back(std::move(text));
  }
  WriteOutput(path, ChromeTraceDocument(all), "run: trace");
}

void RunOnRanks(Communicator& comm, const RunOptions& opt);

// Fails early, before any communication, when --device cuda cannot work.
void RequireDevice(const RunOptions& opt) {
  if (opt.device != "cuda") return;
#ifdef FCP_WITH_CUDA
  if (PluginCudaDeviceCount() == 0)
    throw Error(ErrorCode::kBackend,
                "run: --device cuda: no CUDA device (cudaGetDeviceCount found none)");
#else
  throw Error(ErrorCode::kBackend,
              "run: --device cuda: this fcp was built without CUDA (FCP_WITH_CUDA=OFF)");
#endif
}

// The kernel factory of --device: empty for the CPU kernel. Rank r computes
// on device r mod (device count), so one process per GPU under mpirun and
// all in-process workers on a one-GPU machine both work.
std::function<std::unique_ptr<AttentionKernel>(std::function<void()>)> KernelFactory(
    const RunOptions& opt, int32_t rank) {
  if (opt.device != "cuda") return {};
#ifdef FCP_WITH_CUDA
  return [rank](std::function<void()> progress) {
    CudaKernelOptions ko;
    ko.device = rank % PluginCudaDeviceCount();
    ko.progress = std::move(progress);
    return PluginMakeCudaKernel(ko);
  };
#else
  (void)rank;
  RequireDevice(opt);
  return {};
#endif
}

// All workers as threads of this process over the in-process communicator
// (no mpirun); the first failing rank's error is reported.
void RunInProcess(const RunOptions& opt) {
  const Plan plan = ReadValidPlan(opt.plan_path);
  auto comms = MakeLocalCommunicators(plan.workers, {opt.timeout_s});
  std::vector<std::exception_ptr> errors(comms.size());
  // The workers start together once all threads exist: if the system cannot
  // create one (a thread limit, memory), none has begun to wait on a peer
  // that will never come, and all are told to return.
  std::mutex mutex;
  std::condition_variable started;
  enum class Start { kWaiting, kGo, kCancel } start = Start::kWaiting;
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  std::string creation_error;
  for (size_t r = 0; r < comms.size() && creation_error.empty(); ++r) {
    try {
      threads.emplace_back([&, r] {
        {
          std::unique_lock lock(mutex);
          started.wait(lock, [&] { return start != Start::kWaiting; });
          if (start == Start::kCancel) return;
        }
        try {
          RunOnRanks(*comms[r], opt);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    } catch (const std::system_error& e) {
      creation_error = fmt::format("run --in-process: cannot create worker thread {} of {}: {}", r,
                                   comms.size(), e.what());
    }
  }
  {
    std::lock_guard lock(mutex);
    start = creation_error.empty() ? Start::kGo : Start::kCancel;
  }
  started.notify_all();
  for (auto& t : threads) t.join();
  if (!creation_error.empty()) throw Error(ErrorCode::kBackend, creation_error);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void Run(const RunOptions& opt) {
  RequireDevice(opt);
  if (opt.in_process) {
    RunInProcess(opt);
    return;
  }
  int argc = 0;
  char** argv = nullptr;
  auto comm = MakeMpiCommunicator(&argc, &argv, {opt.timeout_s});
  try {
    RunOnRanks(*comm, opt);
  } catch (const AgreedError& e) {
    // Print while every rank is still alive: once one rank exits non-zero,
    // mpirun kills the others, possibly before they have said anything.
    std::fprintf(stderr, "fcp: %s\n", e.what());
    std::fflush(stderr);
    try {
      comm->Barrier();
    } catch (const Error&) {
      // A peer is gone; exit anyway.
    }
    throw ReportedError{1};
  }
}

// The plan every rank read, the same on all and for as many workers as ranks.
Plan ReadAgreedPlan(Communicator& comm, const RunOptions& opt) {
  Plan plan;
  Agreed(comm, [&] { plan = ReadValidPlan(opt.plan_path); });
  AgreeEqual(comm, Fnv1a(WritePlanJson(plan)), "the plan (hash of its canonical JSON differs)");
  Agreed(comm, [&] {
    if (plan.workers != comm.size())
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("plan {} is for {} workers but mpirun started {} ranks",
                              opt.plan_path, plan.workers, comm.size()));
  });
  return plan;
}

// The dataloader rows [row0, row1) of this rank's inputs, checked to have the
// same shapes and (sampled) data on every rank; the output folder made and
// emptied of an earlier run's outputs.
RankInputs ReadAgreedInputs(Communicator& comm, const RunOptions& opt, const Plan& plan,
                            int64_t row0, int64_t row1) {
  const int64_t T = plan.total_tokens();
  const int32_t hq = plan.attention.heads_q, hkv = plan.attention.heads_kv;
  RankInputs inputs;
  std::string shapes, samples;
  Agreed(comm, [&] {
    auto load = [&](const char* name, int32_t heads) {
      const std::string path = InPath(opt.inputs, name);
      const NpyHeader h = CheckedHeader(path, T, heads, plan.attention.head_dim);
      shapes += fmt::format("{}:{},{},{};", name, h.shape[0], h.shape[1], h.shape[2]);
      samples += SampledRows(path, h);
      return ReadNpyRows(path, h, row0, row1);
    };
    inputs.q = load("q", hq);
    inputs.k = load("k", hkv);
    inputs.v = load("v", hkv);
    if (opt.backward) inputs.d_o = load("do", hq);
    CreateOutputDirectory(opt.out, "run");
    // No output of an earlier run survives this one, failed or not: `fcp
    // check` must never read a stale dq next to a new o.
    if (comm.rank() == 0)
      for (const char* name : kRunOutputs) RemoveIfPresent(InPath(opt.out, name), "run");
  });
  AgreeEqual(comm, Fnv1a(shapes), "the input shapes");
  AgreeEqual(comm, Fnv1a(samples),
             "the input data (a hash of " + std::to_string(kSampledRows) +
                 " rows of each input differs: the ranks read different files)");
  return inputs;
}

ExecutorOptions ExecutorOptionsFor(const RunOptions& opt, const Plan& plan, int32_t rank) {
  ExecutorOptions eo;
  eo.backward = opt.backward;
  // A tile never needs more rows than a block holds (the kernel's scratch is
  // sized by the tiles).
  eo.kernel.q_tile_rows = static_cast<int32_t>(std::min<int64_t>(opt.q_tile, plan.block_size));
  eo.kernel.kv_tile_rows = static_cast<int32_t>(std::min<int64_t>(opt.kv_tile, plan.block_size));
  if (opt.debug_exit_rank == rank) {
    // Fault injection for the liveness tests: die without a word (no
    // MPI_Finalize, no flush), as a crashed process would.
    eo.before_forward_stage = [stage = opt.debug_exit_stage](int32_t t) {
      if (t == stage) std::_Exit(3);
    };
  }
  eo.make_kernel = KernelFactory(opt, rank);
  return eo;
}

// Writes this rank's rows [row0, row1) of every output. The outputs appear
// complete or not at all: rank 0 sizes hidden partial files, every rank
// fills its rows, and rank 0 renames them into place once every rank has
// written, or removes them when any rank failed.
void WriteAgreedOutputs(Communicator& comm, const RunOptions& opt, const Plan& plan,
                        const RankOutputs& outputs, int64_t row0, int64_t row1) {
  const int64_t T = plan.total_tokens();
  const int32_t hq = plan.attention.heads_q, hkv = plan.attention.heads_kv;
  const int32_t hd = plan.attention.head_dim;
  const int32_t me = comm.rank();
  struct Out {
    const char* name;
    std::vector<int64_t> shape;
    const std::vector<float>* data;
  };
  std::vector<Out> outs = {{"o", {T, hq, hd}, &outputs.o}, {"lse", {T, hq}, &outputs.lse}};
  if (opt.backward) {
    outs.push_back({"dq", {T, hq, hd}, &outputs.dq});
    outs.push_back({"dk", {T, hkv, hd}, &outputs.dk});
    outs.push_back({"dv", {T, hkv, hd}, &outputs.dv});
  }
  try {
    Agreed(comm, [&] {
      if (me == 0)
        for (const Out& o : outs) CreateNpy(PartialPath(opt.out, o.name), o.shape);
    });
    Agreed(comm, [&] {
      for (const Out& o : outs)
        WriteNpyRows(PartialPath(opt.out, o.name), o.shape, row0, row1 - row0, o.data->data());
    });
    Agreed(comm, [&] {
      if (me != 0) return;
      for (const Out& o : outs) {
        std::error_code error;
        std::filesystem::rename(PartialPath(opt.out, o.name), InPath(opt.out, o.name), error);
        if (error)
          throw Error(ErrorCode::kIo, "run: cannot rename the output into '" +
                                          InPath(opt.out, o.name) + "': " + error.message());
      }
    });
  } catch (...) {
    if (me == 0)
      for (const Out& o : outs) {
        std::error_code ignored;  // the error being raised says what went wrong
        std::filesystem::remove(PartialPath(opt.out, o.name), ignored);
        std::filesystem::remove(InPath(opt.out, o.name), ignored);
      }
    throw;
  }
}

// Rank 0 prints the run's times over all ranks (microseconds summed, peaks maxed).
void PrintRunSummary(Communicator& comm, const RunOptions& opt, const Plan& plan,
                     const ExecutorStats& stats, double total_s) {
  const auto us = [](double s) { return static_cast<int64_t>(s * 1e6); };
  std::vector<int64_t> sums = {
      us(stats.compute_s),       us(stats.transfer_s),       us(stats.exposed_wait_s),
      us(stats.reshuffle_s),     us(stats.reshuffle_wait_s), stats.bytes_sent,
      us(stats.partials_wait_s), stats.partials_sent_early,  stats.carried_calls};
  std::vector<int64_t> maxes = {us(total_s), us(stats.forward_s), us(stats.backward_s),
                                stats.peak_received_blocks};
  comm.AllreduceMax(maxes);
  comm.AllreduceSum(sums);
  if (comm.rank() != 0) return;
  const double transfer = sums[1] * 1e-6, exposed = sums[2] * 1e-6;
  fmt::print(
      "run: {} ranks{} on {}, {} tokens, {} blocks, mask {}, {}: {:.3f} s (forward {:.3f} s{})\n",
      comm.size(), opt.in_process ? " (in-process)" : "", opt.device, plan.total_tokens(),
      plan.blocks.size(), MaskKindName(plan.mask.kind),
      opt.backward ? "forward+backward" : "forward", maxes[0] * 1e-6, maxes[1] * 1e-6,
      opt.backward ? fmt::format(", backward {:.3f} s", maxes[2] * 1e-6) : std::string());
  size_t partials = 0;
  for (const BackwardStage& stage : plan.backward) partials += stage.send_dkv.size();
  fmt::print(
      "  compute {:.3f} s, stage K/V transfers {:.3f} s of which exposed {:.3f} s: {:.1f}% hidden "
      "behind compute (summed over ranks); waiting for dK/dV partials {:.3f} s{}; {:.1f} MiB "
      "sent\n",
      sums[0] * 1e-6, transfer, exposed,
      transfer > 0 ? 100.0 * (1 - std::min(exposed, transfer) / transfer) : 100.0, sums[6] * 1e-6,
      opt.backward
          ? fmt::format(" ({} of {} sent during the stage before theirs)", sums[7], partials)
          : std::string(),
      sums[5] / 1048576.0);
  fmt::print(
      "  reshuffles {:.3f} s of which exposed {:.3f} s; calls carried past their stage {}; peak "
      "received K/V blocks held {} (coalesce {})\n",
      sums[3] * 1e-6, sums[4] * 1e-6, sums[8], maxes[3], plan.coalesce);
  fmt::print("  outputs written to {}\n", opt.out);
  std::fflush(stdout);
}

// One rank of `fcp run`: agree on the plan and inputs, execute, write the
// outputs (and trace), print the summary, check on rank 0.
void RunOnRanks(Communicator& comm, const RunOptions& opt) {
  SetBlasThreads(1);  // one rank per core
  const int32_t me = comm.rank();
  const Plan plan = ReadAgreedPlan(comm, opt);
  const int64_t T = plan.total_tokens();
  const int64_t row0 = DataloaderBegin(T, plan.workers, me);
  const int64_t row1 = DataloaderBegin(T, plan.workers, me + 1);
  const RankInputs inputs = ReadAgreedInputs(comm, opt, plan, row0, row1);
  const ExecutorOptions eo = ExecutorOptionsFor(opt, plan, me);
  Trace trace;
  ExecutorStats stats;
  RankOutputs outputs;
  comm.Barrier();
  trace.ResetOrigin();
  try {
    outputs = ExecutePlan(plan, comm, inputs, eo, &trace, &stats);
  } catch (const std::exception& e) {
    // Peers may be blocked in a transfer with this rank: no agreement is
    // possible any more, so take the whole job down.
    std::fprintf(stderr, "fcp: run: rank %d: %s\n", me, e.what());
    std::fflush(stderr);
    comm.Abort(1);
  }
  const double total_s = trace.NowUs() * 1e-6;
  WriteAgreedOutputs(comm, opt, plan, outputs, row0, row1);
  if (!opt.trace_path.empty()) Agreed(comm, [&] { WriteTrace(comm, trace, opt.trace_path); });
  PrintRunSummary(comm, opt, plan, stats, total_s);
  // Only rank 0 checks (the float64 reference takes a while on big batches,
  // longer than peers should wait in a bounded call); its exit code carries
  // the verdict, and mpirun returns non-zero when any rank does.
  if (opt.check && me == 0) {
    const CheckResult r = CheckOutputs(plan, opt.inputs, opt.out, opt.tolerance);
    PrintCheck(r, opt.tolerance);
    std::fflush(stdout);
    if (!r.passed) throw Error(ErrorCode::kInternal, "run: outputs do not match the reference");
  }
}

// ---- fcp make-inputs ---------------------------------------------------------

void MakeInputs(const std::string& plan_path, const std::string& out, uint64_t seed) {
  // Validated: the array shapes come from the plan (negative lengths, zero heads).
  const Plan plan = ReadValidPlan(plan_path);
  const int64_t T = plan.total_tokens();
  const int32_t hq = plan.attention.heads_q, hkv = plan.attention.heads_kv,
                hd = plan.attention.head_dim;
  CreateOutputDirectory(out, "make-inputs");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto write = [&](const char* name, int32_t heads) {
    std::vector<float> x(static_cast<size_t>(T * heads * hd));
    for (float& e : x) e = normal(rng);
    WriteNpy(InPath(out, name), {T, heads, hd}, x.data());
  };
  write("q", hq);
  write("k", hkv);
  write("v", hkv);
  write("do", hq);
  fmt::print(
      "make-inputs: wrote q, k, v, do for {} tokens ({} query heads, {} key/value heads, head dim {}) to {}\n",
      T, hq, hkv, hd, out);
}

}  // namespace

void AddRunCommands(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "Execute a plan under mpirun (one rank per worker)");
  run->add_option("--plan", opt->plan_path, "Plan file")->required();
  run->add_option("--inputs", opt->inputs, "Directory with q.npy, k.npy, v.npy (and do.npy)")
      ->required();
  run->add_option("--out", opt->out, "Directory for o.npy, lse.npy (and dq, dk, dv)")->required();
  run->add_flag("--backward", opt->backward, "Also run the backward pass");
  run->add_option("--trace", opt->trace_path, "Write a Chrome trace of real timings per rank");
  run->add_flag("--check", opt->check, "Compare the outputs with the float64 reference (rank 0)");
  run->add_option("--tolerance", opt->tolerance, "Relative error bound of --check")
      ->check(kPositiveFinite)
      ->capture_default_str();
  run->add_option("--timeout-s", opt->timeout_s, "Give up on a silent peer after this long")
      ->check(kPositiveFinite)
      ->capture_default_str();
  // Bounded so the kernel's scratch (tile x tile floats) cannot overflow;
  // above the plan's block size a tile is cut to it.
  run->add_option("--q-tile", opt->q_tile, "Query rows per kernel tile (at most the block size)")
      ->check(CLI::Range(1, kMaxTileRows))
      ->capture_default_str();
  run->add_option("--kv-tile", opt->kv_tile, "Key rows per kernel tile (at most the block size)")
      ->check(CLI::Range(1, kMaxTileRows))
      ->capture_default_str();
  run->add_option("--device", opt->device,
                  "Compute on the CPU or on CUDA GPUs (rank r on GPU r mod count)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  run->add_flag(
      "--in-process", opt->in_process,
      "Run the plan's workers as threads of this process, without mpirun (they share the GPU)");
  run->add_option("--debug-exit-rank", opt->debug_exit_rank,
                  "Testing: this rank dies at --debug-exit-stage")
      ->group("");
  run->add_option("--debug-exit-stage", opt->debug_exit_stage,
                  "Testing: forward stage where it dies")
      ->group("");
  run->callback([opt] { Run(*opt); });

  auto plan_path = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto seed = std::make_shared<uint64_t>(1);
  CLI::App* make =
      app.add_subcommand("make-inputs", "Write random q, k, v, do .npy inputs for a plan");
  make->add_option("--plan", *plan_path, "Plan file")->required();
  make->add_option("--out", *out, "Directory to write")->required();
  make->add_option("--seed", *seed, "Random seed")->check(kNotNegative)->capture_default_str();
  make->callback([plan_path, out, seed] { MakeInputs(*plan_path, *out, *seed); });

  auto check_plan = std::make_shared<std::string>();
  auto check_inputs = std::make_shared<std::string>();
  auto check_outputs = std::make_shared<std::string>();
  auto tolerance = std::make_shared<double>(1e-4);
  CLI::App* check = app.add_subcommand("check", "Compare run outputs with the float64 reference");
  check->add_option("--plan", *check_plan, "Plan file")->required();
  check->add_option("--inputs", *check_inputs, "Input directory")->required();
  check->add_option("--outputs", *check_outputs, "Output directory of fcp run")->required();
  check->add_option("--tolerance", *tolerance, "Relative error bound")
      ->check(kPositiveFinite)
      ->capture_default_str();
  check->callback([=] {
    const Plan plan = ReadValidPlan(*check_plan);
    const CheckResult r = CheckOutputs(plan, *check_inputs, *check_outputs, *tolerance);
    PrintCheck(r, *tolerance);
    if (!r.passed) throw Error(ErrorCode::kInternal, "check: outputs do not match the reference");
  });
}

}  // namespace fcp::cli
