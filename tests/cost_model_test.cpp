#include "fcp/cost_model.h"

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "fcp/error.h"
#include "fuzz/text_readers_check.h"

namespace fcp {
namespace {

TEST(CostModelTest, BuiltinProfilesAreValid) {
  for (const std::string& name : BuiltinProfileNames()) {
    const HardwareProfile p = BuiltinProfile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_NO_THROW(p.validate());
  }
  EXPECT_DOUBLE_EQ(BuiltinProfile("gpu-x").peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(BuiltinProfile("gpu-x").nic_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(BuiltinProfile("gpu-y").nic_bytes_per_s, 100e9);
  try {
    BuiltinProfile("gpu-z");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("gpu-z"), std::string::npos);
  }
}

TEST(CostModelTest, EfficiencyInterpolatesInLogLength) {
  const HardwareProfile p = BuiltinProfile("gpu-x");
  EXPECT_DOUBLE_EQ(KernelEfficiency(p, 512), 0.25);  // a table point (paper section 3.1)
  EXPECT_DOUBLE_EQ(KernelEfficiency(p, 1024), 0.38);
  // Half way in log2 between 512 and 1024.
  EXPECT_NEAR(KernelEfficiency(p, std::sqrt(512.0 * 1024.0)), (0.25 + 0.38) / 2, 1e-12);
  // Below the first point (128 -> 0.07) f falls in proportion to the length.
  EXPECT_NEAR(KernelEfficiency(p, 64), 0.035, 1e-12);
  // Above the last point it is constant, and that is the saturated value.
  EXPECT_DOUBLE_EQ(KernelEfficiency(p, 1 << 22), 0.66);
  EXPECT_DOUBLE_EQ(SaturatedEfficiency(p), 0.66);
  // Monotone over the whole table.
  double last = 0;
  for (double len = 1; len < 1e6; len *= 1.3) {
    const double f = KernelEfficiency(p, len);
    EXPECT_GE(f, last);
    last = f;
  }
}

TEST(CostModelTest, EquivalentKernelLength) {
  // A causal diagonal block of L tokens maps to L + 1 (L (L + 1) / 2 pairs).
  EXPECT_DOUBLE_EQ(EquivalentKernelTokens(4096, int64_t{4096} * 4097 / 2), 4097);
  // A full off-diagonal 4K x 4K block maps to 8K.
  EXPECT_DOUBLE_EQ(EquivalentKernelTokens(4096, int64_t{4096} * 4096), 8192);
  EXPECT_DOUBLE_EQ(EquivalentKernelTokens(0, 0), 0);
}

// The planner's network ratio for a profile: FLOPs computed while one byte
// crosses the NIC. gpu-x: 989e12 x 126/132 x 0.66 / 50e9 = 12462.
TEST(CostModelTest, NetworkFlopsPerByte) {
  EXPECT_NEAR(NetworkFlopsPerByte(BuiltinProfile("gpu-x")), 989e12 * 126.0 / 132.0 * 0.66 / 50e9,
              1e-6);
  HardwareProfile p = BuiltinProfile("gpu-x");
  p.nic_bytes_per_s *= 2;  // twice the network: half the ratio
  EXPECT_NEAR(NetworkFlopsPerByte(p), NetworkFlopsPerByte(BuiltinProfile("gpu-x")) / 2, 1e-6);
}

TEST(CostModelTest, AttentionAndTransferTimes) {
  HardwareProfile p;
  p.peak_flops = 1e15;
  p.nvlink_bytes_per_s = 100;
  p.nic_bytes_per_s = 10;
  p.nvlink_latency_s = 1;
  p.nic_latency_s = 2;
  p.compute_sm_fraction = 0.5;
  p.backward_efficiency_ratio = 0.5;
  p.gpus_per_node = 4;
  p.efficiency = {{1, 0.5}};
  ASSERT_NO_THROW(p.validate());
  // 1e15 FLOPs at 1e15 * 0.5 (SMs) * 0.5 (f) = 4 s; the backward kernel is half as efficient.
  EXPECT_DOUBLE_EQ(AttentionTime_s(p, 1e15, 4096, false), 4);
  EXPECT_DOUBLE_EQ(AttentionTime_s(p, 1e15, 4096, true), 8);
  EXPECT_TRUE(SameNode(p, 0, 3));
  EXPECT_FALSE(SameNode(p, 3, 4));
  EXPECT_DOUBLE_EQ(TransferTime_s(p, 1000, 0, 3), 1 + 10);   // NVLink
  EXPECT_DOUBLE_EQ(TransferTime_s(p, 1000, 3, 4), 2 + 100);  // NIC
}

TEST(CostModelTest, ValidateNamesTheField) {
  HardwareProfile p = BuiltinProfile("gpu-x");
  p.nic_bytes_per_s = 0;
  try {
    p.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("nic_bytes_per_s"), std::string::npos);
  }
  p = BuiltinProfile("gpu-x");
  p.efficiency = {{1024, 0.5}, {512, 0.6}};
  try {
    p.validate();
    FAIL();
  } catch (const Error& e) {  // the table's one check (ValidateEfficiencyTable), in context
    EXPECT_STREQ(e.what(),
                 "profile 'gpu-x': efficiency point 1: tokens must increase (512 after "
                 "1024)");
  }
  p.efficiency = {{512, 1.5}};
  EXPECT_THROW(p.validate(), Error);
  p.efficiency.clear();
  EXPECT_THROW(p.validate(), Error);
}

TEST(CostModelTest, JsonRoundTripAndBase) {
  for (const std::string& name : BuiltinProfileNames()) {
    const HardwareProfile p = BuiltinProfile(name);
    const HardwareProfile back = ParseProfileJson(WriteProfileJson(p));
    EXPECT_EQ(back.name, p.name);
    EXPECT_DOUBLE_EQ(back.peak_flops, p.peak_flops);
    EXPECT_NEAR(back.nic_latency_s, p.nic_latency_s, 1e-18);
    EXPECT_EQ(back.efficiency, p.efficiency);
  }
  // A user pastes a measured curve over the gpu-x defaults.
  const HardwareProfile mine = ParseProfileJson(
      R"({"base": "gpu-x", "name": "my-h100", "efficiency": [[1024, 0.3], [8192, 0.7]]})");
  EXPECT_EQ(mine.name, "my-h100");
  EXPECT_DOUBLE_EQ(mine.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(KernelEfficiency(mine, 8192), 0.7);
  EXPECT_NEAR(KernelEfficiency(mine, 2048), 0.3 + 0.4 / 3, 1e-12);
}

// Issue 19: deep nesting is a parse error (it was a segfault), a directory
// is named as one, and the seeds of the profile fuzzer pass its check.
TEST(CostModelTest, HostileProfiles) {
  try {
    ParseProfileJson("{\"peak_flops\": " + std::string(100000, '[') + std::string(100000, ']') +
                     "}");
    ADD_FAILURE() << "accepted deep nesting";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    EXPECT_NE(std::string(e.what()).find("nest deeper than 64 levels"), std::string::npos)
        << e.what();
  }
  try {
    LoadProfileJson(std::filesystem::temp_directory_path().string());
    ADD_FAILURE() << "read a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  fuzz::ForEachSavedInput(std::filesystem::path(FCP_TESTS_DIR) / "fuzz/profiles",
                          [](const std::filesystem::path& path, const std::string& text) {
                            EXPECT_TRUE(fuzz::CheckProfileText(text)) << path;
                          });
  EXPECT_FALSE(fuzz::CheckProfileText("{\"gpus_per_node\": [[[]]]}"));
}

TEST(CostModelTest, JsonErrors) {
  const auto code_of = [](const std::string& text) {
    try {
      ParseProfileJson(text);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;
  };
  EXPECT_EQ(code_of("{"), ErrorCode::kParse);
  EXPECT_EQ(code_of("[]"), ErrorCode::kParse);
  EXPECT_EQ(code_of(R"({"base": "gpu-x", "peak_flops": "fast"})"), ErrorCode::kParse);
  // A repeated field would be read as its last value.
  EXPECT_EQ(code_of(R"({"base": "gpu-x", "peak_flops": 1e15, "peak_flops": 2e15})"),
            ErrorCode::kParse);
  EXPECT_EQ(code_of(R"({"base": "gpu-x", "peak_flops": -1})"), ErrorCode::kParse);
  // Positive but too small to simulate: times would overflow a double.
  EXPECT_EQ(code_of(R"({"base": "gpu-x", "peak_flops": 1e-300})"), ErrorCode::kParse);
  EXPECT_EQ(code_of(R"({"base": "gpu-x", "gpus_per_node": 4294967297})"), ErrorCode::kParse);
  try {
    ParseProfileJson(R"({"base": "gpu-x", "backward_efficiency_ratio": 1e308})");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("got 1e+308"), std::string::npos) << e.what();
  }
  EXPECT_EQ(code_of(R"({"base": "gpu-q"})"), ErrorCode::kParse);
  EXPECT_EQ(code_of(R"({"base": "gpu-x", "efficiency": [[512]]})"), ErrorCode::kParse);
  EXPECT_EQ(code_of(R"({"peak_flops": 1e15})"), ErrorCode::kParse);  // no base: bandwidths missing
  try {
    LoadProfileJson("/nonexistent/profile.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
  }
  EXPECT_EQ(ResolveProfile("gpu-y").name, "gpu-y");
}

}  // namespace
}  // namespace fcp
