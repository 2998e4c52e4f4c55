// The assignment's data structures (src/plan/assignment_parts.h): the
// ordered worker index, the slot bookkeeping and the load count, on worked
// cases and against naive references (std::set, brute-force sums) over
// random operation sequences.
#include "assignment_parts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace fcp::detail {
namespace {

// The index's walk, as (id, key), the first `limit` entries.
template <bool kDescending>
std::vector<std::pair<int32_t, double>> Walk(const WorkerIndex<kDescending>& index,
                                             size_t limit = SIZE_MAX) {
  std::vector<std::pair<int32_t, double>> seen;
  index.Visit([&](int32_t id, double key) {
    seen.push_back({id, key});
    return seen.size() < limit;
  });
  return seen;
}

using Order = std::vector<std::pair<int32_t, double>>;

// An index of keys.size() workers, worker w inserted with keys[w], in id order.
template <bool kDescending>
WorkerIndex<kDescending> Filled(const std::vector<double>& keys) {
  WorkerIndex<kDescending> index(static_cast<int32_t>(keys.size()));
  for (size_t w = 0; w < keys.size(); ++w) index.Insert(static_cast<int32_t>(w), keys[w]);
  return index;
}

TEST(WorkerIndexTest, AscendingOrdersByKeyThenId) {
  AscendingIndex index = Filled<false>({3.0, 1.0, 3.0, 0.5, 1.0});
  EXPECT_EQ(Walk(index), (Order{{3, 0.5}, {1, 1.0}, {4, 1.0}, {0, 3.0}, {2, 3.0}}));
  EXPECT_EQ(index.first_id(), 3);
  EXPECT_EQ(index.first_key(), 0.5);
  EXPECT_EQ(Walk(index, 2), (Order{{3, 0.5}, {1, 1.0}}));  // the walk stops when told
  index.Update(3, 2.0);
  index.Erase(1);
  index.Erase(1);         // absent: no effect
  index.Update(1, 0.0);   // absent: no effect
  index.Update(0, -0.0);  // -0.0 ranks as 0.0
  EXPECT_EQ(Walk(index), (Order{{0, 0.0}, {4, 1.0}, {3, 2.0}, {2, 3.0}}));
}

TEST(WorkerIndexTest, DescendingOrdersByKeyThenIdBothDescending) {
  DescendingIndex index = Filled<true>({2.0, 5.0, 2.0, 0.0});
  EXPECT_EQ(Walk(index), (Order{{1, 5.0}, {2, 2.0}, {0, 2.0}, {3, 0.0}}));
  index.Update(3, 9.0);
  index.Erase(1);
  EXPECT_EQ(index.first_id(), 3);
  EXPECT_EQ(index.first_key(), 9.0);
  EXPECT_EQ(Walk(index), (Order{{3, 9.0}, {2, 2.0}, {0, 2.0}}));
  for (int32_t w = 0; w < 4; ++w) index.Erase(w);
  EXPECT_TRUE(Walk(index).empty());
}

// Random inserts, erases and updates (keys from a small set, so ties are
// common) against a std::set of (key, id), walks compared in full and cut short.
template <bool kDescending>
void CheckAgainstSet(uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t workers = std::uniform_int_distribution<int32_t>(1, 40)(rng);
  WorkerIndex<kDescending> index(workers);
  std::set<std::pair<double, int32_t>> ref;
  std::vector<double> key_of(workers, -1);  // -1: absent
  auto key = [&] { return std::uniform_int_distribution<int>(0, 6)(rng) * 0.5; };
  for (int op = 0; op < 600; ++op) {
    const int32_t w = std::uniform_int_distribution<int32_t>(0, workers - 1)(rng);
    const int kind = std::uniform_int_distribution<int>(0, 2)(rng);
    if (kind == 0 && key_of[w] < 0) {
      key_of[w] = key();
      index.Insert(w, key_of[w]);
      ref.insert({key_of[w], w});
    } else if (kind == 1) {
      index.Erase(w);
      if (key_of[w] >= 0) ref.erase({key_of[w], w});
      key_of[w] = -1;
    } else {
      const double k = key();
      index.Update(w, k);
      if (key_of[w] >= 0) {
        ref.erase({key_of[w], w});
        key_of[w] = k;
        ref.insert({k, w});
      }
    }
    Order want;
    if (kDescending)
      for (auto it = ref.rbegin(); it != ref.rend(); ++it) want.push_back({it->second, it->first});
    else
      for (const auto& [k, id] : ref) want.push_back({id, k});
    ASSERT_EQ(Walk(index), want) << "seed " << seed << " op " << op;
    const size_t limit = std::uniform_int_distribution<size_t>(1, 5)(rng);
    want.resize(std::min(limit, want.size()));
    ASSERT_EQ(Walk(index, limit), want) << "seed " << seed << " op " << op;
    if (!ref.empty()) {
      ASSERT_EQ(index.first_id(), want[0].first);
      ASSERT_EQ(index.first_key(), want[0].second);
    }
  }
}

TEST(WorkerIndexTest, RandomOperationsMatchASortedSet) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    CheckAgainstSet<false>(seed);
    CheckAgainstSet<true>(seed);
  }
}

