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
#include "planner_constants.h"
#include "short_rehoming.h"

namespace fcp::detail {
namespace {

// A worker's sequences as (length, id), ascending: the shortest are the
// lightest replacements, and a length window is a binary search.
using Owned = std::vector<std::pair<int64_t, int32_t>>;

// One exchange: sequence x of worker a for Y of worker b, Y the `prefix`
// shortest of b's sequences plus up to two more (indices into b's Owned).
struct Exchange {
  int32_t x = -1, b = -1;
  size_t prefix = 0;
  int32_t extra[2] = {-1, -1};
  int64_t moved = std::numeric_limits<int64_t>::max();  // change in tokens away from home
  int64_t peak = std::numeric_limits<int64_t>::max();   // the larger work of a and b after
};

// Where a packing starts (home_packing.h): the dataloader layout, balanced
// inside each node within the movement budget (PackAtHome); or whole
// sequences dealt by LPT, balanced with any worker, nothing charged for
// moving (PackWhole).
enum class Start { kHome, kWhole };

// A subset of `sizes` (each >= 1) adding up to exactly `target` (>= 1), as
// indices, ascending; nothing when there is none. Of the subsets, the one
// a bitset subset-sum picks when it takes an item only where the target
// cannot be reached without it, looking from the last item back: the
// first items are preferred (callers list the ones they would rather use
// first). O(m target / 64) time and space for m sizes.
std::optional<std::vector<size_t>> ExactSubset(const std::vector<int64_t>& sizes, int64_t target) {
  const size_t m = sizes.size();
  const size_t words = static_cast<size_t>(target) / 64 + 1;
  // Row i: the sums the first i sizes reach (bit t: sum t), up to target.
  std::vector<uint64_t> reach((m + 1) * words, 0);
  reach[0] = 1;
  for (size_t i = 0; i < m; ++i) {
    const uint64_t* prev = &reach[i * words];
    uint64_t* next = &reach[(i + 1) * words];
    const size_t word_shift = static_cast<size_t>(sizes[i]) / 64;
    const unsigned bit_shift = static_cast<unsigned>(sizes[i] % 64);
    for (size_t j = 0; j < words; ++j) {
      uint64_t shifted = 0;
      if (j >= word_shift) {
        shifted = prev[j - word_shift] << bit_shift;
        if (bit_shift > 0 && j > word_shift)
          shifted |= prev[j - word_shift - 1] >> (64 - bit_shift);
      }
      next[j] = prev[j] | shifted;
    }
  }
  const auto reached = [&](size_t row, int64_t t) {
    return (reach[row * words + static_cast<size_t>(t) / 64] >> (t % 64)) & 1;
  };
  if (!reached(m, target)) return std::nullopt;
  std::vector<size_t> chosen;
  int64_t t = target;
  for (size_t i = m; i > 0 && t > 0; --i)
    if (!reached(i - 1, t)) {
      chosen.push_back(i - 1);
      t -= sizes[i - 1];
    }
  std::reverse(chosen.begin(), chosen.end());
  return chosen;
}

std::optional<HomePacking> Pack(const std::vector<int64_t>& lengths, const Mask& mask,
                                int32_t workers, int64_t token_cap, int64_t block_size,
                                int32_t node_workers, bool self_check, Start start_layout) {
  const char* const name = start_layout == Start::kHome ? "home packing" : "whole packing";
  const int32_t n = workers;
  const int32_t node = std::max<int32_t>(node_workers, 1);
  const int32_t sequences = static_cast<int32_t>(lengths.size());
  const std::vector<int64_t> offsets = SequenceOffsets(lengths);
  const int64_t total_tokens = offsets.back();
  if (workers < 1 || block_size < 1 ||
      token_cap < (total_tokens + workers - 1) / std::max(workers, 1))
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) +
                    ": needs workers >= 1, block_size >= 1 and token_cap >= ceil(T / N); got " +
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

