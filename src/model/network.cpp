#include "network.h"

#include <algorithm>
#include <bit>
#include <functional>

namespace fcp::sim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Flows within this of their end drain together: one rate recomputation
// instead of several for ends a few nanoseconds apart.
constexpr double kDrainSlack_s = 1e-7;
// A queue entry (share, port) packed so that integer order is (share, port)
// order: a non-negative double's bits order as the double does (shares are
// >= +0 and never NaN), and the port fills the low bits. Comparing two
// entries is then one 128-bit compare instead of a compare of the shares,
// a test for equality and a compare of the ports.
using QueueEntry = unsigned __int128;
QueueEntry Pack(double share, int32_t port) {
  return static_cast<QueueEntry>(std::bit_cast<uint64_t>(share)) << 64 |
         static_cast<uint32_t>(port);
}
double ShareOf(QueueEntry e) { return std::bit_cast<double>(static_cast<uint64_t>(e >> 64)); }
int32_t PortOf(QueueEntry e) { return static_cast<int32_t>(static_cast<uint32_t>(e)); }
enum Port { kNvlinkOut = 0, kNvlinkIn = 1, kNicOut = 2, kNicIn = 3, kPortsPerWorker = 4 };

}  // namespace

Network::Network(const HardwareProfile& profile, int32_t workers)
    : capacity_(static_cast<size_t>(workers) * kPortsPerWorker),
      gpus_per_node_(profile.gpus_per_node) {
  for (int32_t w = 0; w < workers; ++w) {
    capacity_[w * kPortsPerWorker + kNvlinkOut] = profile.nvlink_bytes_per_s;
    capacity_[w * kPortsPerWorker + kNvlinkIn] = profile.nvlink_bytes_per_s;
    capacity_[w * kPortsPerWorker + kNicOut] = profile.nic_bytes_per_s;
    capacity_[w * kPortsPerWorker + kNicIn] = profile.nic_bytes_per_s;
  }
}

void Network::Start(int32_t src, int32_t dst, double bytes, int64_t tag) {
  const bool same_node = src / gpus_per_node_ == dst / gpus_per_node_;
  out_port_.push_back(src * kPortsPerWorker + (same_node ? kNvlinkOut : kNicOut));
  in_port_.push_back(dst * kPortsPerWorker + (same_node ? kNvlinkIn : kNicIn));
  remaining_bytes_.push_back(bytes);
  tolerance_bytes_.push_back(1e-12 * bytes);
  rate_.push_back(0);
  drain_time_.push_back(kInfinity);
  tag_.push_back(tag);
  dirty_ = true;
}

double Network::RateOf(int64_t tag) {
  if (dirty_) Recompute();
  for (size_t k = 0; k < tag_.size(); ++k)
    if (tag_[k] == tag) return rate_[k];
  return -1;
}

double Network::NextDrainTime() {
  if (tag_.empty()) return kInfinity;
  if (dirty_) Recompute();
  return next_drain_;
}

void Network::AdvanceTo(double time, std::vector<int64_t>& drained) {
  if (dirty_) Recompute();
  now_ = std::max(now_, time);
  if (now_ + kDrainSlack_s < next_drain_) return;
  // Bring the byte counts up to date, then take out the drained flows
  // (compacting the arrays in place; slots before the first drained flow
  // stay where they are).
  const double dt = now_ - updated_;
  updated_ = now_;
  const size_t flows = tag_.size();
  double* const remaining = remaining_bytes_.data();
  const double* const rate = rate_.data();
  const double* const tolerance = tolerance_bytes_.data();
  const double* const drain_time = drain_time_.data();
  const double horizon = now_ + kDrainSlack_s;
  const auto drains = [&](size_t k) {
    remaining[k] -= rate[k] * dt;
    return remaining[k] <= tolerance[k] || drain_time[k] <= horizon;
  };
  size_t first = 0;
  while (first < flows && !drains(first)) ++first;
  size_t kept = first;
  if (first < flows) drained.push_back(tag_[first]);
  for (size_t k = first + 1; k < flows; ++k) {
    if (drains(k)) {
      drained.push_back(tag_[k]);
      continue;
    }
    out_port_[kept] = out_port_[k];
    in_port_[kept] = in_port_[k];
    remaining_bytes_[kept] = remaining_bytes_[k];
    tolerance_bytes_[kept] = tolerance_bytes_[k];
    rate_[kept] = rate_[k];
    drain_time_[kept] = drain_time_[k];
    tag_[kept] = tag_[k];
    ++kept;
  }
  if (kept != tag_.size()) {
    for (auto* v : {&out_port_, &in_port_}) v->resize(kept);
    for (auto* v : {&remaining_bytes_, &tolerance_bytes_, &rate_, &drain_time_}) v->resize(kept);
    tag_.resize(kept);
    dirty_ = true;
  }
}

