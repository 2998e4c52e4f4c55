#include "io/json_text.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "fcp/file_io.h"

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

// Appends the JSON text of `value` to `out` until `out` holds more than
// `budget` bytes (then the rest is cut). Recursion is bounded by the
// parser's depth limit.
void AppendBounded(const nlohmann::json& value, std::string& out, size_t budget) {
  if (out.size() > budget) return;
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    out += nlohmann::json(s.substr(0, budget + 1 - std::min(budget, out.size()))).dump();
  } else if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& e : value) {
      if (out.size() > budget) return;
      if (!first) out += ",";
      first = false;
      AppendBounded(e, out, budget);
    }
    out += ']';
  } else if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, e] : value.items()) {
      if (out.size() > budget) return;
      if (!first) out += ",";
      first = false;
      out += nlohmann::json(k.substr(0, budget)).dump() + ":";
      AppendBounded(e, out, budget);
    }
    out += '}';
  } else {
    out += value.dump();
  }
}

// Empties `value` leaves first. nlohmann's destructor flattens a value with
// children onto a heap-allocated stack, and an allocation that fails there
// (out of memory) is std::terminate, from a noexcept destructor; a value
// whose arrays and objects are all empty is destroyed without allocating.
// Recursion is bounded by the parser's depth limit.
void ClearWithoutAllocating(nlohmann::json& value) {
  if (value.is_array()) {
    auto& items = value.get_ref<nlohmann::json::array_t&>();
    for (auto& e : items) ClearWithoutAllocating(e);
    items.clear();
  } else if (value.is_object()) {
    auto& items = value.get_ref<nlohmann::json::object_t&>();
    for (auto& [key, e] : items) ClearWithoutAllocating(e);
    items.clear();
  }
}

// nlohmann's message, with the input it quotes ("last read: '...'", which
// can be a whole unterminated 10 MB string) cut to a short prefix.
std::string QuoteNlohmannMessage(const std::string& message) {
  const std::string marker = "last read: '";
  const size_t at = message.find(marker);
  if (at == std::string::npos) {  // e.g. out_of_range: "number overflow parsing '1E999'"
    const size_t quote = message.find('\'');
    if (quote == std::string::npos) return QuoteForError(message);
    return message.substr(0, quote + 1) + QuoteForError(message.substr(quote + 1));
  }
  std::string token = message.substr(at + marker.size());
  if (!token.empty() && token.back() == '\'') token.pop_back();
  return message.substr(0, at + marker.size()) + QuoteForError(token) +
         "'";  // nlohmann's text: ASCII
}

// nlohmann's own DOM builder (nlohmann::detail::json_sax_dom_parser, what
// json::parse uses), with the keys of each open object checked on the way,
// not a parser callback, which is called for every value (plans are mostly
// numbers; docs/plan-testing.md, "Reader cost"). KeySets are
// kept across objects of the same depth, so their storage is reused.
//
// Streaming: while an element of a streamed top-level array is open, events
// go to a DOM builder of that element alone (element_), which is handed to
// the sink when the element closes.
class StrictDomBuilder {
 public:
  using Json = nlohmann::json;
  using Dom = nlohmann::detail::json_sax_dom_parser<Json>;
  StrictDomBuilder(Json& result, const std::vector<std::string>* streamed = nullptr,
                   const JsonElementSink* sink = nullptr)
      : dom_(result, /*allow_exceptions=*/true), streamed_(streamed), sink_(sink) {}

