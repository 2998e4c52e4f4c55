// .npy reading and writing: round trips (v1.0 headers, row ranges), headers
// written by NumPy itself (v1.0 and v2.0, hand-copied bytes), and every kind
// of malformed file giving Error(kParse) or Error(kIo).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fcp/error.h"
#include "fcp/npy.h"

namespace fcp {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("fcp_npy_test_" + name)).string();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string Floats(const std::vector<float>& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4);
}

TEST(Npy, HeaderIsPaddedTo64AndParsesBack) {
  const std::string h = NpyHeaderBytes({3, 2, 4});
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(h.back(), '\n');
  const NpyHeader parsed = ParseNpyHeader(h, "x");
  EXPECT_EQ(parsed.shape, (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(parsed.data_offset_bytes, static_cast<int64_t>(h.size()));
  EXPECT_EQ(ParseNpyHeader(NpyHeaderBytes({5}), "x").shape, (std::vector<int64_t>{5}));
}

TEST(Npy, RoundTripWholeAndRows) {
  const std::string path = TempPath("round.npy");
  std::vector<float> data(4 * 3);
  for (size_t i = 0; i < data.size(); ++i) data[i] = 0.5f * i - 1;
  WriteNpy(path, {4, 3}, data.data());
  std::vector<int64_t> shape;
  EXPECT_EQ(ReadNpy(path, &shape), data);
  EXPECT_EQ(shape, (std::vector<int64_t>{4, 3}));
  const NpyHeader h = ReadNpyHeader(path);
  EXPECT_EQ(ReadNpyRows(path, h, 1, 3), std::vector<float>(data.begin() + 3, data.begin() + 9));
  EXPECT_TRUE(ReadNpyRows(path, h, 2, 2).empty());
  EXPECT_THROW(ReadNpyRows(path, h, 3, 5), Error);
  // Rows written in two pieces into a pre-sized file give the same array.
  const std::string path2 = TempPath("rows.npy");
  CreateNpy(path2, {4, 3});
  WriteNpyRows(path2, {4, 3}, 2, 2, data.data() + 6);
  WriteNpyRows(path2, {4, 3}, 0, 2, data.data());
  EXPECT_EQ(ReadNpy(path2, nullptr), data);
  std::filesystem::remove(path);
  std::filesystem::remove(path2);
}

TEST(Npy, ReadsNumpyVersion2Header) {
  // numpy.lib.format.write_array(f, a, version=(2, 0)) for a = float32 [[1, 2]].
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }";
  dict.append((12 + dict.size() + 1 + 63) / 64 * 64 - 12 - dict.size() - 1, ' ');
  dict += '\n';
  std::string bytes = std::string("\x93NUMPY\x02\x00", 8);
  bytes += static_cast<char>(dict.size());
  bytes += std::string(3, '\0');  // dict.size() < 256
  bytes += dict + Floats({1, 2});
  const std::string path = TempPath("v2.npy");
  WriteBytes(path, bytes);
  std::vector<int64_t> shape;
  EXPECT_EQ(ReadNpy(path, &shape), (std::vector<float>{1, 2}));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 2}));
  std::filesystem::remove(path);
}

void ExpectParseError(const std::string& bytes, const std::string& needle) {
  const std::string path = TempPath("bad.npy");
  WriteBytes(path, bytes);
  try {
    ReadNpy(path, nullptr);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

std::string WithDict(const std::string& dict) {
  std::string d = dict + "\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(d.size());
  bytes += '\0';
  return bytes + d;
}

TEST(Npy, MalformedFilesGiveParseErrors) {
  ExpectParseError("hello world, not numpy", "bad magic");
  ExpectParseError(
      WithDict("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }") + Floats({0, 0}),
      "float32");
  ExpectParseError(
      WithDict("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }") + Floats({0}),
      "float32");
  ExpectParseError(
      WithDict("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }") + Floats({0}),
      "C order");
  ExpectParseError(
      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }") + Floats({0}), "needs");
  ExpectParseError(WithDict("{'descr': '<f4', 'fortran_order': False, }"), "shape");
  ExpectParseError(WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"), "shape");
  ExpectParseError(std::string("\x93NUMPY\x01\x00\x50\x00{'descr'", 17), "truncated");
}

TEST(Npy, MissingFileIsIoError) {
  try {
    ReadNpyHeader(TempPath("does_not_exist.npy"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
  }
}

}  // namespace
}  // namespace fcp
