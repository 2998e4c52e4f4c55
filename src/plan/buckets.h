// Stable bucket (counting) sorts by small integer keys: the planner's O(n + k)
// replacement for comparison sorts keyed by worker or block ids. Private to
// src/plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fcp::detail {

// Compressed rows (CSR): row r is items[offset[r] .. offset[r+1]). The one
// row-index structure of the planner: buckets, dependency graphs, per-item lists.
template <typename T>
struct Rows {
  std::vector<int32_t> offset;
  std::vector<T> items;
  std::span<const T> row(int32_t r) const {
    return {items.data() + offset[r], items.data() + offset[r + 1]};
  }
};

// Indices grouped by a key: row r holds the indices with key r, in input order.
using Buckets = Rows<int32_t>;

// Buckets of the n indices index(0), ..., index(n-1) by key(index) in [0, rows); stable.
template <typename Index, typename Key>
Buckets BucketIndices(int32_t rows, size_t n, Index index, Key key) {
  Buckets out;
  out.offset.assign(static_cast<size_t>(rows) + 1, 0);
  for (size_t j = 0; j < n; ++j) ++out.offset[key(index(j)) + 1];
  for (int32_t r = 0; r < rows; ++r) out.offset[r + 1] += out.offset[r];
  out.items.resize(n);
  std::vector<int32_t> fill(out.offset.begin(), out.offset.end() - 1);
  for (size_t j = 0; j < n; ++j) {
    const int32_t i = index(j);
    out.items[fill[key(i)]++] = i;
  }
  return out;
}

// Buckets of `order` (indices) by key(index) in [0, rows); stable.
template <typename Key>
Buckets BucketBy(int32_t rows, std::span<const int32_t> order, Key key) {
  return BucketIndices(
      rows, order.size(), [&](size_t j) { return order[j]; }, key);
}

// Buckets of the indices 0 .. n-1 (no index array needed).
template <typename Key>
Buckets BucketBy(int32_t rows, size_t n, Key key) {
  return BucketIndices(
      rows, n, [](size_t j) { return static_cast<int32_t>(j); }, key);
}

}  // namespace fcp::detail
