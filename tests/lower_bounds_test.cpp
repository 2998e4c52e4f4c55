#include "fcp/lower_bounds.h"

#include <gtest/gtest.h>

#include "fcp/error.h"

namespace fcp {
namespace {

// Nodes of `gpus_per_node`; NIC 1 byte/s, NVLink `nvlink` bytes/s.
HardwareProfile Links(int32_t gpus_per_node, double nvlink = 1) {
  HardwareProfile p;
  p.name = "links";
  p.peak_flops = 1;
  p.gpus_per_node = gpus_per_node;
  p.nvlink_bytes_per_s = nvlink;
  p.nic_bytes_per_s = 1;
  p.efficiency = {{1, 1.0}};
  return p;
}

// Two workers, one transfer of 8 bytes, busy 10 and 26 s: compute binds.
TEST(LowerBoundsTest, TwoWorkersOneTransfer) {
  const PassBounds b = ComputePassBounds(Links(1), {10, 26}, {{0, 1, 8}});
  EXPECT_DOUBLE_EQ(b.mean_compute_s, 18);
  EXPECT_DOUBLE_EQ(b.max_compute_s, 26);
  EXPECT_DOUBLE_EQ(b.nic_out_s, 8);
  EXPECT_DOUBLE_EQ(b.nic_in_s, 8);
  EXPECT_DOUBLE_EQ(b.nvlink_in_s, 0);
  EXPECT_DOUBLE_EQ(b.bound_s, 26);
  EXPECT_EQ(b.binding, "compute");
  ASSERT_EQ(b.workers.size(), 2u);
  EXPECT_DOUBLE_EQ(b.workers[0].nic_out_s, 8);
  EXPECT_DOUBLE_EQ(b.workers[0].nic_in_s, 0);
  EXPECT_DOUBLE_EQ(b.workers[1].nic_in_s, 8);
  EXPECT_DOUBLE_EQ(b.workers[1].compute_s, 26);
}

// Three senders, one receiver: w3's in-port carries 3 x 8 bytes, each
// sender's out-port 8. The busiest in-port binds, not the sum sent + received
// averaged over workers (which is 12).
TEST(LowerBoundsTest, ThreeToOneHotspot) {
  const PassBounds b = ComputePassBounds(Links(1), {1, 1, 1, 2}, {{0, 3, 8}, {1, 3, 8}, {2, 3, 8}});
  EXPECT_DOUBLE_EQ(b.nic_in_s, 24);
  EXPECT_DOUBLE_EQ(b.nic_out_s, 8);
  EXPECT_DOUBLE_EQ(b.bound_s, 24);
  EXPECT_EQ(b.binding, "nic_in");
  EXPECT_DOUBLE_EQ(b.workers[3].nic_in_s, 24);
  EXPECT_DOUBLE_EQ(b.workers[3].nic_out_s, 0);
  // Full duplex: the same bytes back out of w3 use its other port.
  const PassBounds both =
      ComputePassBounds(Links(1), {1, 1, 1, 2}, {{0, 3, 8}, {1, 3, 8}, {2, 3, 8}, {3, 0, 24}});
  EXPECT_DOUBLE_EQ(both.nic_in_s, 24);
  EXPECT_DOUBLE_EQ(both.nic_out_s, 24);
  EXPECT_DOUBLE_EQ(both.bound_s, 24);
}

// Nodes of two: 0 -> 1 stays on NVLink (4 bytes/s), 0 -> 2 crosses the NIC.
TEST(LowerBoundsTest, NvlinkAndNicAreSeparatePorts) {
  const PassBounds b =
      ComputePassBounds(Links(2, 4), {0, 0, 0, 0}, {{0, 1, 8}, {0, 2, 8}, {3, 2, 2}});
  EXPECT_DOUBLE_EQ(b.nvlink_out_s, 2);  // w0: 8 bytes at 4 bytes/s
  EXPECT_DOUBLE_EQ(b.nvlink_in_s, 2);   // w1
  EXPECT_DOUBLE_EQ(b.nic_out_s, 8);     // w0
  EXPECT_DOUBLE_EQ(b.nic_in_s, 8);      // w2 (the 2 bytes from w3 are NVLink)
  EXPECT_DOUBLE_EQ(b.workers[2].nvlink_in_s, 0.5);
  EXPECT_DOUBLE_EQ(b.workers[2].nic_in_s, 8);
  EXPECT_DOUBLE_EQ(b.workers[0].nvlink_out_s, 2);
  EXPECT_DOUBLE_EQ(b.bound_s, 8);
  EXPECT_EQ(b.binding, "nic_in");  // ties go to the first term in the documented order
  // On one node of four everything is NVLink.
  const PassBounds one = ComputePassBounds(Links(4, 4), {0, 0, 0, 0}, {{0, 1, 8}, {0, 2, 8}});
  EXPECT_DOUBLE_EQ(one.nic_out_s, 0);
  EXPECT_DOUBLE_EQ(one.nvlink_out_s, 4);
  EXPECT_EQ(one.binding, "nvlink_out");
}

TEST(LowerBoundsTest, EmptyPassAndBadInput) {
  const PassBounds empty = ComputePassBounds(Links(1), {0, 0}, {});
  EXPECT_DOUBLE_EQ(empty.bound_s, 0);
  EXPECT_EQ(empty.binding, "compute");
  EXPECT_THROW(ComputePassBounds(Links(1), {0, 0}, {{0, 2, 1}}), Error);
  EXPECT_THROW(ComputePassBounds(Links(1), {0, 0}, {{1, 1, 1}}), Error);
  EXPECT_THROW(ComputePassBounds(Links(1), {0, 0}, {{-1, 1, 1}}), Error);
  EXPECT_THROW(ComputePassBounds(Links(1), {0, 0}, {{0, 1, -1}}), Error);
  EXPECT_THROW(ComputePassBounds(Links(1), {-1, 0}, {}), Error);
  try {
    ComputePassBounds(Links(1), {0, 0}, {{0, 5, 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("0 -> 5"), std::string::npos) << e.what();
  }
  HardwareProfile bad = Links(1);
  bad.nic_bytes_per_s = 0;
  EXPECT_THROW(ComputePassBounds(bad, {0}, {}), Error);
}

}  // namespace
}  // namespace fcp
