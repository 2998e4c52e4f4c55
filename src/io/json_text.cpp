#include "io/json_text.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

namespace fcp::detail {
namespace {

// The keys of one open object. Plan objects have two to a dozen keys, for
// which a scan beats a tree; a crafted object with thousands must not make
// the check quadratic.
class KeySet {
 public:
  void Clear() {
    few_.clear();
    many_.clear();
  }
  // False if `key` was already there.
  bool Insert(const std::string& key) {
    if (!many_.empty()) return many_.insert(key).second;
    if (std::find(few_.begin(), few_.end(), key) != few_.end()) return false;
    few_.push_back(key);
    if (few_.size() > kScanLimit) {
      many_.insert(few_.begin(), few_.end());
      few_.clear();
    }
    return true;
  }

 private:
  static constexpr size_t kScanLimit = 16;
  std::vector<std::string> few_;
  std::set<std::string> many_;
};

std::string Printable(std::string text) {
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return text;
}

// nlohmann's own DOM builder (nlohmann::detail::json_sax_dom_parser, what
// json::parse uses), with the keys of each open object checked on the way. (A parser callback does the same at 40% more time on large plans:
// it is called for every value, and plans are mostly numbers.) KeySets are
// kept across objects of the same depth, so their storage is reused.
class StrictDomBuilder {
 public:
  using Json = nlohmann::json;
  explicit StrictDomBuilder(Json& result) : dom_(result, /*allow_exceptions=*/true) {}

  bool null() { return dom_.null(); }
  bool boolean(bool value) { return dom_.boolean(value); }
  bool number_integer(Json::number_integer_t value) { return dom_.number_integer(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return dom_.number_unsigned(value); }
  bool number_float(Json::number_float_t value, const Json::string_t& text) {
    return dom_.number_float(value, text);
  }
  bool string(Json::string_t& value) { return dom_.string(value); }
  bool binary(Json::binary_t& value) { return dom_.binary(value); }
  bool start_object(std::size_t elements) {
    if (depth_ == open_.size()) open_.emplace_back();
    open_[depth_++].Clear();
    return dom_.start_object(elements);
  }
  bool key(Json::string_t& name) {
    if (!repeated_ && !open_[depth_ - 1].Insert(name)) repeated_ = name;
    return dom_.key(name);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t elements) { return dom_.start_array(elements); }
  bool end_array() { return dom_.end_array(); }
  template <typename Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& error) {
    return dom_.parse_error(position, token, error);  // throws it
  }

  const std::optional<std::string>& repeated() const { return repeated_; }

 private:
  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::vector<KeySet> open_;  // [0, depth_): the open objects, innermost last
  size_t depth_ = 0;
  std::optional<std::string> repeated_;
};

}  // namespace

nlohmann::json ParseJson(const std::string& text) {
  nlohmann::json doc;
  StrictDomBuilder builder(doc);
  try {
    nlohmann::json::sax_parse(text, &builder);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and also out_of_range for numbers beyond double (1E999).
    throw JsonTextError(Printable(e.what()));
  }
  if (builder.repeated())
    throw JsonTextError("the key \"" + Printable(*builder.repeated()) +
                        "\" appears twice in one object");
  return doc;
}

}  // namespace fcp::detail
