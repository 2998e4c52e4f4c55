#include "assignment_context.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "fcp/error.h"

namespace fcp::detail {

void BuildGraphs(const std::vector<RequiredPair>& pairs, int32_t blocks, Csr& deps, Csr& users) {
  // Stable buckets of the pairs, which are sorted by (q, kv): both graphs' rows come out ascending.
  deps = BucketBy(static_cast<size_t>(blocks), pairs.size(),
                  [&](int32_t k) { return pairs[k].q_block; });
  for (int32_t& k : deps.items) k = pairs[k].kv_block;
  users = BuildUsers(pairs, blocks);
}

Csr BuildUsers(const std::vector<RequiredPair>& pairs, int32_t blocks) {
  Csr users = BucketBy(static_cast<size_t>(blocks), pairs.size(),
                       [&](int32_t k) { return pairs[k].kv_block; });
  for (int32_t& k : users.items) k = pairs[k].q_block;
  return users;
}

BlockLoads CountBlockLoads(const std::vector<Block>& blocks, const std::vector<RequiredPair>& pairs,
                           int32_t workers) {
  BlockLoads loads{std::vector<int64_t>(workers, 0), std::vector<int64_t>(workers, 0),
                   std::vector<double>(workers, 0), std::vector<double>(workers, 0)};
  std::vector<int32_t> owner;
  std::vector<int64_t> tokens;
  for (const Block& b : blocks) {
    owner.push_back(b.worker);
    tokens.push_back(b.tokens());
    loads.tokens[b.worker] += tokens.back();
  }
  for (const RequiredPair& p : pairs) loads.compute[owner[p.q_block]] += p.token_pairs;
  CountTransfers(BuildUsers(pairs, static_cast<int32_t>(blocks.size())), tokens, owner,
                 loads.traffic, loads.send, nullptr);
  return loads;
}

AssignmentContext::AssignmentContext(const AssignmentInput& input)
    : in(input), items(input.sharding->items), n(input.workers) {
  const int32_t blocks = static_cast<int32_t>(in.sharding->blocks.size());
  if (in.shed_only)  // Shed counts loads (users) only
    users = BuildUsers(*in.pairs, blocks);
  else
    BuildGraphs(*in.pairs, blocks, deps, users);
  item_of.assign(blocks, -1);
  block_tokens.reserve(blocks);
  for (const Block& b : in.sharding->blocks) block_tokens.push_back(b.tokens());
  item_work.assign(items.size(), 0);
  for (size_t i = 0; i < items.size(); ++i)
    for (int32_t b : items[i].blocks) {
      item_of[b] = static_cast<int32_t>(i);
      item_work[i] += static_cast<double>(in.block_work[b]);
    }
  const double total_work = std::accumulate(item_work.begin(), item_work.end(), 0.0);
  targets.compute = std::max(total_work / n, 1.0);
  if (in.shed_only) return;
  BuildItemDeps();
  // The narrowest counters that hold MostCount: their tables stay in cache.
  const int64_t most = MostCount();
  if (most <= std::numeric_limits<uint8_t>::max())
    model_.emplace(std::in_place_type<LoadModel<uint8_t>>, in, items, item_deps, users,
                   block_tokens);
  else if (most <= std::numeric_limits<uint16_t>::max())
    model_.emplace(std::in_place_type<LoadModel<uint16_t>>, in, items, item_deps, users,
                   block_tokens);
  else
    model_.emplace(std::in_place_type<LoadModel<int32_t>>, in, items, item_deps, users,
                   block_tokens);
}

// The blocks that need one K/V block, and at most every block of the items
// a worker's slots hold (every search keeps to the slots, each item taking
// one or more).
int64_t AssignmentContext::MostCount() const {
  int64_t most_users = 0;
  for (size_t kv = 0; kv + 1 < users.offset.size(); ++kv)
    most_users = std::max<int64_t>(most_users, users.offset[kv + 1] - users.offset[kv]);
  size_t item_blocks = 0;
  for (const Item& item : items) item_blocks = std::max(item_blocks, item.blocks.size());
  const int64_t slots = int64_t{in.sharding->big_slots} + in.sharding->small_slots;
  return std::min(most_users, slots * static_cast<int64_t>(item_blocks));
}

void AssignmentContext::BuildItemDeps() {
  item_deps.offset.assign(1, 0);
  item_deps.offset.reserve(items.size() + 1);
  item_deps.items.reserve(in.pairs->size());                  // at most one entry per pair
  std::vector<int32_t> slot(in.sharding->blocks.size(), -1);  // kv -> its entry in the row
  for (const Item& item : items) {
    const size_t first = item_deps.items.size();
    for (int32_t b : item.blocks)
      for (int32_t j : deps.row(b)) {
        if (slot[j] < 0) {
          slot[j] = static_cast<int32_t>(item_deps.items.size());
          item_deps.items.push_back({j, 0});
        }
        ++item_deps.items[slot[j]].mult;
      }
    for (size_t k = first; k < item_deps.items.size(); ++k) slot[item_deps.items[k].kv] = -1;
    item_deps.offset.push_back(static_cast<int32_t>(item_deps.items.size()));
  }
}

void AssignmentContext::EstimateTraffic() {
  FCP_CHECK(!in.shed_only, "assignment: a search other than Shed on a shed-only input");
  item_traffic.assign(items.size(), 0);
  item_send.assign(items.size(), 0);
  for (size_t i = 0; i < items.size(); ++i) {
    const auto outside = [&](int32_t block) { return item_of[block] != static_cast<int32_t>(i); };
    for (int32_t b : items[i].blocks) {
      int64_t users_outside = 0;
      for (int32_t q : users.row(b)) users_outside += outside(q);
      item_send[i] += static_cast<double>(std::min<int64_t>(users_outside, n - 1)) *
                      static_cast<double>(block_tokens[b]);
    }
    item_traffic[i] = item_send[i];
    // Each K/V block it needs from outside, once (sums of integers: the
    // order does not matter).
    for (const Dep& d : item_deps.row(static_cast<int32_t>(i)))
      if (outside(d.kv)) item_traffic[i] += static_cast<double>(block_tokens[d.kv]);
  }
  const double total_traffic = std::accumulate(item_traffic.begin(), item_traffic.end(), 0.0);
  targets.traffic = std::max(total_traffic / n, 1.0);
}

Assignment AssignmentContext::Result(const Loads& loads, const std::string& search) const {
  if (in.self_check) {
    const Loads recount = Count(loads.owner);
    for (int32_t w = 0; w < n; ++w)
      FCP_CHECK(recount.compute[w] == loads.compute[w] && recount.traffic[w] == loads.traffic[w] &&
                    recount.send[w] == loads.send[w],
                search + ": worker " + std::to_string(w) + "'s loads differ from a recount");
  }
  return {loads.owner, loads.compute, loads.traffic, loads.send};
}

std::vector<std::vector<int32_t>>& AssignmentContext::Owned(const Loads& loads) {
  owned_.resize(n);
  for (std::vector<int32_t>& row : owned_) row.clear();
  for (size_t i = 0; i < items.size(); ++i)
    owned_[loads.owner[items[i].blocks.front()]].push_back(static_cast<int32_t>(i));
  return owned_;
}

std::vector<HomeTokens> AssignmentContext::HomesOf(const std::vector<int32_t>& original) const {
  const std::vector<int64_t> offsets = SequenceOffsets(*in.lengths);
  std::vector<HomeTokens> homes(items.size());
  std::vector<int64_t> at(n, 0);
  std::vector<int32_t> touched;
  for (size_t i = 0; i < items.size(); ++i) {
    touched.clear();
    for (int32_t b : items[i].blocks)
      for (const Segment& s : in.sharding->blocks[b].segments)
        ForEachDataloaderRun(s, offsets, n, [&](int32_t home, int64_t tokens) {
          const int32_t w = original[home];
          if (at[w] == 0) touched.push_back(w);
          at[w] += tokens;
        });
    HomeTokens& h = homes[i];
    for (int32_t w : touched) {  // the two largest; ties: the lower id
      const auto beats = [&](int k) {
        return at[w] > h.tokens[k] ||
               (at[w] == h.tokens[k] && (h.worker[k] < 0 || w < h.worker[k]));
      };
      if (beats(0)) {
        h.worker[1] = h.worker[0], h.tokens[1] = h.tokens[0];
        h.worker[0] = w, h.tokens[0] = at[w];
      } else if (beats(1)) {
        h.worker[1] = w, h.tokens[1] = at[w];
      }
      at[w] = 0;
    }
  }
  return homes;
}

}  // namespace fcp::detail
