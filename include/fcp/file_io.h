// fcp/file_io.h — files as fcp reads and writes them, and input quoted in
// error messages.
//
// Reading: ReadInputFile takes a whole file (or stdin for "-") into memory,
// refusing a directory and anything longer than a caller's byte limit, so a
// read never grows without bound (/dev/zero, `yes | fcp ...`).
// Writing: every output file appears complete or not at all. WriteFileAtomically
// and AtomicFile write to a temporary in the destination's folder and rename it
// over the destination only once everything was written and flushed; on any
// failure the temporary is removed and the destination is left as it was. An
// existing destination that is not a regular file (/dev/stdout, a FIFO,
// /dev/full) is written in place, never replaced; a symbolic link's target
// is replaced, not the link. Errors
// name the operation, the path and the cause (strerror: "No space left on device").
// QuoteForError (quoting input in a message) is in fcp/error.h, included here.
// Complexity: O(bytes moved).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "fcp/error.h"

namespace fcp {

// The whole of `path` ("-" = stdin). `what` opens every message ("plan",
// "lengths"). Error(kIo) if it is a directory, cannot be opened or read (with
// strerror), or holds more than `max_bytes` bytes (the read stops there);
// Error(kParse) at the first NUL byte (fcp reads only text formats).
std::string ReadInputFile(const std::string& path, const std::string& what, uint64_t max_bytes);

// A file written under a temporary name next to `path` and renamed to `path`
// by Commit(). Destroyed before Commit (an exception, an early return), it
// removes the temporary. Not for "-": Error(kInvalidArgument).
class AtomicFile {
 public:
  AtomicFile(const std::string& path,
             const std::string& what);  // Error(kIo) if it cannot be created
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::FILE* file() { return file_; }
  // fwrite of `bytes` bytes; Error(kIo) naming the cause on a short write.
  void Write(const void* data, size_t bytes);
  // Flushes, syncs, closes and renames over the destination; Error(kIo) on failure.
  void Commit();

 private:
  [[noreturn]] void Fail(const std::string& action, int error_number);
  std::string path_, target_, temp_, what_;  // temp_ empty: written in place
  std::FILE* file_ = nullptr;
};

// `text` into `path` through an AtomicFile. The library never prints:
// Error(kInvalidArgument) for "-" (standard output is the caller's to write;
// the command line's WriteOutput does).
void WriteFileAtomically(const std::string& path, std::string_view text, const std::string& what);

}  // namespace fcp
