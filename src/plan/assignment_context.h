// assignment_context.h — the batch as every assignment search sees it
// (src/plan/assignment*.cpp), built once per AssignmentSearch: the K/V
// dependency graphs, each item's work, tokens and (estimated) traffic, the
// per-worker targets, the load model's scratch and each item's dataloader
// homes. Internal to the planner.
//
// Invariants: items, blocks and their graphs are those of the input's
// sharding and never change; item_work[i] is the sum of its blocks'
// block_work; item_traffic/item_send and targets.traffic are what the last
// EstimateTraffic computed (every search but Shed calls it first). The load
// model is sized once for the batch (its counters as narrow as MostCount
// allows). A shed-only input (AssignmentInput::shed_only) builds neither the
// dependency graphs nor the load model: only Shed may run on it.
// Keeps a reference to the input, which must outlive it at the same address.
// Construction: O(P + I) for P required pairs and I items.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "assignment.h"
#include "assignment_parts.h"
#include "fcp/error.h"

namespace fcp::detail {

constexpr int32_t kUnassigned = -1;

// The per-worker means the searches normalise loads by (balance mode).
struct Targets {
  double compute = 1;  // mean compute per worker
  double traffic = 1;  // mean traffic per worker (estimated)
  double Load(double compute_load, double traffic_load) const {
    return std::max(compute_load / compute, traffic_load / traffic);
  }
};

// The (at most two) dataloader workers holding most of an item's tokens,
// as workers of the assignment, and how many.
struct HomeTokens {
  int32_t worker[2] = {-1, -1};
  int64_t tokens[2] = {0, 0};
  int64_t At(int32_t w) const {
    return w == worker[0] ? tokens[0] : w == worker[1] ? tokens[1] : 0;
  }
};

// deps: row q lists the K/V blocks q needs (ascending); users: row j lists
// the query blocks that need j (ascending). `pairs` sorted by (q, kv).
void BuildGraphs(const std::vector<RequiredPair>& pairs, int32_t blocks, Csr& deps, Csr& users);
// The users graph alone (BuildGraphs' `users`).
Csr BuildUsers(const std::vector<RequiredPair>& pairs, int32_t blocks);

// The loads of blocks whose workers are set (0..workers-1), with their
// required pairs: per worker, allowed token pairs of its query blocks,
// tokens held, and K/V tokens sent plus received and the part sent, each
// block once to every other worker computing with it (CountTransfers).
// O(P + B) for P pairs and B blocks.
struct BlockLoads {
  std::vector<int64_t> compute, tokens;
  std::vector<double> traffic, send;
};
BlockLoads CountBlockLoads(const std::vector<Block>& blocks, const std::vector<RequiredPair>& pairs,
                           int32_t workers);

class AssignmentContext {
 public:
  explicit AssignmentContext(const AssignmentInput& input);
  AssignmentContext(const AssignmentContext&) = delete;
  AssignmentContext& operator=(const AssignmentContext&) = delete;

  const AssignmentInput& in;
  const std::vector<Item>& items;
  const int32_t n;  // workers
  Csr deps, users;
  Rows<Dep> item_deps;           // row i: the K/V blocks item i needs, with multiplicities
  std::vector<int32_t> item_of;  // item_of[block]
  std::vector<int64_t> block_tokens;
  std::vector<double> item_work;
  std::vector<double> item_traffic;  // estimated tokens sent + received
  std::vector<double> item_send;     // estimated tokens sent
  Targets targets;

  // Traffic an item causes wherever it goes (and the traffic target, their
  // mean per worker), assuming the blocks it depends on and the blocks that
  // depend on it sit on other workers: it receives the K/V tokens of its
  // dependencies outside the item and sends each of its blocks once per
  // outside user block (at most once per other worker). Exact for spread-out
  // sequences (zig-zag pairs make it the same for every pair of a
  // sequence); an over-estimate where blocks end up together, which the
  // traffic search then exploits. O(P).
  void EstimateTraffic();

  // The per-worker loads of `owner` (owner[block]).
  Loads Count(std::vector<int32_t> owner) const {
    return CountLoads(in, users, block_tokens, std::move(owner));
  }

  // The loads as an Assignment; with self_check, they must equal a recount
  // (`search` names the search in the error).
  Assignment Result(const Loads& loads, const std::string& search) const;

  // The items each worker owns in `loads`, ascending. The rows are reused
  // from search to search (no allocation after the first); they stay valid
  // until the next call.
  std::vector<std::vector<int32_t>>& Owned(const Loads& loads);

  // Per item, its two largest dataloader homes, dataloader worker h being
  // worker original[h] (ties: the lower id). O(S) for S segments.
  std::vector<HomeTokens> HomesOf(const std::vector<int32_t>& original) const;

  // f(model) for the batch's load model.
  template <typename F>
  decltype(auto) WithModel(F f) {
    FCP_CHECK(model_.has_value(), "assignment: a search other than Shed on a shed-only input");
    return std::visit(f, *model_);
  }

  bool TimeMode() const { return in.judge.objective == PlannerObjective::kTime; }

 private:
  // The most blocks of one worker that can need one K/V block (what the
  // load model's counters must hold).
  int64_t MostCount() const;
  // Row i: each K/V block item i needs once, in first-need order, with the
  // number of its blocks that need it. (LoadModel only sums over a row.)
  void BuildItemDeps();

  std::optional<std::variant<LoadModel<uint8_t>, LoadModel<uint16_t>, LoadModel<int32_t>>> model_;
  std::vector<std::vector<int32_t>> owned_;  // Owned's
};

}  // namespace fcp::detail
