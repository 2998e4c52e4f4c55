// In-process backend of fcp::Communicator: one endpoint per thread, a
// shared hub of FIFO mailboxes keyed by (src, dst, tag), so matching follows
// the same non-overtaking order as MPI. Collectives are rounds of a
// generation counter: each rank deposits its contribution, the last one
// combines, everyone picks up the result.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "fcp/communicator.h"
#include "fcp/error.h"
#include "pending_request.h"

namespace fcp {
namespace {

// Tags the alltoallv uses internally; user tags are expected to be small.
constexpr int32_t kAlltoallvTag = -1000;

struct Hub {
  explicit Hub(int32_t n, double timeout) : ranks(n), timeout_s(timeout), slots(n) {}
  const int32_t ranks;
  const double timeout_s;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int32_t, int32_t, int32_t>, std::deque<std::vector<char>>>
      mail;  // (src, dst, tag)
  // Collective rounds.
  int64_t generation = 0;
  int32_t arrived = 0;
  std::vector<std::vector<char>> slots;
  std::vector<std::vector<char>> published;  // contributions of the last completed round
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<Hub> hub, int32_t rank) : hub_(std::move(hub)), rank_(rank) {}

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return hub_->ranks; }

  Request Isend(const void* data, int64_t bytes, int32_t dst, int32_t tag) override {
    CheckPeer(dst);
    {
      std::lock_guard lock(hub_->mu);
      const char* p = static_cast<const char*>(data);
      hub_->mail[{rank_, dst, tag}].emplace_back(p, p + bytes);
    }
    hub_->cv.notify_all();
    return NewRequest({});  // eager: complete at once
  }

  Request Irecv(void* data, int64_t bytes, int32_t src, int32_t tag) override {
    CheckPeer(src);
    return NewRequest({{src, tag, static_cast<char*>(data), bytes}});
  }

  Request Ialltoallv(const void* send, std::span<const int64_t> send_counts, void* recv,
                     std::span<const int64_t> recv_counts, int64_t elem_bytes) override {
    if (static_cast<int32_t>(send_counts.size()) != size() ||
        static_cast<int32_t>(recv_counts.size()) != size())
      throw Error(ErrorCode::kInvalidArgument,
                  "local communicator: alltoallv counts need one entry per rank");
    const char* s = static_cast<const char*>(send);
    for (int32_t p = 0; p < size(); ++p) {
      Isend(s, send_counts[p] * elem_bytes, p, kAlltoallvTag);
      s += send_counts[p] * elem_bytes;
    }
    std::vector<Pending> parts;
    char* r = static_cast<char*>(recv);
    for (int32_t p = 0; p < size(); ++p) {
      parts.push_back({p, kAlltoallvTag, r, recv_counts[p] * elem_bytes});
      r += recv_counts[p] * elem_bytes;
    }
    return NewRequest(std::move(parts));
  }

  bool Test(Request request) override {
    std::lock_guard lock(hub_->mu);
    return TestLocked(request);
  }

  void Wait(Request request) override {
    std::unique_lock lock(hub_->mu);
    const auto deadline = Deadline();
    while (!TestLocked(request))
      if (hub_->cv.wait_until(lock, deadline) == std::cv_status::timeout && !TestLocked(request))
        throw Error(ErrorCode::kBackend,
                    "local: rank " + std::to_string(rank_) + ": no progress for " +
                        std::to_string(hub_->timeout_s) + " s waiting for a peer");
  }

  void AllreduceMin(std::span<int64_t> values) override {
    Reduce(values, [](int64_t a, int64_t b) { return std::min(a, b); });
  }
  void AllreduceMax(std::span<int64_t> values) override {
    Reduce(values, [](int64_t a, int64_t b) { return std::max(a, b); });
  }
  void AllreduceSum(std::span<int64_t> values) override {
    Reduce(values, [](int64_t a, int64_t b) { return a + b; });
  }

  void Broadcast(void* data, int64_t bytes, int32_t root) override {
    std::vector<char> mine(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    const std::vector<std::vector<char>> all = Gather(std::move(mine));
    if (root < 0 || root >= static_cast<int32_t>(all.size()))
      throw Error(ErrorCode::kInvalidArgument, "local: Broadcast root " + std::to_string(root) +
                                                   " is not a rank (0.." +
                                                   std::to_string(all.size() - 1) + ")");
    std::memcpy(data, all[static_cast<size_t>(root)].data(), static_cast<size_t>(bytes));
  }

  void Barrier() override { Gather({}); }

  [[noreturn]] void Abort(int exit_code) override {
    throw Error(ErrorCode::kBackend, "local: rank " + std::to_string(rank_) +
                                         " aborted with code " + std::to_string(exit_code));
  }

 private:
  struct Pending {
    int32_t src;
    int32_t tag;
    char* data;
    int64_t bytes;
  };
  struct Req {
    int64_t unmatched = 0;  // receive parts still waiting for a message
    bool busy = false;
  };
  struct Posted {
    Request request;
    Pending part;
  };

  void CheckPeer(int32_t peer) const {
    if (peer < 0 || peer >= size())
      throw Error(ErrorCode::kInvalidArgument,
                  "local communicator: no rank " + std::to_string(peer));
  }

  std::chrono::steady_clock::time_point Deadline() const {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(hub_->timeout_s));
  }

