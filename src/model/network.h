// A fluid network of per-worker ports for the simulator: every worker has an
// NVLink out-port and in-port and a NIC out-port and in-port; a flow from w to
// v uses w's out-port and v's in-port of the NVLink pair when both share a
// node, else of the NIC pair. Active flows share ports max-min fairly
// (progressive filling), recomputed lazily after any flow starts or drains.
// Active flows live in compact arrays (structure of arrays) so a
// recomputation, O(F + P + R log R) for F active flows, P ports and R ports
// pushed back in the lazy queue, stays in cache.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "fcp/cost_model.h"

namespace fcp::sim {

class Network {
 public:
  Network(const HardwareProfile& profile, int32_t workers);

  // Starts a flow of `bytes` from `src` to `dst` at the current time; `tag` is
  // returned when it drains.
  void Start(int32_t src, int32_t dst, double bytes, int64_t tag);
  // Absolute time at which the next active flow drains (infinity if none).
  double NextDrainTime();
  // Moves the clock to `time` (>= now), appending the tags of every flow that
  // has drained by then (its end time is at most 0.1 us later) to `drained`, in start order.
  void AdvanceTo(double time, std::vector<int64_t>& drained);
  double now() const { return now_; }
  int64_t active_flows() const { return static_cast<int64_t>(tag_.size()); }
  // Current rate (bytes/s) of the active flow with `tag`, or -1; for tests.
  double RateOf(int64_t tag);

 private:
  void Recompute();
  // Fills sorted_ with (capacity / flow count, port) of every port with flows, in rising order.
  void SortInitialShares();

  std::vector<double> capacity_;  // bytes/s per port
  int32_t gpus_per_node_;
  double now_ = 0;
  bool dirty_ = false;
  double next_drain_ = std::numeric_limits<double>::infinity();
  // Active flows, one slot each (kept in start order).
  std::vector<int32_t> out_port_, in_port_;
  std::vector<double> remaining_bytes_, tolerance_bytes_, rate_, drain_time_;
  std::vector<int64_t> tag_;
  double updated_ = 0;  // time at which remaining_bytes_ was last brought up to date
  // Scratch for Recompute.
  std::vector<double> remaining_capacity_;
  std::vector<int32_t> unfrozen_, port_begin_, port_slots_, bucket_begin_;
  std::vector<char> frozen_;
  // (share, port) entries of the lazy queue, packed (see network.cpp).
  std::vector<unsigned __int128> by_class_, sorted_, heap_;
};

}  // namespace fcp::sim
