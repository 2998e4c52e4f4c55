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
// Unallocated capacity below this fraction of a port's is rounding left over
// (quantized engine): given to nobody.
constexpr double kSliver = 1e-9;
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

// Swap-removes item `id` (a bundle of the fast engine) from the active list and from
// its two port lists, slots kept current in active_slot, out_slot and
// in_slot. An item's out- and in-port differ, so the item moved within
// `port`'s list has `port` as exactly one of its two ports, whose slot it
// takes.
template <class Entry, class IdOf>
void SwapRemove(int32_t id, std::vector<int32_t>& active, std::vector<int32_t>& active_slot,
                std::vector<std::vector<Entry>>& port_lists, const std::vector<int32_t>& out_port,
                const std::vector<int32_t>& in_port, std::vector<int32_t>& out_slot,
                std::vector<int32_t>& in_slot, IdOf id_of) {
  const int32_t moved = active.back();
  active[active_slot[id]] = moved;
  active_slot[moved] = active_slot[id];
  active.pop_back();
  for (const int32_t port : {out_port[id], in_port[id]}) {
    std::vector<Entry>& list = port_lists[port];
    const int32_t slot = out_port[id] == port ? out_slot[id] : in_slot[id];
    const int32_t last = id_of(list.back());
    list[slot] = list.back();
    list.pop_back();
    (out_port[last] == port ? out_slot[last] : in_slot[last]) = slot;
  }
}

// Row `from` of a structure of arrays copied to row `to`, and every array
// resized to `rows`.
template <class... Arrays>
void CopyRow(size_t from, size_t to, Arrays&... arrays) {
  ((arrays[to] = arrays[from]), ...);
}
template <class... Arrays>
void ResizeAll(size_t rows, Arrays&... arrays) {
  (arrays.resize(rows), ...);
}

// The epoch of the next recomputation (items marked with it are done in
// it); on wrap-around `clear_marks` resets every mark, and 0 is never used.
template <class ClearMarks>
uint32_t NextEpoch(uint32_t& epoch, ClearMarks clear_marks) {
  if (++epoch == 0) {
    clear_marks();
    epoch = 1;
  }
  return epoch;
}

// An id for a new item: the last freed one if any (so per-item arrays stay
// as large as the most items active at once, cache-resident, not as every
// item ever started), else `next_id` once `append()` has grown the arrays.
template <class Append>
int32_t ReuseOrAppendId(std::vector<int32_t>& free_ids, size_t next_id, Append append) {
  if (!free_ids.empty()) {
    const int32_t id = free_ids.back();
    free_ids.pop_back();
    return id;
  }
  append();
  return static_cast<int32_t>(next_id);
}

}  // namespace

FlowNetwork::FlowNetwork(const HardwareProfile& profile, int32_t workers)
    : capacity_(static_cast<size_t>(workers) * kPortsPerWorker),
      gpus_per_node_(profile.gpus_per_node) {
  for (int32_t w = 0; w < workers; ++w) {
    capacity_[w * kPortsPerWorker + kNvlinkOut] = profile.nvlink_bytes_per_s;
    capacity_[w * kPortsPerWorker + kNvlinkIn] = profile.nvlink_bytes_per_s;
    capacity_[w * kPortsPerWorker + kNicOut] = profile.nic_bytes_per_s;
    capacity_[w * kPortsPerWorker + kNicIn] = profile.nic_bytes_per_s;
  }
  remaining_capacity_.assign(capacity_.size(), 0);
  unfrozen_.assign(capacity_.size(), 0);
}

int32_t FlowNetwork::OutPort(int32_t src, int32_t dst) const {
  const bool same_node = src / gpus_per_node_ == dst / gpus_per_node_;
  return src * kPortsPerWorker + (same_node ? kNvlinkOut : kNicOut);
}

int32_t FlowNetwork::InPort(int32_t src, int32_t dst) const {
  const bool same_node = src / gpus_per_node_ == dst / gpus_per_node_;
  return dst * kPortsPerWorker + (same_node ? kNvlinkIn : kNicIn);
}

