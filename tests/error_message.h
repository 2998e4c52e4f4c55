// What a test reads of the fcp::Error a call throws, shared by the unit
// tests so that each checks its messages the same way.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "fcp/error.h"

namespace fcp::testing {

// The message of the fcp::Error that f() throws, after expecting its code to
// be `code`; nullopt when f() throws nothing.
template <typename F>
std::optional<std::string> ThrownMessage(ErrorCode code, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  return std::nullopt;
}

// For a call that may pass: its error's message, "" when it throws nothing.
template <typename F>
std::string ErrorMessage(ErrorCode code, F&& f) {
  return ThrownMessage(code, f).value_or("");
}

// For a call that must fail: its error's message; a test failure (and "")
// when it throws nothing.
template <typename F>
std::string ExpectedErrorMessage(ErrorCode code, F&& f) {
  const std::optional<std::string> message = ThrownMessage(code, f);
  if (!message) ADD_FAILURE() << "the call threw no fcp::Error";
  return message.value_or("");
}

}  // namespace fcp::testing
