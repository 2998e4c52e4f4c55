// A fluid network of per-worker ports for the simulator: every worker has an
// NVLink out-port and in-port and a NIC out-port and in-port; a flow from w to
// v uses w's out-port and v's in-port of the NVLink pair when both share a
// node, else of the NIC pair. Active flows share ports max-min fairly
// (progressive filling), recomputed lazily after any flow starts or drains.
// Cost of a recomputation: O((F + P) log P) for F active flows and P ports.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "fcp/cost_model.h"

namespace fcp::sim {

class Network {
 public:
  Network(const HardwareProfile& profile, int32_t workers);

  // Starts a flow of `bytes` from `src` to `dst` at the current time; `tag` is
  // returned when it drains. Returns the flow's id.
  int32_t Start(int32_t src, int32_t dst, double bytes, int64_t tag);
  // Absolute time at which the next active flow drains (infinity if none).
  double NextDrainTime();
  // Moves the clock to `time` (>= now), appending the tags of every flow that
  // has drained by then (within a relative 1e-9 of its size) to `drained`.
  void AdvanceTo(double time, std::vector<int64_t>& drained);
  double now() const { return now_; }
  int64_t active_flows() const { return static_cast<int64_t>(active_.size()); }
  // Current rate of flow `id` (bytes/s); for tests.
  double rate(int32_t id);

 private:
  struct Flow {
    int32_t out_port;
    int32_t in_port;
    double remaining_bytes;
    double tolerance_bytes;
    double rate;
    int64_t tag;
  };
  void Recompute();

  std::vector<double> capacity_;  // bytes/s per port
  int32_t gpus_per_node_;
  std::vector<Flow> flows_;
  std::vector<int32_t> active_;  // ids of active flows, in start order
  double now_ = 0;
  bool dirty_ = false;
  // Scratch for Recompute.
  std::vector<double> remaining_capacity_;
  std::vector<int32_t> unfrozen_;
  std::vector<int32_t> port_begin_, port_flows_, version_;
  std::vector<char> frozen_;
};

}  // namespace fcp::sim
