#include "fcp/edge_coloring.h"

#include <algorithm>
#include <bit>
#include <string>

#include "fcp/error.h"

namespace fcp {
namespace {

constexpr int32_t kNone = -1;

// Colour -> edge table of every vertex (left vertices first, then right),
// with a bitset of used colours per vertex so that a colour free at both ends
// of an edge is found a word (64 colours) at a time.
class ColorTable {
 public:
  ColorTable(int32_t vertices, int32_t colors)
      : colors_(colors),
        words_((colors + 63) / 64),
        at_(static_cast<size_t>(vertices) * colors, kNone),
        used_(static_cast<size_t>(vertices) * words_, 0) {}
  int32_t at(int32_t vertex, int32_t color) const {
    return at_[static_cast<size_t>(vertex) * colors_ + color];
  }
  // Colours are never negative: unsigned, / and % by 64 are shifts and masks.
  void set(int32_t vertex, int32_t color, int32_t edge) {
    const auto c = static_cast<uint32_t>(color);
    at_[static_cast<size_t>(vertex) * colors_ + c] = edge;
    used_[static_cast<size_t>(vertex) * words_ + c / 64] |= uint64_t{1} << (c % 64);
  }
  void release(int32_t vertex, int32_t color) {
    const auto c = static_cast<uint32_t>(color);
    at_[static_cast<size_t>(vertex) * colors_ + c] = kNone;
    used_[static_cast<size_t>(vertex) * words_ + c / 64] &= ~(uint64_t{1} << (c % 64));
  }
  // Smallest colour free at `a` and (if b >= 0) at `b`, or colors_ if none.
  int32_t free_color(int32_t a, int32_t b = -1) const {
    const uint64_t* ua = &used_[static_cast<size_t>(a) * words_];
    const uint64_t* ub = b >= 0 ? &used_[static_cast<size_t>(b) * words_] : nullptr;
    for (int32_t w = 0; w < words_; ++w) {
      const uint64_t taken = ua[w] | (ub ? ub[w] : 0);
      if (~taken) {
        const int32_t c = w * 64 + std::countr_one(taken);
        return std::min(c, colors_);
      }
    }
    return colors_;
  }

 private:
  int32_t colors_;
  int32_t words_;
  std::vector<int32_t> at_;
  std::vector<uint64_t> used_;
};

}  // namespace

int32_t MaxDegree(int32_t left_count, int32_t right_count,
                  const std::vector<BipartiteEdge>& edges) {
  std::vector<int32_t> degree(static_cast<size_t>(left_count) + right_count, 0);
  int32_t max_degree = 0;
  for (size_t e = 0; e < edges.size(); ++e) {
    if (edges[e].left < 0 || edges[e].left >= left_count || edges[e].right < 0 ||
        edges[e].right >= right_count)
      throw Error(ErrorCode::kInvalidArgument,
                  "edge colouring: edge " + std::to_string(e) + " (" +
                      std::to_string(edges[e].left) + ", " + std::to_string(edges[e].right) +
                      ") has an endpoint outside " + std::to_string(left_count) + " x " +
                      std::to_string(right_count));
    max_degree = std::max(max_degree, ++degree[edges[e].left]);
    max_degree = std::max(max_degree, ++degree[left_count + edges[e].right]);
  }
  return max_degree;
}

EdgeColoring ColorBipartiteEdges(int32_t left_count, int32_t right_count,
                                 const std::vector<BipartiteEdge>& edges) {
  EdgeColoring result;
  result.num_colors = MaxDegree(left_count, right_count, edges);  // checks the endpoints
  result.color.assign(edges.size(), kNone);
  ColorTable table(left_count + right_count, result.num_colors);
  const auto other_end = [&](int32_t edge, int32_t vertex) {
    const int32_t l = edges[edge].left, r = left_count + edges[edge].right;
    return vertex == l ? r : l;
  };
  std::vector<int32_t> path;
  for (size_t e = 0; e < edges.size(); ++e) {
    const int32_t u = edges[e].left, v = left_count + edges[e].right;
    int32_t alpha = table.free_color(u, v);
    if (alpha == result.num_colors) {
      alpha = table.free_color(u);
      // alpha is taken at v: flip the alpha/beta path starting at v so that
      // alpha becomes free there. The path alternates alpha, beta, alpha, ...
      const int32_t beta = table.free_color(v);
      path.clear();
      int32_t vertex = v, color = alpha;
      while (table.at(vertex, color) != kNone) {
        const int32_t edge = table.at(vertex, color);
        path.push_back(edge);
        vertex = other_end(edge, vertex);
        color = color == alpha ? beta : alpha;
      }
      for (int32_t edge : path) {
        table.release(edges[edge].left, result.color[edge]);
        table.release(left_count + edges[edge].right, result.color[edge]);
      }
      for (int32_t edge : path) {
        const int32_t flipped = result.color[edge] == alpha ? beta : alpha;
        result.color[edge] = flipped;
        table.set(edges[edge].left, flipped, edge);
        table.set(left_count + edges[edge].right, flipped, edge);
      }
    }
    result.color[e] = alpha;
    table.set(u, alpha, static_cast<int32_t>(e));
    table.set(v, alpha, static_cast<int32_t>(e));
  }
  return result;
}

void CheckEdgeColoring(int32_t left_count, int32_t right_count,
                       const std::vector<BipartiteEdge>& edges, const EdgeColoring& coloring) {
  const auto fail = [](const std::string& what) {
    throw Error(ErrorCode::kInternal, "edge colouring self-check: " + what);
  };
  const int32_t delta = MaxDegree(left_count, right_count, edges);
  if (coloring.num_colors != delta)
    fail("uses " + std::to_string(coloring.num_colors) + " colours, max degree is " +
         std::to_string(delta));
  if (coloring.color.size() != edges.size()) fail("not every edge has a colour");
  std::vector<int32_t> seen(static_cast<size_t>(left_count + right_count) * std::max(delta, 1),
                            kNone);
  for (size_t e = 0; e < edges.size(); ++e) {
    const int32_t c = coloring.color[e];
    if (c < 0 || c >= delta) fail("edge " + std::to_string(e) + " has colour " + std::to_string(c));
    for (int32_t vertex : {edges[e].left, left_count + edges[e].right}) {
      int32_t& slot = seen[static_cast<size_t>(vertex) * delta + c];
      if (slot != kNone)
        fail("edges " + std::to_string(slot) + " and " + std::to_string(e) +
             " share a vertex and colour " + std::to_string(c));
      slot = static_cast<int32_t>(e);
    }
  }
}

}  // namespace fcp
