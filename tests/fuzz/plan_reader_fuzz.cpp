// libFuzzer target: arbitrary bytes through the plan reader, then (when they
// parse) the validator, then (when valid) the metrics; see plan_reader_check.h.
// fcp::Error of the documented code is the expected way to reject input;
// anything else -- a crash, another exception, a sanitizer report, a huge
// allocation -- is a finding. scripts/fuzz.sh builds and runs it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "plan_reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exception escaping here aborts the fuzzer with its message: a finding.
  fcp::fuzz::CheckPlanText(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
