// fcp/chrome_trace.h — the one trace event type and its Chrome trace writer.
//
// Both the simulator (SimResult::trace, modelled times) and the runtime
// (fcp/trace.h, measured times) record intervals as TraceEvent and write them
// with these functions, as the Chrome/Perfetto JSON object format
// ({"traceEvents": [...]}): pid = worker (simulated worker or MPI rank),
// tid = track (a lane of that worker), times in microseconds with three
// decimals.
//
// Invariants: the output is valid JSON for any event names (names are
// escaped; invalid UTF-8 is replaced by U+FFFD, never an exception); the same
// inputs give byte-identical text. A document lists, for each process
// 0..processes-1, its name, its sort index and one name per track, then the
// complete ("X") events in the order given. Events are written as given: a
// track or worker outside the layout is still written (viewers show it
// unnamed).
//
// Complexity: linear in the number of events and the length of their names;
// no JSON DOM is built.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fcp {

// One interval on one track of one worker.
struct TraceEvent {
  int32_t worker = 0;  // Chrome pid
  int32_t track = 0;   // Chrome tid: index into ChromeTraceLayout::tracks
  std::string name;
  double start_s = 0;
  double end_s = 0;
};

// What the document says around the events.
struct ChromeTraceLayout {
  // Document-level "otherData" pairs, in order; the key is omitted when empty.
  std::vector<std::pair<std::string, std::string>> other_data;
  std::string process_label = "worker";  // process p is named "<label> p"
  std::vector<std::string> tracks;       // tid i is named tracks[i]
  // Each complete event carries "cat": its track's name (scripts select a
  // lane's events by it, e.g. scripts/trace_overlap.py).
  bool track_category = false;
};

// The complete events as Chrome JSON objects, one a line, separated by ",\n"
// (no brackets and no trailing separator), so texts made apart (one per MPI
// rank) can be joined into one document.
std::string ChromeCompleteEvents(std::span<const TraceEvent> events,
                                 const ChromeTraceLayout& layout);

// A whole document: the header, the metadata of processes 0..processes-1,
// then the non-empty `event_texts` (each from ChromeCompleteEvents) in order.
void WriteChromeTraceDocument(const ChromeTraceLayout& layout, int32_t processes,
                              const std::vector<std::string>& event_texts, std::ostream& out);

// WriteChromeTraceDocument of one event list.
void WriteChromeTrace(const ChromeTraceLayout& layout, int32_t processes,
                      std::span<const TraceEvent> events, std::ostream& out);

}  // namespace fcp
