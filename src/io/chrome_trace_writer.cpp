// Chrome trace writer (fcp/chrome_trace.h), shared by the simulator and the
// runtime. Hand-written (not a JSON DOM) so a 100k-event trace streams.
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "fcp/chrome_trace.h"

namespace fcp {
namespace {

// A JSON string literal; invalid UTF-8 becomes U+FFFD instead of throwing.
std::string Quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Microseconds with three decimals, the precision viewers show.
std::string Micros(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", seconds * 1e6);
  return buf;
}

void AppendComplete(const TraceEvent& e, const ChromeTraceLayout& layout, std::ostream& out) {
  out << "{\"ph\": \"X\", \"name\": " << Quoted(e.name);
  if (layout.track_category) {
    const bool named = e.track >= 0 && static_cast<size_t>(e.track) < layout.tracks.size();
    out << ", \"cat\": " << Quoted(named ? layout.tracks[static_cast<size_t>(e.track)] : std::string());
  }
  out << ", \"pid\": " << e.worker << ", \"tid\": " << e.track << ", \"ts\": " << Micros(e.start_s)
      << ", \"dur\": " << Micros(e.end_s - e.start_s) << "}";
}

}  // namespace

std::string ChromeCompleteEvents(std::span<const TraceEvent> events, const ChromeTraceLayout& layout) {
  std::ostringstream out;
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) out << ",\n";
    AppendComplete(events[i], layout, out);
  }
  return out.str();
}

void WriteChromeTraceDocument(const ChromeTraceLayout& layout, int32_t processes,
                              const std::vector<std::string>& event_texts, std::ostream& out) {
  out << "{\"displayTimeUnit\": \"ms\", ";
  if (!layout.other_data.empty()) {
    out << "\"otherData\": {";
    for (size_t i = 0; i < layout.other_data.size(); ++i)
      out << (i > 0 ? ", " : "") << Quoted(layout.other_data[i].first) << ": "
          << Quoted(layout.other_data[i].second);
    out << "},\n";
  }
  out << "\"traceEvents\": [\n";
  bool first = true;
  const auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  const std::string label = Quoted(layout.process_label + " ");  // "worker " with its quotes
  for (int32_t p = 0; p < processes; ++p) {
    sep();
    out << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << p << ", \"args\": {\"name\": "
        << label.substr(0, label.size() - 1) << p << "\"}}";
    sep();
    out << "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " << p
        << ", \"args\": {\"sort_index\": " << p << "}}";
    for (size_t track = 0; track < layout.tracks.size(); ++track) {
      sep();
      out << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << p << ", \"tid\": " << track
          << ", \"args\": {\"name\": " << Quoted(layout.tracks[track]) << "}}";
    }
  }
  for (const std::string& text : event_texts) {
    if (text.empty()) continue;
    sep();
    out << text;
  }
  out << "\n]}\n";
}

void WriteChromeTrace(const ChromeTraceLayout& layout, int32_t processes, std::span<const TraceEvent> events,
                      std::ostream& out) {
  WriteChromeTraceDocument(layout, processes, {ChromeCompleteEvents(events, layout)}, out);
}

}  // namespace fcp
