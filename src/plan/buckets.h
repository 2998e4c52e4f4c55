// Compressed rows (RowIndex, Rows) and stable bucket (counting) sorts by
// small integer keys: the planner's O(n + k) replacement for comparison
// sorts keyed by worker or block ids. Private to the library: the planning
// layer (src/plan and its internal headers) and the simulator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fcp::detail {

// Where each row of a compressed-row (CSR) array starts: row r is the range
// [offset[r], offset[r + 1]) of an array laid out row by row (the items of
// Rows below, or an array that is parallel to them or not owned). The one
// row-index structure of the planner: buckets, dependency graphs, per-item
// lists, the pieces of each sequence, the required pairs of each query block.
// Invariant once built: rows() + 1 offsets, non-decreasing from 0 to the
// array's size. Offset is int32_t where the arrays are indexed by int32_t and
// int64_t where a row array can outgrow it.
template <typename Offset = int32_t>
struct RowIndex {
  std::vector<Offset> offset;

  size_t rows() const { return offset.empty() ? 0 : offset.size() - 1; }
  // Row r of `items`, an array this index lays out.
  template <typename U>
  std::span<U> Slice(std::span<U> items, size_t r) const {
    return items.subspan(static_cast<size_t>(offset[r]),
                         static_cast<size_t>(offset[r + 1] - offset[r]));
  }

  // Building by counting, O(rows + items): StartCounting(rows), Count(r) once
  // per item of row r (any order), FinishCounting(); then RowStarts() gives a
  // fill cursor per row (row r's items go to cursor[r]++).
  void StartCounting(size_t rows) { offset.assign(rows + 1, 0); }
  void Count(size_t r) { ++offset[r + 1]; }
  void FinishCounting() {
    for (size_t r = 0; r + 1 < offset.size(); ++r) offset[r + 1] += offset[r];
  }
  std::vector<Offset> RowStarts() const { return {offset.begin(), offset.end() - 1}; }
};

// Compressed rows that own their items: row r is items[offset[r] .. offset[r+1]).
template <typename T, typename Offset = int32_t>
struct Rows : RowIndex<Offset> {
  std::vector<T> items;
  std::span<const T> row(size_t r) const { return this->Slice(std::span<const T>(items), r); }
};

// Indices grouped by a key: row r holds the indices with key r, in input order.
using Buckets = Rows<int32_t>;

// Buckets of the n indices index(0), ..., index(n-1) by key(index) in [0, rows); stable.
template <typename Index, typename Key>
Buckets BucketIndices(size_t rows, size_t n, Index index, Key key) {
  Buckets out;
  out.StartCounting(rows);
  for (size_t j = 0; j < n; ++j) out.Count(key(index(j)));
  out.FinishCounting();
  out.items.resize(n);
  std::vector<int32_t> fill = out.RowStarts();
  for (size_t j = 0; j < n; ++j) {
    const int32_t i = index(j);
    out.items[fill[key(i)]++] = i;
  }
  return out;
}

// Buckets of `order` (indices) by key(index) in [0, rows); stable.
template <typename Key>
Buckets BucketBy(size_t rows, std::span<const int32_t> order, Key key) {
  return BucketIndices(
      rows, order.size(), [&](size_t j) { return order[j]; }, key);
}

// Buckets of the indices 0 .. n-1 (no index array needed).
template <typename Key>
Buckets BucketBy(size_t rows, size_t n, Key key) {
  return BucketIndices(
      rows, n, [](size_t j) { return static_cast<int32_t>(j); }, key);
}

}  // namespace fcp::detail
