// fcp/lengths_file.h — batches of sequence lengths as text: one length per
// line, '#' comments.
//
// Part of the I/O layer (target fcp_io); the batch itself and its limits
// (kMaxSequences) are in fcp/workload.h.
// Invariants: ParseLengths(FormatLengths(x)) == x for every batch of
// positive lengths; a file is refused before it grows past
// kMaxLengthsFileBytes or kMaxSequences lengths.
// Complexity: O(bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/workload.h"

namespace fcp {

// Lengths files are read whole, up to this size (2^27 one-digit lengths).
inline constexpr uint64_t kMaxLengthsFileBytes = uint64_t{1} << 28;

// Whitespace-separated positive integers ('#' starts a comment to end of line;
// a UTF-8 byte order mark at the start is skipped). Error(kParse) names the
// line and quotes a short prefix of the token, and is raised past
// kMaxSequences lengths; Error(kIo) if unreadable, a directory or larger than
// kMaxLengthsFileBytes.
std::vector<int64_t> ParseLengths(const std::string& text);
std::vector<int64_t> ReadLengthsFile(const std::string& path);   // "-" = stdin
std::string FormatLengths(const std::vector<int64_t>& lengths);  // one per line

}  // namespace fcp
