#include "port_proxy.h"

#include <algorithm>

#include "assignment_parts.h"
#include "fcp/error.h"

namespace fcp::detail {

namespace {

// Reshuffle bytes per token, in K/V tokens (2 Hkv D dtype bytes): Q, K, V
// and (the forward's output) O.
double QkvTokens(const AttentionShape& a) {
  return (a.heads_q + 2.0 * a.heads_kv) / (2.0 * a.heads_kv);
}
double OTokens(const AttentionShape& a) { return a.heads_q / (2.0 * a.heads_kv); }

int32_t NodeSize(const PortInput& input) { return std::max<int32_t>(input.node_workers, 1); }

}  // namespace

Ports PortsOf(const PortInput& input, const PortLoads& l, int32_t w) {
  const double qkv = QkvTokens(input.attention), o = OTokens(input.attention);
  const double r = input.pairs_per_traffic_token;
  const double away = static_cast<double>(l.away[w]), lent = static_cast<double>(l.lent[w]);
  const double in = static_cast<double>(l.kv_in[w]), out = static_cast<double>(l.kv_out[w]);
  return {r * (in + qkv * away + o * lent), r * (out + o * away + qkv * lent),
          r * (in + out + o * away + qkv * lent), r * (in + out + qkv * away + o * lent)};
}

PortLoads CountPorts(const PortInput& input, const std::vector<int32_t>& owner) {
  const std::vector<Block>& blocks = *input.blocks;
  const int32_t n = input.workers;
  const int32_t node = NodeSize(input);
  const int32_t block_count = static_cast<int32_t>(blocks.size());
  FCP_CHECK(owner.size() == blocks.size(), "port loads: one owner per block");
  PortLoads l;
  l.compute.assign(n, 0);
  l.kv_in.assign(n, 0);
  l.kv_out.assign(n, 0);
  l.away.assign(n, 0);
  l.lent.assign(n, 0);
  FCP_CHECK(input.block_work->size() == blocks.size(), "port loads: one work per block");
  for (int32_t b = 0; b < block_count; ++b) l.compute[owner[b]] += (*input.block_work)[b];
  // Per block: its owner's node, its tokens.
  std::vector<int32_t> owner_node(block_count);
  std::vector<int64_t> block_tokens(block_count);
  for (int32_t b = 0; b < block_count; ++b) {
    owner_node[b] = owner[b] / node;
    block_tokens[b] = blocks[b].tokens();
  }
  // The transfers that cross nodes, as the assignment counts transfers.
  std::vector<int32_t> seen(n, -1);
  ForEachTransfer(
      *input.users, owner, seen,
      [&](int32_t kv, int32_t to) {
        if (owner_node[kv] == to / node) return;
        l.kv_in[to] += block_tokens[kv];
        l.kv_out[owner[kv]] += block_tokens[kv];
      },
      [](int32_t, int32_t, int32_t) {});
  for (int32_t b = 0; b < block_count; ++b)
    for (const Segment& s : blocks[b].segments)
      ForEachDataloaderRun(s, *input.offsets, n, [&](int32_t home, int64_t tokens) {
        if (home / node == owner_node[b]) return;
        l.away[owner[b]] += tokens;
        l.lent[home] += tokens;
      });
  return l;
}

double PortProxy(const PortInput& input, const PortLoads& loads) {
  double forward = 0, backward = 0;
  for (int32_t w = 0; w < input.workers; ++w) {
    const Ports p = PortsOf(input, loads, w);
    const double c = static_cast<double>(loads.compute[w]);
    forward = std::max({forward, c, p.forward_in, p.forward_out});
    backward = std::max({backward, kBackwardComputeRatio * c, p.backward_in, p.backward_out});
  }
  return forward + backward;
}

}  // namespace fcp::detail
