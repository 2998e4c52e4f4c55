// Bipartite edge colouring with exactly Delta colours: a hand-traced case of
// the documented algorithm, and CheckEdgeColoring over random multigraphs.
#include <algorithm>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_message.h"
#include "fcp/edge_coloring.h"
#include "fcp/error.h"

namespace fcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Three workers, every worker sends one block to each of the others (left =
// sender, right = receiver), edges in this order:
//
//   e0: 0 -> 1    e1: 1 -> 0    e2: 1 -> 2    e3: 0 -> 2    e4: 2 -> 1    e5: 2 -> 0
//
//   every vertex has degree 2: Delta = 2
//
// Traced by hand with the algorithm of edge_coloring.cpp (the smallest colour
// free at both ends; if none is, alpha = smallest free at the sender, beta =
// smallest free at the receiver, flip the alpha/beta path from the receiver):
//   e0: sender 0 {}, receiver 1 {}                       -> 0
//   e1: sender 1 {}, receiver 0 {}                       -> 0
//   e2: sender 1 {0}, receiver 2 {}                      -> 1
//   e3: sender 0 {0}, receiver 2 {1}: no common colour. alpha = 1, beta = 0;
//       the path from receiver 2 alternating 1,0,...: e2 (colour 1, to sender
//       1), e1 (colour 0, to receiver 0), where colour 1 is free: flip e2 to
//       0 and e1 to 1; e3 takes 1.
//   e4: sender 2 {}, receiver 1 {0}                      -> 1
//   e5: sender 2 {1}, receiver 0 {1} (e1 since the flip)  -> 0
TEST(EdgeColoringTest, HandTracedAlternatingPathFlip) {
  const std::vector<BipartiteEdge> edges = {{0, 1}, {1, 0}, {1, 2}, {0, 2}, {2, 1}, {2, 0}};
  const EdgeColoring c = ColorBipartiteEdges(3, 3, edges);
  EXPECT_EQ(c.num_colors, 2);
  EXPECT_THAT(c.color, ElementsAre(0, 1, 0, 1, 1, 0));
  EXPECT_NO_THROW(CheckEdgeColoring(3, 3, edges, c));
}

// Without a conflict no path is flipped: the first-fit colours.
//   e0: 0 -> 1 takes 0, e1: 0 -> 2 takes 1, e2: 1 -> 2 takes 0 (free at both).
TEST(EdgeColoringTest, FirstFitWithoutConflict) {
  const EdgeColoring c = ColorBipartiteEdges(3, 3, {{0, 1}, {0, 2}, {1, 2}});
  EXPECT_EQ(c.num_colors, 2);
  EXPECT_THAT(c.color, ElementsAre(0, 1, 0));
}

// Parallel edges: worker 0 sends three blocks to worker 1 and one to worker 2.
//   e0, e1, e2: 0 -> 1 take 0, 1, 2; e3: 0 -> 2 takes 3. Delta = 4.
TEST(EdgeColoringTest, ParallelEdgesGetDistinctColours) {
  const std::vector<BipartiteEdge> edges = {{0, 1}, {0, 1}, {0, 1}, {0, 2}};
  const EdgeColoring c = ColorBipartiteEdges(3, 3, edges);
  EXPECT_EQ(c.num_colors, 4);
  EXPECT_THAT(c.color, ElementsAre(0, 1, 2, 3));
}

TEST(EdgeColoringTest, EmptyGraph) {
  const EdgeColoring c = ColorBipartiteEdges(4, 4, {});
  EXPECT_EQ(c.num_colors, 0);
  EXPECT_TRUE(c.color.empty());
  EXPECT_NO_THROW(CheckEdgeColoring(4, 4, {}, c));
  EXPECT_EQ(MaxDegree(0, 0, {}), 0);
}

TEST(EdgeColoringTest, MaxDegreeCountsSidesSeparately) {
  // Vertex 0 on the left has degree 2 and vertex 0 on the right degree 1.
  EXPECT_EQ(MaxDegree(2, 2, {{0, 0}, {0, 1}, {1, 1}}), 2);
  EXPECT_EQ(MaxDegree(2, 2, {{0, 0}, {1, 0}, {1, 0}}), 3);
}

TEST(EdgeColoringTest, RejectsEndpointsOutOfRange) {
  for (const BipartiteEdge& bad :
       {BipartiteEdge{3, 0}, BipartiteEdge{0, 3}, BipartiteEdge{-1, 0}, BipartiteEdge{0, -2}}) {
    SCOPED_TRACE("edge (" + std::to_string(bad.left) + ", " + std::to_string(bad.right) + ")");
    EXPECT_THAT(testing::ExpectedErrorMessage(ErrorCode::kInvalidArgument,
                                              [&] {
                                                ColorBipartiteEdges(3, 3, {{0, 0}, bad});
                                              }),
                HasSubstr("edge 1"));
    EXPECT_THAT(testing::ExpectedErrorMessage(ErrorCode::kInvalidArgument,
                                              [&] {
                                                MaxDegree(3, 3, {{0, 0}, bad});
                                              }),
                HasSubstr("edge 1"));
  }
}

std::string CheckError(int32_t l, int32_t r, const std::vector<BipartiteEdge>& edges,
                       const EdgeColoring& c) {
  return testing::ErrorMessage(ErrorCode::kInternal, [&] { CheckEdgeColoring(l, r, edges, c); });
}

TEST(EdgeColoringTest, CheckRejectsInvalidColourings) {
  const std::vector<BipartiteEdge> edges = {{0, 1}, {0, 2}, {1, 2}, {1, 0}, {2, 1}, {2, 0}};
  const EdgeColoring good{{1, 0, 1, 0, 0, 1}, 2};
  EXPECT_EQ(CheckError(3, 3, edges, good), "");
  // Two edges of sender 0 share colour 1.
  EXPECT_THAT(CheckError(3, 3, edges, {{1, 1, 1, 0, 0, 1}, 2}),
              HasSubstr("edges 0 and 1 share a vertex and colour 1"));
  // Two edges into receiver 2 (e1 and e2) share colour 0.
  EXPECT_THAT(CheckError(3, 3, edges, {{1, 0, 0, 1, 0, 1}, 2}),
              HasSubstr("edges 1 and 2 share a vertex and colour 0"));
  // More colours than Delta, a colour out of range, a missing colour.
  EXPECT_THAT(CheckError(3, 3, edges, {{1, 0, 1, 0, 0, 1}, 3}), HasSubstr("uses 3 colours"));
  EXPECT_THAT(CheckError(3, 3, edges, {{1, 0, 1, 0, 0, 2}, 2}), HasSubstr("edge 5 has colour 2"));
  EXPECT_THAT(CheckError(3, 3, edges, {{1, 0, 1, 0, 0, -1}, 2}), HasSubstr("edge 5 has colour -1"));
  EXPECT_THAT(CheckError(3, 3, edges, {{1, 0, 1, 0, 0}, 2}),
              HasSubstr("not every edge has a colour"));
}

// Random bipartite multigraphs of many shapes, with parallel edges and
// skewed degrees: exactly Delta colours, every class a matching.
TEST(EdgeColoringTest, RandomMultigraphsUseExactlyDeltaColours) {
  std::mt19937_64 rng(2024);
  int64_t total_edges = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t left = 1 + static_cast<int32_t>(rng() % 40);
    const int32_t right = 1 + static_cast<int32_t>(rng() % 40);
    const size_t n_edges = rng() % 600;
    // A few hot vertices make high-degree hubs and many parallel edges.
    const int32_t hot_left = static_cast<int32_t>(rng() % left);
    const int32_t hot_right = static_cast<int32_t>(rng() % right);
    std::vector<BipartiteEdge> edges(n_edges);
    for (BipartiteEdge& e : edges) {
      e.left = rng() % 4 == 0 ? hot_left : static_cast<int32_t>(rng() % left);
      e.right = rng() % 4 == 0 ? hot_right : static_cast<int32_t>(rng() % right);
    }
    const EdgeColoring c = ColorBipartiteEdges(left, right, edges);
    ASSERT_EQ(c.num_colors, MaxDegree(left, right, edges));
    ASSERT_NO_THROW(CheckEdgeColoring(left, right, edges, c)) << "trial " << trial;
    // Independent matching check: per colour, each vertex at most once.
    std::vector<std::vector<int>> used_left(c.num_colors, std::vector<int>(left, 0));
    std::vector<std::vector<int>> used_right(c.num_colors, std::vector<int>(right, 0));
    for (size_t e = 0; e < edges.size(); ++e) {
      ASSERT_EQ(++used_left[c.color[e]][edges[e].left], 1);
      ASSERT_EQ(++used_right[c.color[e]][edges[e].right], 1);
    }
    // Deterministic: the same edges give the same colours.
    ASSERT_EQ(ColorBipartiteEdges(left, right, edges).color, c.color);
    total_edges += static_cast<int64_t>(n_edges);
  }
  EXPECT_GT(total_edges, 50000);
}

// A regular multigraph (every vertex degree d) needs every colour at every vertex.
TEST(EdgeColoringTest, RegularMultigraphIsPerfectlyColoured) {
  std::mt19937_64 rng(5);
  const int32_t n = 64, d = 16;
  std::vector<BipartiteEdge> edges;
  for (int32_t k = 0; k < d; ++k) {  // union of d random perfect matchings
    std::vector<int32_t> perm(n);
    for (int32_t i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int32_t i = 0; i < n; ++i) edges.push_back({i, perm[i]});
  }
  const EdgeColoring c = ColorBipartiteEdges(n, n, edges);
  EXPECT_EQ(c.num_colors, d);
  EXPECT_NO_THROW(CheckEdgeColoring(n, n, edges, c));
}

}  // namespace
}  // namespace fcp
