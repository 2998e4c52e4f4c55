// The checks the profile and lengths reader fuzzers apply to one input,
// shared with the unit tests that replay inputs in every build (as
// plan_reader_check.h is for plans). Return normally when the input is
// handled as documented: rejected with fcp::Error(kParse), or read into a
// value that survives a write-and-read round trip. Anything else -- another
// exception, a crash, a sanitizer report, a huge allocation -- is a finding.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "check_common.h"
#include "fcp/cost_model.h"
#include "fcp/error.h"
#include "fcp/lengths_file.h"
#include "fcp/workload.h"

namespace fcp::fuzz {

// True if `text` was read, false if it was rejected as documented.
inline bool CheckProfileText(const std::string& text) {
  HardwareProfile profile;
  if (!PassesOrRejects("profile reader", ErrorCode::kParse,
                       [&] { profile = ParseProfileJson(text); }))
    return false;
  // What was read is a valid profile, and writes to text that reads again.
  profile.validate();
  const HardwareProfile again = ParseProfileJson(WriteProfileJson(profile));
  if (again.efficiency.size() != profile.efficiency.size() ||
      again.gpus_per_node != profile.gpus_per_node)
    throw std::logic_error("profile JSON round trip changed the profile");
  return true;
}

inline bool CheckLengthsText(const std::string& text) {
  std::vector<int64_t> lengths;
  if (!PassesOrRejects("lengths reader", ErrorCode::kParse, [&] { lengths = ParseLengths(text); }))
    return false;
  if (lengths.empty() || static_cast<int64_t>(lengths.size()) > kMaxSequences)
    throw std::logic_error("lengths reader returned an empty or oversize batch");
  for (int64_t len : lengths)
    if (len < 1) throw std::logic_error("lengths reader returned a length < 1");
  if (ParseLengths(FormatLengths(lengths)) != lengths)
    throw std::logic_error("lengths round trip changed the batch");
  return true;
}

}  // namespace fcp::fuzz