std::unique_ptr<FlowNetwork> MakeNetwork(NetworkModel model, const HardwareProfile& profile,
                                         int32_t workers, double quantum_s) {
  model = ResolveNetworkModel(model, workers);
  if (model == NetworkModel::kFast) return std::make_unique<BundledNetwork>(profile, workers);
  if (model == NetworkModel::kQuantized)
    return std::make_unique<QuantizedNetwork>(profile, workers, quantum_s);
  return std::make_unique<Network>(profile, workers);
}

template <class ForEachPort>
void FlowNetwork::SortInitialShares(ForEachPort for_each_port) {
  // Among ports of one capacity (>= 1 per second, as HardwareProfile::validate wants),
  // rising share capacity / count is falling count: capacity / a and
  // capacity / b round to different doubles for any counts a != b that fit in
  // memory. So a counting sort by (capacity class, falling count) with ports
  // taken in rising order gives each class's (share, port) entries sorted, and
  // one merge of the two classes gives what a comparison sort would, in O(P)
  // instead of O(P log P).
  int32_t max_count = 0;
  for_each_port([&](int32_t p) { max_count = std::max(max_count, unfrozen_[p]); });
  const auto bucket = [&](int32_t p) {
    const int32_t nic = p % kPortsPerWorker >= kNicOut ? 1 : 0;
    return nic * (max_count + 1) + (max_count - unfrozen_[p]);
  };
  bucket_begin_.assign(2 * (static_cast<size_t>(max_count) + 1) + 1, 0);
  for_each_port([&](int32_t p) {
    if (unfrozen_[p] > 0) ++bucket_begin_[bucket(p) + 1];
  });
  for (size_t b = 0; b + 1 < bucket_begin_.size(); ++b) bucket_begin_[b + 1] += bucket_begin_[b];
  const int32_t nvlink_ports = bucket_begin_[max_count + 1];
  by_class_.resize(bucket_begin_.back());
  for_each_port([&](int32_t p) {
    if (unfrozen_[p] > 0)
      by_class_[bucket_begin_[bucket(p)]++] = Pack(remaining_capacity_[p] / unfrozen_[p], p);
  });
  sorted_.resize(by_class_.size());
  std::merge(by_class_.begin(), by_class_.begin() + nvlink_ports, by_class_.begin() + nvlink_ports,
             by_class_.end(), sorted_.begin());
}

template <class Freeze>
void FlowNetwork::Fill(Freeze freeze) {
  // Progressive filling: the port with the smallest fair share is the next
  // bottleneck; its unfrozen flows get that share and leave their other port.
  // A port's share rem/cnt never falls while the water level rises (removing a
  // flow at level s <= rem/cnt leaves (rem - s)/(cnt - 1) >= rem/cnt), so the
  // queue is lazy: a popped port whose share has grown is pushed back. The
  // queue is the initial shares sorted once plus a heap of the pushed-back
  // ones: popping the smaller front of the two yields the same (share, port)
  // sequence as one heap of both (entries are totally ordered pairs), for
  // fewer comparisons than popping every port off a heap.
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
    freeze(port, share, std::max(share, 1e-12 * capacity_[port]));
    unfrozen_[port] = 0;
  }
}

template <class FlowsOn>
void FlowNetwork::StartFilling(const PortSet& ports, FlowsOn flows_on) {
  ports.ForEach([&](int32_t p) {
    remaining_capacity_[p] = capacity_[p];
    unfrozen_[p] = flows_on(p);
  });
  SortInitialShares([&ports](auto visit) { ports.ForEach(visit); });
}

void FlowNetwork::FillPortLists(const PortFlows& lists, const PortSet& ports,
                                std::vector<uint32_t>& frozen_epoch, uint32_t& epoch,
                                double* rates) {
  StartFilling(ports, [&](int32_t p) { return static_cast<int32_t>(lists[p].size()); });
  // A flow is frozen in this filling when its epoch is this one's (no pass
  // to clear flags); epoch 0 is never used.
  const uint32_t current =
      NextEpoch(epoch, [&] { std::fill(frozen_epoch.begin(), frozen_epoch.end(), 0); });
  uint32_t* const frozen = frozen_epoch.data();
  double* const remaining_capacity = remaining_capacity_.data();
  int32_t* const unfrozen = unfrozen_.data();
  Fill([&](int32_t port, double share, double rate) {
    for (const auto [slot, other] : lists[port]) {
      if (frozen[slot] == current) continue;
      frozen[slot] = current;
      rates[slot] = rate;
      remaining_capacity[other] = std::max(0.0, remaining_capacity[other] - share);
      --unfrozen[other];
    }
    remaining_capacity[port] = 0;  // saturated (up to rounding)
  });
}

