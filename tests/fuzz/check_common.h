// What the fuzzers' checks (plan_reader_check.h, text_readers_check.h) and
// the unit tests that replay saved inputs share: a step that must either
// pass or reject its input with one documented error code, and the saved
// inputs of a folder.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "fcp/error.h"

namespace fcp::fuzz {

// Runs step(): true when it returns, false when it throws fcp::Error with
// code `expected` (the documented rejection). Any other fcp::Error is a
// finding: a std::logic_error naming `who` and the message.
template <typename F>
bool PassesOrRejects(const char* who, ErrorCode expected, F&& step) {
  try {
    step();
    return true;
  } catch (const Error& e) {
    if (e.code() != expected)
      throw std::logic_error(std::string(who) + " threw an error of another code (" +
                             std::to_string(static_cast<int>(e.code())) + "): " + e.what());
    return false;
  }
}

// Calls f(path, text) for every file in `folder` (a seed corpus or the
// regressions), in the order the folder lists them.
template <typename F>
void ForEachSavedInput(const std::filesystem::path& folder, F&& f) {
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::ifstream file(entry.path(), std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    f(entry.path(), text.str());
  }
}

}  // namespace fcp::fuzz
