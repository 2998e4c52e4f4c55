// A fluid network of per-worker ports for the simulator: every worker has an
// NVLink out-port and in-port and a NIC out-port and in-port; a flow from w to
// v uses w's out-port and v's in-port of the NVLink pair when both share a
// node, else of the NIC pair. Active flows share ports max-min fairly
// (progressive filling), recomputed lazily after any flow starts or drains.
//
// Two engines compute the same allocation (SimConfig::network):
//  * Network (exact, the default): every active flow in compact arrays
//    (structure of arrays) and on its two ports' lists, kept current as flows
//    start and drain; a recomputation, O(F + P_a + R log R) for F active
//    flows, P_a ports with flows and R ports pushed back in the lazy queue,
//    brings every flow's byte count and drain time up to date. Its
//    floating-point results are the reference the simulator comparison cases
//    are saved with.
//  * BundledNetwork (fast): flows on one (out-port, in-port) pair always get
//    the same max-min rate, so they form one bundle of multiplicity k, counted
//    k times on both ports; its members' remaining bytes are offsets against
//    the bundle's served bytes per member (a min-heap), so a member needs no
//    update per event and the bundle drains next at its smallest member. A
//    bundle keeps (served bytes at t0, rate, t0) and sits in an indexed heap
//    keyed by a lower bound of its drain time (raised when it reaches the
//    top, so a drain that moves later costs no heap move); a recomputation, O(B + P_a + R log R)
//    for B active bundles and P_a ports with flows (a bitmap of the P ports, P / 64 words), moves
//    only the bundles whose rate changed (bitwise). Same allocation up to
//    rounding (k x share subtracted once instead of share k times; served
//    bytes accumulated per rate change instead of per event).
// Both: a flow's drain is reported once, at the first AdvanceTo whose time is
// within kDrainSlack_s of its end; flows draining together are reported in
// start order.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/simulator.h"

namespace fcp::sim {

// A set of ports (a bitmap, P / 64 words), visited in rising order.
class PortSet {
 public:
  explicit PortSet(size_t ports) : words_((ports + 63) / 64, 0) {}
  void Assign(int32_t port, bool member) {
    const uint64_t bit = uint64_t{1} << (port % 64);
    words_[port / 64] = member ? words_[port / 64] | bit : words_[port / 64] & ~bit;
  }
  template <class Visit>
  void ForEach(Visit visit) const {
    for (size_t w = 0; w < words_.size(); ++w)
      for (uint64_t word = words_[w]; word != 0; word &= word - 1)
        visit(static_cast<int32_t>(w * 64 + std::countr_zero(word)));
  }

 private:
  std::vector<uint64_t> words_;
};

// The interface the pass simulator drives; port capacities and numbering
// (4 ports per worker: NVLink out, NVLink in, NIC out, NIC in) are shared.
class FlowNetwork {
 public:
  FlowNetwork(const HardwareProfile& profile, int32_t workers);
  virtual ~FlowNetwork() = default;
  // Starts a flow of `bytes` from `src` to `dst` at the current time; `tag` is
  // returned when it drains.
  virtual void Start(int32_t src, int32_t dst, double bytes, int64_t tag) = 0;
  // Absolute time at which the next active flow drains (infinity if none).
  virtual double NextDrainTime() = 0;
  // Moves the clock to `time` (>= now), appending the tags of every flow that
  // has drained by then (its end time is at most 0.1 us later) to `drained`, in start order.
  virtual void AdvanceTo(double time, std::vector<int64_t>& drained) = 0;
  virtual int64_t active_flows() const = 0;
  // Current rate (bytes/s) of the active flow with `tag`, or -1; for tests (O(F)).
  virtual double RateOf(int64_t tag) = 0;
  double now() const { return now_; }

 protected:
  int32_t OutPort(int32_t src, int32_t dst) const;
  int32_t InPort(int32_t src, int32_t dst) const;

