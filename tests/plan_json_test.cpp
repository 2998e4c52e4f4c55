// Plan JSON: canonical writer, strict reader, byte-identical round trips and
// one kParse error naming the field for every kind of malformed input.
#include <filesystem>
#include <functional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/plan.h"
#include "fcp/plan_json.h"
#include "fuzz/plan_reader_check.h"
#include "hand_plans.h"

namespace fcp {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// A plan written by hand (not by WritePlanJson): other spacing, fields in
// another order, an unknown extra field at three levels.
constexpr const char* kHandJson = R"({
  "version": 1, "format": "fcp-plan",
  "planner": "by hand", "workers": 2, "comment": "ignored",
  "mask": {"window": 3, "kind": "sliding_window"},
  "attention": {"heads_q": 8, "heads_kv": 2, "head_dim": 64, "dtype_bytes": 4},
  "block_size": 4, "coalesce": 2, "token_cap": 6,
  "sequences": [5, 3],
  "blocks": [{"worker": 1, "segments": [[0, 0, 4]], "note": 1},
             {"segments": [[0, 4, 1], [1, 0, 3]], "worker": 0}],
  "forward": [{"send": [[0, 1, 0]], "compute": [[0, 0], [1, 1]], "x": null},
              {"send": [], "compute": [[1, 0]]}],
  "backward": [{"send_kv": [[0, 1, 0]], "send_dkv": [], "compute": [[0, 0], [1, 1]]},
               {"send_kv": [], "send_dkv": [], "compute": [[1, 0]]},
               {"send_kv": [], "send_dkv": [[0, 0, 1]], "compute": []}]
}
)";

TEST(PlanJsonTest, ReadsHandWrittenPlanWithExactValues) {
  const Plan p = ReadPlanJson(kHandJson);
  EXPECT_EQ(p.planner, "by hand");
  EXPECT_EQ(p.workers, 2);
  EXPECT_EQ(p.mask, (Mask{MaskKind::kSlidingWindow, 3}));
  EXPECT_EQ(p.attention, (AttentionShape{8, 2, 64, 4}));
  EXPECT_EQ(p.block_size, 4);
  EXPECT_EQ(p.coalesce, 2);
  EXPECT_EQ(p.token_cap, 6);
  EXPECT_EQ(p.sequences, (std::vector<int64_t>{5, 3}));
  ASSERT_EQ(p.blocks.size(), 2u);
  EXPECT_EQ(p.blocks[0], (Block{1, {{0, 0, 4}}}));
  EXPECT_EQ(p.blocks[1], (Block{0, {{0, 4, 1}, {1, 0, 3}}}));
  ASSERT_EQ(p.forward.size(), 2u);
  EXPECT_EQ(p.forward[0].send, (std::vector<Transfer>{{0, 1, 0}}));
  EXPECT_EQ(p.forward[0].compute, (std::vector<BlockPair>{{0, 0}, {1, 1}}));
  EXPECT_TRUE(p.forward[1].send.empty());
  EXPECT_EQ(p.forward[1].compute, (std::vector<BlockPair>{{1, 0}}));
  ASSERT_EQ(p.backward.size(), 3u);
  EXPECT_EQ(p.backward[0].send_kv, (std::vector<Transfer>{{0, 1, 0}}));
  EXPECT_TRUE(p.backward[0].send_dkv.empty());
  EXPECT_EQ(p.backward[2].send_dkv, (std::vector<Transfer>{{0, 0, 1}}));
  EXPECT_TRUE(p.backward[2].compute.empty());
  // The hand plan is also a valid one (the extra fields change nothing).
  EXPECT_NO_THROW(ValidatePlan(p));
}

