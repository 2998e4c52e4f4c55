// Piece sizing: after assignment, re-cut the pieces of split items so that
// the workers holding them share their work evenly. Private to src/plan.
//
// A split item's p sub-items (sharding.h, step 4) are equal when they are
// made, so a worker holds whole multiples of them: at N = 16 a 143K-token
// sequence gives 17 pairs, 68 sub-items, and 4 workers hold 5 where the
// others hold 4, 9% compute imbalance that no exchange of items can remove.
// The pieces need not be equal: sub-item x's piece can have any size s_x
// with lo <= s_x <= hi and sum s_x = b, its filler taking the rest of the
// slot, so the slots and the token cap are unchanged. Only splits whose
// piece work is linear in s_x are sized: a causal pair (zig-zag inside the
// pair: exactly s_x (m b + 1)) and any piece under a full mask. A piece
// token displaces a filler token, priced at the fillers' mean work per
// token, so rate = (the item's work - that of as many filler tokens) / b.
//
// With the owners fixed, sizes minimising the sum over workers of the
// squared compute make every split's workers as level as its bounds allow:
// block coordinate descent, one split at a time levelled by water-filling
// (exact for that split given the rest), converges to that minimum as the
// objective is convex and each split's constraints are its own; a few
// sweeps get close. Sizes are then rounded to whole granules (64 tokens
// where b allows) keeping the sum. O(sweeps * P log p) for P sub-items.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sharding.h"

namespace fcp::detail {

// New piece sizes for split.splits, given the worker of each sub-item
// (aligned with split.added) and every worker's compute (allowed token
// pairs) as assigned. Returns the largest compute the new sizes predict (by
// the model above, before rounding), or nothing when no size changed; call
// BuildSubItems then. Deterministic.
std::optional<double> SizePieces(const ShardBase& base, HeavySplit& split, const Mask& mask,
                                 const std::vector<int32_t>& sub_item_worker,
                                 std::vector<double> compute);

}  // namespace fcp::detail