  std::vector<double> capacity_;  // bytes/s per port
  int32_t gpus_per_node_;
  double now_ = 0;
  // Scratch of the progressive filling, per port.
  std::vector<double> remaining_capacity_;
  std::vector<int32_t> unfrozen_, bucket_begin_;
  // (share, port) entries of the lazy queue, packed (see network.cpp).
  std::vector<unsigned __int128> by_class_, sorted_, heap_;
  // Fills sorted_ with (remaining capacity / unfrozen count, port) of every
  // port with unfrozen flows that `for_each_port` visits (in rising port
  // order), in rising order.
  template <class ForEachPort>
  void SortInitialShares(ForEachPort for_each_port);
  // Progressive filling over the ports in sorted_: freeze(port, share)
  // freezes the port's unfrozen flows at that share (updating their other
  // ports' remaining capacity and unfrozen count).
  template <class Freeze>
  void Fill(Freeze freeze);
  // Readies a filling over `ports`: each at its capacity with flows_on(p)
  // unfrozen flows, their initial shares sorted.
  template <class FlowsOn>
  void StartFilling(const PortSet& ports, FlowsOn flows_on);
  // A flow on a port's list: its slot and its other port. Every active flow
  // is on the lists of both its ports.
  struct FlowEntry {
    int32_t slot, other;
  };
  using PortFlows = std::vector<std::vector<FlowEntry>>;
  // Max-min fair rates of the flows on `lists` (those of the ports in
  // `ports`, the ports with flows) into rates[slot]: the initial shares of
  // those ports sorted, then Fill. The result does not depend on the order of
  // a list: a port's flows all get its share, and each subtracts that same
  // share from its other port. Leaves remaining_capacity_ of those ports at
  // what each has left unallocated (0 at a bottleneck). frozen_epoch (one
  // per slot) and epoch are the caller's scratch, never cleared between calls.
  void FillPortLists(const PortFlows& lists, const PortSet& ports,
                     std::vector<uint32_t>& frozen_epoch, uint32_t& epoch, double* rates);
  // Keeping the port lists current: a new flow in `slot` (its positions in
  // the two lists into out_pos / in_pos); a flow taken out (each list's last
  // entry takes its place; on_emptied(port) for a port left without flows);
  // a flow moved to `slot` (its two entries pointed there).
  static void LinkToPorts(int32_t slot, int32_t out, int32_t in, PortFlows& lists,
                          std::vector<int32_t>& out_pos, std::vector<int32_t>& in_pos,
                          PortSet& ports);
  template <class OnEmptied>
  static void UnlinkFromPorts(int32_t slot, const std::vector<int32_t>& out_port,
                              const std::vector<int32_t>& in_port, PortFlows& lists,
                              std::vector<int32_t>& out_pos, std::vector<int32_t>& in_pos,
                              PortSet& ports, OnEmptied on_emptied);
  static void Relink(int32_t slot, const std::vector<int32_t>& out_port,
                     const std::vector<int32_t>& in_port, const std::vector<int32_t>& out_pos,
                     const std::vector<int32_t>& in_pos, PortFlows& lists);
};

// The engine ResolveNetworkModel(model, workers) names. `quantum_s` (> 0) is
// the quantized engine's recomputation quantum; the other engines ignore it.
std::unique_ptr<FlowNetwork> MakeNetwork(NetworkModel model, const HardwareProfile& profile,
                                         int32_t workers, double quantum_s = 1);

class Network final : public FlowNetwork {
 public:
  Network(const HardwareProfile& profile, int32_t workers);

  void Start(int32_t src, int32_t dst, double bytes, int64_t tag) override;
  double NextDrainTime() override;
  void AdvanceTo(double time, std::vector<int64_t>& drained) override;
  int64_t active_flows() const override { return static_cast<int64_t>(tag_.size()); }
  double RateOf(int64_t tag) override;

 private:
  void Recompute();

  bool dirty_ = false;
  double next_drain_ = std::numeric_limits<double>::infinity();
  // Active flows, one slot each (kept in start order), with their positions
  // in their ports' lists and the filling that froze them.
  std::vector<int32_t> out_port_, in_port_, out_pos_, in_pos_;
  std::vector<double> remaining_bytes_, tolerance_bytes_, rate_, drain_time_;
  std::vector<int64_t> tag_;
  std::vector<uint32_t> frozen_epoch_;
  uint32_t epoch_ = 0;
  PortFlows port_flows_;
  PortSet ports_with_flows_;
  double updated_ = 0;  // time at which remaining_bytes_ was last brought up to date
};

class BundledNetwork final : public FlowNetwork {
 public:
  BundledNetwork(const HardwareProfile& profile, int32_t workers);