  // The start. A whole sequence is a unit of the exchanges (owner, owned);
  // a cut one is fixed in pieces, each needing the K/V of those before it.
  std::vector<int32_t> owner(sequences, -1);
  std::vector<int64_t> tokens(n, 0), load(n, 0);
  std::vector<Owned> owned(n);
  struct Piece {
    int32_t worker = 0;
    Segment segment;
  };
  std::vector<Piece> pieces;
  const auto place = [&](int32_t s, int32_t w) {
    owner[s] = w;
    tokens[w] += lengths[s];
    load[w] += work[s];
    owned[w].push_back({lengths[s], s});
  };
  const auto place_piece = [&](int32_t w, int32_t s, int64_t start, int64_t length) {
    tokens[w] += length;
    load[w] += AllowedPairs(mask, {start, start + length}, {0, lengths[s]});
    pieces.push_back({w, {s, start, length}});
  };
  if (start_layout == Start::kHome) {
    // The dataloader layout: a sequence inside one worker's share stays
    // whole there; one across shares is cut at their boundaries.
    for (int32_t s = 0; s < sequences; ++s) {
      if (run_begin[s + 1] - run_begin[s] == 1) {
        place(s, run_worker[run_begin[s]]);
        continue;
      }
      int64_t start = 0;
      for (int32_t r = run_begin[s]; r < run_begin[s + 1]; ++r) {
        place_piece(run_worker[r], s, start, run_tokens[r]);
        start += run_tokens[r];
      }
    }
  } else {
    // LPT over whole sequences: heaviest first (ties: longer, then lower
    // id), each to the least loaded worker with room for it whole (ties by
    // id) that it leaves full or with room for the shortest sequence, else
    // to the least loaded with room for it. One that fits nowhere waits: the later ones are lighter
    // and may still fit. Then the exact refill (below), and what it leaves goes, longest first,
    // whole to the least loaded worker with room for it, else cut across the rooms left, the least
    // loaded worker's first, so the cap holds exactly.
    std::vector<int32_t> order(sequences);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return std::tie(work[b], lengths[b], a) < std::tie(work[a], lengths[a], b);
    });
    const int64_t shortest = *std::min_element(lengths.begin(), lengths.end());
    // Workers with room for the shortest sequence, by (work, id).
    std::set<std::pair<int64_t, int32_t>> open;
    for (int32_t w = 0; w < n; ++w)
      if (token_cap >= shortest) open.insert({0, w});
    std::vector<int32_t> waiting;
    for (const int32_t s : order) {
      // Room left after s: none, or enough for the shortest sequence. A
      // sliver between can take no whole sequence, so it would end cut.
      auto it = std::find_if(open.begin(), open.end(), [&](const auto& e) {
        const int64_t left = token_cap - tokens[e.second] - lengths[s];
        return left == 0 || left >= shortest;
      });
      if (it == open.end())
        it = std::find_if(open.begin(), open.end(), [&](const auto& e) {
          return tokens[e.second] + lengths[s] <= token_cap;
        });
      if (it == open.end()) {
        waiting.push_back(s);
        continue;
      }
      const int32_t w = it->second;
      open.erase(it);
      place(s, w);
      if (token_cap - tokens[w] >= shortest) open.insert({load[w], w});
    }
    // Exact refill: the deal leaves most workers a room of fewer tokens
    // than any sequence, and each such room would hold a cut piece. So
    // each worker with room gives back its k lightest (the last it was
    // dealt) to a pool with the waiting ones (k = 0: the waiting ones
    // alone), and the rooms, smallest first (ties by id), are refilled
    // with pool sequences adding up to exactly the room (ExactSubset, the
    // longest preferred, so that the short ones are left for the rooms
    // after). Each sequence given back changes the mix of lengths the deal
    // balanced, so the fewest that cut the fewest sequences are given
    // back; the exchanges below level the work this shifts.
    const auto longer = [&](int32_t a, int32_t b) {
      return lengths[a] != lengths[b] ? lengths[a] > lengths[b] : a < b;
    };
    // The refill with k given back, then what is left of the pool,
    // longest first: whole to the least loaded worker with room for it
    // (ties by id), else cut across the rooms, the least loaded worker's
    // first. On the state as dealt; returns the number of sequences cut.
    const auto refill = [&](size_t given_back) {
      std::vector<int32_t> pool = waiting;
      for (int32_t w = 0; w < n; ++w) {
        if (tokens[w] == token_cap) continue;
        for (size_t k = 0; k < given_back && !owned[w].empty(); ++k) {
          const int32_t s = owned[w].back().second;
          owned[w].pop_back();
          owner[s] = -1;
          tokens[w] -= lengths[s];
          load[w] -= work[s];
          pool.push_back(s);
        }
      }
      std::sort(pool.begin(), pool.end(), longer);
      std::vector<int32_t> by_room;
      for (int32_t w = 0; w < n; ++w)
        if (tokens[w] < token_cap) by_room.push_back(w);
      std::sort(by_room.begin(), by_room.end(), [&](int32_t a, int32_t b) {
        return std::tie(tokens[b], a) < std::tie(tokens[a], b);  // room ascending, then id
      });
      for (const int32_t w : by_room) {
        if (pool.empty()) break;
        const int64_t room = token_cap - tokens[w];
        // The pool sequences that fit: a suffix of the pool (longest first).
        const auto fit = std::lower_bound(pool.begin(), pool.end(), room,
                                          [&](int32_t s, int64_t r) { return lengths[s] > r; });
        std::vector<int32_t> candidates(fit, pool.end());
        if (candidates.size() > kRefillItems)
          candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(kRefillItems / 2),
                           candidates.end() - static_cast<std::ptrdiff_t>(kRefillItems / 2));
        std::vector<int64_t> sizes;
        for (const int32_t s : candidates) sizes.push_back(lengths[s]);
        // Too few tokens to fill it, or a subset-sum table past its bound
        // (a loose cap leaves rooms of many blocks): left as it is.
        const int64_t available = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
        const double table_words =
            static_cast<double>(sizes.size() + 1) * static_cast<double>(room / 64 + 1);
        if (available < room || table_words > kRefillMaxWords) continue;
        const std::optional<std::vector<size_t>> chosen = ExactSubset(sizes, room);
        if (!chosen) continue;
        for (const size_t i : *chosen) {
          place(candidates[i], w);
          pool.erase(std::lower_bound(pool.begin(), pool.end(), candidates[i], longer));
        }
      }
      std::set<std::pair<int64_t, int32_t>> rooms;  // workers with any room, by (work, id)
      for (int32_t w = 0; w < n; ++w)
        if (tokens[w] < token_cap) rooms.insert({load[w], w});
      size_t cut = 0;
      for (const int32_t s : pool) {
        const auto whole_fit = std::find_if(rooms.begin(), rooms.end(), [&](const auto& e) {
          return tokens[e.second] + lengths[s] <= token_cap;
        });
        if (whole_fit != rooms.end()) {
          const int32_t w = whole_fit->second;
          rooms.erase(whole_fit);
          place(s, w);
          if (tokens[w] < token_cap) rooms.insert({load[w], w});
          continue;
        }
        ++cut;
        for (int64_t start = 0; start < lengths[s];) {
          FCP_CHECK(!rooms.empty(), std::string(name) + ": the rooms hold every token");
          const int32_t w = rooms.begin()->second;
          rooms.erase(rooms.begin());
          const int64_t length = std::min(lengths[s] - start, token_cap - tokens[w]);
          place_piece(w, s, start, length);
          start += length;
          if (tokens[w] < token_cap) rooms.insert({load[w], w});
        }
      }
      return cut;
    };
    // Of k = 0 .. kRefillSequences: the first that cuts nothing, else the
    // one that cuts the fewest (ties: the smaller k).
    struct Layout {
      std::vector<int32_t> owner;
      std::vector<int64_t> tokens, load;
      std::vector<Owned> owned;
      std::vector<Piece> pieces;
    };
    const Layout dealt{owner, tokens, load, owned, pieces};
    Layout best;
    size_t fewest = std::numeric_limits<size_t>::max();
    for (size_t k = 0; k <= kRefillSequences && fewest > 0; ++k) {
      if (k > 0) {
        owner = dealt.owner;
        tokens = dealt.tokens;
        load = dealt.load;
        owned = dealt.owned;
        pieces = dealt.pieces;
      }
      const size_t cut = refill(k);
      if (cut < fewest) {
        fewest = cut;
        best = Layout{std::move(owner), std::move(tokens), std::move(load), std::move(owned),
                      std::move(pieces)};
      }
    }
    owner = std::move(best.owner);
    tokens = std::move(best.tokens);
    load = std::move(best.load);
    owned = std::move(best.owned);
    pieces = std::move(best.pieces);
  }
  for (Owned& o : owned) std::sort(o.begin(), o.end());
  int64_t moved = 0;  // tokens away from their dataloader worker (none at home)
  if (start_layout == Start::kWhole) {
    for (int32_t s = 0; s < sequences; ++s)
      if (owner[s] >= 0) moved += away(s, owner[s]);
    for (const Piece& p : pieces)
      ForEachDataloaderRun(p.segment, offsets, n, [&](int32_t home, int64_t t) {
        if (home != p.worker) moved += t;
      });
  }
  const int64_t total_work = std::accumulate(load.begin(), load.end(), int64_t{0});
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
  // Sequence s (whole) from worker `from` to `to`, every count kept.
  const auto shift = [&](int32_t s, int32_t from, int32_t to) {
    moved += away(s, to) - away(s, from);
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
  const auto apply = [&](const Exchange& e, int32_t a) {
    const std::vector<int32_t> ys = replacement_ids(e);
    shift(e.x, a, e.b);
    for (const int32_t y : ys) shift(y, e.b, a);
  };
  // Partners of a. At home: the other workers of its node. Across nodes
  // the reshuffle takes the NIC, and on the benchmark batches it cost more
  // than the balance it bought (docs/planner.md, step 7, home packing).
  // Whole: the kWholePartners least loaded workers anywhere (nothing is
  // charged for moving).
  const auto partners_of = [&](int32_t a) {
    std::vector<int32_t> p;
    if (start_layout == Start::kWhole) {
      for (auto it = by_load.begin(); it != by_load.end() && p.size() < kWholePartners; ++it)
        if (it->second != a) p.push_back(it->second);
      return p;
    }
    for (int32_t b = a / node * node; b < std::min(n, (a / node + 1) * node); ++b)
      if (b != a) p.push_back(b);
    return p;
  };

  // Balance, within the movement budget. Each exchange lowers the most
  // loaded worker's work or moves the maximum to a worker below it.
  const double limit = static_cast<double>(total_work) / n * (1 + kPackSlack);
  ReshuffleFloorConfig floor;
  floor.workers = n;
  floor.mask = mask;
  floor.token_cap = token_cap;
  // Whole: no budget (nothing is charged for moving; the floor not computed).
  const int64_t budget =
      start_layout == Start::kWhole
          ? std::numeric_limits<int64_t>::max()
          : std::min(static_cast<int64_t>(kPackMovedShare * static_cast<double>(total_tokens)),
                     static_cast<int64_t>(
                         kPackFloorMultiple *
                         static_cast<double>(ComputeReshuffleFloor(lengths, floor).tokens)));
  // The `count` densest sequences of worker a (work per token; ties by id):
  // among equal exchanges the densest is kept.
  const auto densest = [&](int32_t a, size_t count) {
    std::vector<int32_t> xs;
    for (const auto& [len, s] : owned[a]) xs.push_back(s);
    const size_t offered = std::min(xs.size(), count);
    std::partial_sort(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(offered), xs.end(),
                      [&](int32_t p, int32_t q) {
                        const __int128 l = static_cast<__int128>(work[p]) * lengths[q];
                        const __int128 r = static_cast<__int128>(work[q]) * lengths[p];
                        return l != r ? l > r : p < q;
                      });
    xs.resize(offered);
    return xs;
  };
  const size_t max_steps = kStepsPerWorker * static_cast<size_t>(n);
  for (size_t step = 0; step < max_steps; ++step) {
    const int32_t a = std::prev(by_load.end())->second;
    if (static_cast<double>(load[a]) <= limit) break;
    // The kOffered densest sequences of a (work per token; ties by id):
    // among equal exchanges the densest is kept.
    const Exchange e = search(a, densest(a, kOffered), partners_of(a), budget);
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
      FCP_CHECK(out.blocks[b].tokens() <= block_size, std::string(name) + ": block " +
                                                          std::to_string(b) +
                                                          " holds more than block_size tokens");
    for (int32_t w = 0; w < n; ++w) {
      FCP_CHECK(loads.compute[w] == load[w], std::string(name) + ": worker " + std::to_string(w) +
                                                 "'s compute differs from a recount of its pairs");
      FCP_CHECK(loads.tokens[w] <= token_cap, std::string(name) + ": worker " + std::to_string(w) +
                                                  " holds more than the token cap");
    }
  }
  return out;
}

}  // namespace

std::optional<HomePacking> PackAtHome(const std::vector<int64_t>& lengths, const Mask& mask,
                                      int32_t workers, int64_t token_cap, int64_t block_size,
                                      int32_t node_workers, bool self_check) {
  return Pack(lengths, mask, workers, token_cap, block_size, node_workers, self_check,
              Start::kHome);
}

std::optional<HomePacking> PackWhole(const std::vector<int64_t>& lengths, const Mask& mask,
                                     int32_t workers, int64_t token_cap, int64_t block_size,
                                     bool self_check) {
  return Pack(lengths, mask, workers, token_cap, block_size, 1, self_check, Start::kWhole);
}

}  // namespace fcp::detail
