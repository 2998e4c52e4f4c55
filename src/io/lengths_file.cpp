#include <charconv>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "fcp/error.h"
#include "fcp/workload.h"

namespace fcp {

std::vector<int64_t> ParseLengths(const std::string& text) {
  std::vector<int64_t> lengths;
  std::istringstream lines(text);
  std::string line;
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      int64_t value = 0;
      auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
      if (ec != std::errc() || end != word.data() + word.size() || value < 1)
        throw Error(ErrorCode::kParse, "lengths: line " + std::to_string(line_no) + ": '" + word +
                                           "' is not a positive integer");
      lengths.push_back(value);
    }
  }
  if (lengths.empty()) throw Error(ErrorCode::kParse, "lengths: no sequence lengths found");
  return lengths;
}

std::vector<int64_t> ReadLengthsFile(const std::string& path) {
  std::stringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
  } else {
    std::ifstream file(path);
    if (!file) throw Error(ErrorCode::kIo, "lengths: cannot open '" + path + "'");
    buffer << file.rdbuf();
  }
  try {
    return ParseLengths(buffer.str());
  } catch (const Error& e) {
    throw Error(e.code(), std::string(e.what()) + " (in '" + path + "')");
  }
}

std::string FormatLengths(const std::vector<int64_t>& lengths) {
  std::string out;
  for (int64_t len : lengths) out += std::to_string(len) + "\n";
  return out;
}

}  // namespace fcp
