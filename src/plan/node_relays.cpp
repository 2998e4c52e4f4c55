#include "fcp/node_relays.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "fcp/error.h"
#include "fcp/required_pairs.h"
#include "planner_constants.h"

namespace fcp {
namespace {

using detail::kBackwardWork;  // planner_constants.h
using detail::kHotPortShare;

bool TransferLess(const Transfer& a, const Transfer& b) {
  return std::tie(a.src, a.dst, a.block) < std::tie(b.src, b.dst, b.block);
}

// A transfer between an owner and a worker of another node: the group it
// belongs to (its block and that other node), its stage and the other end.
struct Crossing {
  int32_t block = 0;
  int32_t node = 0;  // the non-owner end's node
  int32_t stage = 0;
  int32_t worker = 0;  // the non-owner end
  Transfer* transfer = nullptr;
};

bool CrossingLess(const Crossing& a, const Crossing& b) {
  return std::tie(a.block, a.node, a.stage, a.worker) <
         std::tie(b.block, b.node, b.stage, b.worker);
}

class Relayer {
 public:
  Relayer(const Plan& plan, int32_t node_workers, const std::vector<RequiredPair>& pairs,
          double network_flops_per_byte)
      : plan_(plan), node_(node_workers), ratio_(network_flops_per_byte) {
    FCP_CHECK(node_workers >= 1, "node relays: node_workers >= 1");
    for (const Block& b : plan.blocks)
      FCP_CHECK(b.worker >= 0 && b.worker < plan.workers, "node relays: block owners in range");
    std::vector<int64_t> token_pairs(plan.workers, 0);
    for (const RequiredPair& p : pairs) {
      FCP_CHECK(p.q_block >= 0 && static_cast<size_t>(p.q_block) < plan.blocks.size(),
                "node relays: pair blocks in range");
      token_pairs[Owner(p.q_block)] += p.token_pairs;
    }
    forward_flops_.resize(plan.workers);
    for (int32_t w = 0; w < plan.workers; ++w)
      forward_flops_[w] = ForwardFlops(plan.attention, token_pairs[w]);
  }

  // One pass's transfers of one kind, one list per stage. K/V (`partials`
  // false): an owner's sends to another node, each receipt after the
  // node's first taken from that first receiver in its own stage. Partials:
  // sends to an owner from another node, each send before the node's last
  // made to that last sender in its own stage. `work`: the pass's compute
  // over the forward's. Returns the transfers rewritten.
  int64_t Relay(const std::vector<std::vector<Transfer>*>& stages, bool partials, double work) {
    // The owner's end of a transfer (the relay takes its place) and the far one.
    const auto owner_end = [&](Transfer& t) -> int32_t& { return partials ? t.dst : t.src; };
    const auto far_end = [&](const Transfer& t) { return partials ? t.src : t.dst; };
    std::vector<Crossing> crossings;
    // Per (stage, worker): its transfers at the owner's end (sends of K/V,
    // receipts of partials), which the congestion bound caps at c.
    std::vector<int32_t> load(stages.size() * plan_.workers, 0);
    const auto load_at = [&](int32_t stage, int32_t worker) -> int32_t& {
      return load[static_cast<size_t>(stage) * plan_.workers + worker];
    };
    std::vector<double> nic_bytes(plan_.workers, 0);  // each owner's crossings
    for (size_t s = 0; s < stages.size(); ++s)
      for (Transfer& t : *stages[s]) {
        const int32_t end = owner_end(t);
        ++load_at(static_cast<int32_t>(s), end);
        if (end != Owner(t.block) || Node(far_end(t)) == Node(end) || !t.all_rows()) continue;
        crossings.push_back({t.block, Node(far_end(t)), static_cast<int32_t>(s), far_end(t), &t});
        nic_bytes[end] += Bytes(t.block);
      }
    DropCool(crossings, nic_bytes, work);
    std::sort(crossings.begin(), crossings.end(), CrossingLess);
    // Rounds until none relays more: a rewrite frees a place at the owner's
    // end in its stage, and that owner may be another group's relay.
    int64_t relayed = 0, round = 0;
    do {
      round = 0;
      ForEachGroup(crossings, [&](const Crossing* first, const Crossing* last) {
        // K/V: the earliest receipt; partials: the latest send. Ties: the lowest id.
        const Crossing* relay = first;
        if (partials)
          for (const Crossing* x = first + 1; x != last; ++x)
            if (x->stage > relay->stage) relay = x;
        for (const Crossing* x = first; x != last; ++x) {
          Transfer& t = *x->transfer;
          const bool in_order = partials ? x->stage < relay->stage : x->stage > relay->stage;
          if (owner_end(t) != Owner(x->block) || !in_order ||
              load_at(x->stage, relay->worker) >= plan_.coalesce)
            continue;
          ++load_at(x->stage, relay->worker);
          --load_at(x->stage, owner_end(t));
          owner_end(t) = relay->worker;
          ++round;
        }
      });
      relayed += round;
    } while (round > 0);
    if (relayed > 0) SortStages(stages);
    return relayed;
  }

