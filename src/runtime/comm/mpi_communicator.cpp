// MPI backend of fcp::Communicator. Every wait is a polling loop over
// MPI_Test with a deadline, so a dead peer turns into an Error after
// timeout_s instead of a hang (OpenMPI's default MPI_Wait never gives up).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "fcp/communicator.h"
#include "fcp/error.h"
#include "pending_request.h"

namespace fcp {
namespace {

void Check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(ErrorCode::kBackend,
              std::string("mpi: ") + op + " failed: " + std::string(text, len));
}

int ToInt(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw Error(ErrorCode::kBackend, std::string("mpi: ") + what + " " + std::to_string(value) +
                                         " does not fit an MPI count");
  return static_cast<int>(value);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int* argc, char*** argv, const CommunicatorOptions& options)
      : timeout_s_(options.timeout_s) {
    if (!(options.timeout_s > 0))
      throw Error(ErrorCode::kInvalidArgument, "mpi communicator: timeout_s must be > 0");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      Check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_mpi_ = true;
    }
    Check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  ~MpiCommunicator() override {
    for (Slot& s : slots_)
      if (s.type != MPI_DATATYPE_NULL) MPI_Type_free(&s.type);
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  Request Isend(const void* data, int64_t bytes, int32_t dst, int32_t tag) override {
    const Request r = NewSlot();
    Check(MPI_Isend(data, ToInt(bytes, "message bytes"), MPI_BYTE, dst, tag, comm_, &slots_[r].req),
          "MPI_Isend");
    return r;
  }

  Request Irecv(void* data, int64_t bytes, int32_t src, int32_t tag) override {
    const Request r = NewSlot();
    Check(MPI_Irecv(data, ToInt(bytes, "message bytes"), MPI_BYTE, src, tag, comm_, &slots_[r].req),
          "MPI_Irecv");
    return r;
  }

  Request Ialltoallv(const void* send, std::span<const int64_t> send_counts, void* recv,
                     std::span<const int64_t> recv_counts, int64_t elem_bytes) override {
    if (static_cast<int32_t>(send_counts.size()) != size_ ||
        static_cast<int32_t>(recv_counts.size()) != size_)
      throw Error(ErrorCode::kInvalidArgument, "mpi: alltoallv counts need one entry per rank");
    const Request r = NewSlot();
    Slot& s = slots_[r];
    Check(MPI_Type_contiguous(ToInt(elem_bytes, "element bytes"), MPI_BYTE, &s.type),
          "MPI_Type_contiguous");
    Check(MPI_Type_commit(&s.type), "MPI_Type_commit");
    // The count arrays must outlive the operation: they live in the slot.
    s.counts.assign(4 * static_cast<size_t>(size_), 0);
    int64_t send_off = 0, recv_off = 0;
    for (int32_t p = 0; p < size_; ++p) {
      s.counts[p] = ToInt(send_counts[p], "alltoallv count");
      s.counts[size_ + p] = ToInt(send_off, "alltoallv displacement");
      s.counts[2 * size_ + p] = ToInt(recv_counts[p], "alltoallv count");
      s.counts[3 * size_ + p] = ToInt(recv_off, "alltoallv displacement");
      send_off += send_counts[p];
      recv_off += recv_counts[p];
    }
    Check(MPI_Ialltoallv(send, s.counts.data(), s.counts.data() + size_, s.type, recv,
                         s.counts.data() + 2 * size_, s.counts.data() + 3 * size_, s.type, comm_,
                         &s.req),
          "MPI_Ialltoallv");
    return r;
  }

  bool Test(Request request) override {
    Slot& s = detail::PendingRequest(slots_, request, "mpi");
    int done = 0;
    Check(MPI_Test(&s.req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) Release(request);
    return done != 0;
  }

  void Wait(Request request) override {
    const auto deadline = Deadline();
    int spins = 0;
    while (!Test(request)) {
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(ErrorCode::kBackend, "mpi: rank " + std::to_string(rank_) +
                                             ": no progress for " + std::to_string(timeout_s_) +
                                             " s waiting for a peer (did a rank die?)");
      // Spin briefly for latency, then yield the core to the peer ranks.
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void AllreduceMin(std::span<int64_t> values) override { Allreduce(values, MPI_MIN); }
  void AllreduceMax(std::span<int64_t> values) override { Allreduce(values, MPI_MAX); }
  void AllreduceSum(std::span<int64_t> values) override { Allreduce(values, MPI_SUM); }

  void Broadcast(void* data, int64_t bytes, int32_t root) override {
    const Request r = NewSlot();
    Check(MPI_Ibcast(data, ToInt(bytes, "broadcast bytes"), MPI_BYTE, root, comm_, &slots_[r].req),
          "MPI_Ibcast");
    Wait(r);
  }

  void Barrier() override {
    const Request r = NewSlot();
    Check(MPI_Ibarrier(comm_, &slots_[r].req), "MPI_Ibarrier");
    Wait(r);
  }

  [[noreturn]] void Abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this satisfies [[noreturn]]
  }

 private:
  struct Slot {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    std::vector<int> counts;
    bool busy = false;
  };

  std::chrono::steady_clock::time_point Deadline() const {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(timeout_s_));
  }

  void Allreduce(std::span<int64_t> values, MPI_Op op) {
    const Request r = NewSlot();
    Check(MPI_Iallreduce(MPI_IN_PLACE, values.data(),
                         ToInt(static_cast<int64_t>(values.size()), "allreduce count"), MPI_INT64_T,
                         op, comm_, &slots_[r].req),
          "MPI_Iallreduce");
    Wait(r);
  }

  Request NewSlot() {
    if (!free_.empty()) {
      const Request r = free_.back();
      free_.pop_back();
      slots_[r].busy = true;
      return r;
    }
    slots_.push_back({});
    slots_.back().busy = true;
    return static_cast<Request>(slots_.size() - 1);
  }

  void Release(Request r) {
    Slot& s = slots_[r];
    if (s.type != MPI_DATATYPE_NULL) MPI_Type_free(&s.type);
    s.req = MPI_REQUEST_NULL;
    s.counts.clear();
    s.busy = false;
    free_.push_back(r);
  }

  double timeout_s_;
  bool owns_mpi_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Slot> slots_;
  std::vector<Request> free_;
};

}  // namespace

std::unique_ptr<Communicator> MakeMpiCommunicator(int* argc, char*** argv,
                                                  const CommunicatorOptions& options) {
  return std::make_unique<MpiCommunicator>(argc, argv, options);
}

}  // namespace fcp
