#include "fcp/npy.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "fcp/error.h"
#include "fcp/file_io.h"

namespace fcp {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

[[noreturn]] void ParseFail(const std::string& what, const std::string& msg) {
  throw Error(ErrorCode::kParse, "npy " + what + ": " + msg);
}

// Finds the value text after 'key': in the header dict (up to the next
// top-level comma or closing brace; a tuple value is kept whole).
std::string DictValue(const std::string& dict, const std::string& key, const std::string& what) {
  const std::string quoted1 = "'" + key + "'";
  const std::string quoted2 = "\"" + key + "\"";
  size_t pos = dict.find(quoted1);
  size_t key_len = quoted1.size();
  if (pos == std::string::npos) {
    pos = dict.find(quoted2);
    key_len = quoted2.size();
  }
  if (pos == std::string::npos) ParseFail(what, "header has no '" + key + "' field");
  pos = dict.find(':', pos + key_len);
  if (pos == std::string::npos) ParseFail(what, "header field '" + key + "' has no value");
  ++pos;
  while (pos < dict.size() && std::isspace(static_cast<unsigned char>(dict[pos]))) ++pos;
  size_t end = pos;
  if (end < dict.size() && dict[end] == '(') {
    end = dict.find(')', end);
    if (end == std::string::npos) ParseFail(what, "unterminated shape tuple");
    return dict.substr(pos, end + 1 - pos);
  }
  while (end < dict.size() && dict[end] != ',' && dict[end] != '}') ++end;
  std::string value = dict.substr(pos, end - pos);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  return value;
}

std::vector<int64_t> ParseShape(const std::string& tuple, const std::string& what) {
  if (tuple.size() < 2 || tuple.front() != '(' || tuple.back() != ')')
    ParseFail(what, "shape must be a tuple, got " + tuple);
  std::vector<int64_t> shape;
  size_t pos = 1;
  const size_t end = tuple.size() - 1;
  while (pos < end) {
    while (pos < end && (std::isspace(static_cast<unsigned char>(tuple[pos])) || tuple[pos] == ','))
      ++pos;
    if (pos >= end) break;
    if (!std::isdigit(static_cast<unsigned char>(tuple[pos])))
      ParseFail(what, "shape entries must be non-negative integers, got " + tuple);
    int64_t value = 0;
    while (pos < end && std::isdigit(static_cast<unsigned char>(tuple[pos]))) {
      if (value > (std::numeric_limits<int64_t>::max() - 9) / 10)
        ParseFail(what, "shape entry too large in " + tuple);
      value = value * 10 + (tuple[pos] - '0');
      ++pos;
    }
    shape.push_back(value);
    while (pos < end && std::isspace(static_cast<unsigned char>(tuple[pos]))) ++pos;
    if (pos < end && tuple[pos] != ',') ParseFail(what, "malformed shape tuple " + tuple);
  }
  return shape;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  return s + ")";
}

std::FILE* OpenOrThrow(const std::string& path, const char* mode) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f)
    throw Error(ErrorCode::kIo, "npy " + path + ": cannot open (" + std::strerror(errno) + ")");
  return f;
}

struct FileCloser {
  std::FILE* f;
  ~FileCloser() {
    if (f) std::fclose(f);
  }
};

int64_t FileSize(std::FILE* f, const std::string& path) {
  if (std::fseek(f, 0, SEEK_END) != 0) throw Error(ErrorCode::kIo, "npy " + path + ": cannot seek");
  const long size = std::ftell(f);
  if (size < 0) throw Error(ErrorCode::kIo, "npy " + path + ": cannot tell size");
  return size;
}

}  // namespace

int64_t NpyHeader::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t NpyHeader::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

NpyHeader ParseNpyHeader(const std::string& bytes, const std::string& what) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    ParseFail(what, "not an .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t len_bytes = 0;
  if (major == 1)
    len_bytes = 2;
  else if (major == 2 || major == 3)
    len_bytes = 4;
  else
    ParseFail(what, "unsupported format version " + std::to_string(major));
  if (bytes.size() < 8 + len_bytes) ParseFail(what, "truncated header");
  uint64_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i)
    header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  const size_t start = 8 + len_bytes;
  if (bytes.size() < start + header_len) ParseFail(what, "truncated header");
  const std::string dict = bytes.substr(start, header_len);
  std::string descr = DictValue(dict, "descr", what);
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"'))
    descr = descr.substr(1, descr.size() - 2);
  if (descr != "<f4" && descr != "=f4" && descr != "f4")
    ParseFail(what, "dtype must be little-endian float32 '<f4', got '" + descr + "'");
  const std::string fortran = DictValue(dict, "fortran_order", what);
  if (fortran != "False")
    ParseFail(what, "array must be in C order (fortran_order False), got " + fortran);
  NpyHeader header;
  header.shape = ParseShape(DictValue(dict, "shape", what), what);
  header.data_offset_bytes = static_cast<int64_t>(start + header_len);
  return header;
}

