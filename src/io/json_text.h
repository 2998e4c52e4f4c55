// JSON text as fcp's readers take it (plan files, hardware profiles):
// nlohmann's parser, except that
//  - an object naming a key twice is an error (nlohmann keeps the last value
//    silently, so a file with a repeated field would be read as half of what
//    it says);
//  - arrays and objects nest at most kMaxJsonDepth deep (fcp's formats need 4;
//    deeper text is rejected while it is read, before any recursive code such
//    as dump() or a destructor can run out of stack on it);
//  - the elements of chosen top-level arrays can be streamed: each element is
//    handed to a sink as soon as it closes and then dropped, so a reader holds
//    one element's DOM at a time instead of the whole file's (a DOM takes
//    5-20x the text's size).
// Private to fcp_core.
//
// O(L) for L bytes (keys are checked per object: linearly while an object
// has few, through a sorted set beyond that).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fcp::detail {

inline constexpr size_t kMaxJsonDepth = 64;

// Malformed text (nlohmann's message), a key repeated in one object or
// nesting beyond kMaxJsonDepth; what() is one line of printable ASCII, at
// most a short prefix of any offending bytes.
struct JsonTextError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nlohmann::json ParseJson(const std::string& text);  // throws JsonTextError

// Called with (top-level key, index in its array, element) for each element
// of a streamed array. May throw; the exception leaves ParseJsonStreaming.
using JsonElementSink = std::function<void(const std::string&, size_t, nlohmann::json&&)>;

// As ParseJson, except that when the top level is an object, the value of
// each key in `streamed` that is an array reaches `sink` element by element
// and is an empty array in the returned document.
nlohmann::json ParseJsonStreaming(const std::string& text, const std::vector<std::string>& streamed,
                                  const JsonElementSink& sink);

// `value` as JSON text for a message: at most a short prefix (QuoteForError),
// produced without serialising more of `value` than that.
std::string QuoteJson(const nlohmann::json& value);

}  // namespace fcp::detail