void FlowNetwork::LinkToPorts(int32_t slot, int32_t out, int32_t in, PortFlows& lists,
                              std::vector<int32_t>& out_pos, std::vector<int32_t>& in_pos,
                              PortSet& ports) {
  out_pos[slot] = static_cast<int32_t>(lists[out].size());
  in_pos[slot] = static_cast<int32_t>(lists[in].size());
  lists[out].push_back({slot, in});
  lists[in].push_back({slot, out});
  ports.Assign(out, true);
  ports.Assign(in, true);
}

template <class OnEmptied>
void FlowNetwork::UnlinkFromPorts(int32_t slot, const std::vector<int32_t>& out_port,
                                  const std::vector<int32_t>& in_port, PortFlows& lists,
                                  std::vector<int32_t>& out_pos, std::vector<int32_t>& in_pos,
                                  PortSet& ports, OnEmptied on_emptied) {
  // The last entry of each list takes its place; a flow's out- and in-port
  // differ in kind, so the moved entry's flow has `port` as its out-port
  // exactly when `port` is an out-port.
  for (const auto& [port, pos] :
       {std::pair{out_port[slot], out_pos[slot]}, std::pair{in_port[slot], in_pos[slot]}}) {
    std::vector<FlowEntry>& list = lists[port];
    const int32_t moved = list.back().slot;
    list[pos] = list.back();
    list.pop_back();
    (out_port[moved] == port ? out_pos : in_pos)[moved] = pos;
    if (list.empty()) {
      ports.Assign(port, false);
      on_emptied(port);
    }
  }
}

void FlowNetwork::Relink(int32_t slot, const std::vector<int32_t>& out_port,
                         const std::vector<int32_t>& in_port, const std::vector<int32_t>& out_pos,
                         const std::vector<int32_t>& in_pos, PortFlows& lists) {
  lists[out_port[slot]][out_pos[slot]].slot = slot;
  lists[in_port[slot]][in_pos[slot]].slot = slot;
}

Network::Network(const HardwareProfile& profile, int32_t workers)
    : FlowNetwork(profile, workers),
      port_flows_(capacity_.size()),
      ports_with_flows_(capacity_.size()) {}

