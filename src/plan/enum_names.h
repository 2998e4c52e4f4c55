// The names of an enum's values, both ways, from one table: the planner's
// and the simulator's option enums (mask kind, length distribution,
// reshuffle and transfer modes, network model). Private to the library (src/).
// Invariant: a table lists every value of its enum once; NameOf is "?" for
// a value missing from it. Cost: O(table size) a call.
#pragma once

#include <cstddef>
#include <string>

#include "fcp/error.h"

namespace fcp::detail {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E, size_t N>
const char* NameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table)
    if (e.value == value) return e.name;
  return "?";
}

// The value called `name`, else Error(kInvalidArgument): "<unknown> 'name'
// (expected a, b or c)", e.g. unknown = "mask: unknown kind".
template <typename E, size_t N>
E ValueNamed(const EnumName<E> (&table)[N], const std::string& name, const char* unknown) {
  std::string expected;
  for (size_t i = 0; i < N; ++i) {
    if (name == table[i].name) return table[i].value;
    expected += i == 0 ? "" : i + 1 < N ? ", " : " or ";
    expected += table[i].name;
  }
  throw Error(ErrorCode::kInvalidArgument,
              std::string(unknown) + " '" + QuoteForError(name) + "' (expected " + expected + ")");
}

}  // namespace fcp::detail
