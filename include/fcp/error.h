// fcp/error.h — the one error type of the fcp library.
//
// Every failure the library reports is an fcp::Error: a code saying what kind
// of failure it is and a one-line message that names the operation and the
// offending value ("plan: block 7 segment 0: length must be > 0, got -3").
// Library functions throw; the command line and the Python module catch at
// their boundary and turn the error into an exit code / a Python exception.
// Nothing in the library calls exit() or prints.
// QuoteForError: what every message that quotes input shows of it (a short,
// printable prefix), so a 10 MB field never becomes a 10 MB line on stderr.
// Complexity: O(kQuotedInputBytes).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fcp {

enum class ErrorCode {
  kInvalidArgument,  // a config value or input that can never be valid
  kInfeasible,       // valid inputs that admit no solution (e.g. token cap too small)
  kParse,            // a malformed file (JSON, .npy, lengths)
  kInvalidPlan,      // a plan that breaks a rule of PLAN_FORMAT.md
  kIo,               // a file that cannot be opened, read or written
  kBackend,          // MPI / BLAS / CUDA reported a failure
  kInternal,         // a self-check of an algorithm failed: a bug in fcp
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// At most this many bytes of an offending value are quoted in a message.
inline constexpr size_t kQuotedInputBytes = 64;

// `text` with bytes outside printable ASCII as '?', cut to kQuotedInputBytes
// with "... (N bytes)" appended when longer. No quotes are added.
inline std::string QuoteForError(std::string_view text) {
  std::string out(text.substr(0, kQuotedInputBytes));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  if (text.size() > kQuotedInputBytes) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace fcp

// Always-on check of an internal invariant; a failure is a bug in fcp.
#define FCP_CHECK(cond, msg)                                                             \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::fcp::Error(::fcp::ErrorCode::kInternal,                                    \
                         std::string("internal check failed: ") + #cond + ": " + (msg)); \
  } while (0)
