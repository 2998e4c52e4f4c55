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

// Buckets of `order` (indices) by key(index) in [0, rows); stable.
template <typename Key>
Buckets BucketBy(int32_t rows, std::span<const int32_t> order, Key key) {
  Buckets out;
  out.begin.assign(static_cast<size_t>(rows) + 1, 0);
  for (int32_t i : order) ++out.begin[key(i) + 1];
  for (int32_t r = 0; r < rows; ++r) out.begin[r + 1] += out.begin[r];
  out.items.resize(order.size());
  std::vector<int32_t> fill(out.begin.begin(), out.begin.end() - 1);
  for (int32_t i : order) out.items[fill[key(i)]++] = i;
  return out;
}

// Buckets of the indices 0 .. n-1.
template <typename Key>
Buckets BucketBy(int32_t rows, size_t n, Key key) {
  std::vector<int32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  return BucketBy(rows, std::span<const int32_t>(order), key);
}

}  // namespace fcp::detail