void Network::Start(int32_t src, int32_t dst, double bytes, int64_t tag) {
  const auto slot = static_cast<int32_t>(tag_.size());
  const int32_t out = OutPort(src, dst), in = InPort(src, dst);
  out_port_.push_back(out);
  in_port_.push_back(in);
  out_pos_.push_back(0);
  in_pos_.push_back(0);
  remaining_bytes_.push_back(bytes);
  tolerance_bytes_.push_back(1e-12 * bytes);
  rate_.push_back(0);
  drain_time_.push_back(kInfinity);
  tag_.push_back(tag);
  frozen_epoch_.push_back(0);
  LinkToPorts(slot, out, in, port_flows_, out_pos_, in_pos_, ports_with_flows_);
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
  size_t kept = 0;
  for (size_t k = 0; k < flows; ++k) {
    const auto slot = static_cast<int32_t>(k);
    if (drains(k)) {
      drained.push_back(tag_[k]);
      UnlinkFromPorts(slot, out_port_, in_port_, port_flows_, out_pos_, in_pos_, ports_with_flows_,
                      [](int32_t) {});
      continue;
    }
    if (kept != k) {
      CopyRow(k, kept, out_port_, in_port_, out_pos_, in_pos_, remaining_bytes_, tolerance_bytes_,
              rate_, drain_time_, tag_, frozen_epoch_);
      Relink(static_cast<int32_t>(kept), out_port_, in_port_, out_pos_, in_pos_, port_flows_);
    }
    ++kept;
  }
  if (kept != tag_.size()) {
    ResizeAll(kept, out_port_, in_port_, out_pos_, in_pos_, remaining_bytes_, tolerance_bytes_,
              rate_, drain_time_, tag_, frozen_epoch_);
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

  FillPortLists(port_flows_, ports_with_flows_, frozen_epoch_, epoch_, rate_.data());
  // Locals: a store through drain_time_ could otherwise alias next_drain_ and now_.
  double next_drain = kInfinity;
  const double now = now_;
  double* const drain_time = drain_time_.data();
  const double* const remaining = remaining_bytes_.data();
  const double* const rates = rate_.data();
  for (size_t k = 0; k < flows; ++k) {
    drain_time[k] = now + std::max(0.0, remaining[k]) / rates[k];
    next_drain = std::min(next_drain, drain_time[k]);
  }
  next_drain_ = next_drain;
}

// ---- BundledNetwork ----

BundledNetwork::BundledNetwork(const HardwareProfile& profile, int32_t workers)
    : FlowNetwork(profile, workers),
      port_bundles_(capacity_.size()),
      port_flows_(capacity_.size(), 0),
      ports_with_flows_(capacity_.size()) {}

int32_t BundledNetwork::BundleOf(int32_t out_port, int32_t in_port) {
  const auto [it, inserted] = bundle_of_pair_.try_emplace(PairKey(out_port, in_port), 0);
  if (!inserted) return it->second;
  const int32_t b = ReuseOrAppendId(free_ids_, out_port_.size(), [&] {
    for (auto* v : {&out_port_, &in_port_, &active_slot_, &out_slot_, &in_slot_}) v->push_back(0);
    heap_pos_.push_back(-1);
    for (auto* v : {&served_bytes_, &t0_, &min_target_bytes_, &heap_key_}) v->push_back(0);
    drain_time_.push_back(kInfinity);
    hot_.push_back({});
    stale_.push_back(0);
    members_.emplace_back();
  });
  out_port_[b] = out_port;
  in_port_[b] = in_port;
  it->second = b;
  return b;
}

uint64_t BundledNetwork::PairKey(int32_t out_port, int32_t in_port) {
  return static_cast<uint64_t>(static_cast<uint32_t>(out_port)) << 32 |
         static_cast<uint32_t>(in_port);
}

void BundledNetwork::AddPortFlows(int32_t port, int32_t delta) {
  port_flows_[port] += delta;
  ports_with_flows_.Assign(port, port_flows_[port] > 0);
}

void BundledNetwork::Activate(int32_t b) {
  served_bytes_[b] = 0;
  t0_[b] = now_;
  hot_[b].rate = 0;
  active_slot_[b] = static_cast<int32_t>(active_.size());
  active_.push_back(b);
  out_slot_[b] = static_cast<int32_t>(port_bundles_[out_port_[b]].size());
  port_bundles_[out_port_[b]].push_back({b, in_port_[b]});
  in_slot_[b] = static_cast<int32_t>(port_bundles_[in_port_[b]].size());
  port_bundles_[in_port_[b]].push_back({b, out_port_[b]});
}

void BundledNetwork::Deactivate(int32_t b) {
  SwapRemove(b, active_, active_slot_, port_bundles_, out_port_, in_port_, out_slot_, in_slot_,
             [](const PortEntry& e) { return e.bundle; });
  HeapRemove(b);
  hot_[b].rate = 0;
  drain_time_[b] = kInfinity;
  bundle_of_pair_.erase(PairKey(out_port_[b], in_port_[b]));
  free_ids_.push_back(b);
}

void BundledNetwork::Rebase(int32_t b) {
  served_bytes_[b] += hot_[b].rate * (now_ - t0_[b]);
  t0_[b] = now_;
}

double BundledNetwork::DrainTimeOf(int32_t b) const {
  return t0_[b] + std::max(0.0, min_target_bytes_[b] - served_bytes_[b]) / hot_[b].rate;
}

void BundledNetwork::Start(int32_t src, int32_t dst, double bytes, int64_t tag) {
  const int32_t b = BundleOf(OutPort(src, dst), InPort(src, dst));
  if (hot_[b].count == 0) Activate(b);
  Rebase(b);
  std::vector<Member>& members = members_[b];
  members.push_back({served_bytes_[b] + bytes, 1e-12 * bytes, next_seq_++, tag});
  std::push_heap(members.begin(), members.end());
  // A new smallest member moves the drain time even if the rate stays.
  if (members.front().seq + 1 == next_seq_) {
    stale_[b] = 1;
    min_target_bytes_[b] = members.front().target_bytes;
  }
  ++hot_[b].count;
  ++flows_;
  AddPortFlows(out_port_[b], 1);
  AddPortFlows(in_port_[b], 1);
  dirty_ = true;
}

double BundledNetwork::RateOf(int64_t tag) {
  if (dirty_) Recompute();
  for (const int32_t b : active_)
    for (const Member& m : members_[b])
      if (m.tag == tag) return hot_[b].rate;
  return -1;
}

double BundledNetwork::NextDrainTime() {
  if (flows_ == 0) return kInfinity;
  if (dirty_) Recompute();
  FixTop();
  return drain_time_[drain_heap_.front()];
}

void BundledNetwork::AdvanceTo(double time, std::vector<int64_t>& drained) {
  if (dirty_) Recompute();
  now_ = std::max(now_, time);
  const double horizon = now_ + kDrainSlack_s;
  drained_scratch_.clear();
  while (!drain_heap_.empty() && (FixTop(), drain_time_[drain_heap_.front()] <= horizon)) {
    const int32_t b = drain_heap_.front();
    Rebase(b);
    std::vector<Member>& members = members_[b];
    // The smallest member is due (its drain time is within the horizon);
    // the next ones too if they end within it or have no bytes left.
    do {
      std::pop_heap(members.begin(), members.end());
      drained_scratch_.emplace_back(members.back().seq, members.back().tag);
      members.pop_back();
      --hot_[b].count;
      --flows_;
      AddPortFlows(out_port_[b], -1);
      AddPortFlows(in_port_[b], -1);
      if (!members.empty()) min_target_bytes_[b] = members.front().target_bytes;
    } while (!members.empty() &&
             (min_target_bytes_[b] - served_bytes_[b] <= members.front().tolerance_bytes ||
              DrainTimeOf(b) <= horizon));
    if (members.empty()) {
      Deactivate(b);
    } else {
      drain_time_[b] = DrainTimeOf(b);
      HeapUpdate(b);
    }
    dirty_ = true;
  }
  std::sort(drained_scratch_.begin(), drained_scratch_.end());
  for (const auto& [seq, tag] : drained_scratch_) drained.push_back(tag);
}

void BundledNetwork::Recompute() {
  dirty_ = false;
  StartFilling(ports_with_flows_, [&](int32_t p) { return port_flows_[p]; });
  // A bundle is frozen in this recomputation when its epoch is this one's
  // (no pass to clear flags); epoch 0 is never used.
  const uint32_t epoch = NextEpoch(epoch_, [&] {
    for (Hot& h : hot_) h.epoch = 0;
  });
  Hot* const hot = hot_.data();
  double* const remaining_capacity = remaining_capacity_.data();
  int32_t* const unfrozen = unfrozen_.data();
  char* const stale = stale_.data();
  // A bundle whose rate changed (bitwise), or that has a new smallest member,
  // moves: served bytes up to now under the old rate, a new drain time.
  // The others keep their state untouched.
  Fill([&](int32_t port, double share, double rate) {
    for (const PortEntry& e : port_bundles_[port]) {
      Hot& h = hot[e.bundle];
      if (h.epoch == epoch) continue;
      h.epoch = epoch;
      remaining_capacity[e.other] = std::max(0.0, remaining_capacity[e.other] - h.count * share);
      unfrozen[e.other] -= h.count;
      if (std::bit_cast<uint64_t>(rate) == std::bit_cast<uint64_t>(h.rate) && !stale[e.bundle])
        continue;
      stale[e.bundle] = 0;
      Rebase(e.bundle);
      h.rate = rate;
      drain_time_[e.bundle] = DrainTimeOf(e.bundle);
      HeapUpdate(e.bundle);
    }
  });
}

bool BundledNetwork::HeapLess(int32_t a, int32_t b) const {
  return heap_key_[a] != heap_key_[b] ? heap_key_[a] < heap_key_[b] : a < b;
}

void BundledNetwork::SiftUp(size_t i) {
  const int32_t b = drain_heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!HeapLess(b, drain_heap_[parent])) break;
    drain_heap_[i] = drain_heap_[parent];
    heap_pos_[drain_heap_[i]] = static_cast<int32_t>(i);
    i = parent;
  }
  drain_heap_[i] = b;
  heap_pos_[b] = static_cast<int32_t>(i);
}

