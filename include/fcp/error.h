// fcp/error.h — the one error type of the fcp library.
//
// Every failure the library reports is an fcp::Error: a code saying what kind
// of failure it is and a one-line message that names the operation and the
// offending value ("plan: block 7 segment 0: length must be > 0, got -3").
// Library functions throw; the command line and the Python module catch at
// their boundary and turn the error into an exit code / a Python exception.
// Nothing in the library calls exit() or prints.
#pragma once

#include <stdexcept>
#include <string>

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
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace fcp

// Always-on check of an internal invariant; a failure is a bug in fcp.
#define FCP_CHECK(cond, msg)                                                       \
  do {                                                                             \
    if (!(cond))                                                                   \
      throw ::fcp::Error(::fcp::ErrorCode::kInternal,                              \
                         std::string("internal check failed: ") + #cond + ": " + (msg)); \
  } while (0)