Item OneSlot() { return Item{{0}, 1, false}; }
Item TwoSlot() { return Item{{0}, 2, false}; }
Item SmallItem() { return Item{{0}, 1, true}; }

// Two workers of two big slots and one small: one two-slot item and two
// one-slot items to place.
TEST(SlotsTest, OneSlotItemsLeaveAPairForTheTwoSlotItem) {
  Sharding sharding;
  sharding.big_slots = 2;
  sharding.small_slots = 1;
  sharding.items = {TwoSlot(), OneSlot(), OneSlot(), SmallItem()};
  Slots slots(sharding, 2);
  EXPECT_TRUE(slots.Fits(OneSlot(), 0));  // two free pairs, one needed
  slots.Take(OneSlot(), 0);
  // Worker 1's last pair is the two-slot item's: no one-slot item there,
  // but worker 0's odd free slot takes one.
  EXPECT_FALSE(slots.Fits(OneSlot(), 1));
  EXPECT_TRUE(slots.Fits(OneSlot(), 0));
  EXPECT_FALSE(slots.Fits(TwoSlot(), 0));
  EXPECT_TRUE(slots.Fits(TwoSlot(), 1));
  slots.Take(TwoSlot(), 1);
  EXPECT_FALSE(slots.Open(1, false));
  EXPECT_TRUE(slots.Open(1, true));
  EXPECT_TRUE(slots.Fits(OneSlot(), 0));
  slots.Take(OneSlot(), 0);
  EXPECT_FALSE(slots.Open(0, false));
  EXPECT_FALSE(slots.Fits(OneSlot(), 0));
  slots.Take(SmallItem(), 0);
  EXPECT_FALSE(slots.Fits(SmallItem(), 0));
  EXPECT_TRUE(slots.Fits(SmallItem(), 1));
}

// Random placements against a reference that recounts the free pairs.
TEST(SlotsTest, RandomPlacementsMatchARecount) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t workers = std::uniform_int_distribution<int32_t>(1, 6)(rng);
    Sharding sharding;
    sharding.big_slots = std::uniform_int_distribution<int32_t>(1, 5)(rng);
    sharding.small_slots = std::uniform_int_distribution<int32_t>(0, 1)(rng);
    const int n = std::uniform_int_distribution<int>(1, 20)(rng);
    for (int i = 0; i < n; ++i) {
      const int kind = std::uniform_int_distribution<int>(0, 2)(rng);
      sharding.items.push_back(kind == 0 ? OneSlot() : kind == 1 ? TwoSlot() : SmallItem());
    }
    Slots slots(sharding, workers);
    std::vector<int32_t> big(workers, sharding.big_slots), small(workers, sharding.small_slots);
    int64_t needed = 0;
    for (const Item& item : sharding.items) needed += !item.small && item.slots == 2;
    for (const Item& item : sharding.items) {
      int64_t pairs_free = 0;
      for (int32_t b : big) pairs_free += b / 2;
      std::vector<int32_t> fits;
      for (int32_t w = 0; w < workers; ++w) {
        const bool want = item.small        ? small[w] >= 1
                          : item.slots == 2 ? big[w] >= 2
                          : big[w] % 2 == 1 ? true
                                            : big[w] >= 2 && pairs_free - 1 >= needed;
        ASSERT_EQ(slots.Fits(item, w), want) << "trial " << trial << " worker " << w;
        ASSERT_EQ(slots.Open(w, false), big[w] > 0);
        ASSERT_EQ(slots.Open(w, true), small[w] > 0);
        if (want) fits.push_back(w);
      }
      if (fits.empty()) continue;  // nowhere: skipped, as if placed elsewhere
      const int32_t w = fits[std::uniform_int_distribution<size_t>(0, fits.size() - 1)(rng)];
      slots.Take(item, w);
      if (item.small) {
        --small[w];
      } else {
        big[w] -= item.slots;
        needed -= item.slots == 2;
      }
    }
  }
}