void BundledNetwork::SiftDown(size_t i) {
  const int32_t b = drain_heap_[i];
  const size_t n = drain_heap_.size();
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && HeapLess(drain_heap_[child + 1], drain_heap_[child])) ++child;
    if (!HeapLess(drain_heap_[child], b)) break;
    drain_heap_[i] = drain_heap_[child];
    heap_pos_[drain_heap_[i]] = static_cast<int32_t>(i);
    i = child;
  }
  drain_heap_[i] = b;
  heap_pos_[b] = static_cast<int32_t>(i);
}

void BundledNetwork::HeapUpdate(int32_t b) {
  // A later drain time leaves the key as it is (a lower bound); FixTop
  // raises it if the bundle reaches the top first. An earlier one moves up.
  if (heap_pos_[b] < 0) {
    heap_key_[b] = drain_time_[b];
    drain_heap_.push_back(b);
    SiftUp(drain_heap_.size() - 1);
  } else if (drain_time_[b] < heap_key_[b]) {
    heap_key_[b] = drain_time_[b];
    SiftUp(static_cast<size_t>(heap_pos_[b]));
  }
}

void BundledNetwork::FixTop() {
  // Every key is at most its bundle's drain time, so once the top's key is
  // its drain time, the top drains first.
  for (;;) {
    const int32_t b = drain_heap_.front();
    if (heap_key_[b] >= drain_time_[b]) return;
    heap_key_[b] = drain_time_[b];
    SiftDown(0);
  }
}

