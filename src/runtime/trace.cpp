#include "fcp/trace.h"

#include <fmt/format.h>

namespace fcp {
namespace {

const char* LaneName(TraceLane lane) {
  switch (lane) {
    case TraceLane::kCompute: return "compute";
    case TraceLane::kSend: return "send";
    case TraceLane::kRecv: return "recv";
    case TraceLane::kWait: return "wait";
    case TraceLane::kReshuffle: return "reshuffle";
  }
  return "?";
}

}  // namespace

std::string Trace::ChromeEvents(int32_t rank) const {
  std::string out;
  for (int lane = 0; lane <= static_cast<int>(TraceLane::kReshuffle); ++lane) {
    if (!out.empty()) out += ",\n";
    out += fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
                       rank, lane, LaneName(static_cast<TraceLane>(lane)));
  }
  out += fmt::format(R"(,
{{"name":"process_name","ph":"M","pid":{},"args":{{"name":"rank {}"}}}})", rank, rank);
  for (const TraceEvent& e : events_)
    out += fmt::format(R"(,
{{"name":"{}","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}}})",
                       e.name, LaneName(e.lane), rank, static_cast<int>(e.lane), e.start_us,
                       e.end_us - e.start_us);
  return out;
}

std::string ChromeTraceDocument(const std::vector<std::string>& rank_events) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& e : rank_events) {
    if (e.empty()) continue;
    if (!first) out += ",\n";
    out += e;
    first = false;
  }
  return out + "\n]}\n";
}

}  // namespace fcp