// The canonical layout, pinned: one top-level field per line, one block or
// stage per line, a window only for sliding_window.
TEST(PlanJsonTest, WritesCanonicalText) {
  EXPECT_EQ(WritePlanJson(testing::TwoWorkerPlan()),
            R"({
  "format": "fcp-plan",
  "version": 1,
  "planner": "hand",
  "workers": 2,
  "mask": {"kind": "causal"},
  "attention": {"heads_q": 2, "heads_kv": 1, "head_dim": 4, "dtype_bytes": 2},
  "block_size": 4,
  "coalesce": 1,
  "token_cap": 8,
  "sequences": [12],
  "blocks": [
    {"worker": 0, "segments": [[0, 0, 4]]},
    {"worker": 1, "segments": [[0, 4, 4]]},
    {"worker": 1, "segments": [[0, 8, 4]]}
  ],
  "forward": [
    {"send": [[0, 0, 1]], "compute": [[0, 0], [1, 1], [2, 1], [2, 2]]},
    {"send": [], "compute": [[1, 0], [2, 0]]}
  ],
  "backward": [
    {"send_kv": [[0, 0, 1]], "send_dkv": [], "compute": [[0, 0], [1, 1], [2, 1], [2, 2]]},
    {"send_kv": [], "send_dkv": [], "compute": [[1, 0]]},
    {"send_kv": [], "send_dkv": [], "compute": [[2, 0]]},
    {"send_kv": [], "send_dkv": [[0, 1, 0]], "compute": []}
  ]
}
)");
}

TEST(PlanJsonTest, RoundTripIsByteIdentical) {
  Plan empty_stages = testing::ThreeWorkerPlan();
  empty_stages.forward.clear();
  empty_stages.backward.clear();
  empty_stages.planner = "quote \" backslash \\ tab \t unicode \u00e9";
  Plan window = testing::ThreeWorkerPlan();
  window.mask = {MaskKind::kSlidingWindow, 5};
  Plan big = testing::TwoWorkerPlan();
  big.token_cap = (int64_t{1} << 40) + 7;  // beyond int32
  big.sequences = {int64_t{1} << 31};
  Plan options = testing::TwoWorkerPlan();
  options.planner_options = {{"a", 0.1}, {"b", 4}, {"c", 1e-300}, {"d", 12462.5}};
  for (const Plan& plan :
       {testing::TwoWorkerPlan(), testing::ThreeWorkerPlan(), ReadPlanJson(kHandJson), empty_stages,
        window, big, options, testing::RowRangePlan()}) {
    const std::string first = WritePlanJson(plan);
    const Plan read = ReadPlanJson(first);
    EXPECT_EQ(read, plan);
    EXPECT_EQ(WritePlanJson(read), first);
  }
}

TEST(PlanJsonTest, EqualPlansGiveIdenticalBytes) {
  EXPECT_EQ(WritePlanJson(testing::ThreeWorkerPlan()), WritePlanJson(testing::ThreeWorkerPlan()));
  EXPECT_NE(WritePlanJson(testing::ThreeWorkerPlan()), WritePlanJson(testing::TwoWorkerPlan()));
}

// Returns the kParse message of ReadPlanJson(text); fails the test if it parses.
std::string ParseError(const std::string& text) {
  return testing::ExpectedErrorMessage(ErrorCode::kParse, [&] { ReadPlanJson(text); });
}

struct Malformed {
  const char* name;
  std::function<void(json&)> mutate;  // applied to the canonical ThreeWorkerPlan JSON
  const char* expected;
};