void BundledNetwork::HeapRemove(int32_t b) {
  const int32_t pos = heap_pos_[b];
  if (pos < 0) return;
  heap_pos_[b] = -1;
  const int32_t last = drain_heap_.back();
  drain_heap_.pop_back();
  if (last == b) return;
  drain_heap_[pos] = last;
  heap_pos_[last] = pos;
  SiftUp(static_cast<size_t>(pos));
  SiftDown(static_cast<size_t>(heap_pos_[last]));
}

// ---- QuantizedNetwork ----

QuantizedNetwork::QuantizedNetwork(const HardwareProfile& profile, int32_t workers,
                                   double quantum_s)
    : FlowNetwork(profile, workers),
      quantum_s_(quantum_s),
      port_flows_(capacity_.size()),
      ports_with_flows_(capacity_.size()),
      unallocated_(capacity_) {}

void QuantizedNetwork::Start(int32_t src, int32_t dst, double bytes, int64_t tag) {
  const int32_t id = ReuseOrAppendId(free_ids_, version_.size(), [&] {
    slot_of_.push_back(0);
    version_.push_back(0);
  });
  const int32_t out = OutPort(src, dst), in = InPort(src, dst);
  const auto slot = static_cast<int32_t>(id_.size());
  slot_of_[id] = slot;
  id_.push_back(id);
  out_port_.push_back(out);
  in_port_.push_back(in);
  out_pos_.push_back(0);
  in_pos_.push_back(0);
  bytes_at_t0_.push_back(bytes);
  t0_.push_back(now_);
  rate_.push_back(0);
  seq_.push_back(next_seq_++);
  tag_.push_back(tag);
  frozen_epoch_.push_back(0);
  entry_made_.push_back(1);
  LinkToPorts(slot, out, in, port_flows_, out_pos_, in_pos_, ports_with_flows_);
  // What both ports have left.
  const double rate = std::min(unallocated_[out], unallocated_[in]);
  if (rate > kSliver * std::min(capacity_[out], capacity_[in])) {
    unallocated_[out] = std::max(0.0, unallocated_[out] - rate);
    unallocated_[in] = std::max(0.0, unallocated_[in] - rate);
    SetRate(slot, rate);
  } else if (bytes <= 0) {
    SetRate(slot, 0);
  }
  dirty_ = true;
}