  bool null() {
    return Scalar([](Dom& d) { return d.null(); });
  }
  bool boolean(bool value) {
    return Scalar([&](Dom& d) { return d.boolean(value); });
  }
  bool number_integer(Json::number_integer_t value) {
    return Scalar([&](Dom& d) { return d.number_integer(value); });
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    return Scalar([&](Dom& d) { return d.number_unsigned(value); });
  }
  bool number_float(Json::number_float_t value, const Json::string_t& text) {
    return Scalar([&](Dom& d) { return d.number_float(value, text); });
  }
  bool string(Json::string_t& value) {
    return Scalar([&](Dom& d) { return d.string(value); });
  }
  bool binary(Json::binary_t& value) {
    return Scalar([&](Dom& d) { return d.binary(value); });
  }
  bool start_object(std::size_t elements) {
    Open();
    if (depth_ == open_.size()) open_.emplace_back();
    open_[depth_++].Clear();
    if (nesting_ == 1) top_is_object_ = true;
    return Target().start_object(elements);
  }
  bool key(Json::string_t& name) {
    if (!repeated_ && !open_[depth_ - 1].Insert(name)) repeated_ = name;
    if (nesting_ == 1 && top_is_object_) top_key_ = name;
    return Target().key(name);
  }
  bool end_object() {
    --depth_;
    const bool ok = Target().end_object();
    return Close() && ok;
  }
  bool start_array(std::size_t elements) {
    if (nesting_ == 1 && top_is_object_ && streamed_ && !streaming_ &&
        std::find(streamed_->begin(), streamed_->end(), top_key_) != streamed_->end()) {
      Open();
      streaming_ = true;
      next_index_ = 0;
      return dom_.start_array(elements);  // stays empty in the document
    }
    Open();
    return Target().start_array(elements);
  }
  bool end_array() {
    if (streaming_ && nesting_ == 2) {
      streaming_ = false;
      --nesting_;
      return dom_.end_array();
    }
    const bool ok = Target().end_array();
    return Close() && ok;
  }
  template <typename Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& error) {
    return dom_.parse_error(position, token, error);  // throws it
  }

  const std::optional<std::string>& repeated() const { return repeated_; }
  // Before unwinding past a failure (bad_alloc mid-element): see ClearWithoutAllocating.
  void ClearElement() { ClearWithoutAllocating(element_); }

 private:
  // A streamed array's element begins at nesting 2 (top object, array).
  bool AtElementStart() const { return streaming_ && nesting_ == 2; }
  Dom& Target() { return element_dom_ ? *element_dom_ : dom_; }
  void BeginElement() {
    element_ = Json();
    element_dom_ = std::make_unique<Dom>(element_, /*allow_exceptions=*/true);
  }
  void EndElement() {
    element_dom_.reset();
    (*sink_)(top_key_, next_index_++, std::move(element_));
    ClearWithoutAllocating(element_);
  }
  template <typename F>
  bool Scalar(F event) {
    const bool element = AtElementStart();
    if (element) BeginElement();
    const bool ok = event(Target());
    if (element) EndElement();
    return ok;
  }
  void Open() {
    if (AtElementStart()) BeginElement();
    if (++nesting_ > kMaxJsonDepth)
      throw JsonTextError("arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels");
  }
  bool Close() {
    --nesting_;
    if (AtElementStart() && element_dom_) EndElement();
    return true;
  }

  Dom dom_;
  std::vector<KeySet> open_;  // [0, depth_): the open objects, innermost last
  size_t depth_ = 0;
  size_t nesting_ = 0;  // open arrays and objects
  std::optional<std::string> repeated_;
  const std::vector<std::string>* streamed_;
  const JsonElementSink* sink_;
  bool top_is_object_ = false, streaming_ = false;
  std::string top_key_;
  size_t next_index_ = 0;
  Json element_;
  std::unique_ptr<Dom> element_dom_;
};

}  // namespace

nlohmann::json ParseJsonStreaming(const std::string& text, const std::vector<std::string>& streamed,
                                  const JsonElementSink& sink) {
  nlohmann::json doc;
  StrictDomBuilder builder(doc, &streamed, &sink);
  try {
    nlohmann::json::sax_parse(text, &builder);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and also out_of_range for numbers beyond double (1E999).
    builder.ClearElement();
    ClearWithoutAllocating(doc);
    throw JsonTextError(QuoteNlohmannMessage(e.what()));
  } catch (...) {
    builder.ClearElement();
    ClearWithoutAllocating(doc);
    throw;
  }
  if (builder.repeated())
    throw JsonTextError("the key \"" + QuoteForError(*builder.repeated()) +
                        "\" appears twice in one object");
  return doc;
}

nlohmann::json ParseJson(const std::string& text) {
  return ParseJsonStreaming(text, {}, [](const std::string&, size_t, nlohmann::json&&) {});
}

std::string QuoteJson(const nlohmann::json& value) {
  std::string text;
  AppendBounded(value, text, kQuotedInputBytes);
  if (text.size() <= kQuotedInputBytes) return QuoteForError(text);
  std::string out = QuoteForError(text.substr(0, kQuotedInputBytes)) + "...";
  if (value.is_string())
    out +=
        " (a string of " + std::to_string(value.get_ref<const std::string&>().size()) + " bytes)";
  return out;
}

}  // namespace fcp::detail