NpyHeader ReadNpyHeader(const std::string& path) {
  std::FILE* f = OpenOrThrow(path, "rb");
  FileCloser closer{f};
  std::string bytes(12, '\0');
  size_t got = std::fread(bytes.data(), 1, bytes.size(), f);
  bytes.resize(got);
  if (got >= 10 && std::memcmp(bytes.data(), kMagic, kMagicBytes) == 0) {
    const int major = static_cast<unsigned char>(bytes[6]);
    uint64_t header_len = 0;
    const size_t len_bytes = major == 1 ? 2 : 4;
    if (got >= 8 + len_bytes) {
      for (size_t i = 0; i < len_bytes; ++i)
        header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
      if (header_len > (1u << 24))
        ParseFail(path, "header length " + std::to_string(header_len) + " is implausible");
      const size_t want = 8 + len_bytes + header_len;
      bytes.resize(want);
      if (want > got) got += std::fread(bytes.data() + got, 1, want - got, f);
      bytes.resize(got);
    }
  }
  NpyHeader header = ParseNpyHeader(bytes, path);
  const int64_t size = FileSize(f, path);
  const int64_t need = header.data_offset_bytes + header.elements() * 4;
  if (size < need)
    ParseFail(path, "file has " + std::to_string(size) + " bytes but shape " +
                        ShapeText(header.shape) + " needs " + std::to_string(need));
  return header;
}

std::vector<float> ReadNpyRows(const std::string& path, const NpyHeader& header, int64_t row_begin,
                               int64_t row_end) {
  const int64_t rows = header.shape.empty() ? 1 : header.shape[0];
  if (row_begin < 0 || row_end < row_begin || row_end > rows)
    throw Error(ErrorCode::kInvalidArgument,
                "npy " + path + ": row range [" + std::to_string(row_begin) + ", " +
                    std::to_string(row_end) + ") outside " + std::to_string(rows) + " rows");
  const int64_t row_elems = header.row_elements();
  std::vector<float> data(static_cast<size_t>((row_end - row_begin) * row_elems));
  if (data.empty()) return data;
  std::FILE* f = OpenOrThrow(path, "rb");
  FileCloser closer{f};
  if (std::fseek(f, header.data_offset_bytes + row_begin * row_elems * 4, SEEK_SET) != 0)
    throw Error(ErrorCode::kIo,
                "npy " + path + ": cannot seek to row " + std::to_string(row_begin));
  if (std::fread(data.data(), 4, data.size(), f) != data.size())
    throw Error(ErrorCode::kParse, "npy " + path + ": truncated data");
  return data;
}

std::vector<float> ReadNpy(const std::string& path, std::vector<int64_t>* shape) {
  const NpyHeader header = ReadNpyHeader(path);
  if (shape) *shape = header.shape;
  return ReadNpyRows(path, header, 0, header.shape.empty() ? 1 : header.shape[0]);
}

std::string NpyHeaderBytes(const std::vector<int64_t>& shape) {
  std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + ShapeText(shape) + ", }";
  // Total (magic + version + length + dict + '\n') is padded to 64 bytes.
  size_t prefix = 10;
  if (dict.size() + 1 + prefix > 65535 + 10) prefix = 12;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicBytes);
  const size_t len = dict.size();
  if (prefix == 10) {
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>((len >> 8) & 0xff);
  } else {
    out += '\x02';
    out += '\x00';
    for (int i = 0; i < 4; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  }
  return out + dict;
}

void WriteNpy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  AtomicFile file(path, "npy");
  const std::string header = NpyHeaderBytes(shape);
  NpyHeader h;
  h.shape = shape;
  file.Write(header.data(), header.size());
  file.Write(data, static_cast<size_t>(h.elements()) * 4);
  file.Commit();
}

void CreateNpy(const std::string& path, const std::vector<int64_t>& shape) {
  std::FILE* f = OpenOrThrow(path, "wb");
  FileCloser closer{f};
  const std::string header = NpyHeaderBytes(shape);
  NpyHeader h;
  h.shape = shape;
  const int64_t data_bytes = h.elements() * 4;
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  if (ok && data_bytes > 0) {
    // Extend to the full size by writing the last byte; the rest reads as zeros.
    ok = std::fseek(f, static_cast<long>(header.size() + data_bytes - 1), SEEK_SET) == 0 &&
         std::fputc(0, f) != EOF;
  }
  if (!ok)
    throw Error(ErrorCode::kIo, "npy " + path + ": cannot create (" + std::strerror(errno) + ")");
}

void WriteNpyRows(const std::string& path, const std::vector<int64_t>& shape, int64_t row_begin,
                  int64_t rows, const float* data) {
  NpyHeader h;
  h.shape = shape;
  const int64_t row_elems = h.row_elements();
  const int64_t offset =
      static_cast<int64_t>(NpyHeaderBytes(shape).size()) + row_begin * row_elems * 4;
  if (rows == 0) return;
  std::FILE* f = OpenOrThrow(path, "r+b");
  FileCloser closer{f};
  const size_t n = static_cast<size_t>(rows * row_elems);
  // A full disk shows at the write, the flush or the close: each names its cause.
  const auto fail = [&] {
    throw Error(ErrorCode::kIo, "npy " + path + ": cannot write rows at " +
                                    std::to_string(row_begin) + ": " + std::strerror(errno));
  };
  if (std::fseek(f, static_cast<long>(offset), SEEK_SET) != 0 || std::fwrite(data, 4, n, f) != n ||
      std::fflush(f) != 0)
    fail();
  closer.f = nullptr;
  if (std::fclose(f) != 0) fail();
}

}  // namespace fcp
