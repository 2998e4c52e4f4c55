// The assignment's data structures (src/plan/assignment_parts.h): the
// ordered worker index, the slot bookkeeping and the load count, on worked
// cases and against naive references (std::set, brute-force sums) over
// random operation sequences.
#include "assignment_parts.h"

#include <gtest/gtest.h>

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
  index.Erase(1);             // absent: no effect
  index.Update(1, 0.0);       // absent: no effect
  index.Update(0, -0.0);      // -0.0 ranks as 0.0
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
        const bool want = item.small          ? small[w] >= 1
                          : item.slots == 2   ? big[w] >= 2
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
  EXPECT_EQ(loads.needers, (std::vector<int32_t>{2, 1, 1}));
}

TEST(CountLoadsTest, RandomAssignmentsMatchBruteForceSums) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    AssignmentInput in;
    in.workers = std::uniform_int_distribution<int32_t>(1, 7)(rng);
    const int32_t blocks = std::uniform_int_distribution<int32_t>(1, 15)(rng);
    std::vector<int32_t> owner(blocks);
    std::vector<int64_t> tokens(blocks);
    for (int32_t b = 0; b < blocks; ++b) {
      owner[b] = std::uniform_int_distribution<int32_t>(0, in.workers - 1)(rng);
      tokens[b] = std::uniform_int_distribution<int64_t>(1, 100)(rng);
      in.block_work.push_back(std::uniform_int_distribution<int64_t>(0, 1000)(rng));
    }
    std::bernoulli_distribution keep(0.3);
    std::vector<std::pair<int32_t, int32_t>> qk;
    for (int32_t q = 0; q < blocks; ++q)
      for (int32_t k = 0; k < blocks; ++k)
        if (keep(rng)) qk.push_back({q, k});
    const Loads loads = CountLoads(in, UsersOf(qk, blocks), tokens, owner);

    std::vector<double> compute(in.workers, 0), traffic(in.workers, 0);
    for (int32_t b = 0; b < blocks; ++b) compute[owner[b]] += static_cast<double>(in.block_work[b]);
    std::set<std::pair<int32_t, int32_t>> needs;  // (kv, worker)
    for (auto [q, k] : qk) needs.insert({k, owner[q]});
    std::vector<int32_t> needers(blocks, 0);
    for (auto [k, w] : needs) {
      ++needers[k];
      if (w == owner[k]) continue;
      traffic[w] += static_cast<double>(tokens[k]);
      traffic[owner[k]] += static_cast<double>(tokens[k]);
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    EXPECT_EQ(loads.owner, owner);
    EXPECT_EQ(loads.compute, compute);
    EXPECT_EQ(loads.traffic, traffic);
    EXPECT_EQ(loads.needers, needers);
  }
}

}  // namespace
}  // namespace fcp::detail
