// fcp/plan_json.h — a plan as JSON text (`fcp-plan` version 1,
// ../shared/PLAN_FORMAT.md): the canonical writer and the streaming reader.
//
// Part of the I/O layer (target fcp_io, above fcp_plan): the planner makes a
// Plan value (fcp/plan.h) and never needs this header.
// Invariants: WritePlanJson is deterministic (equal plans, identical bytes)
// and ReadPlanJson(WritePlanJson(p)) == p for every plan.
// Complexity: O(size of the plan) both ways.
#pragma once

#include <cstdint>
#include <string>

#include "fcp/plan.h"

namespace fcp {

// Canonical text: one top-level field per line, one block / stage per line.
// Deterministic: equal plans give identical bytes.
std::string WritePlanJson(const Plan& plan);
// Written atomically (fcp/file_io.h): on failure no file, or the old one, is
// left. A file only: standard output is the caller's (write WritePlanJson).
void WritePlanJsonFile(const Plan& plan, const std::string& path);
// Parses and checks types/shapes of the fields (not the plan rules:
// call ValidatePlan). Throws Error(kParse) naming the field and quoting at
// most a short prefix of the offending value; nesting deeper than 64 levels
// is a parse error. Memory: the text plus about the size of the Plan (the
// large arrays are streamed, not held as a DOM; docs/plan-testing.md).
Plan ReadPlanJson(const std::string& text);
// Plan files are read whole, up to this size (beyond it: Error(kIo)).
inline constexpr uint64_t kMaxPlanFileBytes = uint64_t{1} << 32;  // 4 GiB
Plan ReadPlanJsonFile(const std::string& path);  // "-" = stdin; Error(kIo) if unreadable

}  // namespace fcp
