#include "short_rehoming.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "fcp/error.h"
#include "planner_constants.h"

namespace fcp::detail {
void AppendSequenceBlocks(int32_t worker, const std::vector<int32_t>& away,
                          const std::vector<int32_t>& at_home, const std::vector<int64_t>& lengths,
                          int64_t block_size, std::vector<Block>& out,
                          const std::vector<int32_t>* away_source) {
  for (const std::vector<int32_t>* group : {&away, &at_home}) {
    int64_t room = 0;
    int32_t source = -1;
    for (const int32_t s : *group) {
      const bool new_source =
          group == &away && away_source != nullptr && (*away_source)[s] != source;
      if (lengths[s] > room || new_source) {
        out.push_back(Block{worker, {}});
        room = block_size;
        if (group == &away && away_source != nullptr) source = (*away_source)[s];
      }
      out.back().segments.push_back({s, 0, lengths[s]});
      room -= lengths[s];
    }
  }
}

bool HasShortSequences(const std::vector<int64_t>& lengths, int64_t block_size) {
  return std::any_of(lengths.begin(), lengths.end(),
                     [&](int64_t length) { return length <= block_size; });
}

std::optional<std::vector<Block>> RehomeShortSequences(const std::vector<int64_t>& lengths,
                                                       const Mask& mask,
                                                       const std::vector<Block>& blocks,
                                                       int32_t workers, int64_t block_size,
                                                       int32_t node_workers) {
  const int32_t n = workers;
  const int32_t node = std::max<int32_t>(node_workers, 1);
  const int32_t sequences = static_cast<int32_t>(lengths.size());
  const auto fail = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "short-sequence rehoming: " + what);
  };
  if (workers < 1 || block_size < 1)
    fail("needs workers >= 1 and block_size >= 1; got " + std::to_string(workers) +
         " workers, block_size " + std::to_string(block_size));
  for (int32_t s = 0; s < sequences; ++s)
    if (lengths[s] < 1)
      fail("sequence " + std::to_string(s) + " has length " + std::to_string(lengths[s]));
  const std::vector<int64_t> offsets = SequenceOffsets(lengths);
  const auto is_short = [&](int32_t s) { return lengths[s] <= block_size; };

  // Each worker's room (its short tokens) and compute without them; the
  // plan's largest compute, which the re-deal keeps.
  std::vector<int64_t> room(n, 0), compute(n, 0), before(n, 0);
  int64_t largest = 0;
  {
    std::vector<int64_t> covered(sequences, 0);
    for (const Block& b : blocks) {
      if (b.worker < 0 || b.worker >= n)
        fail("block worker " + std::to_string(b.worker) + " outside [0, " + std::to_string(n) +
             ")");
      for (const Segment& g : b.segments) {
        if (g.seq < 0 || g.seq >= sequences || g.start < 0 || g.length < 1 ||
            g.start + g.length > lengths[g.seq])
          fail("segment [" + std::to_string(g.seq) + ", " + std::to_string(g.start) + ", " +
               std::to_string(g.length) + "] is outside its sequence");
        covered[g.seq] += g.length;
        const int64_t work = AllowedPairs(mask, {g.start, g.start + g.length}, {0, lengths[g.seq]});
        before[b.worker] += work;
        if (is_short(g.seq))
          room[b.worker] += g.length;
        else
          compute[b.worker] += work;
      }
    }
    largest = *std::max_element(before.begin(), before.end());
    for (int32_t s = 0; s < sequences; ++s)
      if (covered[s] != lengths[s])
        fail("the blocks hold " + std::to_string(covered[s]) + " tokens of sequence " +
             std::to_string(s) + ", which has " + std::to_string(lengths[s]));
  }

  if (!HasShortSequences(lengths, block_size)) return std::nullopt;

  // 1. At home, in sequence order.
  std::vector<int64_t> work(sequences, 0);
  std::vector<int32_t> home(sequences, -1), owner(sequences, -1);
  std::vector<int32_t> shorts;
  for (int32_t s = 0; s < sequences; ++s) {
    if (!is_short(s)) continue;
    shorts.push_back(s);
    work[s] = AllowedPairs(mask, {0, lengths[s]}, {0, lengths[s]});
    int64_t most = -1;
    ForEachDataloaderRun(Segment{s, 0, lengths[s]}, offsets, n, [&](int32_t w, int64_t t) {
      if (t > most) {
        most = t;
        home[s] = w;
      }
    });
  }
  for (const int32_t s : shorts) {
    const int32_t h = home[s];
    if (lengths[s] <= room[h] && compute[h] + work[s] <= before[h]) {
      owner[s] = h;
      room[h] -= lengths[s];
      compute[h] += work[s];
    }
  }

  // 2. The rest, longest first (ties by id), whole where they fit, else
  // cut. (shorts in that order too, for step 3.)
  {
    // Sorted as (-length, id) pairs: the same order as comparing through
    // `lengths`, without a load per comparison.
    std::vector<std::pair<int64_t, int32_t>> keyed;
    keyed.reserve(shorts.size());
    for (const int32_t s : shorts) keyed.push_back({-lengths[s], s});
    std::sort(keyed.begin(), keyed.end());
    for (size_t k = 0; k < keyed.size(); ++k) shorts[k] = keyed[k].second;
  }
  std::vector<int32_t> rest;
  for (const int32_t s : shorts)
    if (owner[s] < 0) rest.push_back(s);
  struct Piece {
    int32_t worker;
    Segment segment;
  };
  std::vector<Piece> pieces;
  // The pick for s among the workers offered to it, in any order: one with
  // room for s and, within the largest compute (`capped`), the most
  // headroom left per token of room left after s (the densest sequences
  // come first and go where the headroom is, so the last rooms still fit
  // the lightest); or, not capped, the least computing one with room.
  // Ties: the lowest id. Worker -1: none.
  struct Pick {
    int32_t worker = -1;
    __int128 headroom = 0, left = 1;  // capped: the pick's ratio headroom / left
  };
  const auto offer = [&](Pick& pick, int32_t s, int32_t w, bool capped) {
    if (lengths[s] > room[w]) return;
    if (!capped) {
      const int32_t p = pick.worker;
      if (p < 0 || compute[w] < compute[p] || (compute[w] == compute[p] && w < p)) pick.worker = w;
      return;
    }
    const __int128 headroom = static_cast<__int128>(largest) - compute[w] - work[s];
    if (headroom < 0) return;
    const __int128 left = std::max<int64_t>(room[w] - lengths[s], 1);
    const __int128 mine = headroom * pick.left, theirs = pick.headroom * left;
    if (pick.worker < 0 || mine > theirs || (mine == theirs && w < pick.worker))
      pick = {w, headroom, left};
  };
  // Past its own node, a sequence looks at every worker with room for it
  // (`by_room`: the workers with room, by room then id), the tightest
  // rooms first: none with room r can beat a capped pick once even the
  // most headroom any worker has (`most_headroom`: compute only rises in
  // this step) over max(r - length, 1) is below the pick's ratio. (At N = 4096
  // an id-order scan of every worker with room offered about 220 workers
  // per sequence, and taking the first node after the home's with a fit
  // instead was cheaper and lost N = 64's gain: the measurement log
  // (docs/planner.md).)
  std::set<std::pair<int64_t, int32_t>> by_room;
  for (int32_t w = 0; w < n; ++w)
    if (room[w] > 0) by_room.insert({room[w], w});
  const int64_t least_compute = *std::min_element(compute.begin(), compute.end());
  const auto take_room = [&](int32_t w, int64_t tokens) {
    by_room.erase({room[w], w});
    room[w] -= tokens;
    if (room[w] > 0) by_room.insert({room[w], w});
  };
  for (const int32_t s : rest) {
    const int32_t own = home[s] / node;
    Pick pick;
    for (int32_t v = own * node; v < std::min(n, (own + 1) * node); ++v) offer(pick, s, v, true);
    const auto fitting = by_room.lower_bound({lengths[s], 0});
    const __int128 most_headroom = static_cast<__int128>(largest) - least_compute - work[s];
    if (pick.worker < 0 && most_headroom >= 0)
      for (auto it = fitting; it != by_room.end(); ++it) {
        const __int128 left = std::max<int64_t>(it->first - lengths[s], 1);
        if (pick.worker >= 0 && most_headroom * pick.left < pick.headroom * left) break;
        offer(pick, s, it->second, true);
      }
    // None within the largest: the least computing with room of all.
    if (pick.worker < 0)
      for (auto it = fitting; it != by_room.end(); ++it) offer(pick, s, it->second, false);
    const int32_t w = pick.worker;
    if (w >= 0) {
      owner[s] = w;
      take_room(w, lengths[s]);
      compute[w] += work[s];
      continue;
    }
    // Cut in token order across the workers with the most room (ties: the
    // lowest id); the rooms sum to the tokens left, so it always ends.
    for (int64_t start = 0; start < lengths[s];) {
      const int32_t most =
          static_cast<int32_t>(std::max_element(room.begin(), room.end()) - room.begin());
      const int64_t take = std::min(room[most], lengths[s] - start);
      FCP_CHECK(take > 0,
                "short-sequence rehoming: no room left for sequence " + std::to_string(s));
      pieces.push_back({most, {s, start, take}});
      take_room(most, take);
      compute[most] += AllowedPairs(mask, {start, start + take}, {0, lengths[s]});
      start += take;
    }
  }

  // 3. Repair: while a worker is above the largest compute, it gives one
  // of its longest whole short sequences x for two whole short sequences
  // y, z of a less loaded worker v with len(y) + len(z) = len(x): the
  // tokens stay exact, and y and z weigh less than x (a row attends more
  // keys the later it is), so work moves to v, which must stay within the
  // largest. Partners by least compute (ties: lowest id).
  std::vector<std::vector<int32_t>> held(n);  // whole short sequences, longest first
  for (const int32_t s : shorts)
    if (owner[s] >= 0) held[owner[s]].push_back(s);
  const auto insert = [&](std::vector<int32_t>& list, int32_t s) {
    list.insert(std::upper_bound(list.begin(), list.end(), s,
                                 [&](int32_t p, int32_t q) {
                                   return lengths[p] != lengths[q] ? lengths[p] > lengths[q]
                                                                   : p < q;
                                 }),
                s);
  };
  // One exchange for a, if any: x = held[a][i], y = held[v][k], z = held[v][m].
  const auto exchange = [&](int32_t a) {
    std::vector<int32_t> partners;
    for (int32_t v = 0; v < n; ++v)
      if (v != a && compute[v] < largest) partners.push_back(v);
    const size_t tried = std::min(partners.size(), kRepairPartners);
    std::partial_sort(partners.begin(), partners.begin() + static_cast<std::ptrdiff_t>(tried),
                      partners.end(), [&](int32_t p, int32_t q) {
                        return compute[p] != compute[q] ? compute[p] < compute[q] : p < q;
                      });
    for (size_t i = 0; i < std::min(held[a].size(), kRepairOffers); ++i) {
      const int32_t x = held[a][i];
      for (size_t j = 0; j < tried; ++j) {
        const int32_t v = partners[j];
        const std::vector<int32_t>& list = held[v];
        // held[v] is longest first: the first index whose length is at most
        // `len` (a binary search; no table to build per partner).
        const auto first_at_most = [&](int64_t len) {
          return static_cast<size_t>(
              std::partition_point(list.begin(), list.end(),
                                   [&](int32_t s) { return lengths[s] > len; }) -
              list.begin());
        };
        // y shorter than x: from the first such on. want = len(x) - len(y)
        // only grows with k, so z's index, first_at_most(want), only falls:
        // `at_most` follows it down from the end (O(list) over the loop).
        size_t at_most = list.size();
        for (size_t k = first_at_most(lengths[x] - 1); k < list.size(); ++k) {
          const int32_t y = list[k];
          const int64_t want = lengths[x] - lengths[y];
          while (at_most > 0 && lengths[list[at_most - 1]] <= want) --at_most;
          size_t m = at_most;
          if (m == list.size() || lengths[list[m]] != want) continue;
          if (m == k) {  // z must differ from y: the next of that length
            m = k + 1;
            if (m >= list.size() || lengths[list[m]] != lengths[y]) continue;
          }
          const int32_t z = list[m];
          const int64_t gain = work[x] - work[y] - work[z];
          if (gain <= 0 || compute[v] + gain > largest) continue;
          compute[a] -= gain;
          compute[v] += gain;
          owner[x] = v;
          owner[y] = owner[z] = a;
          held[a].erase(held[a].begin() + static_cast<std::ptrdiff_t>(i));
          held[v].erase(held[v].begin() + static_cast<std::ptrdiff_t>(std::max(k, m)));
          held[v].erase(held[v].begin() + static_cast<std::ptrdiff_t>(std::min(k, m)));
          insert(held[v], x);
          insert(held[a], y);
          insert(held[a], z);
          return true;
        }
      }
    }
    return false;
  };
  for (int32_t a = 0; a < n; ++a)
    for (size_t e = 0; e < kRepairExchanges && compute[a] > largest; ++e)
      if (!exchange(a)) break;

  // Blocks: per worker away, then at home; the cut pieces; the rest.
  std::vector<std::vector<int32_t>> away(n), at_home(n);
  for (int32_t s = 0; s < sequences; ++s)
    if (owner[s] >= 0) (owner[s] == home[s] ? at_home : away)[owner[s]].push_back(s);
  std::vector<Block> out;
  for (const Block& b : blocks) {
    Block kept{b.worker, {}};
    for (const Segment& g : b.segments)
      if (!is_short(g.seq)) kept.segments.push_back(g);
    if (!kept.segments.empty()) out.push_back(std::move(kept));
  }
  for (int32_t w = 0; w < n; ++w) {
    std::stable_sort(away[w].begin(), away[w].end(),
                     [&](int32_t a, int32_t b) { return home[a] < home[b]; });
    AppendSequenceBlocks(w, away[w], at_home[w], lengths, block_size, out, &home);
  }
  for (const Piece& p : pieces) out.push_back(Block{p.worker, {p.segment}});
  return out;
}

}  // namespace fcp::detail
