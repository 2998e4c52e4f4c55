// Plan <-> JSON text. The writer emits a canonical layout by hand (one block or
// stage per line) so files are readable, diff-able and byte-identical for equal
// plans; the reader uses nlohmann::json and checks every field's type.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fcp/error.h"
#include "fcp/file_io.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "io/json_text.h"

namespace fcp {
namespace {

using nlohmann::json;

void AppendInt(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  // (pointer, count): append(first, last) would take the iterator-range
  // overload, a general replace.
  out.append(buf, static_cast<size_t>(end - buf));
}

// Appends `values` as one tuple, "[a, b, c]", preceded by ", " unless it is
// the first of its list: formatted in place and appended once (one append a
// tuple, not one a number and separator: the lists of a large plan hold
// tens of millions of numbers).
constexpr size_t kMostTupleFields = 3;
void AppendTuple(std::string& out, std::span<const int64_t> values, bool first) {
  FCP_CHECK(values.size() <= kMostTupleFields, "plan writer: a tuple of at most 3 numbers");
  char buf[4 + kMostTupleFields * 22];  // ", [" "]", each number <= 20 chars and its ", "
  char* p = buf;
  if (!first) {
    *p++ = ',';
    *p++ = ' ';
  }
  *p++ = '[';
  for (size_t k = 0; k < values.size(); ++k) {
    if (k) {
      *p++ = ',';
      *p++ = ' ';
    }
    p = std::to_chars(p, buf + sizeof(buf), values[k]).ptr;
  }
  *p++ = ']';
  out.append(buf, static_cast<size_t>(p - buf));
}

// Appends `items` as one line of integer tuples, [[a, b], [c, d]], the
// numbers of an item being fields(item) (a std::array).
template <typename T, typename Fields>
void AppendTuples(std::string& out, const std::vector<T>& items, Fields fields) {
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    const auto values = fields(items[i]);
    AppendTuple(out, values, i == 0);
  }
  out += ']';
}

// [block, src, dst] and [q_block, kv_block], as PLAN_FORMAT.md lists them.
void AppendTransfers(std::string& out, const std::vector<Transfer>& transfers) {
  AppendTuples(out, transfers, [](const Transfer& t) {
    return std::array<int64_t, 3>{t.block, t.src, t.dst};
  });
}

// The row-range extension (docs/plan-format.md): `, "NAME": [[index, row_begin,
// row_count], ...]` for the transfers of `transfers` that carry part of their
// block, by index; nothing when every one carries all of it.
void AppendTransferRows(std::string& out, const char* name,
                        const std::vector<Transfer>& transfers) {
  std::vector<std::array<int64_t, 3>> rows;
  for (size_t i = 0; i < transfers.size(); ++i)
    if (!transfers[i].all_rows())
      rows.push_back({static_cast<int64_t>(i), transfers[i].row_begin, transfers[i].row_count});
  if (rows.empty()) return;
  out += ", \"";
  out += name;
  out += "\": ";
  AppendTuples(out, rows, [](const std::array<int64_t, 3>& r) { return r; });
}

// [q_block, kv_block], or [q_block, kv_block, worker] for a pair computed
// away from its query block's owner (the remote-compute extension).
void AppendPairs(std::string& out, const std::vector<BlockPair>& pairs) {
  out += '[';
  for (size_t i = 0; i < pairs.size(); ++i) {
    const BlockPair& pair = pairs[i];
    const std::array<int64_t, 3> values = {pair.q_block, pair.kv_block, pair.worker};
    AppendTuple(out, std::span(values).first(pair.worker != kOwner ? 3 : 2), i == 0);
  }
  out += ']';
}

// The remote-compute extension's transfer lists: `, "NAME": [...]`, only
// when non-empty, so plans without it are byte-identical to before.
void AppendOptionalTransfers(std::string& out, const char* name,
                             const std::vector<Transfer>& transfers) {
  if (transfers.empty()) return;
  out += ", \"";
  out += name;
  out += "\": ";
  AppendTransfers(out, transfers);
}

// Appends `items` as a JSON array with one item per line, each written by `write`.
template <typename T, typename Write>
void AppendLines(std::string& out, const char* name, const std::vector<T>& items, Write write,
                 bool last) {
  out += "  \"";
  out += name;
  out += "\": [";
  for (size_t i = 0; i < items.size(); ++i) {
    out += i ? ",\n    " : "\n    ";
    write(items[i]);
  }
  out += items.empty() ? "]" : "\n  ]";
  out += last ? "\n" : ",\n";
}

[[noreturn]] void ParseFail(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::kParse, "plan: field '" + where + "' " + what);
}

