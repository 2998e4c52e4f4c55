#include <charconv>
#include <string>
#include <string_view>

#include "fcp/error.h"
#include "fcp/file_io.h"
#include "fcp/lengths_file.h"
#include "fcp/workload.h"

namespace fcp {

namespace {

// The separators of `std::istream >> word` in the C locale.
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

std::vector<int64_t> ParseLengths(const std::string& text) {
  std::vector<int64_t> lengths;
  std::string_view rest(text);
  // Editors on some systems start a UTF-8 file with a byte order mark.
  if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);
  // Scanned in place, line by line and word by word: a string stream per
  // line cost about 3,000 instructions a line, most of `fcp plan`'s input.
  for (int64_t line_no = 1; !rest.empty(); ++line_no) {
    const size_t newline = rest.find('\n');
    std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(newline == std::string_view::npos ? rest.size() : newline + 1);
    if (const size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    while (!line.empty()) {
      size_t begin = 0;
      while (begin < line.size() && IsSpace(line[begin])) ++begin;
      size_t end = begin;
      while (end < line.size() && !IsSpace(line[end])) ++end;
      const std::string_view word = line.substr(begin, end - begin);
      line.remove_prefix(end);
      if (word.empty()) break;
      int64_t value = 0;
      auto [stop, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
      if (ec != std::errc() || stop != word.data() + word.size() || value < 1)
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
