// fcp/lower_bounds.h — lower bounds on a simulated pass and step, from what
// each worker must compute and what each of its ports must carry.
//
// A pass (forward or backward) cannot end before
//  * any worker's compute stream has run its kernels (busy compute: the sum
//    of its pairs' kernel times plus one launch per stage with work), and
//  * any port has carried its bytes: every worker has four ports, NIC in and
//    out (flows across nodes) and NVLink in and out (flows inside a node,
//    `gpus_per_node` of the profile), each of its class's bandwidth per
//    direction (cost_model.h). A flow uses its sender's out-port and its
//    receiver's in-port, so a port's bytes / bandwidth is a floor on the
//    pass however the flows share it.
// The pass's bound is the largest of these terms; the mean busy compute
// (perfect balance of this plan's kernels) is reported beside it as the
// best any rebalancing of the same kernels could reach. Latencies are not
// counted (the bound stays a floor). The step's bound is the sum of the two
// pass bounds, as the simulator runs the backward after the forward; the
// reshuffle's flows count in the pass that moves them (Q, K, V in and O out
// in the forward, dO in and dQ, dK, dV out in the backward) when charged.
// The flows are the plan's own transfers: a block relayed through a node
// (a worker forwarding what it received) crosses the NIC once into that
// node and loads NVLink ports for its other receipts, so the bound holds
// for the plan as made, and relaying lowers it (docs/simulator.md, "Lower
// bounds").
//
// Invariant: for every plan, profile and SimConfig, Simulate's pass time is
// >= its bound (up to the flow engine's drain tolerance); tests check it on
// random plans of every planner. Cost: O(workers + flows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/cost_model.h"

namespace fcp {

// Bytes from `src`'s out-port into `dst`'s in-port (src != dst).
struct PortFlow {
  int32_t src = 0;
  int32_t dst = 0;
  double bytes = 0;
};

// One worker's floors on one pass, in seconds.
struct WorkerBounds {
  double compute_s = 0;    // busy compute
  double nic_in_s = 0;     // bytes received across nodes / NIC bandwidth
  double nic_out_s = 0;    // bytes sent across nodes / NIC bandwidth
  double nvlink_in_s = 0;  // bytes received inside its node / NVLink bandwidth
  double nvlink_out_s = 0;
};

struct PassBounds {
  double mean_compute_s = 0;  // sum of busy compute / workers
  double max_compute_s = 0;   // largest busy compute
  // Busiest port of each class and direction: max over workers.
  double nic_in_s = 0;
  double nic_out_s = 0;
  double nvlink_in_s = 0;
  double nvlink_out_s = 0;
  double bound_s = 0;  // max of max_compute_s and the four port terms
  // Which term is bound_s: "compute", "nic_in", "nic_out", "nvlink_in",
  // "nvlink_out" (the first in this order among equal ones).
  std::string binding;
  std::vector<WorkerBounds> workers;
};

// Bounds of one pass from each worker's busy compute (size = workers) and
// every flow of the pass. Error(kInvalidArgument) if a flow's ends are out of
// range or equal, or a value is negative or not finite. O(workers + flows).
PassBounds ComputePassBounds(const HardwareProfile& profile,
                             const std::vector<double>& busy_compute_s,
                             const std::vector<PortFlow>& flows);

}  // namespace fcp
