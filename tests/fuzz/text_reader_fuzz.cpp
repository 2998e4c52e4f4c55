// libFuzzer targets: arbitrary bytes through the hardware-profile reader
// (profile_reader_fuzz) or the lengths reader (lengths_reader_fuzz), one
// binary each, chosen by FCP_FUZZ_CHECK; see text_readers_check.h.
// scripts/fuzz.sh builds and runs them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "text_readers_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exception escaping here aborts the fuzzer with its message: a finding.
  fcp::fuzz::FCP_FUZZ_CHECK(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
