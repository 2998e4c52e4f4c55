// fcp/edge_coloring.h — proper edge colouring of a bipartite multigraph with
// exactly Delta colours (Konig's line-colouring theorem).
//
// Used for the transfer graph: left vertices send, right vertices receive, an
// edge is one block moving from a sender to a receiver. A colour class is a
// matching: every worker sends at most one and receives at most one block, so
// a colour is one congestion-free sub-stage, and Delta (the max degree) is
// both a lower bound on the number of sub-stages and achieved.
//
// Algorithm: edges in the given order take the smallest colour free at both
// ends (found 64 colours at a time in per-vertex bitsets); when no colour is
// free at both (alpha free at the sender, beta at the receiver), the
// alpha/beta alternating path from the receiver is flipped, which never
// reaches the sender in a bipartite graph. Worst case O(E * V), in practice
// O(E * Delta / 64) plus rare short flips. Memory: O((L + R) * Delta).
// Deterministic: the result depends only on the edge order.
#pragma once

#include <cstdint>
#include <vector>

namespace fcp {

struct BipartiteEdge {
  int32_t left = 0;   // sender
  int32_t right = 0;  // receiver
};

struct EdgeColoring {
  std::vector<int32_t> color;  // color[e] in [0, num_colors) for each edge e
  int32_t num_colors = 0;      // == max degree
};

// Max over vertices of degree (left and right counted separately). Throws
// Error(kInvalidArgument) if an endpoint is out of range.
int32_t MaxDegree(int32_t left_count, int32_t right_count, const std::vector<BipartiteEdge>& edges);

// Throws Error(kInvalidArgument) if an endpoint is out of range.
EdgeColoring ColorBipartiteEdges(int32_t left_count, int32_t right_count,
                                 const std::vector<BipartiteEdge>& edges);

// Checks that every edge has a colour in [0, num_colors), that no two edges
// of one colour share a vertex and that num_colors == MaxDegree. Throws
// Error(kInternal) describing the first violation.
void CheckEdgeColoring(int32_t left_count, int32_t right_count,
                       const std::vector<BipartiteEdge>& edges, const EdgeColoring& coloring);

}  // namespace fcp
