// The port proxy of a plan (issue 17, part 3): the step's lower bound by
// NIC ports, as a cheap stand-in for the simulated step. Private to
// src/plan.
//
// In token pairs: per pass, the busiest of every worker's compute, NIC
// in-port and NIC out-port (bytes that cross a node of `node_workers`
// consecutive workers, as K/V tokens x the network ratio; NVLink bytes, 9x
// cheaper in the built-in profiles, are not counted), the two passes
// summed, as the simulator's lower bound sums them (lower_bounds.h).
// Forward: every K/V transfer (owner out, needer in, one per (K/V block,
// receiving worker)), the reshuffle's Q, K, V in and O out. Backward: the
// K/V again and the dK/dV partials back, so both ports carry in + out; dO
// in and dQ, dK, dV out; compute kBackwardComputeRatio x the forward.
//
// Invariants: the loads are integer token counts (exact in any order of
// summation); the proxy is a pure function of the plan's blocks, owners
// and shape. Cost: O(P + B + N + S) for P required pairs, B blocks, N
// workers, S segments.
#pragma once

#include <cstdint>
#include <vector>

#include "buckets.h"
#include "fcp/plan.h"

namespace fcp::detail {

// The backward's compute as a multiple of the forward's: 2.5x the FLOPs
// at 3/4 the speed.
constexpr double kBackwardComputeRatio = 2.5 / 0.75;

// What the proxy is computed from: the plan's blocks (worker unset: owners
// are given separately, in the plan's worker ids), the users graph of
// their required pairs (row kv: the query blocks that need kv, as
// AssignmentSearch::users or BuildUsers give it), each block's work as a
// query block (the sum of its pairs' token pairs), the sequences' first
// tokens (SequenceOffsets).
struct PortInput {
  const std::vector<Block>* blocks = nullptr;
  const Rows<int32_t>* users = nullptr;
  const std::vector<int64_t>* block_work = nullptr;
  const std::vector<int64_t>* offsets = nullptr;
  int32_t workers = 1;
  int32_t node_workers = 8;  // < 1 is read as 1
  AttentionShape attention;
  double pairs_per_traffic_token = 0;  // the network ratio, token pairs per K/V token
};

// Per worker, in tokens: its compute (allowed token pairs of its query
// blocks), the K/V tokens of the forward transfers across nodes it
// receives and sends, the tokens it holds whose dataloader worker is on
// another node (`away`), and its dataloader tokens held on another node
// (`lent`).
struct PortLoads {
  std::vector<int64_t> compute, kv_in, kv_out, away, lent;
};

// The loads of `owner` (owner[block], plan ids). O(P + B + N + S) for S
// segments.
PortLoads CountPorts(const PortInput& input, const std::vector<int32_t>& owner);

// Worker w's four NIC port loads, in token pairs (K/V tokens x the ratio):
// forward in (K/V received, Q, K, V of the tokens it holds from other
// nodes, O of its dataloader tokens held elsewhere), forward out (K/V
// sent, O back, Q, K, V of its lent tokens), backward in and out (K/V
// both ways, as the K/V is sent again and the dK/dV partials return; dO
// in to the holder, dQ, dK, dV out to the dataloader worker). O(1).
struct Ports {
  double forward_in, forward_out, backward_in, backward_out;
};
Ports PortsOf(const PortInput& input, const PortLoads& loads, int32_t w);

// The proxy of `loads`, in token pairs. O(N).
double PortProxy(const PortInput& input, const PortLoads& loads);

}  // namespace fcp::detail
