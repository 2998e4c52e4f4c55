#include <charconv>
#include <sstream>
#include <string>
#include <string_view>

#include "fcp/error.h"
#include "fcp/file_io.h"
#include "fcp/lengths_file.h"
#include "fcp/workload.h"

namespace fcp {

std::vector<int64_t> ParseLengths(const std::string& text) {
  std::vector<int64_t> lengths;
  std::string_view rest(text);
  // Editors on some systems start a UTF-8 file with a byte order mark.
  if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);
  std::istringstream lines{std::string(rest)};
  std::string line;
  for (int64_t line_no = 1; std::getline(lines, line); ++line_no) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      int64_t value = 0;
      auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
      if (ec != std::errc() || end != word.data() + word.size() || value < 1)
        throw Error(ErrorCode::kParse, "lengths: line " + std::to_string(line_no) + ": '" +
                                           QuoteForError(word) + "' is not a positive integer");
      if (static_cast<int64_t>(lengths.size()) == kMaxSequences)
        throw Error(ErrorCode::kParse, "lengths: line " + std::to_string(line_no) +
                                           ": more than 2^27 sequences (no plan can hold them)");
      lengths.push_back(value);
    }
  }
  if (lengths.empty()) throw Error(ErrorCode::kParse, "lengths: no sequence lengths found");
  return lengths;
}

std::vector<int64_t> ReadLengthsFile(const std::string& path) {
  const std::string text = ReadInputFile(path, "lengths", kMaxLengthsFileBytes);
  try {
    return ParseLengths(text);
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
