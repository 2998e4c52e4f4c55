// Stable bucket (counting) sorts by small integer keys: the planner's O(n + k)
// replacement for comparison sorts keyed by worker or block ids. Private to
// src/plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fcp::detail {

// items[begin[r] .. begin[r+1]) are the indices with key r, in input order.
struct Buckets {
  std::vector<int32_t> begin;
  std::vector<int32_t> items;
  std::span<const int32_t> row(int32_t r) const {
    return std::span(items).subspan(begin[r], begin[r + 1] - begin[r]);
  }
};

// Buckets of the n indices index(0), ..., index(n-1) by key(index) in [0, rows); stable.
template <typename Index, typename Key>
Buckets BucketIndices(int32_t rows, size_t n, Index index, Key key) {
  Buckets out;
  out.begin.assign(static_cast<size_t>(rows) + 1, 0);
  for (size_t j = 0; j < n; ++j) ++out.begin[key(index(j)) + 1];
  for (int32_t r = 0; r < rows; ++r) out.begin[r + 1] += out.begin[r];
  out.items.resize(n);
  std::vector<int32_t> fill(out.begin.begin(), out.begin.end() - 1);
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
