// fcp/communicator.h — the few communication operations the runtime needs,
// behind an interface small enough for an NCCL backend to implement later.
//
// Point-to-point sends and receives of byte buffers and the all-to-all-v are
// non-blocking: they return a Request that Test() polls and Wait() completes.
// A buffer passed to Isend/Irecv/Ialltoallv must stay alive and untouched
// until its request completes. Messages between the same two ranks with the
// same tag are matched in the order they were posted (MPI's non-overtaking
// rule), which the executor relies on: both sides walk the plan in the same
// order. Small blocking collectives (AllreduceMin/Max, Broadcast) serve the
// start-up agreement on plan and inputs.
//
// Liveness: every blocking call gives up after `timeout_s` seconds (set at
// construction) and throws Error(kBackend); a rank that dies therefore makes
// the others fail within a bounded time instead of hanging, and Abort() then
// takes the whole job down.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fcp {

class Communicator {
 public:
  using Request = int64_t;  // opaque handle, valid until it completes

  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  virtual Request Isend(const void* data, int64_t bytes, int32_t dst, int32_t tag) = 0;
  virtual Request Irecv(void* data, int64_t bytes, int32_t src, int32_t tag) = 0;
  // Elements of `elem_bytes` bytes: send_counts[r] go to rank r, taken in
  // rank order from `send`; recv_counts[r] arrive from rank r into `recv` in
  // rank order. Counts have size() entries.
  virtual Request Ialltoallv(const void* send, std::span<const int64_t> send_counts, void* recv,
                             std::span<const int64_t> recv_counts, int64_t elem_bytes) = 0;

  // True (and the handle released) when the request has completed.
  virtual bool Test(Request request) = 0;
  // Blocks until complete; Error(kBackend) after the timeout.
  virtual void Wait(Request request) = 0;

  // Element-wise min / max / sum over all ranks, in place.
  virtual void AllreduceMin(std::span<int64_t> values) = 0;
  virtual void AllreduceMax(std::span<int64_t> values) = 0;
  virtual void AllreduceSum(std::span<int64_t> values) = 0;
  // Copies `bytes` bytes from `root`'s buffer into everyone's.
  virtual void Broadcast(void* data, int64_t bytes, int32_t root) = 0;
  virtual void Barrier() = 0;

  // Ends every process of the job with `exit_code`; does not return.
  [[noreturn]] virtual void Abort(int exit_code) = 0;
};

struct CommunicatorOptions {
  double timeout_s = 120;  // bound on every blocking wait (> 0)
};

// An in-process backend: `ranks` communicators for `ranks` threads of one
// process, exchanging messages through shared memory. Sends copy eagerly
// and complete at once; receives and collectives complete when the peers'
// data is there. Same matching rules and deadlines as the MPI backend, so
// the executor runs unchanged on threads in unit tests (and under TSan).
// Abort() throws Error(kBackend) instead of ending the process.
std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(
    int32_t ranks, const CommunicatorOptions& options = {});

// The MPI backend. Initialises MPI (MPI_THREAD_FUNNELED) on construction when
// nobody has, and finalises it on destruction if it initialised it; uses a
// duplicate of MPI_COMM_WORLD with errors returned (turned into
// Error(kBackend)) rather than fatal.
std::unique_ptr<Communicator> MakeMpiCommunicator(int* argc, char*** argv,
                                                  const CommunicatorOptions& options = {});

}  // namespace fcp