// users: row kv lists the query blocks needing kv, ascending.
Csr UsersOf(const std::vector<std::pair<int32_t, int32_t>>& qk, int32_t blocks) {
  Csr users;
  users.offset.assign(blocks + 1, 0);
  for (int32_t kv = 0; kv < blocks; ++kv) {
    for (auto [q, k] : qk)
      if (k == kv) users.items.push_back(q);
    std::sort(users.items.begin() + users.offset[kv], users.items.end());
    users.offset[kv + 1] = static_cast<int32_t>(users.items.size());
  }
  return users;
}

// Random tokens (1..50) and works (0..500, into in.block_work) of `blocks`
// blocks, and random (q, kv) pairs, each with probability `density`.
std::vector<std::pair<int32_t, int32_t>> RandomBlocks(std::mt19937& rng, int32_t blocks,
                                                      double density, AssignmentInput& in,
                                                      std::vector<int64_t>& tokens) {
  tokens.resize(blocks);
  for (int32_t b = 0; b < blocks; ++b) {
    tokens[b] = std::uniform_int_distribution<int64_t>(1, 50)(rng);
    in.block_work.push_back(std::uniform_int_distribution<int64_t>(0, 500)(rng));
  }
  std::bernoulli_distribution keep(density);
  std::vector<std::pair<int32_t, int32_t>> qk;
  for (int32_t q = 0; q < blocks; ++q)
    for (int32_t k = 0; k < blocks; ++k)
      if (keep(rng)) qk.push_back({q, k});
  return qk;
}

// Three blocks on workers 0, 1, 1 (tokens 4, 2, 3, work 10, 20, 30), causal
// pairs. Block 0 goes to worker 1 once (blocks 1 and 2 both need it): worker
// 0 sends 4, worker 1 receives 4. Blocks 1 and 2 are needed only on worker 1.
TEST(CountLoadsTest, WorkedCausalThreeBlocks) {
  AssignmentInput in;
  in.workers = 2;
  in.block_work = {10, 20, 30};
  const Csr users = UsersOf({{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 2}}, 3);
  const Loads loads = CountLoads(in, users, {4, 2, 3}, {0, 1, 1});
  EXPECT_EQ(loads.owner, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(loads.compute, (std::vector<double>{10, 50}));
  EXPECT_EQ(loads.traffic, (std::vector<double>{4, 4}));
  EXPECT_EQ(loads.send, (std::vector<double>{4, 0}));
  EXPECT_EQ(loads.needers, (std::vector<int32_t>{2, 1, 1}));
}

TEST(CountLoadsTest, RandomAssignmentsMatchBruteForceSums) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    AssignmentInput in;
    in.workers = std::uniform_int_distribution<int32_t>(1, 7)(rng);
    const int32_t blocks = std::uniform_int_distribution<int32_t>(1, 15)(rng);
    std::vector<int32_t> owner(blocks);
    for (int32_t& o : owner) o = std::uniform_int_distribution<int32_t>(0, in.workers - 1)(rng);
    std::vector<int64_t> tokens;
    const std::vector<std::pair<int32_t, int32_t>> qk = RandomBlocks(rng, blocks, 0.3, in, tokens);
    const Loads loads = CountLoads(in, UsersOf(qk, blocks), tokens, owner);

    std::vector<double> compute(in.workers, 0), traffic(in.workers, 0), send(in.workers, 0);
    for (int32_t b = 0; b < blocks; ++b) compute[owner[b]] += static_cast<double>(in.block_work[b]);
    std::set<std::pair<int32_t, int32_t>> needs;  // (kv, worker)
    for (auto [q, k] : qk) needs.insert({k, owner[q]});
    std::vector<int32_t> needers(blocks, 0);
    for (auto [k, w] : needs) {
      ++needers[k];
      if (w == owner[k]) continue;
      traffic[w] += static_cast<double>(tokens[k]);
      traffic[owner[k]] += static_cast<double>(tokens[k]);
      send[owner[k]] += static_cast<double>(tokens[k]);
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    EXPECT_EQ(loads.owner, owner);
    EXPECT_EQ(loads.compute, compute);
    EXPECT_EQ(loads.traffic, traffic);
    EXPECT_EQ(loads.send, send);
    EXPECT_EQ(loads.needers, needers);
  }
}

