// fcp/trace.h — real timings of a run, per rank, as a Chrome trace.
//
// The executor records intervals (compute of a pair, the flight of a
// transfer from post to observed completion, time blocked in a wait) against
// one steady clock; all ranks of a single machine share that clock (Linux
// CLOCK_MONOTONIC), and the origin is taken just after a barrier. Events are
// fcp::TraceEvent (fcp/chrome_trace.h), written by the same writer as the
// simulator's: pid = rank, tid = lane, "cat" = the lane's name.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fcp/chrome_trace.h"

namespace fcp {

enum class TraceLane : int32_t { kCompute = 0, kSend = 1, kRecv = 2, kWait = 3, kReshuffle = 4 };

// The runtime's tracks, named by TraceLane.
ChromeTraceLayout RuntimeTraceLayout();

class Trace {
 public:
  Trace() : origin_(std::chrono::steady_clock::now()) {}
  void ResetOrigin() { origin_ = std::chrono::steady_clock::now(); }
  double NowUs() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
        .count();
  }
  // An interval of this rank (its pid is given when written, ChromeEvents).
  void Add(std::string name, TraceLane lane, double start_us, double end_us) {
    events_.push_back(
        {0, static_cast<int32_t>(lane), std::move(name), start_us * 1e-6, end_us * 1e-6});
  }
  const std::vector<TraceEvent>& events() const { return events_; }

  // The complete events of one rank (pid = rank) as ChromeCompleteEvents
  // text, so ranks' texts can be joined by ChromeTraceDocument.
  std::string ChromeEvents(int32_t rank) const;

 private:
  std::chrono::steady_clock::time_point origin_;
  std::vector<TraceEvent> events_;
};

// One Chrome trace document of all ranks: rank_events[r] = ChromeEvents(r).
std::string ChromeTraceDocument(const std::vector<std::string>& rank_events);

}  // namespace fcp
