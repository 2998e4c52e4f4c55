// The port proxy (src/plan/port_proxy.h): a hand-worked plan with its
// exact ports, across nodes and inside one.
#include "port_proxy.h"

#include <vector>

#include <gtest/gtest.h>

#include "assignment_context.h"
#include "fcp/required_pairs.h"

namespace fcp::detail {
namespace {

// One causal sequence of 8 tokens in blocks of 4 on 2 workers, each its own
// node; worker 0 holds tokens 0-3 in the dataloader, worker 1 tokens 4-7.
// Pairs: q0 x kv0 (10 token pairs), q1 x kv0 (16), q1 x kv1 (10).
struct TwoBlocks {
  std::vector<int64_t> lengths{8};
  std::vector<int64_t> offsets = SequenceOffsets(lengths);
  std::vector<Block> blocks{Block{0, {{0, 0, 4}}}, Block{0, {{0, 4, 4}}}};
  std::vector<RequiredPair> pairs{{0, 0, 10}, {1, 0, 16}, {1, 1, 10}};
  Csr users = BuildUsers(pairs, 2);
  std::vector<int64_t> block_work{10, 26};
  PortInput input() const {
    PortInput in;
    in.blocks = &blocks;
    in.users = &users;
    in.block_work = &block_work;
    in.offsets = &offsets;
    in.workers = 2;
    in.node_workers = 1;
    in.attention = {2, 1, 8, 2};  // Q, K, V: 2 K/V tokens a token; O: 1
    in.pairs_per_traffic_token = 10;
    return in;
  }
};

// Each block on the other's dataloader worker. Worker 0 computes q1 (26
// pairs) and receives kv0 (4 tokens) from worker 1; each holds 4 tokens of
// the other and lends 4. Forward ports (x 10): worker 0 in 4 + 2*4 + 1*4 =
// 16, out 0 + 1*4 + 2*4 = 12; worker 1 in 12, out 16. Backward (K/V in +
// out = 4 on both): in 4 + 1*4 + 2*4 = 16, out 16, above 10/3 x 26.
// Proxy: 160 + 160.
TEST(PortProxyTest, HandWorkedPorts) {
  const TwoBlocks t;
  const PortLoads l = CountPorts(t.input(), {1, 0});
  EXPECT_EQ(l.compute, (std::vector<int64_t>{26, 10}));
  EXPECT_EQ(l.kv_in, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(l.kv_out, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(l.away, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(l.lent, (std::vector<int64_t>{4, 4}));
  const auto ports = [&](const PortLoads& loads, int32_t w) {
    const Ports p = PortsOf(t.input(), loads, w);
    return std::vector<double>{p.forward_in, p.forward_out, p.backward_in, p.backward_out};
  };
  EXPECT_EQ(ports(l, 0), (std::vector<double>{160, 120, 160, 160}));
  EXPECT_EQ(ports(l, 1), (std::vector<double>{120, 160, 160, 160}));
  EXPECT_DOUBLE_EQ(PortProxy(t.input(), l), 320.0);
  // Both blocks on worker 1: it holds 4 tokens of worker 0, nothing else
  // crosses. Worker 0 forward in O (1 x 4), out Q, K, V (2 x 4); backward
  // in dQ, dK, dV (8), out dO (4); worker 1 the reverse. Proxy: forward 80,
  // backward 10/3 x 36 = 120.
  const PortLoads both = CountPorts(t.input(), {1, 1});
  EXPECT_EQ(both.away, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(both.lent, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(ports(both, 0), (std::vector<double>{40, 80, 80, 40}));
  EXPECT_EQ(ports(both, 1), (std::vector<double>{80, 40, 40, 80}));
  EXPECT_DOUBLE_EQ(PortProxy(t.input(), both), 80.0 + 36.0 * kBackwardComputeRatio);
  // At home: only kv0 crosses (worker 0 to 1). Forward 40 (both ports of
  // the transfer), backward max(40, 10/3 x 26).
  const PortLoads home = CountPorts(t.input(), {0, 1});
  EXPECT_EQ(home.kv_in, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(home.kv_out, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(home.away, (std::vector<int64_t>{0, 0}));
  EXPECT_DOUBLE_EQ(PortProxy(t.input(), home), 40.0 + 26.0 * kBackwardComputeRatio);
  // One node: nothing crosses, the proxy is the compute's.
  PortInput one = t.input();
  one.node_workers = 2;
  const PortLoads inside = CountPorts(one, {1, 0});
  EXPECT_EQ(inside.kv_in, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(inside.away, (std::vector<int64_t>{0, 0}));
  EXPECT_DOUBLE_EQ(PortProxy(one, inside), 26.0 + 26.0 * kBackwardComputeRatio);
}

}  // namespace
}  // namespace fcp::detail