// Random exchanges through the load model (one to three items at a time,
// between random workers) against CountLoads' recount of the new owners:
// the evaluated traffic before Apply, and all loads after it.
template <typename Counter>
void CheckLoadModel(uint32_t seed) {
  std::mt19937 rng(seed);
  AssignmentInput in;
  in.workers = std::uniform_int_distribution<int32_t>(2, 6)(rng);
  const int32_t n_items = std::uniform_int_distribution<int32_t>(2, 14)(rng);
  std::vector<Item> items;
  std::vector<int32_t> item_owner(n_items), owner;
  std::vector<std::vector<int32_t>> owned(in.workers);
  for (int32_t i = 0; i < n_items; ++i) {
    Item item;
    const int32_t size = std::uniform_int_distribution<int32_t>(1, 2)(rng);
    item_owner[i] = std::uniform_int_distribution<int32_t>(0, in.workers - 1)(rng);
    for (int32_t k = 0; k < size; ++k) {
      item.blocks.push_back(static_cast<int32_t>(owner.size()));
      owner.push_back(item_owner[i]);
    }
    owned[item_owner[i]].push_back(i);
    items.push_back(item);
  }
  const auto blocks = static_cast<int32_t>(owner.size());
  std::vector<int64_t> tokens;
  const std::vector<std::pair<int32_t, int32_t>> qk = RandomBlocks(rng, blocks, 0.35, in, tokens);
  std::bernoulli_distribution keep(0.35);  // whether an exchange takes a second item
  const Csr users = UsersOf(qk, blocks);
  Rows<Dep> item_deps;  // per item, (kv, blocks of the item needing kv), kv ascending
  item_deps.offset.assign(1, 0);
  for (const Item& item : items) {
    std::map<int32_t, int32_t> mult;
    for (auto [q, k] : qk)
      if (std::find(item.blocks.begin(), item.blocks.end(), q) != item.blocks.end()) ++mult[k];
    for (auto [kv, m] : mult) item_deps.items.push_back({kv, m});
    item_deps.offset.push_back(static_cast<int32_t>(item_deps.items.size()));
  }
  auto work = [&](int32_t item) {
    double w = 0;
    for (int32_t b : items[item].blocks) w += static_cast<double>(in.block_work[b]);
    return w;
  };

  LoadModel<Counter> model(in, items, item_deps, users, tokens);
  model.Start(CountLoads(in, users, tokens, owner));
  for (int step = 0; step < 200; ++step) {
    const int32_t a = std::uniform_int_distribution<int32_t>(0, in.workers - 1)(rng);
    const int32_t b =
        (a + std::uniform_int_distribution<int32_t>(1, in.workers - 1)(rng)) % in.workers;
    if (owned[a].empty() || owned[b].empty()) continue;
    auto pick = [&](const std::vector<int32_t>& from) {
      return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    };
    const int32_t x = pick(owned[a]), y = pick(owned[b]);
    int32_t z = owned[b].size() > 1 && keep(rng) ? pick(owned[b]) : -1;
    if (z == y) z = -1;
    SCOPED_TRACE(testing::Message() << "seed " << seed << " step " << step);
    // The recount: owners after giving x to b and y (and z) to a.
    std::vector<int32_t> after = model.loads().owner;
    for (int32_t blk : items[x].blocks) after[blk] = b;
    for (int32_t t : {y, z})
      if (t >= 0)
        for (int32_t blk : items[t].blocks) after[blk] = a;
    const Loads want = CountLoads(in, users, tokens, after);

    model.BeginStep();
    const int hs = model.Table(a, owned[a]), ls = model.Table(b, owned[b]);
    model.Evaluate(x, a, hs, {y, z}, b, ls);
    for (int32_t w = 0; w < in.workers; ++w) {
      ASSERT_EQ(model.in_changed(w) ? model.traffic_after(w) : model.traffic(w), want.traffic[w])
          << "worker " << w;
      ASSERT_EQ(model.in_changed(w) ? model.send_after(w) : model.send(w), want.send[w])
          << "worker " << w;
    }
    const double ca = model.compute(a) - work(x) + work(y) + (z >= 0 ? work(z) : 0);
    const double cb = model.compute(b) + work(x) - work(y) - (z >= 0 ? work(z) : 0);
    model.Apply(ca, cb);
    ASSERT_EQ(model.loads().owner, want.owner);
    ASSERT_EQ(model.loads().compute, want.compute);
    ASSERT_EQ(model.loads().traffic, want.traffic);
    ASSERT_EQ(model.loads().send, want.send);
    ASSERT_EQ(model.loads().needers, want.needers);
    std::erase(owned[a], x);
    owned[b].push_back(x);
    for (int32_t t : {y, z})
      if (t >= 0) {
        std::erase(owned[b], t);
        owned[a].push_back(t);
      }
  }
}

TEST(LoadModelTest, RandomExchangesMatchARecount) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CheckLoadModel<int32_t>(seed);
    CheckLoadModel<uint8_t>(seed);
  }
}

}  // namespace
}  // namespace fcp::detail
