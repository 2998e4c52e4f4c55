// JSON text as fcp's readers take it (plan files, hardware profiles):
// nlohmann's parser, except that an object naming a key twice is an error.
// nlohmann keeps the last value silently, so a file with a repeated field
// would be read as half of what it says. Private to fcp_core.
//
// O(L) for L bytes (keys are checked per object: linearly while an object
// has few, through a sorted set beyond that).
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace fcp::detail {

// Malformed text (nlohmann's message) or a key repeated in one object;
// what() is one line of printable ASCII (nlohmann quotes the offending
// bytes raw).
struct JsonTextError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nlohmann::json ParseJson(const std::string& text);  // throws JsonTextError

}  // namespace fcp::detail