// `where` is a C string so that a call with a literal binds no temporary
// (GCC 13+ -Wdangling-reference warns on a reference returned from a call
// that took a temporary std::string).
const json& Field(const json& object, const char* name, const char* where) {
  auto it = object.find(name);
  if (it == object.end())
    ParseFail(*where == '\0' ? std::string(name) : std::string(where) + "." + name, "is missing");
  return *it;
}
const json& Field(const json& object, const char* name, const std::string& where) {
  return Field(object, name, where.c_str());
}

int64_t Int(const json& v, const std::string& where) {
  if (!v.is_number_integer()) ParseFail(where, "must be an integer, got " + detail::QuoteJson(v));
  // nlohmann keeps integers above INT64_MAX as unsigned; get<int64_t> would wrap them.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    ParseFail(where, "is out of range: " + detail::QuoteJson(v));
  return v.get<int64_t>();
}

int32_t Int32(const json& v, const std::string& where) {
  const int64_t x = Int(v, where);
  if (x < INT32_MIN || x > INT32_MAX) ParseFail(where, "is out of range: " + detail::QuoteJson(v));
  return static_cast<int32_t>(x);
}

const json& Array(const json& v, const std::string& where) {
  if (!v.is_array()) ParseFail(where, "must be an array");
  return v;
}

// v as an int32, if it is one (what Int32 accepts), without a message.
std::optional<int32_t> AsInt32(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (x <= static_cast<uint64_t>(INT32_MAX)) return static_cast<int32_t>(x);
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x >= INT32_MIN && x <= INT32_MAX) return static_cast<int32_t>(x);
  }
  return std::nullopt;
}

// An array of K-tuples of int32s (`shape` names them for messages), each
// made into a T. The path of an element is spelled out only when it is
// malformed: built for every element, it would dominate a large plan's read
// time (docs/plan-testing.md, "Reader cost").
template <typename T, size_t K>
std::vector<T> ReadInt32Tuples(const json& v, const std::string& where, const char* shape) {
  std::vector<T> out;
  out.reserve(Array(v, where).size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    std::array<int32_t, K> x{};
    bool ok = e.is_array() && e.size() == K;
    for (size_t k = 0; ok && k < K; ++k) {
      const std::optional<int32_t> value = AsInt32(e[k]);
      ok = value.has_value();
      if (ok) x[k] = *value;
    }
    if (!ok) {
      const std::string w = where + "[" + std::to_string(i) + "]";
      if (!e.is_array() || e.size() != K)
        ParseFail(w, std::string("must be ") + shape + ", got " + detail::QuoteJson(e));
      for (size_t k = 0; k < K; ++k) Int32(e[k], w + "[" + std::to_string(k) + "]");
    }
    out.push_back(std::apply([](auto... fields) { return T{fields...}; }, x));
  }
  return out;
}

std::vector<Transfer> ReadTransfers(const json& v, const std::string& where) {
  return ReadInt32Tuples<Transfer, 3>(v, where, "[block, src, dst]");
}

// [q_block, kv_block] or, with the remote-compute extension, [q_block,
// kv_block, worker] with worker >= 0.
std::vector<BlockPair> ReadPairs(const json& v, const std::string& where) {
  std::vector<BlockPair> out;
  out.reserve(Array(v, where).size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    if (e.is_array() && e.size() == 2) {
      const std::optional<int32_t> q = AsInt32(e[0]), k = AsInt32(e[1]);
      if (q && k) {
        out.push_back({*q, *k, kOwner});
        continue;
      }
    }
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (!e.is_array() || (e.size() != 2 && e.size() != 3))
      ParseFail(w, "must be [q_block, kv_block] or [q_block, kv_block, worker], got " +
                       detail::QuoteJson(e));
    BlockPair pair{Int32(e[0], w + "[0]"), Int32(e[1], w + "[1]"), kOwner};
    if (e.size() == 3) {
      pair.worker = Int32(e[2], w + "[2]");
      if (pair.worker < 0) ParseFail(w + "[2]", "must be >= 0, got " + std::to_string(pair.worker));
    }
    out.push_back(pair);
  }
  return out;
}

