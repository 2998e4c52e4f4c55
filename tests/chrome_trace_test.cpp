// The one Chrome trace writer (fcp/chrome_trace.h): exact text of hand-made
// event lists, escaping of hostile names, and that any output parses.
#include "fcp/chrome_trace.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fcp {
namespace {

std::string Document(const ChromeTraceLayout& layout, int32_t processes,
                     const std::vector<TraceEvent>& events) {
  std::ostringstream out;
  WriteChromeTrace(layout, processes, events, out);
  return out.str();
}

TEST(ChromeTrace, OneProcessTwoTracksExactText) {
  ChromeTraceLayout layout;
  layout.other_data = {{"planner", "fcp"}, {"profile", "gpu-x"}};
  layout.process_label = "worker";
  layout.tracks = {"compute", "send"};
  const std::vector<TraceEvent> events = {{0, 0, "pair q0 kv0", 0.5e-6, 2e-6},
                                          {0, 1, "kv1 -> 1", 1e-3, 1.0015e-3}};
  EXPECT_EQ(
      Document(layout, 1, events),
      "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"planner\": \"fcp\", \"profile\": \"gpu-x\"},\n"
      "\"traceEvents\": [\n"
      "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": {\"name\": \"worker 0\"}},\n"
      "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": 0, \"args\": {\"sort_index\": 0}},\n"
      "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": \"compute\"}},\n"
      "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": 1, \"args\": {\"name\": \"send\"}},\n"
      "{\"ph\": \"X\", \"name\": \"pair q0 kv0\", \"pid\": 0, \"tid\": 0, \"ts\": 0.500, \"dur\": 1.500},\n"
      "{\"ph\": \"X\", \"name\": \"kv1 -> 1\", \"pid\": 0, \"tid\": 1, \"ts\": 1000.000, \"dur\": 1.500}\n"
      "]}\n");
}

TEST(ChromeTrace, NoOtherDataNoEventsNoProcesses) {
  EXPECT_EQ(Document({}, 0, {}), "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n\n]}\n");
}

TEST(ChromeTrace, CategoryIsTheTrackName) {
  ChromeTraceLayout layout;
  layout.process_label = "rank";
  layout.tracks = {"compute", "recv"};
  layout.track_category = true;
  // Track 5 has no name: written with an empty category, not dropped.
  const std::vector<TraceEvent> events = {{3, 1, "recv kv2 from 0", 0, 1e-6}, {3, 5, "odd", 0, 0}};
  EXPECT_EQ(
      ChromeCompleteEvents(events, layout),
      "{\"ph\": \"X\", \"name\": \"recv kv2 from 0\", \"cat\": \"recv\", \"pid\": 3, \"tid\": 1, "
      "\"ts\": 0.000, \"dur\": 1.000},\n"
      "{\"ph\": \"X\", \"name\": \"odd\", \"cat\": \"\", \"pid\": 3, \"tid\": 5, \"ts\": 0.000, \"dur\": 0.000}");
}

TEST(ChromeTrace, NamesAreEscaped) {
  ChromeTraceLayout layout;
  layout.process_label = "w\"k";
  layout.tracks = {"a\\b"};
  layout.other_data = {{"k\"", "line\nbreak"}};
  const std::vector<TraceEvent> events = {
      {0, 0, std::string("q\"uote\\back\tx\x01y\x7f", 16), 0, 0}, {0, 0, "bad \xff utf8", 0, 0}};
  const std::string text = Document(layout, 1, events);
  EXPECT_NE(text.find("\"otherData\": {\"k\\\"\": \"line\\nbreak\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"args\": {\"name\": \"w\\\"k 0\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"args\": {\"name\": \"a\\\\b\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"name\": \"q\\\"uote\\\\back\\tx\\u0001y\x7f\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("\"name\": \"bad \xef\xbf\xbd utf8\""), std::string::npos) << text;  // U+FFFD
  const nlohmann::json doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["traceEvents"][3]["name"], std::string("q\"uote\\back\tx\x01y\x7f", 16));
}

TEST(ChromeTrace, TextsMadeApartJoinIntoOneDocument) {
  ChromeTraceLayout layout;
  layout.process_label = "rank";
  layout.tracks = {"compute"};
  const std::string rank0 =
      ChromeCompleteEvents(std::vector<TraceEvent>{{0, 0, "a", 0, 1e-6}}, layout);
  const std::string rank1 =
      ChromeCompleteEvents(std::vector<TraceEvent>{{1, 0, "b", 0, 2e-6}}, layout);
  std::ostringstream out;
  WriteChromeTraceDocument(layout, 3, {rank0, "", rank1}, out);  // rank 2 recorded nothing
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  ASSERT_EQ(doc["traceEvents"].size(), 3u * 3u + 2u);  // 3 metadata events a process
  EXPECT_EQ(doc["traceEvents"][6]["args"]["name"], "rank 2");
  EXPECT_EQ(doc["traceEvents"][9]["name"], "a");
  EXPECT_EQ(doc["traceEvents"][10]["name"], "b");
  EXPECT_EQ(doc["traceEvents"][10]["dur"], 2.0);
}

// Property: random names (any bytes) and times always give a document that
// parses, with every event back in order and its times to 1 ns.
TEST(ChromeTrace, RandomEventsRoundTrip) {
  std::mt19937_64 rng(20);
  for (int round = 0; round < 50; ++round) {
    ChromeTraceLayout layout;
    layout.tracks = {"compute", "send", "receive"};
    layout.track_category = round % 2 == 1;
    std::vector<TraceEvent> events(rng() % 40);
    for (TraceEvent& e : events) {
      e.worker = static_cast<int32_t>(rng() % 4);
      e.track = static_cast<int32_t>(rng() % 3);
      e.name.resize(rng() % 12);
      for (char& c : e.name)
        c = static_cast<char>(rng() % 128);  // ASCII, control characters included
      e.start_s = static_cast<double>(rng() % 1000000) * 1e-6;
      e.end_s = e.start_s + static_cast<double>(rng() % 1000) * 1e-9;
    }
    const nlohmann::json doc = nlohmann::json::parse(Document(layout, 4, events));
    const auto& all = doc["traceEvents"];
    ASSERT_EQ(all.size(), 4 * 5 + events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& j = all[20 + i];
      EXPECT_EQ(j["name"], events[i].name);
      EXPECT_EQ(j["pid"], events[i].worker);
      EXPECT_EQ(j["tid"], events[i].track);
      EXPECT_EQ(j.contains("cat"), layout.track_category);
      EXPECT_NEAR(j["ts"].get<double>(), events[i].start_s * 1e6, 1e-3);
      EXPECT_NEAR(j["dur"].get<double>(), (events[i].end_s - events[i].start_s) * 1e6, 1e-3);
    }
  }
}

}  // namespace
}  // namespace fcp
