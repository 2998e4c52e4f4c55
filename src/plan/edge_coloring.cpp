#include "fcp/edge_coloring.h"

#include <algorithm>
#include <string>

#include "fcp/error.h"

namespace fcp {
namespace {

constexpr int32_t kNone = -1;

// Colour -> edge table of every vertex (left vertices first, then right).
class ColorTable {
 public:
  ColorTable(int32_t vertices, int32_t colors)
      : colors_(colors), at_(static_cast<size_t>(vertices) * colors, kNone), cursor_(vertices, 0) {}
  int32_t& at(int32_t vertex, int32_t color) {
    return at_[static_cast<size_t>(vertex) * colors_ + color];
  }
  // Smallest colour free at `vertex`.
  int32_t free_color(int32_t vertex) {
    int32_t& c = cursor_[vertex];
    while (c < colors_ && at(vertex, c) != kNone) ++c;
    return c;
  }
  void release(int32_t vertex, int32_t color) {
    at(vertex, color) = kNone;
    cursor_[vertex] = std::min(cursor_[vertex], color);
  }

 private:
  int32_t colors_;
  std::vector<int32_t> at_;
  std::vector<int32_t> cursor_;
};

}  // namespace

int32_t MaxDegree(int32_t left_count, int32_t right_count,
                  const std::vector<BipartiteEdge>& edges) {
  std::vector<int32_t> degree(static_cast<size_t>(left_count) + right_count, 0);
  int32_t max_degree = 0;
  for (const BipartiteEdge& e : edges) {
    max_degree = std::max(max_degree, ++degree[e.left]);
    max_degree = std::max(max_degree, ++degree[left_count + e.right]);
  }
  return max_degree;
}

EdgeColoring ColorBipartiteEdges(int32_t left_count, int32_t right_count,
                                 const std::vector<BipartiteEdge>& edges) {
  for (size_t e = 0; e < edges.size(); ++e)
    if (edges[e].left < 0 || edges[e].left >= left_count || edges[e].right < 0 ||
        edges[e].right >= right_count)
      throw Error(ErrorCode::kInvalidArgument,
                  "edge colouring: edge " + std::to_string(e) + " (" +
                      std::to_string(edges[e].left) + ", " + std::to_string(edges[e].right) +
                      ") has an endpoint outside " + std::to_string(left_count) + " x " +
                      std::to_string(right_count));
  EdgeColoring result;
  result.num_colors = MaxDegree(left_count, right_count, edges);
  result.color.assign(edges.size(), kNone);
  ColorTable table(left_count + right_count, result.num_colors);
  const auto other_end = [&](int32_t edge, int32_t vertex) {
    const int32_t l = edges[edge].left, r = left_count + edges[edge].right;
    return vertex == l ? r : l;
  };
  std::vector<int32_t> path;
  for (size_t e = 0; e < edges.size(); ++e) {
    const int32_t u = edges[e].left, v = left_count + edges[e].right;
    const int32_t alpha = table.free_color(u);
    if (table.at(v, alpha) != kNone) {
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
        table.at(edges[edge].left, flipped) = edge;
        table.at(left_count + edges[edge].right, flipped) = edge;
      }
    }
    result.color[e] = alpha;
    table.at(u, alpha) = static_cast<int32_t>(e);
    table.at(v, alpha) = static_cast<int32_t>(e);
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
  std::vector<int32_t> seen(static_cast<size_t>(left_count + right_count) * std::max(delta, 1), kNone);
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