  void Start(int32_t src, int32_t dst, double bytes, int64_t tag) override;
  double NextDrainTime() override;
  void AdvanceTo(double time, std::vector<int64_t>& drained) override;
  int64_t active_flows() const override { return flows_; }
  double RateOf(int64_t tag) override;

 private:
  // A flow in a bundle: it drains when the bundle's served bytes per member
  // reach target_bytes (its bytes + the served bytes when it started).
  struct Member {
    double target_bytes;
    double tolerance_bytes;
    int64_t seq;  // start order
    int64_t tag;
    // Min-heap order on (target, seq) through std::push_heap's max-heap.
    bool operator<(const Member& o) const {
      return target_bytes != o.target_bytes ? target_bytes > o.target_bytes : seq > o.seq;
    }
  };
  void Recompute();
  static uint64_t PairKey(int32_t out_port, int32_t in_port);
  // The active bundle of a port pair, created (or an id reused) if none.
  int32_t BundleOf(int32_t out_port, int32_t in_port);
  void Activate(int32_t b);
  void Deactivate(int32_t b);
  void AddPortFlows(int32_t port, int32_t delta);
  // Served bytes per member brought to now_ under the current rate.
  void Rebase(int32_t b);
  double DrainTimeOf(int32_t b) const;
  // Indexed min-heap of active bundles on (key, bundle), the key a lower
  // bound of the drain time.
  bool HeapLess(int32_t a, int32_t b) const;
  void HeapUpdate(int32_t b);
  void FixTop();  // the top's key raised to its drain time until it is (heap not empty)
  void HeapRemove(int32_t b);
  void SiftUp(size_t i);
  void SiftDown(size_t i);

  // What the filling reads per bundle visit, in one place.
  struct Hot {
    double rate = 0;     // bytes/s per member
    int32_t count = 0;   // active members
    uint32_t epoch = 0;  // last recomputation that froze it
  };
  // A port's active bundle and the bundle's other port.
  struct PortEntry {
    int32_t bundle, other;
  };

  bool dirty_ = false;
  int64_t flows_ = 0, next_seq_ = 0;
  uint32_t epoch_ = 0;
  std::unordered_map<uint64_t, int32_t> bundle_of_pair_;  // active bundles only
  std::vector<int32_t> free_ids_;                         // ids of drained bundles
  // Per bundle id.
  std::vector<int32_t> out_port_, in_port_, active_slot_, out_slot_, in_slot_, heap_pos_;
  std::vector<double> served_bytes_, t0_, min_target_bytes_, drain_time_;
  std::vector<double> heap_key_;  // drain heap key: <= drain_time_ (raised lazily)
  std::vector<Hot> hot_;
  std::vector<char> stale_;  // drain time to recompute (a new smallest member)
  std::vector<std::vector<Member>> members_;
  std::vector<int32_t> active_;                       // active bundles
  std::vector<std::vector<PortEntry>> port_bundles_;  // active bundles per port
  std::vector<int32_t> port_flows_;                   // active flows per port
  PortSet ports_with_flows_;
  std::vector<int32_t> drain_heap_;
  std::vector<std::pair<int64_t, int64_t>> drained_scratch_;  // (seq, tag)
};

// The quantized engine: the max-min allocation is recomputed (as the exact
// engine computes it) at most once per quantum of simulated time, at the
// first query after a change once a quantum has passed since the last one.
// Between recomputations the rates change only locally, and no port ever
// carries more than its capacity:
//  * a flow that starts begins at once at what its two ports have left
//    unallocated (the smaller; 0 if either is full);
//  * a flow that drains gives its rate back to its two ports, and each hands
//    it to its other flows in equal parts up to what their other port has
//    left (a refill one port deep; what it cannot place, and every change
//    further away, waits for the next recomputation).
// Drains are reported at their exact times under the rates in force. So the
// recomputations number at most min(events, T / quantum) for a pass of
// length T, each O(F + P_a + R log R) as the exact engine's (the same
// filling, FlowNetwork::FillPortLists), and a start or drain between them is
// O(k log k + log F) for k flows on its ports (a min-heap of drain times with
// versioned entries; a recomputation heaps only the drains due within two
// quanta and leaves the rest unordered until one of them could be next). The
// error against the exact engine shrinks with the quantum; docs/simulator.md
// has it measured.
class QuantizedNetwork final : public FlowNetwork {
 public:
  QuantizedNetwork(const HardwareProfile& profile, int32_t workers, double quantum_s);