// An optional transfer list of the remote-compute extension.
std::vector<Transfer> ReadOptionalTransfers(const json& stage, const char* name,
                                            const std::string& where) {
  const auto field = stage.find(name);
  if (field == stage.end()) return {};
  return ReadTransfers(*field, where + "." + name);
}

}  // namespace

std::string WritePlanJson(const Plan& plan) {
  std::string out;
  out.reserve(256 + plan.blocks.size() * 48 + plan.forward.size() * 256);
  out += "{\n  \"format\": \"fcp-plan\",\n  \"version\": 1,\n  \"planner\": ";
  out += json(plan.planner).dump();
  out += ",\n  \"workers\": ";
  AppendInt(out, plan.workers);
  out += ",\n  \"mask\": {\"kind\": \"";
  out += MaskKindName(plan.mask.kind);
  out += '"';
  if (plan.mask.kind == MaskKind::kSlidingWindow) {
    out += ", \"window\": ";
    AppendInt(out, plan.mask.window);
  }
  out += "},\n  \"attention\": {\"heads_q\": ";
  AppendInt(out, plan.attention.heads_q);
  out += ", \"heads_kv\": ";
  AppendInt(out, plan.attention.heads_kv);
  out += ", \"head_dim\": ";
  AppendInt(out, plan.attention.head_dim);
  out += ", \"dtype_bytes\": ";
  AppendInt(out, plan.attention.dtype_bytes);
  out += "},\n  \"block_size\": ";
  AppendInt(out, plan.block_size);
  out += ",\n  \"coalesce\": ";
  AppendInt(out, plan.coalesce);
  out += ",\n  \"token_cap\": ";
  AppendInt(out, plan.token_cap);
  if (!plan.planner_options.empty()) {
    // Sorted by name, the order a reader gets them in: round trips stay exact.
    auto options = plan.planner_options;
    std::stable_sort(options.begin(), options.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    out += ",\n  \"planner_options\": {";
    for (size_t i = 0; i < options.size(); ++i) {
      if (i) out += ", ";
      out += json(options[i].first).dump();
      out += ": ";
      out += json(options[i].second).dump();
    }
    out += '}';
  }
  out += ",\n  \"sequences\": [";
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    if (i) out += ", ";
    AppendInt(out, plan.sequences[i]);
  }
  out += "],\n";
  AppendLines(
      out, "blocks", plan.blocks,
      [&](const Block& b) {
        out += "{\"worker\": ";
        AppendInt(out, b.worker);
        out += ", \"segments\": ";
        AppendTuples(out, b.segments, [](const Segment& s) {
          return std::array<int64_t, 3>{s.seq, s.start, s.length};
        });
        out += '}';
      },
      /*last=*/false);
  AppendLines(
      out, "forward", plan.forward,
      [&](const ForwardStage& s) {
        out += "{\"send\": ";
        AppendTransfers(out, s.send);
        AppendTransferRows(out, "send_rows", s.send);
        out += ", \"compute\": ";
        AppendPairs(out, s.compute);
        AppendOptionalTransfers(out, "send_q", s.send_q);
        AppendOptionalTransfers(out, "send_o", s.send_o);
        out += '}';
      },
      /*last=*/false);
  AppendLines(
      out, "backward", plan.backward,
      [&](const BackwardStage& s) {
        out += "{\"send_kv\": ";
        AppendTransfers(out, s.send_kv);
        AppendTransferRows(out, "send_kv_rows", s.send_kv);
        out += ", \"send_dkv\": ";
        AppendTransfers(out, s.send_dkv);
        AppendTransferRows(out, "send_dkv_rows", s.send_dkv);
        out += ", \"compute\": ";
        AppendPairs(out, s.compute);
        AppendOptionalTransfers(out, "send_q", s.send_q);
        AppendOptionalTransfers(out, "send_dq", s.send_dq);
        out += '}';
      },
      /*last=*/true);
  out += "}\n";
  return out;
}

void WritePlanJsonFile(const Plan& plan, const std::string& path) {
  WriteFileAtomically(path, WritePlanJson(plan), "plan");
}