  Request NewRequest(std::vector<Pending> parts) {
    Request r;
    if (!free_.empty()) {
      r = free_.back();
      free_.pop_back();
    } else {
      r = static_cast<Request>(reqs_.size());
      reqs_.emplace_back();
    }
    reqs_[r] = {static_cast<int64_t>(parts.size()), true};
    for (const Pending& p : parts) posted_.push_back({r, p});
    return r;
  }

  // Matches posted receives with arrived messages, oldest receive first,
  // so two receives from one source with one tag match in posting order
  // (MPI's non-overtaking rule). hub_->mu held.
  void MatchLocked() {
    for (auto it = posted_.begin(); it != posted_.end();) {
      auto box = hub_->mail.find({it->part.src, rank_, it->part.tag});
      if (box == hub_->mail.end() || box->second.empty()) {
        ++it;
        continue;
      }
      std::vector<char>& msg = box->second.front();
      if (static_cast<int64_t>(msg.size()) > it->part.bytes)
        throw Error(ErrorCode::kBackend, "local: message of " + std::to_string(msg.size()) +
                                             " bytes truncated to " +
                                             std::to_string(it->part.bytes));
      std::copy(msg.begin(), msg.end(), it->part.data);
      box->second.pop_front();
      --reqs_[it->request].unmatched;
      it = posted_.erase(it);
    }
  }

  bool TestLocked(Request request) {
    Req& req = detail::PendingRequest(reqs_, request, "local");
    MatchLocked();
    if (req.unmatched > 0) return false;
    req.busy = false;
    free_.push_back(request);
    return true;
  }

  // Every rank contributes `mine`; returns all contributions by rank.
  std::vector<std::vector<char>> Gather(std::vector<char> mine) {
    std::unique_lock lock(hub_->mu);
    const int64_t gen = hub_->generation;
    hub_->slots[rank_] = std::move(mine);
    if (++hub_->arrived == hub_->ranks) {
      // Last to arrive publishes the round.
      round_result_ = hub_->slots;
      hub_->published = round_result_;
      hub_->arrived = 0;
      ++hub_->generation;
      hub_->cv.notify_all();
      return round_result_;
    }
    const auto deadline = Deadline();
    while (hub_->generation == gen)
      if (hub_->cv.wait_until(lock, deadline) == std::cv_status::timeout && hub_->generation == gen)
        throw Error(ErrorCode::kBackend,
                    "local: rank " + std::to_string(rank_) + ": no progress for " +
                        std::to_string(hub_->timeout_s) + " s in a collective");
    return hub_->published;
  }

  void Reduce(std::span<int64_t> values, const std::function<int64_t(int64_t, int64_t)>& op) {
    std::vector<char> mine(values.size() * 8);
    std::memcpy(mine.data(), values.data(), mine.size());
    const auto all = Gather(std::move(mine));
    for (size_t i = 0; i < values.size(); ++i) {
      int64_t acc = 0;
      for (size_t r = 0; r < all.size(); ++r) {
        int64_t x = 0;
        std::memcpy(&x, all[r].data() + 8 * i, 8);
        acc = r == 0 ? x : op(acc, x);
      }
      values[i] = acc;
    }
  }

  std::shared_ptr<Hub> hub_;
  int32_t rank_;
  std::vector<Req> reqs_;
  std::vector<Request> free_;
  std::list<Posted> posted_;  // unmatched receive parts, in posting order
  std::vector<std::vector<char>> round_result_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(
    int32_t ranks, const CommunicatorOptions& options) {
  if (ranks < 1) throw Error(ErrorCode::kInvalidArgument, "local communicator: ranks must be >= 1");
  if (!(options.timeout_s > 0))
    throw Error(ErrorCode::kInvalidArgument, "local communicator: timeout_s must be > 0");
  auto hub = std::make_shared<Hub>(ranks, options.timeout_s);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int32_t r = 0; r < ranks; ++r) out.push_back(std::make_unique<LocalCommunicator>(hub, r));
  return out;
}

}  // namespace fcp
