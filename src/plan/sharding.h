// Sharding: cutting a batch into blocks and grouping blocks into the items
// the assignment places (FCP step 1). Private to src/plan.
//
// 1. Every sequence is cut at multiples of the block size b; the remainders
//    (shorter than b) are packed, in dataloader order, into shared blocks of
//    exactly b tokens (a remainder split across two packed blocks only adds a
//    dependency).
// 2. Slots make the token cap exact: with cap C = q*b + r (0 <= r < b) a
//    worker offers q big slots of b tokens and, if r > 0, one small slot of r
//    tokens. If there are more blocks than big slots, the cheapest blocks are
//    re-cut into small blocks of at most r tokens, at most one per worker.
//    Any assignment that respects slots respects the cap, whether or not b
//    divides T/N.
// 3. Causal masks: the full blocks k and m-1-k of a sequence with m of them
//    form one two-slot item (zig-zag). Work grows with a block's position and
//    its traffic shifts from sending (early blocks) to receiving (late ones),
//    so every pair of a sequence carries the same compute and the same
//    traffic: balancing items then balances both.
// 4. Items heavier than heavy_fraction of a worker's mean work are split into
//    p = 2, 4, ... sub-items (zig-zag again inside a pair), each completed to
//    a full slot with a filler block cut from dissolved light items, so no
//    item outweighs a worker's share; the slot count is unchanged. The
//    pieces are equal; piece_sizing.h may re-size them after assignment.
// O(S + K log K) for S sequences and K blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/mask.h"
#include "fcp/plan.h"
#include "planner_constants.h"

namespace fcp::detail {

struct Item {
  std::vector<int32_t> blocks;  // placed together on one worker
  int32_t slots = 1;            // big slots it takes (1 or 2); small items take the small slot
  bool small = false;
};

struct Sharding {
  std::vector<Block> blocks;  // worker unset; sorted by first token (global order)
  std::vector<Item> items;
  int32_t big_slots = 0;    // per worker
  int32_t small_slots = 0;  // per worker, 0 or 1
  int64_t block_size = 0;   // effective: min(block_size, token_cap)
};

// Steps 1-3 and the work order of their items: what does not depend on the
// heavy-block split, so candidates that differ only in it share it.
struct ProtoItem {
  std::vector<Block> blocks;
  int32_t slots = 1;
  bool small = false;
  int64_t work = 0;
};
struct ShardBase {
  std::vector<ProtoItem> items;
  std::vector<size_t> by_work;  // item indices by decreasing work (stable)
  std::vector<size_t> light;    // full one-slot items in by_work order: filler candidates
  double total_work = 0;
  int32_t workers = 1;
  int32_t big_slots = 0, small_slots = 0;
  int64_t block_size = 0;
};
// zigzag = false: no step 3, every full block its own item (the home
// layout keeps a sequence's blocks on their dataloader workers).
ShardBase ShardSteps123(const std::vector<int64_t>& lengths, int64_t block_size, int64_t token_cap,
                        int32_t workers, const Mask& mask, bool zigzag = true);
// Step 4 (heavy_fraction, max_split: see PlannerConfig; 0 / < 2 disables
// splitting): which items of `base` are split (removed[i], also their
// fillers) and the sub-items that replace them. Each item's work is exact,
// so the split alone says what the items weigh, before any block is built.
//
// Split item `item` becomes p = piece_tokens.size() one-slot sub-items:
// sub-item x holds piece x of the item's first block and, in a pair, piece
// p-1-x of its second (zig-zag inside the pair), completed to b tokens from
// the fillers, in order. Each block is cut in token order: the first into
// piece_tokens, the second into second_tokens. SplitHeavy cuts both alike
// (equal pieces, the last one shorter when p does not divide b, so a pair's
// sub-items fill their slots exactly); piece sizing mirrors them
// (second_tokens[p-1-x] = piece_tokens[x]), which makes a sub-item's work
// under a causal mask exactly linear in piece_tokens[x].
struct SplitItem {
  size_t item = 0;                     // in base.items
  std::vector<size_t> fillers;         // base items dissolved into the sub-items, ascending
  std::vector<int64_t> piece_tokens;   // the first block's pieces; sums to b
  std::vector<int64_t> second_tokens;  // a pair's second block's pieces; sums to b
};
struct HeavySplit {
  std::vector<uint8_t> removed;   // per item of base
  std::vector<SplitItem> splits;  // equal pieces as made by SplitHeavy
  // The sub-items, p per split, in the order of splits: their slots and
  // work, no blocks (FinishSharding cuts those; most candidates of a batch
  // are weighed, and pruned, without them).
  std::vector<ProtoItem> added;
};
// How many pieces a heavy item may be cut into: the fewest power of two, or
// the fewest count, that brings a piece under the heavy bound, at most the
// split limit.
//
// Fillers are the lightest one-slot items of the batch, light enough (a
// filler weighs at most the item / p). With `filler_group` (one group per
// item of base, -1 for none; the shed layout's dataloader nodes), a split
// item's fillers are those of its own group first, lightest first, then
// the batch's. Items are split in decreasing work until one finds too few
// fillers, so the groups can change where that happens (the fillers left
// for later items differ), not how an item is cut.
enum class PieceCounts { kPowersOfTwo, kAny };
HeavySplit SplitHeavy(const ShardBase& base, const std::vector<int64_t>& lengths, const Mask& mask,
                      double heavy_fraction, int32_t max_split,
                      PieceCounts counts = PieceCounts::kPowersOfTwo,
                      const std::vector<int32_t>* filler_group = nullptr);
// Recomputes split.added from split.splits, after their piece sizes changed.
void BuildSubItems(const ShardBase& base, HeavySplit& split, const std::vector<int64_t>& lengths,
                   const Mask& mask);
// The final blocks and items: base's kept items, then the sub-items.
Sharding FinishSharding(const ShardBase& base, const HeavySplit& split,
                        const std::vector<int64_t>& lengths);

// Attention work of `block` as a query block against its whole sequences:
// allowed token pairs, independent of how the keys are blocked.
int64_t QueryWork(const Block& block, const std::vector<int64_t>& lengths, const Mask& mask);

}  // namespace fcp::detail
