// assignment_portfolio.h — the assignment's candidate portfolio: which
// starting assignments are built (the greedy starts, the home layout, the
// shed layout), each refined by the exchange engine, and how the best is
// chosen (Better, assignment.h). Internal to the planner.
//
// Invariants: candidates are built and compared in a fixed order, the
// earlier kept on a tie (KeepBetter), so the choice is deterministic; every
// candidate keeps the slots (the token cap). Cost: one greedy start and one
// exchange search per (start, partner policy), see assignment_greedy.h and
// assignment_exchange.h; Shed as stated at AssignmentSearch::Shed.
#pragma once

#include <cstdint>
#include <vector>

#include "assignment.h"
#include "assignment_context.h"
#include "assignment_exchange.h"

namespace fcp::detail {

// What an AssignmentSearch holds: the batch and the engine over it.
class AssignmentSearch::Impl {
 public:
  explicit Impl(const AssignmentInput& input) : context(input), engine(context) {}
  AssignmentContext context;
  ExchangeEngine engine;
};

// The portfolio's choice, one candidate at a time: `candidate` replaces
// `best` when `best` is empty or `candidate` is Better (ties: the earlier).
void KeepBetter(Assignment candidate, Assignment& best, const Judge& judge);

// `a` with its traffic counted as sent + received by Cost and Better, not
// by the busiest port: for the passes whose caps are on the sums (Localize,
// Level; the measurement log (docs/planner.md), ports in the exchange engine).
inline Assignment BySums(Assignment a) {
  a.send.clear();
  return a;
}

// Every item on the dataloader worker holding most of its tokens (`homes`,
// in dataloader ids) where the slots allow, else its second home, else the
// nearest worker with room (same node of `node_workers` consecutive ids
// first, ties: the lower id); two-slot items first, so that none is left
// without a pair of slots. Returns owner[block]. O(I S) for I items and S
// the node size (O(I N) where a node is full).
std::vector<int32_t> AtHome(const AssignmentContext& context, int32_t node_workers,
                            const std::vector<HomeTokens>& homes);

}  // namespace fcp::detail
