// fcp/trace.h — real timings of a run, per rank, as a Chrome trace.
//
// The executor records intervals (compute of a pair, the flight of a
// transfer from post to observed completion, time blocked in a wait) against
// one steady clock; all ranks of a single machine share that clock (Linux
// CLOCK_MONOTONIC), and the origin is taken just after a barrier. The trace
// is the Chrome/Perfetto JSON array format: pid = rank, tid = lane.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fcp {

enum class TraceLane : int32_t { kCompute = 0, kSend = 1, kRecv = 2, kWait = 3, kReshuffle = 4 };

struct TraceEvent {
  std::string name;
  TraceLane lane = TraceLane::kCompute;
  double start_us = 0;
  double end_us = 0;
};

class Trace {
 public:
  Trace() : origin_(std::chrono::steady_clock::now()) {}
  void ResetOrigin() { origin_ = std::chrono::steady_clock::now(); }
  double NowUs() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
  }
  void Add(std::string name, TraceLane lane, double start_us, double end_us) {
    // Filled in place: GCC 12 under ASan reports a sized-delete mismatch when
    // a braced TraceEvent temporary holding a moved-from name is destroyed.
    TraceEvent& event = events_.emplace_back();
    event.name = std::move(name);
    event.lane = lane;
    event.start_us = start_us;
    event.end_us = end_us;
  }
  const std::vector<TraceEvent>& events() const { return events_; }

  // The events of one rank as Chrome trace JSON objects, comma-separated
  // (no brackets), so ranks' texts can be concatenated.
  std::string ChromeEvents(int32_t rank) const;

 private:
  std::chrono::steady_clock::time_point origin_;
  std::vector<TraceEvent> events_;
};

// Wraps comma-separated per-rank event texts into one Chrome trace document.
std::string ChromeTraceDocument(const std::vector<std::string>& rank_events);

}  // namespace fcp