 private:
  int32_t Owner(int32_t block) const { return plan_.blocks[block].worker; }
  int32_t Node(int32_t worker) const { return worker / node_; }
  double Bytes(int32_t block) const {
    return static_cast<double>(KvTransferBytes(plan_.attention, plan_.blocks[block].tokens()));
  }

  // Keeps the crossings of owners whose network port is nearly as busy as
  // their compute in the pass (NIC bytes x the network ratio above
  // kHotPortShare x `work` x their forward FLOPs): elsewhere the port is not
  // what the owner waits for, and a relayed receipt waits for all of the
  // relay's receipts of the stage before (the runtime's rule), which only
  // delays it.
  void DropCool(std::vector<Crossing>& crossings, const std::vector<double>& nic_bytes,
                double work) const {
    std::erase_if(crossings, [&](const Crossing& x) {
      const int32_t owner = Owner(x.block);
      return !(ratio_ * nic_bytes[owner] > kHotPortShare * work * forward_flops_[owner]);
    });
  }

  // Calls f(first, last) for each run of crossings of one (block, node) with
  // at least two members.
  template <typename F>
  static void ForEachGroup(const std::vector<Crossing>& crossings, F f) {
    for (size_t a = 0; a < crossings.size();) {
      size_t b = a + 1;
      while (b < crossings.size() && crossings[b].block == crossings[a].block &&
             crossings[b].node == crossings[a].node)
        ++b;
      if (b - a >= 2) f(crossings.data() + a, crossings.data() + b);
      a = b;
    }
  }

  static void SortStages(const std::vector<std::vector<Transfer>*>& stages) {
    for (std::vector<Transfer>* list : stages) std::sort(list->begin(), list->end(), TransferLess);
  }

  const Plan& plan_;
  int32_t node_;
  double ratio_;
  std::vector<double> forward_flops_;  // per worker: its query blocks' pairs
};

}  // namespace

RelayCounts RelayThroughNodes(Plan& plan, int32_t node_workers,
                              const std::vector<RequiredPair>& pairs,
                              double network_flops_per_byte) {
  Relayer relayer(plan, node_workers, pairs, network_flops_per_byte);
  RelayCounts counts;
  if (node_workers <= 1) return counts;
  std::vector<std::vector<Transfer>*> forward, backward_kv, backward_dkv;
  for (ForwardStage& s : plan.forward) forward.push_back(&s.send);
  for (BackwardStage& s : plan.backward) {
    backward_kv.push_back(&s.send_kv);
    backward_dkv.push_back(&s.send_dkv);
  }
  counts.forward_kv = relayer.Relay(forward, false, 1);
  counts.backward_kv = relayer.Relay(backward_kv, false, kBackwardWork);
  counts.dkv = relayer.Relay(backward_dkv, true, kBackwardWork);
  return counts;
}

}  // namespace fcp