QuantizedNetwork::Due QuantizedNetwork::DueOf(int32_t slot) const {
  const int32_t id = id_[slot];
  const double bytes = bytes_at_t0_[slot];
  return {t0_[slot] + (bytes > 0 ? bytes / rate_[slot] : 0), seq_[slot], id, version_[id]};
}

void QuantizedNetwork::SetRate(int32_t slot, double rate) {
  bytes_at_t0_[slot] -= rate_[slot] * (now_ - t0_[slot]);
  t0_[slot] = now_;
  rate_[slot] = rate;
  ++version_[id_[slot]];
  due_.push_back(DueOf(slot));
  std::push_heap(due_.begin(), due_.end());
  entry_made_[slot] = 1;  // a far flow refilled: its entry is this one
}

double QuantizedNetwork::RateOf(int64_t tag) {
  RecomputeIfDue();
  for (size_t slot = 0; slot < tag_.size(); ++slot)
    if (tag_[slot] == tag) return rate_[slot];
  return -1;
}

double QuantizedNetwork::NextDrainTime() {
  if (id_.empty()) return kInfinity;
  RecomputeIfDue();
  const double drain = NextDueTime();
  return dirty_ ? std::min(drain, next_recompute_) : drain;
}

void QuantizedNetwork::AdvanceTo(double time, std::vector<int64_t>& drained) {
  RecomputeIfDue();
  drained_scratch_.clear();
  // A recomputation due before `time` happens at its time (the drivers that
  // stop at NextDrainTime never skip one; this keeps the model the same for
  // those that do).
  while (dirty_ && !id_.empty() && next_recompute_ < time) {
    DrainUntil(next_recompute_, next_recompute_ + kDrainSlack_s);
    if (!id_.empty()) Recompute();
  }
  DrainUntil(time, time + kDrainSlack_s);
  std::sort(drained_scratch_.begin(), drained_scratch_.end());
  for (const auto& [seq, tag] : drained_scratch_) drained.push_back(tag);
}

void QuantizedNetwork::DrainUntil(double time, double horizon) {
  now_ = std::max(now_, time);
  while (NextDueTime() <= horizon) {
    std::pop_heap(due_.begin(), due_.end());
    const int32_t slot = slot_of_[due_.back().id];
    due_.pop_back();
    drained_scratch_.emplace_back(seq_[slot], tag_[slot]);
    const int32_t out = out_port_[slot], in = in_port_[slot];
    for (const int32_t port : {out, in})
      unallocated_[port] = std::min(capacity_[port], unallocated_[port] + rate_[slot]);
    Remove(slot);
    Refill(out);
    Refill(in);
    dirty_ = true;
  }
}

double QuantizedNetwork::NextDueTime() {
  for (;;) {
    while (!due_.empty() && due_.front().version != version_[due_.front().id]) {
      std::pop_heap(due_.begin(), due_.end());
      due_.pop_back();
    }
    // No far flow drains before far_from_, so none precedes the heap's front
    // unless this holds.
    const double front = due_.empty() ? kInfinity : due_.front().time;
    if (far_from_ == kInfinity || far_from_ > front) return front;
    for (size_t slot = 0; slot < id_.size(); ++slot)
      if (!entry_made_[slot]) {
        due_.push_back(DueOf(slot));
        entry_made_[slot] = 1;
      }
    std::make_heap(due_.begin(), due_.end());
    far_from_ = kInfinity;
  }
}

