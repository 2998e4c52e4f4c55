// The assignment's candidate portfolio (src/plan/assignment_portfolio.h):
// the comparison (Cost, WithinBound, Better, KeepBetter) on worked values,
// a worked Assign, and over random batches that Assign returns exactly the
// candidate Better picks among the greedy starts refined by the exchange
// engine, and that Home keeps the slots.
#include "assignment_portfolio.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "assignment_batch.h"
#include "assignment_greedy.h"

namespace fcp::detail {
namespace {

Assignment Of(std::vector<double> compute, std::vector<double> traffic) {
  return Assignment{{}, std::move(compute), std::move(traffic), {}};
}

// Imbalance (max - mean) / max: compute {10, 8} -> 0.1, {10, 10} -> 0.
TEST(PortfolioTest, CostIsTheImbalanceOrTheWorstWorkersTime) {
  const Assignment a = Of({10, 8}, {4, 6});
  EXPECT_DOUBLE_EQ(Cost(a, 0), 1.0 / 6);  // traffic (6 - 5) / 6 beats compute 0.1
  EXPECT_DOUBLE_EQ(Cost(a, 2), 20);       // max(10 + 8, 8 + 12)
}

// With the sent tokens known, the traffic is the busiest NIC port, twice
// the larger of sent and received: a full-duplex NIC's time.
TEST(PortfolioTest, CostCountsTheBusiestPortWhereTheSentTokensAreKnown) {
  Assignment a = Of({10, 8}, {4, 6});
  a.send = {1, 3};  // worker 0: 1 out, 3 in (port 6); worker 1: 3 out, 3 in (port 6)
  EXPECT_DOUBLE_EQ(Cost(a, 2), 22);  // max(10 + 2 x 6, 8 + 2 x 6)
  a.send = {2, 3};                   // level ports: the sums
  EXPECT_DOUBLE_EQ(Cost(a, 2), 20);
  EXPECT_DOUBLE_EQ(Cost(a, 0), 1.0 / 6);  // imbalance: of the sums, whatever the ports
  EXPECT_DOUBLE_EQ(PortTraffic(10, 7), 14);
  EXPECT_DOUBLE_EQ(PortTraffic(10, 3), 14);
}

TEST(PortfolioTest, WithinBoundAllowsATrafficExcessUnderTheSlack) {
  Judge judge;  // 5%
  EXPECT_TRUE(WithinBound(Of({10, 10}, {10, 10}), judge));
  EXPECT_FALSE(WithinBound(Of({10, 8}, {10, 10}), judge));  // compute 10%
  EXPECT_FALSE(WithinBound(Of({10, 10}, {12, 8}), judge));  // traffic 2 over the mean
  judge.traffic_slack_tokens = 2;
  EXPECT_TRUE(WithinBound(Of({10, 10}, {12, 8}), judge));
  EXPECT_FALSE(WithinBound(Of({10, 10}, {13, 7}), judge));
}

TEST(PortfolioTest, BetterRanksTheBoundThenTheCostThenTotalTraffic) {
  Judge judge;
  judge.pairs_per_traffic_token = 1;
  const Assignment balanced = Of({10, 10}, {10, 10});  // within, cost 20
  const Assignment cheaper = Of({9, 9}, {9, 9});       // within, cost 18
  const Assignment outside = Of({4, 2}, {1, 1});       // cost 5, compute 1/3 outside
  EXPECT_TRUE(Better(balanced, outside, judge));
  EXPECT_FALSE(Better(outside, balanced, judge));
  EXPECT_TRUE(Better(cheaper, balanced, judge));
  // Costs within 0.5%: the less total traffic wins.
  const Assignment tie = Of({10.05, 10.05}, {9.9, 9.9});  // cost 19.95
  EXPECT_TRUE(Better(tie, balanced, judge));
  EXPECT_FALSE(Better(balanced, tie, judge));
  // Both outside: the smaller imbalance.
  EXPECT_TRUE(Better(Of({4, 3}, {1, 1}), outside, judge));
}

TEST(PortfolioTest, KeepBetterTakesAnyIntoAnEmptyBestAndKeepsTheEarlierOnATie) {
  Judge judge;
  Assignment best;
  Assignment first{{0, 1}, {10, 10}, {0, 0}, {}};
  KeepBetter(first, best, judge);
  EXPECT_EQ(best.owner, first.owner);
  KeepBetter(Assignment{{1, 0}, {10, 10}, {0, 0}, {}}, best, judge);  // a tie
  EXPECT_EQ(best.owner, first.owner);
  KeepBetter(Assignment{{1, 1}, {4, 10}, {0, 0}, {}}, best, judge);  // worse
  EXPECT_EQ(best.owner, first.owner);
}

// The batch of GreedyStartsTest.WorkedLptPlacement: every start gives
// computes 18, 17 (within 5%), which no exchange improves (assignment_
// exchange_test's step 2), so every candidate ties and the first is kept.
TEST(PortfolioTest, WorkedAssign) {
  const auto batch = OneBlockPerSequence({4, 3, 2, 2, 1, 1}, 2, 3, Mask{MaskKind::kFull, 0});
  AssignmentSearch search(batch->in);
  const Assignment a = search.Assign();
  EXPECT_EQ(a.owner, (std::vector<int32_t>{0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(a.compute, (std::vector<double>{18, 17}));
}

// Assign, rebuilt from its parts: the Better of every (start, policy),
// with and without a spare core.
TEST(PortfolioTest, AssignIsTheBetterOfItsCandidatesOnRandomBatches) {
  for (uint32_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const auto batch = RandomBatch(rng);
    batch->in.judge.pairs_per_traffic_token = seed % 2 ? 0.0 : 0.5;
    if (seed % 4 == 3) batch->in.judge.objective = PlannerObjective::kTime;
    AssignmentContext context(batch->in);
    ExchangeEngine engine(context);
    context.EstimateTraffic();
    const GreedyStarts greedy(context);
    const bool time = context.TimeMode();
    Assignment expected;
    bool any_within = false;
    for (const Start start : {Start::kCompute, Start::kVector, Start::kAffinity}) {
      if (time && start != Start::kAffinity) continue;
      const Loads from = context.Count(greedy.Build(start));
      for (const Partners policy : {Partners::kMixed, Partners::kBinding}) {
        if (time && policy != Partners::kMixed) continue;
        const Assignment candidate = context.WithModel([&](auto& model) {
          model.Start(from);
          return engine.Improve(model, policy, BalanceObjective{context.targets});
        });
        any_within |= WithinBound(candidate, batch->in.judge);
        KeepBetter(candidate, expected, batch->in.judge);
      }
    }
    AssignmentSearch search(batch->in);
    const Assignment chosen = search.Assign();
    EXPECT_EQ(chosen.owner, expected.owner);
    EXPECT_EQ(chosen.compute, expected.compute);
    // The later starts built on a second thread: the same choice.
    AssignmentSearch spare_core_search(batch->in);
    const Assignment with_spare_core = spare_core_search.Assign(/*spare_core=*/true);
    EXPECT_EQ(with_spare_core.owner, expected.owner);
    EXPECT_EQ(with_spare_core.traffic, chosen.traffic);
    EXPECT_EQ(WithinBound(chosen, batch->in.judge), any_within);
    EXPECT_TRUE(batch->KeepsSlots(chosen.owner));
    // The home layout keeps the slots too, and is deterministic.
    const Assignment home = search.Home(/*node_workers=*/4, /*reshuffle_pairs_per_token=*/2);
    EXPECT_TRUE(batch->KeepsSlots(home.owner));
    EXPECT_EQ(search.Home(4, 2).owner, home.owner);
  }
}

}  // namespace
}  // namespace fcp::detail
