#include "network.h"

#include <algorithm>
#include <queue>
#include <tuple>

namespace fcp::sim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
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

int32_t Network::Start(int32_t src, int32_t dst, double bytes, int64_t tag) {
  const bool same_node = src / gpus_per_node_ == dst / gpus_per_node_;
  Flow f;
  f.out_port = src * kPortsPerWorker + (same_node ? kNvlinkOut : kNicOut);
  f.in_port = dst * kPortsPerWorker + (same_node ? kNvlinkIn : kNicIn);
  f.remaining_bytes = bytes;
  f.tolerance_bytes = 1e-9 * bytes + 1e-3;
  f.rate = 0;
  f.tag = tag;
  flows_.push_back(f);
  const int32_t id = static_cast<int32_t>(flows_.size() - 1);
  active_.push_back(id);
  dirty_ = true;
  return id;
}

double Network::rate(int32_t id) {
  if (dirty_) Recompute();
  return flows_[id].rate;
}

double Network::NextDrainTime() {
  if (active_.empty()) return kInfinity;
  if (dirty_) Recompute();
  double best = kInfinity;
  for (int32_t id : active_) {
    const Flow& f = flows_[id];
    // Aim half a tolerance past the end so round-off cannot leave a sliver.
    const double left = std::max(0.0, f.remaining_bytes - 0.5 * f.tolerance_bytes);
    best = std::min(best, left / f.rate);
  }
  return now_ + best;
}

void Network::AdvanceTo(double time, std::vector<int64_t>& drained) {
  if (dirty_) Recompute();
  const double dt = std::max(0.0, time - now_);
  now_ = std::max(now_, time);
  size_t kept = 0;
  for (int32_t id : active_) {
    Flow& f = flows_[id];
    f.remaining_bytes -= f.rate * dt;
    if (f.remaining_bytes <= f.tolerance_bytes) {
      drained.push_back(f.tag);
      dirty_ = true;
    } else {
      active_[kept++] = id;
    }
  }
  active_.resize(kept);
}

void Network::Recompute() {
  dirty_ = false;
  const size_t ports = capacity_.size();
  remaining_capacity_.assign(capacity_.begin(), capacity_.end());
  unfrozen_.assign(ports, 0);
  version_.assign(ports, 0);
  // Flows per port, as a CSR list.
  port_begin_.assign(ports + 1, 0);
  for (int32_t id : active_) {
    ++port_begin_[flows_[id].out_port + 1];
    ++port_begin_[flows_[id].in_port + 1];
  }
  for (size_t p = 0; p < ports; ++p) port_begin_[p + 1] += port_begin_[p];
  port_flows_.resize(port_begin_[ports]);
  {
    std::vector<int32_t>& fill = unfrozen_;  // reused as a cursor, then as counts
    for (int32_t id : active_) {
      port_flows_[port_begin_[flows_[id].out_port] + fill[flows_[id].out_port]++] = id;
      port_flows_[port_begin_[flows_[id].in_port] + fill[flows_[id].in_port]++] = id;
    }
  }
  frozen_.assign(flows_.size(), 0);
  // Progressive filling: the port with the smallest fair share is the next
  // bottleneck; its unfrozen flows get that share and leave the other ports.
  using Entry = std::tuple<double, int32_t, int32_t>;  // share, port, version
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (size_t p = 0; p < ports; ++p)
    if (unfrozen_[p] > 0)
      heap.emplace(remaining_capacity_[p] / unfrozen_[p], static_cast<int32_t>(p), 0);
  while (!heap.empty()) {
    const auto [share, port, version] = heap.top();
    heap.pop();
    if (version != version_[port] || unfrozen_[port] == 0) continue;
    for (int32_t k = port_begin_[port]; k < port_begin_[port + 1]; ++k) {
      const int32_t id = port_flows_[k];
      if (frozen_[id]) continue;
      frozen_[id] = 1;
      Flow& f = flows_[id];
      // A float round-off can leave a port with ~0 capacity; keep the flow moving.
      f.rate = std::max(share, 1e-12 * capacity_[port]);
      const int32_t other = f.out_port == port ? f.in_port : f.out_port;
      remaining_capacity_[other] = std::max(0.0, remaining_capacity_[other] - share);
      if (--unfrozen_[other] > 0)
        heap.emplace(remaining_capacity_[other] / unfrozen_[other], other, ++version_[other]);
    }
    unfrozen_[port] = 0;
  }
}

}  // namespace fcp::sim