  void Start(int32_t src, int32_t dst, double bytes, int64_t tag) override;
  // The next drain, or the time of the pending recomputation if a change
  // waits for it (an AdvanceTo there drains nothing and recomputes).
  double NextDrainTime() override;
  void AdvanceTo(double time, std::vector<int64_t>& drained) override;
  int64_t active_flows() const override { return static_cast<int64_t>(id_.size()); }
  double RateOf(int64_t tag) override;

 private:
  // (drain time, start order, flow id): a min-heap through std::push_heap's max-heap.
  // An entry is current while its version is the flow's (a refill that
  // raises a rate pushes a new entry instead of moving the old one).
  struct Due {
    double time;
    int64_t seq;
    int32_t id;
    uint32_t version;
    bool operator<(const Due& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  void RecomputeIfDue();
  // Time of the next current drain-heap entry (infinity if none), stale
  // entries dropped and the far flows' entries made where one of them could
  // be next; due_.front() is that entry.
  double NextDueTime();
  void Recompute();
  // Drains every flow due by `horizon` (appended as (seq, tag)), the clock at `time`.
  void DrainUntil(double time, double horizon);
  void Remove(int32_t slot);
  // Hands `port`'s unallocated capacity to its flows, up to what their other
  // port has left, in equal parts (water-filling over the flows ordered by
  // that headroom).
  void Refill(int32_t port);
  void SetRate(int32_t slot, double rate);  // from now, a new drain-heap entry
  // Its drain-heap entry under the rate since t0 (at t0 if no bytes are left).
  Due DueOf(int32_t slot) const;

  double quantum_s_;
  bool dirty_ = false;
  double next_recompute_ = 0;  // earliest time of the next recomputation
  int64_t next_seq_ = 0;
  // Active flows sit in slots 0..F-1 (a drained flow's slot takes the last
  // one), so a recomputation reads their state in order. A flow's id, its
  // drain-heap entries' handle and the refill's tie-break, stays while it is
  // active; ids of drained flows are reused.
  std::vector<int32_t> slot_of_;   // per id
  std::vector<uint32_t> version_;  // per id: its current drain-heap entry's
  std::vector<int32_t> free_ids_;
  // Per slot: its id, ports, positions in the two port lists, bytes left at
  // t0 and rate since t0, start order, tag, and the recomputation that froze it.
  std::vector<int32_t> id_, out_port_, in_port_, out_pos_, in_pos_;
  std::vector<double> bytes_at_t0_, t0_, rate_;
  std::vector<int64_t> seq_, tag_;
  std::vector<uint32_t> frozen_epoch_;
  std::vector<char> entry_made_;
  uint32_t epoch_ = 0;
  PortFlows port_flows_;  // per port its active flows
  // Ports with flows, and ports that lost their last flow since the last
  // recomputation (the only ports without flows whose unallocated capacity
  // may differ from their capacity).
  PortSet ports_with_flows_;
  std::vector<int32_t> emptied_ports_;
  std::vector<std::pair<double, int32_t>> candidates_;  // Refill scratch: (headroom, id)
  std::vector<double> unallocated_;  // per port: capacity minus the rates in force
  // The drain heap: an entry per flow with a rate > 0, except the flows a
  // recomputation found far from draining (entry_made_ 0), whose entries are
  // made only once one of them could be next (none drains before far_from_).
  // Entries are totally ordered (time, start order), so the drains come in
  // the same order as if every entry were in the heap.
  std::vector<Due> due_;
  double far_from_ = std::numeric_limits<double>::infinity();
  std::vector<std::pair<int64_t, int64_t>> drained_scratch_;  // (seq, tag)
};

}  // namespace fcp::sim
