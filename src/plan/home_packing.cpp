#include "home_packing.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "assignment_context.h"
#include "assignment_parts.h"
#include "fcp/error.h"
#include "fcp/required_pairs.h"
#include "fcp/reshuffle_floor.h"
#include "short_rehoming.h"

namespace fcp::detail {
namespace {

// A worker's sequences as (length, id), ascending: the shortest are the
// lightest replacements, and a length window is a binary search.
using Owned = std::vector<std::pair<int64_t, int32_t>>;

// Shortest sequences tried as a replacement prefix, first sequences of a
// two-sequence completion after it, and matches looked at per completion
// (equal lengths weigh the same under every mask); sequences of the most
// loaded worker offered per step, densest first; exchanges per worker.
// The bounds keep a step O(1) in the sequences a worker holds (1,000 of
// up to 64 tokens took 14 s to plan at N = 64 without them).
constexpr size_t kPrefixSequences = 12;
constexpr size_t kPairFirsts = 8;
constexpr int kMatches = 2;
constexpr size_t kOffered = 32;
constexpr size_t kStepsPerWorker = 4;

// One exchange: sequence x of worker a for Y of worker b, Y the `prefix`
// shortest of b's sequences plus up to two more (indices into b's Owned).
struct Exchange {
  int32_t x = -1, b = -1;
  size_t prefix = 0;
  int32_t extra[2] = {-1, -1};
  int64_t moved = std::numeric_limits<int64_t>::max();  // change in tokens away from home
  int64_t peak = std::numeric_limits<int64_t>::max();   // the larger work of a and b after
};

}  // namespace

std::optional<HomePacking> PackAtHome(const std::vector<int64_t>& lengths, const Mask& mask,
                                      int32_t workers, int64_t token_cap, int64_t block_size,
                                      int32_t node_workers, bool self_check) {
  const int32_t n = workers;
  const int32_t node = std::max<int32_t>(node_workers, 1);
  const int32_t sequences = static_cast<int32_t>(lengths.size());
  const std::vector<int64_t> offsets = SequenceOffsets(lengths);
  const int64_t total_tokens = offsets.back();
  if (workers < 1 || block_size < 1 ||
      token_cap < (total_tokens + workers - 1) / std::max(workers, 1))
    throw Error(ErrorCode::kInvalidArgument,
                "home packing: needs workers >= 1, block_size >= 1 and token_cap >= ceil(T / N); "
                "got " +
                    std::to_string(workers) + " workers, block_size " + std::to_string(block_size) +
                    ", token_cap " + std::to_string(token_cap) +
                    " for T = " + std::to_string(total_tokens));
  for (const int64_t len : lengths)
    if (len > block_size || len > token_cap) return std::nullopt;

  // Per sequence: its runs on dataloader workers (ascending), its work.
  std::vector<int32_t> run_begin(sequences + 1, 0), run_worker;
  std::vector<int64_t> run_tokens, work(sequences);
  for (int32_t s = 0; s < sequences; ++s) {
    run_begin[s] = static_cast<int32_t>(run_worker.size());
    ForEachDataloaderRun(Segment{s, 0, lengths[s]}, offsets, n, [&](int32_t home, int64_t t) {
      run_worker.push_back(home);
      run_tokens.push_back(t);
    });
    work[s] = AllowedPairs(mask, {0, lengths[s]}, {0, lengths[s]});
  }
  run_begin[sequences] = static_cast<int32_t>(run_worker.size());
  const auto away = [&](int32_t s, int32_t w) {  // tokens of s not at home on w
    int64_t kept = 0;
    for (int32_t r = run_begin[s]; r < run_begin[s + 1]; ++r)
      if (run_worker[r] == w) kept = run_tokens[r];
    return lengths[s] - kept;
  };

  // The dataloader layout: a sequence inside one worker's share is a unit
  // of the exchanges; one across shares is cut at their boundaries, its
  // pieces fixed at home (each needs the K/V of the pieces before it).
  std::vector<int32_t> owner(sequences, -1);
  std::vector<int64_t> tokens(n, 0), load(n, 0);
  std::vector<Owned> owned(n);
  struct Piece {
    int32_t worker = 0;
    Segment segment;
  };
  std::vector<Piece> pieces;
  for (int32_t s = 0; s < sequences; ++s) {
    int64_t start = 0;
    for (int32_t r = run_begin[s]; r < run_begin[s + 1]; ++r) {
      const int32_t w = run_worker[r];
      tokens[w] += run_tokens[r];
      if (run_begin[s + 1] - run_begin[s] == 1) {
        owner[s] = w;
        load[w] += work[s];
        owned[w].push_back({lengths[s], s});
      } else {
        load[w] += AllowedPairs(mask, {start, start + run_tokens[r]}, {0, lengths[s]});
        pieces.push_back({w, {s, start, run_tokens[r]}});
      }
      start += run_tokens[r];
    }
  }
  for (Owned& o : owned) std::sort(o.begin(), o.end());
  int64_t moved = 0;
  std::set<std::pair<int64_t, int32_t>> by_load;  // (work, worker): a total order
  for (int32_t w = 0; w < n; ++w) by_load.insert({load[w], w});

  // The exchanges of x (on a) for replacements from b whose tokens lie in
  // [lo, hi]: the shortest `prefix` of b's sequences, alone or completed by
  // one or two more of the rest. visit(prefix, extra0, extra1, tokens, work).
  const auto replacements = [&](int32_t b, int64_t lo, int64_t hi, auto visit) {
    const Owned& o = owned[b];
    int64_t prefix_tokens = 0, prefix_work = 0;
    for (size_t k = 0; k <= std::min(kPrefixSequences, o.size()); ++k) {
      if (k > 0) {
        prefix_tokens += o[k - 1].first;
        prefix_work += work[o[k - 1].second];
      }
      const int64_t r_lo = lo - prefix_tokens, r_hi = hi - prefix_tokens;
      if (r_hi < 0) break;
      if (r_lo <= 0) visit(k, -1, -1, prefix_tokens, prefix_work);
      const auto from = [&](size_t i, int64_t len) {
        return std::lower_bound(o.begin() + static_cast<std::ptrdiff_t>(i), o.end(),
                                std::pair<int64_t, int32_t>{len, -1});
      };
      int found = 0;
      for (auto it = from(k, r_lo); it != o.end() && it->first <= r_hi && found < kMatches;
           ++it, ++found)
        visit(k, static_cast<int32_t>(it - o.begin()), -1, prefix_tokens + it->first,
              prefix_work + work[it->second]);
      for (size_t i = k; i < std::min(o.size(), k + kPairFirsts) && 2 * o[i].first <= r_hi; ++i) {
        found = 0;
        for (auto it = from(i + 1, r_lo - o[i].first);
             it != o.end() && it->first <= r_hi - o[i].first && found < kMatches; ++it, ++found)
          visit(k, static_cast<int32_t>(i), static_cast<int32_t>(it - o.begin()),
                prefix_tokens + o[i].first + it->first,
                prefix_work + work[o[i].second] + work[it->second]);
      }
    }
  };
  const auto replacement_ids = [&](const Exchange& e) {
    std::vector<int32_t> ids;
    const Owned& o = owned[e.b];
    for (size_t k = 0; k < e.prefix; ++k) ids.push_back(o[k].second);
    for (const int32_t i : e.extra)
      if (i >= 0) ids.push_back(o[static_cast<size_t>(i)].second);
    return ids;
  };
  const auto moved_change = [&](const Exchange& e, int32_t a) {
    int64_t change = away(e.x, e.b) - away(e.x, a);
    for (const int32_t y : replacement_ids(e)) change += away(y, a) - away(y, e.b);
    return change;
  };
  // Best exchange of x in `xs` (a's) with the partners: the lowest peak
  // below a's work, with the tokens away from home within the budget, then
  // the fewest of those; ties: the first found.
  const auto search = [&](int32_t a, const std::vector<int32_t>& xs,
                          const std::vector<int32_t>& partners, int64_t budget) {
    Exchange best;
    for (const int32_t x : xs) {
      // a keeps at least its work without x: no exchange of x can have a
      // lower peak than that (exact pruning; equal peaks are still tried).
      if (load[a] - work[x] > best.peak) continue;
      for (const int32_t b : partners) {
        // a and b keep their work together, so the larger is at least half
        // of it: when that half is above the best peak, so is every
        // exchange with b (exact pruning, as above; written without the
        // sum, which would overflow while best.peak is unset).
        if (load[b] - best.peak > best.peak - load[a]) continue;
        // Tokens a sheds (negative: takes), both workers within the cap.
        const int64_t room_a = token_cap - tokens[a], room_b = token_cap - tokens[b];
        replacements(b, lengths[x] - room_b, lengths[x] + room_a,
                     [&](size_t prefix, int32_t e0, int32_t e1, int64_t, int64_t w) {
                       Exchange e;
                       e.x = x, e.b = b, e.prefix = prefix, e.extra[0] = e0, e.extra[1] = e1;
                       e.peak = std::max(load[a] - work[x] + w, load[b] + work[x] - w);
                       // Cheap test first: the peak alone rules most out.
                       if (e.peak > best.peak || e.peak >= load[a]) return;
                       e.moved = moved_change(e, a);
                       if (moved + e.moved > budget) return;
                       if (std::tie(e.peak, e.moved) < std::tie(best.peak, best.moved)) best = e;
                     });
      }
    }
    return best;
  };
  const auto apply = [&](const Exchange& e, int32_t a) {
    const std::vector<int32_t> ys = replacement_ids(e);
    moved += moved_change(e, a);
    const auto shift = [&](int32_t s, int32_t from, int32_t to) {
      Owned& o = owned[from];
      o.erase(std::lower_bound(o.begin(), o.end(), std::pair<int64_t, int32_t>{lengths[s], s}));
      Owned& t = owned[to];
      t.insert(std::upper_bound(t.begin(), t.end(), std::pair<int64_t, int32_t>{lengths[s], s}),
               {lengths[s], s});
      by_load.erase({load[from], from});
      by_load.erase({load[to], to});
      load[from] -= work[s], load[to] += work[s];
      tokens[from] -= lengths[s], tokens[to] += lengths[s];
      by_load.insert({load[from], from});
      by_load.insert({load[to], to});
      owner[s] = to;
    };
    shift(e.x, a, e.b);
    for (const int32_t y : ys) shift(y, e.b, a);
  };
  // Partners of a: the other workers of its node. Across nodes the
  // reshuffle takes the NIC, and on the benchmark batches it cost more
  // than the balance it bought (docs/planner.md, step 7, home packing).
  const auto partners_of = [&](int32_t a) {
    std::vector<int32_t> p;
    for (int32_t b = a / node * node; b < std::min(n, (a / node + 1) * node); ++b)
      if (b != a) p.push_back(b);
    return p;
  };

  // Balance, within the movement budget. Each exchange lowers the most
  // loaded worker's work or moves the maximum to a worker below it.
  const int64_t total_work = std::accumulate(load.begin(), load.end(), int64_t{0});
  const double limit = static_cast<double>(total_work) / n * (1 + kPackSlack);
  ReshuffleFloorConfig floor;
  floor.workers = n;
  floor.mask = mask;
  floor.token_cap = token_cap;
  const int64_t budget = std::min(
      static_cast<int64_t>(kPackMovedShare * static_cast<double>(total_tokens)),
      static_cast<int64_t>(kPackFloorMultiple *
                           static_cast<double>(ComputeReshuffleFloor(lengths, floor).tokens)));
  const size_t max_steps = kStepsPerWorker * static_cast<size_t>(n);
  for (size_t step = 0; step < max_steps; ++step) {
    const int32_t a = std::prev(by_load.end())->second;
    if (static_cast<double>(load[a]) <= limit) break;
    // The kOffered densest sequences of a (work per token; ties by id):
    // among equal exchanges the densest is kept.
    std::vector<int32_t> xs;
    for (const auto& [len, s] : owned[a]) xs.push_back(s);
    const size_t offered = std::min(xs.size(), kOffered);
    std::partial_sort(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(offered), xs.end(),
                      [&](int32_t p, int32_t q) {
                        const __int128 l = static_cast<__int128>(work[p]) * lengths[q];
                        const __int128 r = static_cast<__int128>(work[q]) * lengths[p];
                        return l != r ? l > r : p < q;
                      });
    xs.resize(offered);
    const Exchange e = search(a, xs, partners_of(a), budget);
    if (e.x < 0) break;
    apply(e, a);
  }

  HomePacking out;
  out.moved_tokens = moved;
  out.compute.assign(load.begin(), load.end());
  // Blocks: per worker its whole sequences away from home, then those at
  // home, each in id order (AppendSequenceBlocks); then each piece in a
  // block of its own (transfers move whole blocks).
  std::vector<std::vector<int32_t>> away_of(n), home_of(n);
  for (int32_t s = 0; s < sequences; ++s)
    if (owner[s] >= 0) (away(s, owner[s]) == 0 ? home_of : away_of)[owner[s]].push_back(s);
  for (int32_t w = 0; w < n; ++w)
    AppendSequenceBlocks(w, away_of[w], home_of[w], lengths, block_size, out.blocks);
  for (const Piece& p : pieces) out.blocks.push_back(Block{p.worker, {p.segment}});
  out.pairs = RequiredPairs(lengths, out.blocks, mask);
  // K/V traffic: each block once to every other worker computing with it.
  BlockLoads loads = CountBlockLoads(out.blocks, out.pairs, n);
  out.traffic = std::move(loads.traffic);
  out.send = std::move(loads.send);
  if (self_check) {
    // The exchanges kept `load` incrementally; recount it from the pairs.
    for (size_t b = 0; b < out.blocks.size(); ++b)
      FCP_CHECK(out.blocks[b].tokens() <= block_size,
                "home packing: block " + std::to_string(b) + " holds more than block_size tokens");
    for (int32_t w = 0; w < n; ++w) {
      FCP_CHECK(loads.compute[w] == load[w], "home packing: worker " + std::to_string(w) +
                                                 "'s compute differs from a recount of its pairs");
      FCP_CHECK(loads.tokens[w] <= token_cap,
                "home packing: worker " + std::to_string(w) + " holds more than the token cap");
    }
  }
  return out;
}

}  // namespace fcp::detail