namespace {

void ReadBlock(const json& v, const std::string& where, Plan& plan) {
  if (!v.is_object()) ParseFail(where, "must be an object");
  Block block;
  block.worker = Int32(Field(v, "worker", where), where + ".worker");
  const json& segments = Field(v, "segments", where);
  Array(segments, where + ".segments");
  block.segments.reserve(segments.size());
  for (size_t k = 0; k < segments.size(); ++k) {
    const std::string w = where + ".segments[" + std::to_string(k) + "]";
    if (!segments[k].is_array() || segments[k].size() != 3)
      ParseFail(w, "must be [seq, start, length], got " + detail::QuoteJson(segments[k]));
    block.segments.push_back({Int32(segments[k][0], w + "[0]"), Int(segments[k][1], w + "[1]"),
                              Int(segments[k][2], w + "[2]")});
  }
  plan.blocks.push_back(std::move(block));
}

// The optional row-range field `name` of a stage (docs/plan-format.md):
// [index, row_begin, row_count] triples, indices strictly increasing into
// `transfers`, row_begin >= 0, row_count >= 1 (whether the rows lie inside
// the block is ValidatePlan's to check).
void ReadTransferRows(const json& stage, const char* name, const std::string& where,
                      std::vector<Transfer>& transfers) {
  const auto field = stage.find(name);
  if (field == stage.end()) return;
  const std::string w = where + "." + name;
  Array(*field, w);
  int64_t last = -1;
  for (size_t i = 0; i < field->size(); ++i) {
    const json& e = (*field)[i];
    const std::string we = w + "[" + std::to_string(i) + "]";
    if (!e.is_array() || e.size() != 3)
      ParseFail(we, "must be [index, row_begin, row_count], got " + detail::QuoteJson(e));
    const int64_t index = Int(e[0], we + "[0]"), begin = Int(e[1], we + "[1]"),
                  count = Int(e[2], we + "[2]");
    if (index <= last || index >= static_cast<int64_t>(transfers.size()))
      ParseFail(we + "[0]", "must name a transfer after the previous one, got " +
                                std::to_string(index) + " (" + std::to_string(transfers.size()) +
                                " transfers)");
    if (begin < 0) ParseFail(we + "[1]", "must be >= 0, got " + std::to_string(begin));
    if (count < 1) ParseFail(we + "[2]", "must be >= 1, got " + std::to_string(count));
    transfers[index].row_begin = begin;
    transfers[index].row_count = count;
    last = index;
  }
}

void ReadForwardStage(const json& v, const std::string& where, Plan& plan) {
  if (!v.is_object()) ParseFail(where, "must be an object");
  ForwardStage stage;
  stage.send = ReadTransfers(Field(v, "send", where), where + ".send");
  ReadTransferRows(v, "send_rows", where, stage.send);
  stage.compute = ReadPairs(Field(v, "compute", where), where + ".compute");
  stage.send_q = ReadOptionalTransfers(v, "send_q", where);
  stage.send_o = ReadOptionalTransfers(v, "send_o", where);
  plan.forward.push_back(std::move(stage));
}

void ReadBackwardStage(const json& v, const std::string& where, Plan& plan) {
  if (!v.is_object()) ParseFail(where, "must be an object");
  BackwardStage stage;
  stage.send_kv = ReadTransfers(Field(v, "send_kv", where), where + ".send_kv");
  stage.send_dkv = ReadTransfers(Field(v, "send_dkv", where), where + ".send_dkv");
  ReadTransferRows(v, "send_kv_rows", where, stage.send_kv);
  ReadTransferRows(v, "send_dkv_rows", where, stage.send_dkv);
  stage.compute = ReadPairs(Field(v, "compute", where), where + ".compute");
  stage.send_q = ReadOptionalTransfers(v, "send_q", where);
  stage.send_dq = ReadOptionalTransfers(v, "send_dq", where);
  plan.backward.push_back(std::move(stage));
}

// The four arrays that make up almost all of a plan's bytes are read element
// by element while the text is parsed (detail::ParseJsonStreaming), so the
// reader never holds their DOM. An element's error is kept and raised where
// a whole-document reader would raise it (after the header fields, in field
// order), so messages do not depend on the order of fields in the file.
struct StreamedArray {
  const char* name;
  void (*read)(const json&, const std::string&, Plan&);
  std::optional<Error> error;  // the first malformed element
};

using StreamedArrays = std::array<StreamedArray, 4>;

// Parses `text`, reading the streamed arrays' elements into `plan` as they
// come; returns the rest of the document.
json ParsePlanDocument(const std::string& text, StreamedArrays& arrays, Plan& plan) {
  std::vector<std::string> names;
  for (const StreamedArray& a : arrays) names.push_back(a.name);
  json doc;
  try {
    const auto read = [&](const std::string& key, size_t i, json&& element) {
      for (StreamedArray& a : arrays) {
        if (key != a.name || a.error) continue;
        try {
          a.read(element, key + "[" + std::to_string(i) + "]", plan);
        } catch (const Error& e) {
          a.error = e;
        }
      }
    };
    doc = detail::ParseJsonStreaming(text, names, read);
  } catch (const detail::JsonTextError& e) {
    throw Error(ErrorCode::kParse, std::string("plan: not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) throw Error(ErrorCode::kParse, "plan: top level must be a JSON object");
  return doc;
}

void ReadFormat(const json& doc) {
  const json& format = Field(doc, "format", "");
  if (format != "fcp-plan")
    ParseFail("format", "must be \"fcp-plan\", got " + detail::QuoteJson(format));
  const int64_t version = Int(Field(doc, "version", ""), "version");
  if (version != 1) ParseFail("version", "must be 1, got " + std::to_string(version));
}

Mask ReadMask(const json& doc) {
  const json& mask = Field(doc, "mask", "");
  if (!mask.is_object()) ParseFail("mask", "must be an object");
  const json& kind = Field(mask, "kind", "mask");
  if (!kind.is_string()) ParseFail("mask.kind", "must be a string");
  Mask result;
  try {
    result.kind = ParseMaskKind(kind.get<std::string>());
  } catch (const Error& e) {
    ParseFail("mask.kind", std::string("is invalid: ") + e.what());
  }
  if (result.kind == MaskKind::kSlidingWindow)
    result.window = Int(Field(mask, "window", "mask"), "mask.window");
  return result;
}

AttentionShape ReadAttention(const json& doc) {
  const json& attention = Field(doc, "attention", "");
  if (!attention.is_object()) ParseFail("attention", "must be an object");
  AttentionShape shape;
  shape.heads_q = Int32(Field(attention, "heads_q", "attention"), "attention.heads_q");
  shape.heads_kv = Int32(Field(attention, "heads_kv", "attention"), "attention.heads_kv");
  shape.head_dim = Int32(Field(attention, "head_dim", "attention"), "attention.head_dim");
  shape.dtype_bytes = Int32(Field(attention, "dtype_bytes", "attention"), "attention.dtype_bytes");
  return shape;
}

// The optional extra field: any names, each a finite number.
std::vector<std::pair<std::string, double>> ReadPlannerOptions(const json& doc) {
  std::vector<std::pair<std::string, double>> result;
  const auto options = doc.find("planner_options");
  if (options == doc.end()) return result;
  if (!options->is_object()) ParseFail("planner_options", "must be an object");
  for (const auto& [name, value] : options->items()) {
    const std::string where = "planner_options." + QuoteForError(name);
    if (!value.is_number() || !std::isfinite(value.get<double>()))
      ParseFail(where, "must be a finite number, got " + detail::QuoteJson(value));
    result.emplace_back(name, value.get<double>());
  }
  return result;
}

}  // namespace

// The header fields in the order of the format, each checked as it is read,
// then the streamed arrays' first error, if any.
Plan ReadPlanJson(const std::string& text) {
  Plan plan;
  StreamedArrays arrays = {{
      {"sequences",
       [](const json& v, const std::string& where, Plan& p) {
         p.sequences.push_back(Int(v, where));
       },
       {}},
      {"blocks", ReadBlock, {}},
      {"forward", ReadForwardStage, {}},
      {"backward", ReadBackwardStage, {}},
  }};
  const json doc = ParsePlanDocument(text, arrays, plan);
  ReadFormat(doc);
  const json& planner = Field(doc, "planner", "");
  if (!planner.is_string()) ParseFail("planner", "must be a string");
  plan.planner = planner.get<std::string>();
  plan.workers = Int32(Field(doc, "workers", ""), "workers");
  plan.mask = ReadMask(doc);
  plan.attention = ReadAttention(doc);
  plan.block_size = Int(Field(doc, "block_size", ""), "block_size");
  plan.coalesce = Int32(Field(doc, "coalesce", ""), "coalesce");
  plan.token_cap = Int(Field(doc, "token_cap", ""), "token_cap");
  plan.planner_options = ReadPlannerOptions(doc);
  // Present and an array (then streamed, empty here) or the type error.
  for (const StreamedArray& a : arrays) {
    Array(Field(doc, a.name, ""), a.name);
    if (a.error) throw *a.error;
  }
  return plan;
}

Plan ReadPlanJsonFile(const std::string& path) {
  return ReadPlanJson(ReadInputFile(path, "plan", kMaxPlanFileBytes));
}

}  // namespace fcp
