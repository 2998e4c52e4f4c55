// The reshuffle floor (fcp/reshuffle_floor.h): home shares cut into runs of
// one sequence, then the densest-first cover of each overloaded home's
// excess, and of all of them pooled.
#include "fcp/reshuffle_floor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "fcp/error.h"
#include "fcp/plan.h"

namespace fcp {
namespace {

[[noreturn]] void BadInput(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "reshuffle floor: " + what);
}

// Work sums in 128 bits: one full-mask sequence of 2^31 tokens alone has
// 2^62 token pairs, so a batch's total may pass int64.
using Wide = __int128;

// Query rows [begin, end) of a sequence of `length` tokens.
struct Run {
  int64_t length = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

int64_t RowWork(const Mask& mask, int64_t length, int64_t row) {
  return AllowedPairs(mask, {row, row + 1}, {0, length});
}

struct Tally {
  int64_t tokens = 0;
  Wide token_pairs = 0;
};

// The first row of [r.begin, r.end) whose work is at least `threshold` >= 1,
// or r.end if none: rows of a sequence get no lighter towards its end, and
// a row's work is in closed form (fcp/mask.h: row q of a sequence of L
// attends L keys under the full mask, q + 1 causal, min(q + 1, W) under a
// sliding window of W), so O(1), not a binary search over the run.
int64_t FirstRowAtLeast(const Mask& mask, const Run& r, int64_t threshold) {
  switch (mask.kind) {
    case MaskKind::kFull:
      return r.length >= threshold ? r.begin : r.end;
    case MaskKind::kSlidingWindow:
      if (threshold > mask.window) return r.end;
      [[fallthrough]];
    case MaskKind::kCausal:
      return std::clamp(threshold - 1, r.begin, r.end);
  }
  return r.end;
}

// The rows of `runs` whose work is at least `threshold`: a suffix of each run.
Tally AtLeast(const Mask& mask, const std::vector<Run>& runs, int64_t threshold) {
  Tally t;
  for (const Run& r : runs) {
    const int64_t first = FirstRowAtLeast(mask, r, threshold);
    t.tokens += r.end - first;
    t.token_pairs += AllowedPairs(mask, {first, r.end}, {0, r.length});
  }
  return t;
}

// The fewest rows of `runs` whose work sums to at least `excess`, which is in
// (0, their total]: all rows heavier than the threshold tau at which the
// heaviest rows first cover it, then as many rows of work exactly tau as the
// rest of the excess needs.
int64_t DensestCover(const Mask& mask, const std::vector<Run>& runs, Wide excess) {
  int64_t heaviest = 0;
  for (const Run& r : runs)
    if (r.end > r.begin) heaviest = std::max(heaviest, RowWork(mask, r.length, r.end - 1));
  int64_t lo = 1, hi = heaviest;  // every row has work >= 1 (its diagonal)
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (AtLeast(mask, runs, mid).token_pairs >= excess)
      lo = mid;
    else
      hi = mid - 1;
  }
  const Tally above = AtLeast(mask, runs, lo + 1);  // short of the excess
  return above.tokens + static_cast<int64_t>((excess - above.token_pairs + lo - 1) / lo);
}

}  // namespace

void ReshuffleFloorConfig::validate() const {
  if (workers < 1) BadInput("workers must be >= 1, got " + std::to_string(workers));
  if (token_cap < 0)
    BadInput("token_cap must be >= 0 (0 = ceil(T/N)), got " + std::to_string(token_cap));
  if (!std::isfinite(max_work_ratio) || max_work_ratio <= 0)
    BadInput("max_work_ratio must be a finite number > 0, got " + std::to_string(max_work_ratio));
  mask.validate();
}

ReshuffleFloor ComputeReshuffleFloor(const std::vector<int64_t>& sequences,
                                     const ReshuffleFloorConfig& config) {
  config.validate();
  int64_t total_tokens = 0;
  for (int64_t length : sequences) {
    if (length < 0) BadInput("sequence length " + std::to_string(length) + " is negative");
    if (__builtin_add_overflow(total_tokens, length, &total_tokens))
      BadInput("token counts overflow int64");
  }
  const int32_t n = config.workers;
  const int64_t even_cap = total_tokens / n + (total_tokens % n != 0);
  const int64_t cap = config.token_cap > 0 ? config.token_cap : even_cap;
  if (cap < even_cap)
    BadInput("token_cap " + std::to_string(cap) +
             " is below ceil(T/N) = " + std::to_string(even_cap) + ": no plan fits");

  // Each home's share as runs of one sequence, and its work.
  std::vector<std::vector<Run>> runs(n);
  std::vector<Wide> work(n, 0);
  Wide total_work = 0;
  size_t seq = 0;
  int64_t seq_begin = 0;  // global first token of sequences[seq]
  for (int32_t r = 0; r < n; ++r) {
    const int64_t home_end = DataloaderBegin(total_tokens, n, r + 1);
    int64_t token = DataloaderBegin(total_tokens, n, r);
    while (token < home_end) {
      while (seq_begin + sequences[seq] <= token)
        seq_begin += sequences[seq++];  // skips empty ones
      const int64_t stop = std::min(home_end, seq_begin + sequences[seq]);
      const Run run{sequences[seq], token - seq_begin, stop - seq_begin};
      runs[r].push_back(run);
      work[r] += AllowedPairs(config.mask, {run.begin, run.end}, {0, run.length});
      token = stop;
    }
    total_work += work[r];
  }

  const Wide target =
      config.max_work_ratio == 1.0
          ? total_work / n
          : static_cast<Wide>(std::floor(static_cast<long double>(config.max_work_ratio) *
                                         static_cast<long double>(total_work) / n));
  ReshuffleFloor f;
  Wide excess = 0;
  std::vector<Run> overloaded_runs;
  for (int32_t r = 0; r < n; ++r) {
    const int64_t share =
        DataloaderBegin(total_tokens, n, r + 1) - DataloaderBegin(total_tokens, n, r);
    if (work[r] <= target) {
      f.spare_tokens += cap - share;
      continue;
    }
    ++f.overloaded_workers;
    excess += work[r] - target;
    f.shed_tokens += DensestCover(config.mask, runs[r], work[r] - target);
    overloaded_runs.insert(overloaded_runs.end(), runs[r].begin(), runs[r].end());
  }
  if (excess > 0) f.pooled_shed_tokens = DensestCover(config.mask, overloaded_runs, excess);
  f.target_token_pairs = static_cast<double>(target);
  f.excess_token_pairs = static_cast<double>(excess);
  f.replacement_tokens = std::max<int64_t>(0, f.pooled_shed_tokens - f.spare_tokens);
  f.tokens = f.shed_tokens + f.replacement_tokens;
  return f;
}

}  // namespace fcp
