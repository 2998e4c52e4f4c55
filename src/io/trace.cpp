#include "fcp/trace.h"

#include <sstream>

namespace fcp {

ChromeTraceLayout RuntimeTraceLayout() {
  ChromeTraceLayout layout;
  layout.process_label = "rank";
  layout.tracks = {"compute", "send", "recv", "wait", "reshuffle"};  // by TraceLane
  layout.track_category = true;
  return layout;
}

std::string Trace::ChromeEvents(int32_t rank) const {
  std::vector<TraceEvent> mine = events_;
  for (TraceEvent& e : mine) e.worker = rank;
  return ChromeCompleteEvents(mine, RuntimeTraceLayout());
}

std::string ChromeTraceDocument(const std::vector<std::string>& rank_events) {
  std::ostringstream out;
  WriteChromeTraceDocument(RuntimeTraceLayout(), static_cast<int32_t>(rank_events.size()),
                           rank_events, out);
  return out.str();
}

}  // namespace fcp
