// fcp/npy.h — reading and writing float32 NumPy .npy files.
//
// The runtime's inputs (q, k, v, do) and outputs (o, lse, dq, dk, dv) are
// float32 arrays in C order stored as .npy (format versions 1.0 and 2.0;
// 3.0 only differs in header encoding and is accepted too). Only
// little-endian float32 ('<f4') in C order is accepted: anything else is a
// clear Error(kParse) naming the file and the field, never a silent
// conversion. Row-range reads and writes let each MPI rank touch only its own
// rows of a shared file: a "row" is one index of the first dimension.
// Complexity: O(header) plus the bytes moved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fcp {

struct NpyHeader {
  std::vector<int64_t> shape;     // C order; empty = scalar
  int64_t data_offset_bytes = 0;  // where the array data starts in the file
  int64_t elements() const;       // product of shape (1 for a scalar)
  int64_t row_elements() const;   // product of shape[1:]
};

// Parses the header of an .npy file held in `bytes` (at least the header).
// `what` names the file in error messages. Throws Error(kParse).
NpyHeader ParseNpyHeader(const std::string& bytes, const std::string& what);

// Reads the header of `path`. Error(kIo) if it cannot be opened, kParse if
// malformed, truncated (file shorter than the data the header announces).
NpyHeader ReadNpyHeader(const std::string& path);

// Reads rows [row_begin, row_end) of `path` (all of a 1-D or N-D array's
// trailing dimensions). Error(kInvalidArgument) for an out-of-range range.
std::vector<float> ReadNpyRows(const std::string& path, const NpyHeader& header, int64_t row_begin,
                               int64_t row_end);

// Reads the whole array; `shape` receives its shape.
std::vector<float> ReadNpy(const std::string& path, std::vector<int64_t>* shape);

// The header bytes (v1.0, or v2.0 when the header does not fit 65535 bytes)
// of a float32 C-order array of `shape`, padded to a multiple of 64 bytes.
std::string NpyHeaderBytes(const std::vector<int64_t>& shape);

// Writes a whole array (data has product(shape) floats), atomically (an
// AtomicFile: on failure no file or the old one). Error(kIo) naming the cause.
void WriteNpy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

// Creates `path` with the header of `shape` and its full (zero) size, so that
// ranks can then fill disjoint row ranges with WriteNpyRows.
void CreateNpy(const std::string& path, const std::vector<int64_t>& shape);
// Writes rows [row_begin, row_begin + rows) of a file made by CreateNpy.
void WriteNpyRows(const std::string& path, const std::vector<int64_t>& shape, int64_t row_begin,
                  int64_t rows, const float* data);

}  // namespace fcp