void QuantizedNetwork::Refill(int32_t port) {
  double spare = unallocated_[port];
  const double sliver = kSliver * capacity_[port];
  if (spare <= sliver) return;
  // Ordered by (headroom, id): ties go by id, as flows are numbered.
  candidates_.clear();
  for (const auto [slot, other] : port_flows_[port])
    if (unallocated_[other] > kSliver * capacity_[other])
      candidates_.emplace_back(unallocated_[other], id_[slot]);
  std::sort(candidates_.begin(), candidates_.end());
  for (size_t k = 0; k < candidates_.size() && spare > sliver; ++k) {
    const int32_t slot = slot_of_[candidates_[k].second];
    const int32_t other = out_port_[slot] == port ? in_port_[slot] : out_port_[slot];
    const double extra =
        std::min(unallocated_[other], spare / static_cast<double>(candidates_.size() - k));
    if (extra <= kSliver * capacity_[other]) continue;
    unallocated_[other] = std::max(0.0, unallocated_[other] - extra);
    spare -= extra;
    SetRate(slot, rate_[slot] + extra);
  }
  unallocated_[port] = std::max(0.0, spare);
}

void QuantizedNetwork::Remove(int32_t slot) {
  const int32_t id = id_[slot];
  ++version_[id];  // its heap entries are stale
  free_ids_.push_back(id);
  UnlinkFromPorts(slot, out_port_, in_port_, port_flows_, out_pos_, in_pos_, ports_with_flows_,
                  [&](int32_t port) { emptied_ports_.push_back(port); });
  // The last slot takes its place.
  const auto last = static_cast<int32_t>(id_.size()) - 1;
  if (slot != last) {
    CopyRow(last, slot, id_, out_port_, in_port_, out_pos_, in_pos_, bytes_at_t0_, t0_, rate_, seq_,
            tag_, frozen_epoch_, entry_made_);
    slot_of_[id_[slot]] = slot;
    Relink(slot, out_port_, in_port_, out_pos_, in_pos_, port_flows_);
  }
  ResizeAll(last, id_, out_port_, in_port_, out_pos_, in_pos_, bytes_at_t0_, t0_, rate_, seq_, tag_,
            frozen_epoch_, entry_made_);
}

void QuantizedNetwork::RecomputeIfDue() {
  if (dirty_ && now_ >= next_recompute_) Recompute();
}

void QuantizedNetwork::Recompute() {
  dirty_ = false;
  next_recompute_ = now_ + quantum_s_;
  const size_t flows = id_.size();
  for (size_t slot = 0; slot < flows; ++slot) {
    bytes_at_t0_[slot] -= rate_[slot] * (now_ - t0_[slot]);
    t0_[slot] = now_;
  }
  // The filling over the port lists kept current since the last
  // recomputation, over the ports with flows only.
  FillPortLists(port_flows_, ports_with_flows_, frozen_epoch_, epoch_, rate_.data());
  // What the filling left where flows are; a port without flows has its
  // capacity (it has held it since it lost its last flow).
  ports_with_flows_.ForEach([&](int32_t p) { unallocated_[p] = remaining_capacity_[p]; });
  for (const int32_t p : emptied_ports_)
    if (port_flows_[p].empty()) unallocated_[p] = capacity_[p];
  emptied_ports_.clear();
  // Only the drains before the next recomputation or two get an entry now;
  // the next recomputation re-times the rest (NextDueTime makes their
  // entries first if none comes). A flow is far when bytes > rate x 2 quanta
  // by a margin that rounding cannot cross: then its drain time is at least
  // `near`, and the division is left undone. The heap is rebuilt, so the
  // flows' versions stay as they are.
  due_.clear();
  const double near = now_ + 2 * quantum_s_;
  const double far_margin = 2 * quantum_s_ * (1 + 1e-9);
  bool any_far = false;
  for (size_t slot = 0; slot < flows; ++slot) {
    const double bytes = bytes_at_t0_[slot], rate = rate_[slot];
    const bool far = bytes > rate * far_margin;
    entry_made_[slot] = !far;
    any_far |= far;
    if (!far) due_.push_back(DueOf(slot));
  }
  far_from_ = any_far ? near : kInfinity;
  std::make_heap(due_.begin(), due_.end());
}

}  // namespace fcp::sim
