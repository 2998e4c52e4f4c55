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
    out << ", \"cat\": "
        << Quoted(named ? layout.tracks[static_cast<size_t>(e.track)] : std::string());
  }
  out << ", \"pid\": " << e.worker << ", \"tid\": " << e.track << ", \"ts\": " << Micros(e.start_s)
      << ", \"dur\": " << Micros(e.end_s - e.start_s) << "}";
}

// The header and the metadata of processes 0..processes-1, each object after
// the first preceded by ",\n"; returns whether it wrote any object.
bool WriteHead(const ChromeTraceLayout& layout, int32_t processes, std::ostream& out) {
  out << "{\"displayTimeUnit\": \"ms\", ";
  if (!layout.other_data.empty()) {
    out << "\"otherData\": {";
    for (size_t i = 0; i < layout.other_data.size(); ++i)
      out << (i > 0 ? ", " : "") << Quoted(layout.other_data[i].first) << ": "
          << Quoted(layout.other_data[i].second);
    out << "},\n";
  }
  out << "\"traceEvents\": [\n";
  const std::string label = Quoted(layout.process_label + " ");  // "worker " with its quotes
  for (int32_t p = 0; p < processes; ++p) {
    if (p > 0) out << ",\n";
    out << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << p
        << ", \"args\": {\"name\": " << label.substr(0, label.size() - 1) << p << "\"}},\n";
    out << "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " << p
        << ", \"args\": {\"sort_index\": " << p << "}}";
    for (size_t track = 0; track < layout.tracks.size(); ++track)
      out << ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << p
          << ", \"tid\": " << track << ", \"args\": {\"name\": " << Quoted(layout.tracks[track])
          << "}}";
  }
  return processes > 0;
}

}  // namespace

std::string ChromeCompleteEvents(std::span<const TraceEvent> events,
                                 const ChromeTraceLayout& layout) {
  std::ostringstream out;
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) out << ",\n";
    AppendComplete(events[i], layout, out);
  }
  return out.str();
}

void WriteChromeTraceDocument(const ChromeTraceLayout& layout, int32_t processes,
                              const std::vector<std::string>& event_texts, std::ostream& out) {
  bool any = WriteHead(layout, processes, out);
  for (const std::string& text : event_texts) {
    if (text.empty()) continue;
    if (any) out << ",\n";
    out << text;
    any = true;
  }
  out << "\n]}\n";
}

void WriteChromeTrace(const ChromeTraceLayout& layout, int32_t processes,
                      std::span<const TraceEvent> events, std::ostream& out) {
  // Streamed event by event: a 100k-event simulator trace is not held twice.
  bool any = WriteHead(layout, processes, out);
  for (const TraceEvent& e : events) {
    if (any) out << ",\n";
    AppendComplete(e, layout, out);
    any = true;
  }
  out << "\n]}\n";
}

}  // namespace fcp