const Malformed kMalformed[] = {
    {"MissingFormat", [](json& j) { j.erase("format"); }, "field 'format' is missing"},
    {"WrongFormat", [](json& j) { j["format"] = "fcp-plan2"; },
     "field 'format' must be \"fcp-plan\", got \"fcp-plan2\""},
    {"FormatNotString", [](json& j) { j["format"] = 1; }, "field 'format' must be \"fcp-plan\""},
    {"WrongVersion", [](json& j) { j["version"] = 2; }, "field 'version' must be 1, got 2"},
    {"VersionNotInteger", [](json& j) { j["version"] = "1"; },
     "field 'version' must be an integer, got \"1\""},
    {"MissingPlanner", [](json& j) { j.erase("planner"); }, "field 'planner' is missing"},
    {"PlannerNotString", [](json& j) { j["planner"] = 3; }, "field 'planner' must be a string"},
    {"MissingWorkers", [](json& j) { j.erase("workers"); }, "field 'workers' is missing"},
    {"WorkersFloat", [](json& j) { j["workers"] = 2.5; },
     "field 'workers' must be an integer, got 2.5"},
    {"WorkersWholeFloat", [](json& j) { j["workers"] = 3.0; },
     "field 'workers' must be an integer"},
    {"WorkersString", [](json& j) { j["workers"] = "3"; }, "field 'workers' must be an integer"},
    {"WorkersBool", [](json& j) { j["workers"] = true; }, "field 'workers' must be an integer"},
    {"WorkersBeyondInt32", [](json& j) { j["workers"] = int64_t{1} << 32; },
     "field 'workers' is out of range: 4294967296"},
    {"TokenCapBeyondInt64", [](json& j) { j["token_cap"] = uint64_t{1} << 63; },
     "field 'token_cap' is out of range: 9223372036854775808"},
    {"MissingMask", [](json& j) { j.erase("mask"); }, "field 'mask' is missing"},
    {"MaskNotObject", [](json& j) { j["mask"] = "causal"; }, "field 'mask' must be an object"},
    {"MissingMaskKind", [](json& j) { j["mask"].erase("kind"); }, "field 'mask.kind' is missing"},
    {"BadMaskKind", [](json& j) { j["mask"]["kind"] = "diagonal"; },
     "field 'mask.kind' is invalid: mask: unknown kind 'diagonal'"},
    {"MaskKindNotString", [](json& j) { j["mask"]["kind"] = 0; },
     "field 'mask.kind' must be a string"},
    {"WindowMissing",
     [](json& j) {
       j["mask"] = {{"kind", "sliding_window"}};
     },
     "field 'mask.window' is missing"},
    {"WindowNotInteger",
     [](json& j) {
       j["mask"] = {{"kind", "sliding_window"}, {"window", "4"}};
     },
     "field 'mask.window' must be an integer"},
    {"MissingAttention", [](json& j) { j.erase("attention"); }, "field 'attention' is missing"},
    {"MissingHeadDim", [](json& j) { j["attention"].erase("head_dim"); },
     "field 'attention.head_dim' is missing"},
    {"HeadsQNotInteger", [](json& j) { j["attention"]["heads_q"] = json::array(); },
     "field 'attention.heads_q' must be an integer"},
    {"MissingBlockSize", [](json& j) { j.erase("block_size"); }, "field 'block_size' is missing"},
    {"MissingCoalesce", [](json& j) { j.erase("coalesce"); }, "field 'coalesce' is missing"},
    {"MissingTokenCap", [](json& j) { j.erase("token_cap"); }, "field 'token_cap' is missing"},
    {"SequencesNotArray", [](json& j) { j["sequences"] = 12; },
     "field 'sequences' must be an array"},
    {"SequenceNotInteger", [](json& j) { j["sequences"][0] = "12"; },
     "field 'sequences[0]' must be an integer"},
    {"MissingBlocks", [](json& j) { j.erase("blocks"); }, "field 'blocks' is missing"},
    {"BlockNotObject", [](json& j) { j["blocks"][1] = json::array(); },
     "field 'blocks[1]' must be an object"},
    {"BlockWorkerMissing", [](json& j) { j["blocks"][2].erase("worker"); },
     "field 'blocks[2].worker' is missing"},
    {"BlockSegmentsMissing", [](json& j) { j["blocks"][2].erase("segments"); },
     "field 'blocks[2].segments' is missing"},
    {"SegmentNotTriple",
     [](json& j) {
       j["blocks"][1]["segments"][0] = {0, 4};
     },
     "field 'blocks[1].segments[0]' must be [seq, start, length], got [0,4]"},
    {"SegmentQuadruple",
     [](json& j) {
       j["blocks"][1]["segments"][0] = {0, 4, 4, 1};
     },
     "field 'blocks[1].segments[0]' must be [seq, start, length]"},
    {"SegmentObject",
     [](json& j) {
       j["blocks"][1]["segments"][0] = {{"seq", 0}};
     },
     "field 'blocks[1].segments[0]' must be [seq, start, length]"},
    {"SegmentValueNotInteger", [](json& j) { j["blocks"][1]["segments"][0][2] = nullptr; },
     "field 'blocks[1].segments[0][2]' must be an integer, got null"},
    {"MissingForward", [](json& j) { j.erase("forward"); }, "field 'forward' is missing"},
    {"ForwardStageNotObject", [](json& j) { j["forward"][0] = 1; },
     "field 'forward[0]' must be an object"},
    {"ForwardSendMissing", [](json& j) { j["forward"][1].erase("send"); },
     "field 'forward[1].send' is missing"},
    {"ForwardComputeNotArray", [](json& j) { j["forward"][1]["compute"] = json::object(); },
     "field 'forward[1].compute' must be an array"},
    {"SendNotTriple",
     [](json& j) {
       j["forward"][0]["send"][1] = {1, 1};
     },
     "field 'forward[0].send[1]' must be [block, src, dst], got [1,1]"},
    {"SendIdNotInteger", [](json& j) { j["forward"][0]["send"][1][2] = 2.0; },
     "field 'forward[0].send[1][2]' must be an integer"},
    {"ComputeNotPair",
     [](json& j) {
       j["forward"][2]["compute"][0] = {2, 0, 1, 1};
     },
     "field 'forward[2].compute[0]' must be [q_block, kv_block]"},
    {"ComputeIdBeyondInt32",
     [](json& j) { j["forward"][2]["compute"][0][0] = -(int64_t{1} << 40); },
     "field 'forward[2].compute[0][0]' is out of range"},
    {"OptionsNotObject", [](json& j) { j["planner_options"] = json::array(); },
     "field 'planner_options' must be an object"},
    {"OptionNotNumber", [](json& j) { j["planner_options"]["max_split"] = "4"; },
     "field 'planner_options.max_split' must be a finite number, got \"4\""},
    {"MissingBackward", [](json& j) { j.erase("backward"); }, "field 'backward' is missing"},
    {"BackwardSendDkvMissing", [](json& j) { j["backward"][3].erase("send_dkv"); },
     "field 'backward[3].send_dkv' is missing"},
    {"BackwardSendKvMissing", [](json& j) { j["backward"][0].erase("send_kv"); },
     "field 'backward[0].send_kv' is missing"},
    {"BackwardComputeMissing", [](json& j) { j["backward"][2].erase("compute"); },
     "field 'backward[2].compute' is missing"},
    {"BackwardDkvNotTriple", [](json& j) { j["backward"][3]["send_dkv"][0] = "x"; },
     "field 'backward[3].send_dkv[0]' must be [block, src, dst]"},
};

class PlanJsonMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(PlanJsonMalformedTest, FailsNamingTheField) {
  json j = json::parse(WritePlanJson(testing::ThreeWorkerPlan()));
  GetParam().mutate(j);
  EXPECT_THAT(ParseError(j.dump()), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(AllFields, PlanJsonMalformedTest, ::testing::ValuesIn(kMalformed),
                         [](const auto& info) { return std::string(info.param.name); });

// Options come back sorted by name whatever order a planner stored them in,
// and the file lists them in that order.
// The row-range extension (docs/plan-format.md): a stage lists the
// transfers that carry part of their block by index; the others carry all.
TEST(PlanJsonTest, RowRangesAreWrittenByIndexAndReadBack) {
  const std::string text = WritePlanJson(testing::RowRangePlan());
  EXPECT_THAT(text, HasSubstr("{\"send\": [[0, 0, 1]], \"send_rows\": [[0, 2, 2]], \"compute\""));
  EXPECT_THAT(text, HasSubstr("\"send_kv\": [[0, 0, 1]], \"send_kv_rows\": [[0, 2, 2]], "
                              "\"send_dkv\": []"));
  EXPECT_THAT(text, HasSubstr("\"send_dkv\": [[0, 1, 0]], \"send_dkv_rows\": [[0, 2, 2]]"));
  // Plans without ranges say nothing of them.
  EXPECT_THAT(WritePlanJson(testing::ThreeWorkerPlan()), Not(HasSubstr("_rows")));
  const Plan read = ReadPlanJson(text);
  EXPECT_EQ(read.forward[0].send[0], (Transfer{0, 0, 1, 2, 2}));
  EXPECT_EQ(read.backward[2].send_dkv[0], (Transfer{0, 1, 0, 2, 2}));
  EXPECT_TRUE(read.forward[1].send.empty());
  for (const auto& [bad, message] : std::vector<std::pair<std::string, std::string>>{
           {"[[1, 2, 2]]",
            "field 'forward[0].send_rows[0][0]' must name a transfer after the "
            "previous one, got 1 (1 transfers)"},
           {"[[0, -1, 2]]", "field 'forward[0].send_rows[0][1]' must be >= 0, got -1"},
           {"[[0, 2, 0]]", "field 'forward[0].send_rows[0][2]' must be >= 1, got 0"},
           {"[[0, 2]]", "field 'forward[0].send_rows[0]' must be [index, row_begin, row_count]"},
           {"[[0, 2, 2], [0, 1, 1]]", "must name a transfer after the previous one, got 0"},
           {"{}", "field 'forward[0].send_rows' must be an array"}}) {
    json j = json::parse(text);
    j["forward"][0]["send_rows"] = json::parse(bad);
    EXPECT_THAT(ParseError(j.dump()), HasSubstr(message)) << bad;
  }
}

// The remote-compute extension: a third compute element and the send_q /
// send_o / send_dq lists, written only where used, read back exactly.
TEST(PlanJsonTest, RemoteComputeIsWrittenWhereUsedAndReadBack) {
  const std::string text = WritePlanJson(testing::RemoteComputePlan());
  EXPECT_THAT(text, HasSubstr("{\"send\": [[0, 0, 1]], \"compute\": [[0, 0], [1, 1], [2, 1], "
                              "[2, 2]], \"send_q\": [[2, 1, 0]]}"));
  EXPECT_THAT(text, HasSubstr("{\"send\": [], \"compute\": [[1, 0], [2, 0, 0]]}"));
  EXPECT_THAT(text, HasSubstr("{\"send\": [], \"compute\": [], \"send_o\": [[2, 0, 1]]}"));
  EXPECT_THAT(text, HasSubstr("\"send_dkv\": [[0, 1, 0]], \"compute\": [], \"send_dq\": "
                              "[[2, 0, 1]]}"));
  EXPECT_THAT(WritePlanJson(testing::ThreeWorkerPlan()), Not(HasSubstr("send_q")));
  EXPECT_EQ(ReadPlanJson(text), testing::RemoteComputePlan());
  EXPECT_EQ(WritePlanJson(ReadPlanJson(text)), text);
  for (const auto& [bad, message] : std::vector<std::pair<std::string, std::string>>{
           {"[[1, 0, -1]]", "field 'forward[1].compute[0][2]' must be >= 0, got -1"},
           {"[[1, 0, 0, 1]]",
            "field 'forward[1].compute[0]' must be [q_block, kv_block] or "
            "[q_block, kv_block, worker]"},
           {"[[1, 0, \"a\"]]", "field 'forward[1].compute[0][2]' must be an integer"}}) {
    json j = json::parse(text);
    j["forward"][1]["compute"] = json::parse(bad);
    EXPECT_THAT(ParseError(j.dump()), HasSubstr(message)) << bad;
  }
  json j = json::parse(text);
  j["forward"][2]["send_o"] = json::parse("[[2, 0]]");
  EXPECT_THAT(ParseError(j.dump()), HasSubstr("field 'forward[2].send_o[0]' must be "
                                              "[block, src, dst]"));
}

TEST(PlanJsonTest, PlannerOptionsAreWrittenSortedByName) {
  Plan plan = testing::TwoWorkerPlan();
  plan.planner_options = {{"zeta", 2}, {"alpha", 0.5}};
  const std::string text = WritePlanJson(plan);
  EXPECT_THAT(text, HasSubstr("\"planner_options\": {\"alpha\": 0.5, \"zeta\": 2.0}"));
  EXPECT_EQ(ReadPlanJson(text).planner_options,
            (std::vector<std::pair<std::string, double>>{{"alpha", 0.5}, {"zeta", 2}}));
  EXPECT_THAT(WritePlanJson(testing::TwoWorkerPlan()), Not(HasSubstr("planner_options")));
  std::string huge = text;
  huge.replace(huge.find("0.5"), 3, "1E999");
  EXPECT_THAT(ParseError(huge), HasSubstr("number overflow parsing '1E999'"));
}

TEST(PlanJsonTest, RejectsTextThatIsNotAPlanObject) {
  EXPECT_THAT(ParseError(""), HasSubstr("plan: not valid JSON"));
  EXPECT_THAT(ParseError("fcp-plan"), HasSubstr("plan: not valid JSON"));
  EXPECT_THAT(ParseError("{\"format\": \"fcp-plan\""), HasSubstr("plan: not valid JSON"));
  EXPECT_THAT(ParseError("[1, 2, 3]"), HasSubstr("plan: top level must be a JSON object"));
  EXPECT_THAT(ParseError("42"), HasSubstr("top level must be a JSON object"));
  EXPECT_THAT(ParseError("{}"), HasSubstr("field 'format' is missing"));
  // Numbers beyond double (found by the fuzzer: nlohmann reports them with
  // out_of_range, not parse_error).
  EXPECT_THAT(ParseError("{\"format\": 1E999}"), HasSubstr("plan: not valid JSON"));
  EXPECT_THAT(ParseError("{\"format\": \"fcp-plan\", \"version\": -1e400}"),
              HasSubstr("plan: not valid JSON"));
  // Trailing garbage after a complete plan.
  EXPECT_THAT(ParseError(WritePlanJson(testing::TwoWorkerPlan()) + "x"),
              HasSubstr("plan: not valid JSON"));
  EXPECT_THAT(ParseError(WritePlanJson(testing::TwoWorkerPlan()) + "{}"),
              HasSubstr("plan: not valid JSON"));
}

// A repeated key would be read as its last value (nlohmann's choice): the
// reader refuses it and names the key, at any depth and in objects of any
// size; the same key in different objects is fine.
TEST(PlanJsonTest, RejectsAKeyRepeatedInOneObject) {
  const std::string text = WritePlanJson(testing::TwoWorkerPlan());
  ASSERT_NO_THROW(ReadPlanJson(text));  // every block has its own "worker"
  std::string top = text;
  top.insert(top.find("\"workers\""), "\"workers\": 5, ");
  EXPECT_THAT(ParseError(top),
              HasSubstr("plan: not valid JSON: the key \"workers\" appears twice in one object"));
  std::string block = text;
  block.insert(block.find("{\"worker\": ") + 1, "\"worker\": 1, ");
  EXPECT_THAT(ParseError(block), HasSubstr("the key \"worker\" appears twice"));
  // An extra object (allowed, ignored) past the short scan of keys.
  std::string extra = "{";
  for (int k = 0; k < 1000; ++k)
    extra += "\"k" + std::to_string(k) + "\": " + std::to_string(k) + ", ";
  std::string many = text;
  many.insert(1, "\"extra\": " + extra + "\"last\": 0}, ");
  EXPECT_NO_THROW(ReadPlanJson(many));
  many.insert(1, "\"extra2\": " + extra + "\"k999\": 0}, ");
  EXPECT_THAT(ParseError(many), HasSubstr("the key \"k999\" appears twice"));
  std::string odd = text;
  odd.insert(1, "\"\\u0001\": 0, \"\\u0001\": 1, ");  // a control character, escaped
  EXPECT_THAT(ParseError(odd), HasSubstr("the key \"?\" appears twice"));
}

TEST(PlanJsonTest, ErrorsAreOnePrintableLine) {
  // The CLI prints the message as one line on stderr, whatever bytes the file held.
  for (const char* text : {"{\n\"a\": \n", "[1,\n2", "{\"format\": \"fcp-plan\",\n\"version\": x}",
                           "{\"\xff\xfe\": 1}", "{\"a\": \"\x01\x80\"}", "{\"\t\r\n"}) {
    const std::string message = ParseError(text);
    for (char c : message) EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << message;
  }
}

TEST(PlanJsonTest, ReadsFilesAndReportsUnreadableOnes) {
  const std::string path = ::testing::TempDir() + "/plan_json_test.json";
  WritePlanJsonFile(testing::ThreeWorkerPlan(), path);
  EXPECT_EQ(ReadPlanJsonFile(path), testing::ThreeWorkerPlan());
  try {
    ReadPlanJsonFile(path + ".does-not-exist");
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr("plan_json_test.json.does-not-exist"));
  }
  try {
    WritePlanJsonFile(testing::ThreeWorkerPlan(), path + ".missing-dir/x.json");
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
  }
}

// Issue 19: nesting beyond 64 levels is refused while reading (it crashed
// every reader: nlohmann dumps and destroys recursively); a long value is
// quoted by a short prefix; a malformed element of a streamed array is
// reported after the header fields, as a whole-document reader would.
TEST(PlanJsonTest, DeepNestingIsAParseError) {
  json j = json::parse(WritePlanJson(testing::ThreeWorkerPlan()));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string text = j.dump();
  text.replace(text.find("\"workers\":") + 10, 1, deep);
  EXPECT_THAT(ParseError(text), HasSubstr("nest deeper than 64 levels"));
  text = j.dump();
  const std::string blocks = "\"blocks\":[";
  text.insert(text.find(blocks) + blocks.size(), std::string(70, '[') + std::string(70, ']') + ",");
  EXPECT_THAT(ParseError(text), HasSubstr("nest deeper than 64 levels"));
}

TEST(PlanJsonTest, LongValuesAreQuotedByAShortPrefix) {
  json j = json::parse(WritePlanJson(testing::ThreeWorkerPlan()));
  j["workers"] = std::string(10'000'000, 'x');
  std::string message = ParseError(j.dump());
  EXPECT_THAT(message, HasSubstr("a string of 10000000 bytes"));
  EXPECT_LT(message.size(), 300u);
  j = json::parse(WritePlanJson(testing::ThreeWorkerPlan()));
  j["blocks"][0]["segments"][0] = json::array();
  for (int i = 0; i < 100000; ++i) j["blocks"][0]["segments"][0].push_back(i);
  message = ParseError(j.dump());
  EXPECT_THAT(message, HasSubstr("must be [seq, start, length], got [0,1,2,"));
  EXPECT_LT(message.size(), 300u);
  const std::string unterminated = "{\"format\": \"" + std::string(1'000'000, 'y');
  EXPECT_LT(ParseError(unterminated).size(), 400u);
}

TEST(PlanJsonTest, StreamedArrayErrorsComeInFieldOrder) {
  json j = json::parse(WritePlanJson(testing::ThreeWorkerPlan()));
  j["blocks"][0]["worker"] = "w";
  j["version"] = 3;  // a header error is found first, wherever the fields are
  EXPECT_THAT(ParseError(j.dump()), HasSubstr("field 'version' must be 1"));
  j["version"] = 1;
  j["sequences"][0] = "s";  // sequences before blocks, as in the format
  EXPECT_THAT(ParseError(j.dump()), HasSubstr("field 'sequences[0]' must be an integer"));
  j = json::parse(WritePlanJson(testing::ThreeWorkerPlan()));
  j["forward"] = 5;  // not an array: not streamed, the type error
  EXPECT_THAT(ParseError(j.dump()), HasSubstr("field 'forward' must be an array"));
}

// The fuzzer's seed corpus (valid plans) and every input it ever found a bug
// with (tests/fuzz/regressions/), replayed through the fuzzer's check in
// every build, sanitizers included.
TEST(PlanJsonTest, FuzzCorpusAndRegressionsAreHandled) {
  const std::filesystem::path root = FCP_TESTS_DIR;
  int valid = 0, files = 0;
  for (const char* dir : {"fuzz/corpus", "fuzz/regressions"})
    fuzz::ForEachSavedInput(root / dir,
                            [&](const std::filesystem::path& path, const std::string& text) {
                              SCOPED_TRACE(path.string());
                              fuzz::Outcome outcome{};
                              EXPECT_NO_THROW(outcome = fuzz::CheckPlanText(text));
                              valid += outcome == fuzz::Outcome::kValid;
                              ++files;
                              if (std::string(dir) == "fuzz/corpus") {
                                EXPECT_EQ(outcome, fuzz::Outcome::kValid);
                              }
                            });
  EXPECT_GE(valid, 4);
  EXPECT_GT(files, valid);
}

}  // namespace
}  // namespace fcp
