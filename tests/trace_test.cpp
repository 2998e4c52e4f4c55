// The runtime's trace recorder (fcp/trace.h) written through the shared
// Chrome writer: exact text of a trace with injected times.
#include "fcp/trace.h"

#include <gtest/gtest.h>

#include <string>

namespace fcp {
namespace {

TEST(RuntimeTrace, InjectedTimesExactText) {
  Trace trace;
  trace.Add("fwd s0 q0 kv0", TraceLane::kCompute, 2.5, 10);
  trace.Add("wait fwd s0", TraceLane::kWait, 10, 12.25);
  const std::string rank1 = trace.ChromeEvents(1);
  EXPECT_EQ(
      rank1,
      "{\"ph\": \"X\", \"name\": \"fwd s0 q0 kv0\", \"cat\": \"compute\", \"pid\": 1, \"tid\": 0, "
      "\"ts\": 2.500, \"dur\": 7.500},\n"
      "{\"ph\": \"X\", \"name\": \"wait fwd s0\", \"cat\": \"wait\", \"pid\": 1, \"tid\": 3, "
      "\"ts\": 10.000, \"dur\": 2.250}");
  std::string lanes;
  for (int lane = 0; lane < 5; ++lane)
    lanes +=
        "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": " + std::to_string(lane) +
        ", \"args\": {\"name\": \"" + RuntimeTraceLayout().tracks[lane] + "\"}},\n";
  const std::string doc = ChromeTraceDocument({"", rank1});  // rank 0 recorded nothing
  const std::string rank0_metadata_end = "\"tid\": 4, \"args\": {\"name\": \"reshuffle\"}},\n";
  const size_t at = doc.find(rank0_metadata_end);
  ASSERT_NE(at, std::string::npos) << doc;
  EXPECT_EQ(
      doc.substr(at + rank0_metadata_end.size()),
      "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"args\": {\"name\": \"rank 1\"}},\n"
      "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": 1, \"args\": {\"sort_index\": 1}},\n" +
          lanes + rank1 + "\n]}\n");
  EXPECT_EQ(doc.rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", 0), 0u);
}

}  // namespace
}  // namespace fcp