void Network::Recompute() {
  dirty_ = false;
  // Bring byte counts to now under the old rates.
  const double dt = now_ - updated_;
  updated_ = now_;
  const size_t flows = tag_.size();
  // After AdvanceTo took out drained flows, dt is 0 and every x - rate * 0 is
  // x: the pass is skipped without changing a bit.
  if (dt != 0)
    for (size_t k = 0; k < flows; ++k) remaining_bytes_[k] -= rate_[k] * dt;

  const size_t ports = capacity_.size();
  remaining_capacity_.assign(capacity_.begin(), capacity_.end());
  unfrozen_.assign(ports, 0);
  port_begin_.assign(ports + 1, 0);
  for (size_t k = 0; k < flows; ++k) {
    ++port_begin_[out_port_[k] + 1];
    ++port_begin_[in_port_[k] + 1];
  }
  for (size_t p = 0; p < ports; ++p) port_begin_[p + 1] += port_begin_[p];
  port_slots_.resize(port_begin_[ports]);
  for (size_t k = 0; k < flows; ++k) {
    port_slots_[port_begin_[out_port_[k]] + unfrozen_[out_port_[k]]++] = static_cast<int32_t>(k);
    port_slots_[port_begin_[in_port_[k]] + unfrozen_[in_port_[k]]++] = static_cast<int32_t>(k);
  }
  frozen_.assign(flows, 0);
  // Progressive filling: the port with the smallest fair share is the next
  // bottleneck; its unfrozen flows get that share and leave their other port.
  // A port's share rem/cnt never falls while the water level rises (removing a
  // flow at level s <= rem/cnt leaves (rem - s)/(cnt - 1) >= rem/cnt), so the
  // queue is lazy: a popped port whose share has grown is pushed back. The
  // queue is the initial shares sorted once plus a heap of the pushed-back
  // ones: popping the smaller front of the two yields the same (share, port)
  // sequence as one heap of both (entries are totally ordered pairs), for
  // fewer comparisons than popping every port off a heap.
  SortInitialShares();
  // Raw pointers for the filling loop: its stores (a char among them, which
  // may alias anything) would otherwise reload every vector's data pointer.
  char* const frozen = frozen_.data();
  double* const rates = rate_.data();
  double* const remaining_capacity = remaining_capacity_.data();
  int32_t* const unfrozen = unfrozen_.data();
  const int32_t* const port_begin = port_begin_.data();
  const int32_t* const port_slots = port_slots_.data();
  const int32_t* const out_port = out_port_.data();
  const int32_t* const in_port = in_port_.data();
  heap_.clear();
  size_t next = 0;
  const auto front_is_sorted = [&] {
    return heap_.empty() || (next < sorted_.size() && sorted_[next] < heap_.front());
  };
  const auto queue_empty = [&] { return next == sorted_.size() && heap_.empty(); };
  while (!queue_empty()) {
    QueueEntry popped;
    if (front_is_sorted()) {
      popped = sorted_[next++];
    } else {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<QueueEntry>());
      popped = heap_.back();
      heap_.pop_back();
    }
    const double pushed_share = ShareOf(popped);
    const int32_t port = PortOf(popped);
    if (unfrozen_[port] == 0) continue;
    const double share = remaining_capacity_[port] / unfrozen_[port];
    if (share > pushed_share * (1 + 1e-12) && !queue_empty() &&
        share > ShareOf(front_is_sorted() ? sorted_[next] : heap_.front())) {
      heap_.push_back(Pack(share, port));
      std::push_heap(heap_.begin(), heap_.end(), std::greater<QueueEntry>());
      continue;
    }
    // A float round-off can leave a port with ~0 capacity; keep the flow moving.
    const double rate = std::max(share, 1e-12 * capacity_[port]);
    for (int32_t i = port_begin[port]; i < port_begin[port + 1]; ++i) {
      const int32_t k = port_slots[i];
      if (frozen[k]) continue;
      frozen[k] = 1;
      rates[k] = rate;
      const int32_t other = out_port[k] == port ? in_port[k] : out_port[k];
      remaining_capacity[other] = std::max(0.0, remaining_capacity[other] - share);
      --unfrozen[other];
    }
    unfrozen[port] = 0;
  }
  // Locals: a store through drain_time_ could otherwise alias next_drain_ and now_.
  double next_drain = kInfinity;
  const double now = now_;
  double* const drain_time = drain_time_.data();
  const double* const remaining = remaining_bytes_.data();
  for (size_t k = 0; k < flows; ++k) {
    drain_time[k] = now + std::max(0.0, remaining[k]) / rates[k];
    next_drain = std::min(next_drain, drain_time[k]);
  }
  next_drain_ = next_drain;
}

void Network::SortInitialShares() {
  // Among ports of one capacity (>= 1 per second, as HardwareProfile::validate wants),
  // rising share capacity / count is falling count: capacity / a and
  // capacity / b round to different doubles for any counts a != b that fit in
  // memory. So a counting sort by (capacity class, falling count) with ports
  // taken in rising order gives each class's (share, port) entries sorted, and
  // one merge of the two classes gives what a comparison sort would, in O(P)
  // instead of O(P log P).
  const size_t ports = capacity_.size();
  int32_t max_count = 0;
  for (size_t p = 0; p < ports; ++p) max_count = std::max(max_count, unfrozen_[p]);
  const auto bucket = [&](size_t p) {
    const int32_t nic = p % kPortsPerWorker >= kNicOut ? 1 : 0;
    return nic * (max_count + 1) + (max_count - unfrozen_[p]);
  };
  bucket_begin_.assign(2 * (static_cast<size_t>(max_count) + 1) + 1, 0);
  for (size_t p = 0; p < ports; ++p)
    if (unfrozen_[p] > 0) ++bucket_begin_[bucket(p) + 1];
  for (size_t b = 0; b + 1 < bucket_begin_.size(); ++b) bucket_begin_[b + 1] += bucket_begin_[b];
  const int32_t nvlink_ports = bucket_begin_[max_count + 1];
  by_class_.resize(bucket_begin_.back());
  for (size_t p = 0; p < ports; ++p)
    if (unfrozen_[p] > 0)
      by_class_[bucket_begin_[bucket(p)]++] =
          Pack(remaining_capacity_[p] / unfrozen_[p], static_cast<int32_t>(p));
  sorted_.resize(by_class_.size());
  std::merge(by_class_.begin(), by_class_.begin() + nvlink_ports, by_class_.begin() + nvlink_ports,
             by_class_.end(), sorted_.begin());
}

}  // namespace fcp::sim
