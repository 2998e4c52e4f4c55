// Assignment: which worker owns each block (FCP step 2). Private to src/plan.
//
// Vector scheduling of items (groups of blocks placed together, sharding.h)
// over two per-worker loads, compute (allowed token pairs of the query blocks
// it owns) and K/V traffic (tokens of the K/V blocks it sends plus receives),
// under hard slot limits, which make the token cap exact. A candidate
// portfolio of starting assignments, each refined by one exchange engine
// under a pluggable objective, the best chosen by Better:
//
// - assignment_context.h: the batch as the searches see it (dependency
//   graphs, item work and estimated traffic, the load model), built once.
// - assignment_greedy.h: the greedy starts (compute LPT, vector LPT,
//   sequence-affinity vector LPT).
// - assignment_exchange.h: the exchange engine (local search) and its
//   objectives: balance, cost (with the reshuffle), traffic leveling.
// - assignment_portfolio.h: the portfolio (Assign, Refine, Home, Shed) and
//   the comparison (Better, WithinBound, Cost below).
// - assignment_locality.cpp: on the chosen plan, the locality exchanges
//   (Localize), traffic leveling (Level) and LocalityRenaming.
// - assignment_parts.h: the data structures (worker heap, slots, loads,
//   the load model that evaluates exchanges).
//
// Time mode (no bound) runs only the affinity start and the mixed policy.
// Cost: O(passes * I * (C * D + log N)) for I items, C candidates, D
// dependencies per item, plus the bounded local search.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "buckets.h"
#include "fcp/planner.h"
#include "fcp/required_pairs.h"
#include "sharding.h"

namespace fcp::detail {

// How assignments are judged (Better).
struct Judge {
  // The planner's objective (PlannerConfig::Objective): kBalance has
  // pairs_per_traffic_token 0, kTime runs the fewest starts and policies.
  PlannerObjective objective = PlannerObjective::kBalance;
  // Token pairs of compute that moving one K/V token costs (Cost); 0 = by
  // balance alone.
  double pairs_per_traffic_token = 0;
  // Compute and traffic imbalance an assignment may have and still be judged
  // by its cost ...
  double max_imbalance = 0.05;
  // ... where a traffic excess (max - mean) of at most this many tokens
  // counts as balanced: one block's K/V, which no placement of blocks can
  // split further.
  double traffic_slack_tokens = 0;
};

struct AssignmentInput {
  int32_t workers = 1;
  const Sharding* sharding = nullptr;
  std::vector<int64_t> block_work;  // allowed token pairs of each block as a query block
  std::vector<int32_t> dataloader;  // dataloader worker of each item's first token
  const std::vector<RequiredPair>* pairs = nullptr;  // sorted by (q, kv)
  const std::vector<int64_t>* lengths = nullptr;     // sequence lengths
  Mask mask;
  Judge judge;
  int32_t local_search_rounds = 2;
  bool self_check = false;  // verify the local search's loads against a recount
  // Only Shed will run: the K/V dependency rows and the load model, which
  // the other searches need, are not built (they would throw).
  bool shed_only = false;
};

struct Assignment {
  std::vector<int32_t> owner;  // owner[block]
  // Per worker: allowed token pairs of its query blocks, K/V tokens it
  // sends plus receives, and the part it sends (empty: Cost and Better
  // count the sum, as BySums asks for).
  std::vector<double> compute, traffic, send;
};

// The searches over one input. Its dependency graphs are built once, for
// the search and for the passes on the plan chosen (Localize, Level);
// not at all for a shed-only input, on which every search but Shed throws.
// Keeps a reference to the input, which must outlive it at the same
// address. All deterministic.
class AssignmentSearch {
 public:
  explicit AssignmentSearch(const AssignmentInput& input);
  ~AssignmentSearch();
  AssignmentSearch(const AssignmentSearch&) = delete;
  AssignmentSearch& operator=(const AssignmentSearch&) = delete;

  // The Better of the greedy starts, each refined by the local search.
  // With `spare_core`, the starts after the first are built on a second
  // thread while the first is searched (the same result: building only
  // reads the batch; for callers with no other thread running).
  Assignment Assign(bool spare_core = false);

  // The Better of `owner` (owner[block], respecting the slots) and the local
  // search's refinements of it.
  Assignment Refine(std::vector<int32_t> owner);

  // The home layout: every item on the dataloader worker holding most of
  // its tokens where the slots allow (else the nearest worker with room,
  // same node of `node_workers` consecutive ids first), refined by the local
  // search by cost (compute + traffic + the reshuffle's tokens in + out at
  // `reshuffle_pairs_per_token`), which moves only what lowers the most
  // loaded worker. In dataloader ids (no renaming).
  Assignment Home(int32_t node_workers, double reshuffle_pairs_per_token);

  // The shed layout: every item at home as in Home, then the most loaded
  // worker repeatedly gives its densest item (work per token) for the
  // lightest of equal slot use of a worker that stays within 2% of the mean
  // compute (its own node's workers first, then the least loaded of other
  // nodes with the least reshuffle across nodes), until every compute is
  // within it or no exchange lowers the larger of the two. No traffic
  // search. In dataloader ids.
  Assignment Shed(int32_t node_workers);

  // `assignment` after exchanges that bring items to their dataloader
  // worker, worker w's being rename[w]'s (fewer tokens in the reshuffle),
  // without raising the largest compute, traffic or cost, or the traffic
  // imbalance past the judge's bound; itself if Better. One pass, O(I (s +
  // D)) for I items, s slots per worker and D K/V dependencies per exchange.
  Assignment Localize(Assignment assignment, const std::vector<int32_t>& rename);

  // `assignment` after exchanges that lower the largest traffic without
  // raising the largest compute or cost (the local search with traffic as
  // its load); itself unless the traffic imbalance falls.
  Assignment Level(Assignment assignment);

  // The input's users graph: row kv lists the query blocks that need K/V
  // block kv, ascending (built for every input, shed-only too).
  const Rows<int32_t>& users() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// How an assignment is judged (lower is better). With a ratio r > 0: the
// worst worker's compute + r x traffic, its time in token pairs if nothing
// overlapped (overlap hides part of the smaller term, but simulated plans
// rank by this sum better than by the max: a plan that halves traffic at the
// price of 40% compute imbalance loses), the traffic counted by its busiest
// NIC port (twice the larger of sent and received, PortTraffic; the sum
// where `send` is empty). With r = 0: the larger of the compute and traffic
// (sent + received) imbalances.
double Cost(const Assignment& assignment, double pairs_per_traffic_token);

// Whether `a` is a better plan than `b`: one within the judge's imbalance
// bound (compute and traffic) beats one outside it; two within it compare by
// Cost (with r = 0: by imbalance; costs within 0.5% by total traffic), two
// outside it by imbalance.
bool Better(const Assignment& a, const Assignment& b, const Judge& judge);

// Whether `a` is within the judge's imbalance bound (what Better ranks first).
bool WithinBound(const Assignment& a, const Judge& judge);

// A renaming of workers (rename[w] is w's new id, a permutation) that keeps
// tokens on their dataloader worker: greedy maximum-weight matching of
// (assigned worker, dataloader worker) by the tokens they share, heaviest
// first, ties by ids; unmatched workers take the unused ids in order.
// O(S log S) for S segments.
std::vector<int32_t> LocalityRenaming(const std::vector<Block>& blocks,
                                      const std::vector<int32_t>& owner,
                                      const std::vector<int64_t>& lengths, int32_t workers);

}  // namespace fcp::detail
