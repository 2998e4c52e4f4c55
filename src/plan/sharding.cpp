#include "sharding.h"

#include <algorithm>
#include <numeric>
#include <span>

#include "buckets.h"
#include "fcp/error.h"

namespace fcp::detail {

int64_t QueryWork(const Block& block, const std::vector<int64_t>& lengths, const Mask& mask) {
  int64_t work = 0;
  for (const Segment& s : block.segments)
    work += AllowedPairs(mask, {s.start, s.start + s.length}, {0, lengths[s.seq]});
  return work;
}

namespace {

// Appends tokens [start, start + length) of `seq`, merging with the last
// segment when contiguous.
void AppendSegment(std::vector<Segment>& segments, int32_t seq, int64_t start, int64_t length) {
  if (!segments.empty() && segments.back().seq == seq &&
      segments.back().start + segments.back().length == start) {
    segments.back().length += length;
    return;
  }
  segments.push_back({seq, start, length});
}

// Takes the next `count` tokens of a segment stream (a view: the segments
// must outlive it).
class SegmentStream {
 public:
  explicit SegmentStream(std::span<const Segment> segments) : segments_(segments) {}
  // Calls f(seq, start, length) for each run of the next `count` tokens.
  template <typename F>
  void Take(int64_t count, F f) {
    while (count > 0 && pos_ < segments_.size()) {
      const Segment& s = segments_[pos_];
      const int64_t take = std::min(count, s.length - offset_);
      f(s.seq, s.start + offset_, take);
      count -= take;
      offset_ += take;
      if (offset_ == s.length) ++pos_, offset_ = 0;
    }
  }
  Block Take(int64_t count) {
    Block block;
    block.segments.reserve(Runs(count));  // one allocation, not one per doubling
    Take(count, [&](int32_t seq, int64_t start, int64_t length) {
      AppendSegment(block.segments, seq, start, length);
    });
    return block;
  }
  bool empty() const { return pos_ == segments_.size(); }
  // The runs the next `count` tokens span: at least Take's segments.
  size_t Runs(int64_t count) const {
    size_t runs = 0;
    for (size_t pos = pos_; count > 0 && pos < segments_.size(); ++pos, ++runs)
      count -= segments_[pos].length - (pos == pos_ ? offset_ : 0);
    return runs;
  }

 private:
  std::span<const Segment> segments_;
  size_t pos_ = 0;
  int64_t offset_ = 0;
};

// The concatenation of `segments` cut into blocks of at most `chunk` tokens.
std::vector<Block> Chop(const std::vector<Segment>& segments, int64_t chunk) {
  SegmentStream stream(segments);
  std::vector<Block> blocks;
  while (!stream.empty()) blocks.push_back(stream.Take(chunk));
  return blocks;
}

// Appends the segments of `block` to `out`, merging contiguous ones.
void Concatenate(const Block& block, std::vector<Segment>& out) {
  for (const Segment& s : block.segments) AppendSegment(out, s.seq, s.start, s.length);
}

bool AllFull(const ProtoItem& item, int64_t b) {
  return std::all_of(item.blocks.begin(), item.blocks.end(),
                     [b](const Block& x) { return x.tokens() == b; });
}

// Step 4: choose the items heavier than `bound` to split into p one-slot
// sub-items, and the lightest one-slot items that complete them (fillers).
// With `filler_group` (a group per item, -1 for none), an item's fillers
// are the lightest light enough of its own group first, then of any.
// Marks both in `removed`; the pieces are equal.
std::vector<SplitItem> ChooseSplits(const ShardBase& base, double bound, int32_t split_limit,
                                    PieceCounts counts, std::vector<uint8_t>& removed,
                                    const std::vector<int32_t>* filler_group) {
  const std::vector<ProtoItem>& items = base.items;
  const int64_t b = base.block_size;
  std::vector<size_t> light = base.light;  // lightest last
  // Per group, its light items, lightest last.
  std::vector<std::vector<size_t>> group_light;
  if (filler_group)
    for (size_t f : base.light)
      if (const int32_t g = (*filler_group)[f]; g >= 0) {
        if (static_cast<size_t>(g) >= group_light.size()) group_light.resize(g + 1);
        group_light[g].push_back(f);
      }
  std::vector<uint8_t> taken(items.size(), 0);  // a filler, also in the other list
  std::vector<SplitItem> splits;
  for (size_t i : base.by_work) {
    const ProtoItem& item = items[i];
    if (static_cast<double>(item.work) <= bound) break;
    if (item.small || !AllFull(item, b) || removed[i]) continue;
    int32_t p = 2;
    while (p<split_limit&& static_cast<double>(item.work) / p> bound)
      p = counts == PieceCounts::kPowersOfTwo ? p * 2 : p + 1;
    if (p > split_limit) break;
    const size_t fillers_needed = static_cast<size_t>(p - item.slots);
    SplitItem split{i, {}, {}, {}};
    // Fillers must come from items lighter than the sub-items they complete.
    const auto take = [&](std::vector<size_t>& from) {
      while (split.fillers.size() < fillers_needed && !from.empty()) {
        const size_t f = from.back();
        if (removed[f] || taken[f] || f == i) {
          from.pop_back();
          continue;
        }
        if (static_cast<double>(items[f].work) * p > static_cast<double>(item.work)) break;
        split.fillers.push_back(f);
        taken[f] = 1;
        from.pop_back();
      }
    };
    if (filler_group && (*filler_group)[i] >= 0 &&
        static_cast<size_t>((*filler_group)[i]) < group_light.size())
      take(group_light[(*filler_group)[i]]);
    take(light);
    if (split.fillers.size() < fillers_needed) break;       // not enough light tokens: stop
    std::sort(split.fillers.begin(), split.fillers.end());  // dataloader order keeps fillers local
    for (size_t f : split.fillers) removed[f] = 1;
    removed[i] = 1;
    const int64_t piece = (b + p - 1) / p;
    for (int32_t x = 0; x < p; ++x) split.piece_tokens.push_back(std::min(piece, b - x * piece));
    if (item.blocks.size() == 2) split.second_tokens = split.piece_tokens;
    splits.push_back(std::move(split));
  }
  return splits;
}

// Appends `block` to `out` (its index to `ids`), its segments that are only
// part of their sequence as blocks of their own: the whole sequences stay
// together in one block. A piece's K/V (or its queries' need for the rest of
// its sequence) is then the only thing that crosses workers, so a short
// sequence split at a slot boundary costs a transfer of that piece, not of
// the whole packed block. The item keeps its tokens, so slots and the token
// cap are unchanged. B: const Block& (copied) or Block (moved).
template <typename B>
void AppendIsolated(B&& block, const std::vector<int64_t>& lengths, std::vector<Block>& out,
                    std::vector<int32_t>& ids) {
  const auto partial = std::count_if(block.segments.begin(), block.segments.end(),
                                     [&](const Segment& s) { return s.length < lengths[s.seq]; });
  // Nothing to isolate (or nothing else): the block as it is.
  if (partial == 0 || block.segments.size() < 2) {
    ids.push_back(static_cast<int32_t>(out.size()));
    out.push_back(std::forward<B>(block));
    return;
  }
  Block whole;
  whole.segments.reserve(block.segments.size() - static_cast<size_t>(partial));
  for (const Segment& s : block.segments) {
    if (s.length == lengths[s.seq]) {
      whole.segments.push_back(s);
    } else {
      ids.push_back(static_cast<int32_t>(out.size()));
      out.push_back(Block{0, {s}});
    }
  }
  if (!whole.segments.empty()) {
    ids.push_back(static_cast<int32_t>(out.size()));
    out.push_back(std::move(whole));
  }
}

// A sub-item's part weighed without being built: its tokens and work.
struct PartWeight {
  int64_t tokens = 0, work = 0;
};
int64_t TokensOf(const Block& part) { return part.tokens(); }
int64_t TokensOf(const PartWeight& part) { return part.tokens; }

// Scratch of CutSubItems, reused across the splits of a batch.
template <typename Part>
struct CutScratch {
  std::vector<Segment> filler_segments;
  std::vector<std::vector<Part>> pieces;  // per block of the split item
  std::vector<Part> parts;                // of one sub-item
};

// Cuts split `s` of `base` into its sub-items (sharding.h, SplitItem):
// take(stream, tokens) makes a Part of the stream's next `tokens`, and
// emit(parts) receives each sub-item's parts in order (pieces, then the
// filler). Building the blocks and weighing them share this one cut.
template <typename Part, typename Take, typename Emit>
void CutSubItems(const ShardBase& base, const SplitItem& s, CutScratch<Part>& scratch, Take take,
                 Emit emit) {
  const ProtoItem& item = base.items[s.item];
  const size_t p = s.piece_tokens.size();
  scratch.filler_segments.clear();
  for (size_t f : s.fillers)
    for (const Block& x : base.items[f].blocks) Concatenate(x, scratch.filler_segments);
  SegmentStream filler(scratch.filler_segments);
  // Pieces of each block in token order; sub-item x takes piece x of the
  // first block and piece p-1-x of a pair's second.
  std::vector<std::vector<Part>>& pieces = scratch.pieces;
  pieces.resize(item.blocks.size());
  for (size_t k = 0; k < item.blocks.size(); ++k) {
    SegmentStream stream(item.blocks[k].segments);
    std::vector<Part>& cut = pieces[k];
    cut.clear();
    for (int64_t tokens : k == 0 ? s.piece_tokens : s.second_tokens)
      cut.push_back(take(stream, tokens));
    FCP_CHECK(stream.empty() && cut.size() == p, "a split block's pieces cover it");
  }
  std::vector<Part>& parts = scratch.parts;
  for (size_t x = 0; x < p; ++x) {
    parts.clear();
    parts.push_back(std::move(pieces[0][x]));
    if (pieces.size() == 2) parts.push_back(std::move(pieces[1][p - 1 - x]));
    int64_t tokens = 0;
    for (const Part& part : parts) tokens += TokensOf(part);
    FCP_CHECK(tokens <= base.block_size, "a sub-item fits its slot");
    if (tokens < base.block_size) parts.push_back(take(filler, base.block_size - tokens));
    FCP_CHECK(TokensOf(parts.back()) > 0, "fillers complete every sub-item");
    emit(parts);
  }
  FCP_CHECK(filler.empty(), "heavy-item fillers use every dissolved token");
}

}  // namespace

ShardBase ShardSteps123(const std::vector<int64_t>& lengths, int64_t block_size, int64_t token_cap,
                        int32_t workers, const Mask& mask, bool zigzag) {
  ShardBase out;
  out.workers = workers;
  const int64_t b = std::min(block_size, token_cap);
  out.block_size = b;
  out.big_slots = static_cast<int32_t>(std::min<int64_t>(token_cap / b, INT32_MAX));
  const int64_t small_slot_tokens = token_cap - static_cast<int64_t>(out.big_slots) * b;

  // 1. Whole blocks of every sequence (seq_of >= 0) and packed remainders (-1).
  std::vector<Block> blocks;
  std::vector<int32_t> seq_of;
  std::vector<Segment> remainders;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t full = lengths[s] / b;
    for (int64_t k = 0; k < full; ++k) {
      blocks.push_back(Block{0, {{static_cast<int32_t>(s), k * b, b}}});
      seq_of.push_back(static_cast<int32_t>(s));
    }
    if (lengths[s] % b) remainders.push_back({static_cast<int32_t>(s), full * b, lengths[s] % b});
  }
  for (Block& packed : Chop(remainders, b)) {
    blocks.push_back(std::move(packed));
    seq_of.push_back(-1);
  }
  std::vector<int64_t> work(blocks.size());
  double total_work = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    work[i] = QueryWork(blocks[i], lengths, mask);
    total_work += static_cast<double>(work[i]);
  }

  std::vector<ProtoItem>& items = out.items;
  // 2. More blocks than big slots: dissolve the short block (at most one) and
  //    then the cheapest into small blocks of <= r tokens. T <= N*q*b + N*r,
  //    so they fill at most N small slots.
  std::vector<uint8_t> dissolved(blocks.size(), 0);
  const int64_t big_capacity = static_cast<int64_t>(workers) * out.big_slots;
  if (static_cast<int64_t>(blocks.size()) > big_capacity) {
    std::vector<size_t> order(blocks.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      const bool xs = blocks[x].tokens() < b, ys = blocks[y].tokens() < b;
      if (xs != ys) return xs;
      return work[x] < work[y];
    });
    const size_t count = blocks.size() - static_cast<size_t>(big_capacity);
    for (size_t k = 0; k < count; ++k) dissolved[order[k]] = 1;
    std::vector<Segment> stream;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (dissolved[i]) Concatenate(blocks[i], stream);
    for (Block& small : Chop(stream, small_slot_tokens)) {
      ProtoItem item;
      item.small = true;
      item.work = QueryWork(small, lengths, mask);
      item.blocks.push_back(std::move(small));
      items.push_back(std::move(item));
    }
    out.small_slots = 1;
  }

  // 3. Items: zig-zag pairs of a sequence's full blocks under a causal mask,
  //    single blocks otherwise.
  const auto single = [&](size_t i) {
    ProtoItem item;
    item.work = work[i];
    item.blocks.push_back(std::move(blocks[i]));
    items.push_back(std::move(item));
  };
  // A worker holds at most floor(q/2) pairs, so at most N*floor(q/2) pairs
  // can be placed; blocks beyond that stay single.
  std::vector<size_t> run;  // full, kept blocks of the current sequence
  int64_t pairs_left = static_cast<int64_t>(workers) * (out.big_slots / 2);
  const auto flush_run = [&] {
    size_t lo = 0, hi = run.size();
    while (zigzag && mask.kind == MaskKind::kCausal && hi - lo >= 2 && pairs_left > 0) {
      --pairs_left;
      ProtoItem pair;
      pair.slots = 2;
      pair.work = work[run[lo]] + work[run[hi - 1]];
      pair.blocks.reserve(2);
      pair.blocks.push_back(std::move(blocks[run[lo]]));
      pair.blocks.push_back(std::move(blocks[run[hi - 1]]));
      items.push_back(std::move(pair));
      ++lo, --hi;
    }
    for (; lo < hi; ++lo) single(run[lo]);
    run.clear();
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (dissolved[i]) continue;
    if (seq_of[i] < 0) {
      single(i);
      continue;
    }
    if (!run.empty() && seq_of[run.back()] != seq_of[i]) flush_run();
    run.push_back(i);
  }
  flush_run();

  out.total_work = total_work;
  // Step 4's order: by decreasing work; light (one-slot, full) items are the
  // fillers, lightest last.
  out.by_work.resize(items.size());
  std::iota(out.by_work.begin(), out.by_work.end(), 0);
  std::stable_sort(out.by_work.begin(), out.by_work.end(),
                   [&](size_t x, size_t y) { return items[x].work > items[y].work; });
  for (size_t i : out.by_work)
    if (!items[i].small && items[i].slots == 1 && AllFull(items[i], b)) out.light.push_back(i);
  return out;
}

HeavySplit SplitHeavy(const ShardBase& base, const std::vector<int64_t>& lengths, const Mask& mask,
                      double heavy_fraction, int32_t max_split, PieceCounts counts,
                      const std::vector<int32_t>* filler_group) {
  HeavySplit split;
  split.removed.assign(base.items.size(), 0);
  if (heavy_fraction > 0 && max_split >= 2) {
    int32_t split_limit = 1;
    if (counts == PieceCounts::kPowersOfTwo) {
      while (split_limit * 2 <= max_split && base.block_size / (split_limit * 2) >= kMinPieceTokens)
        split_limit *= 2;
    } else {
      split_limit = static_cast<int32_t>(
          std::min<int64_t>(max_split, std::max<int64_t>(1, base.block_size / kMinPieceTokens)));
    }
    if (split_limit >= 2)
      split.splits = ChooseSplits(base, heavy_fraction * base.total_work / base.workers,
                                  split_limit, counts, split.removed, filler_group);
  }
  BuildSubItems(base, split, lengths, mask);
  return split;
}

void BuildSubItems(const ShardBase& base, HeavySplit& split, const std::vector<int64_t>& lengths,
                   const Mask& mask) {
  split.added.clear();
  size_t sub_items = 0;
  for (const SplitItem& s : split.splits) sub_items += s.piece_tokens.size();
  split.added.reserve(sub_items);
  // A part's work: its runs' allowed pairs, as QueryWork of its block would
  // count them (exact integers, additive over runs).
  const auto weigh = [&](SegmentStream& stream, int64_t tokens) {
    PartWeight part;
    stream.Take(tokens, [&](int32_t seq, int64_t start, int64_t length) {
      part.tokens += length;
      part.work += AllowedPairs(mask, {start, start + length}, {0, lengths[seq]});
    });
    return part;
  };
  CutScratch<PartWeight> scratch;
  for (const SplitItem& s : split.splits)
    CutSubItems(base, s, scratch, weigh, [&](const std::vector<PartWeight>& parts) {
      ProtoItem& sub = split.added.emplace_back();
      for (const PartWeight& part : parts) sub.work += part.work;
    });
}

Sharding FinishSharding(const ShardBase& base, const HeavySplit& split,
                        const std::vector<int64_t>& lengths) {
  Sharding out;
  out.block_size = base.block_size;
  out.big_slots = base.big_slots;
  out.small_slots = base.small_slots;
  const std::vector<uint8_t>& removed = split.removed;
  const std::vector<ProtoItem>& added = split.added;

  // Items: the kept ones, then the sub-items; their blocks with partial
  // segments isolated, numbered in item order for now.
  std::vector<Block> blocks;
  blocks.reserve(2 * (base.items.size() + added.size()));
  out.items.reserve(base.items.size() + added.size());
  // `blocks`: the item's blocks before isolation (the common count after).
  const auto start_item = [&](const ProtoItem& proto, size_t blocks) -> Item& {
    Item& item = out.items.emplace_back();
    item.slots = proto.slots;
    item.small = proto.small;
    item.blocks.reserve(blocks);
    return item;
  };
  for (size_t i = 0; i < base.items.size(); ++i) {
    if (removed[i]) continue;
    Item& item = start_item(base.items[i], base.items[i].blocks.size());
    for (const Block& block : base.items[i].blocks)
      AppendIsolated(block, lengths, blocks, item.blocks);
  }
  // The sub-items' blocks, cut from base's.
  size_t next = 0;
  const auto cut = [](SegmentStream& stream, int64_t tokens) { return stream.Take(tokens); };
  CutScratch<Block> scratch;
  for (const SplitItem& s : split.splits)
    CutSubItems(base, s, scratch, cut, [&](std::vector<Block>& parts) {
      Item& item = start_item(added[next++], parts.size());
      for (Block& block : parts) AppendIsolated(std::move(block), lengths, blocks, item.blocks);
    });
  FCP_CHECK(next == added.size(), "split.added: one entry per sub-item");

  // 5. Final block ids in global token order (by sequence, then start: the
  //    blocks are disjoint, so the keys are distinct); items refer to them.
  Buckets by_seq = BucketBy(static_cast<int32_t>(lengths.size()), blocks.size(),
                            [&](int32_t k) { return blocks[k].segments.front().seq; });
  for (size_t seq = 0; seq < lengths.size(); ++seq)
    std::sort(by_seq.items.begin() + by_seq.offset[seq],
              by_seq.items.begin() + by_seq.offset[seq + 1], [&](int32_t x, int32_t y) {
                return blocks[x].segments.front().start < blocks[y].segments.front().start;
              });
  std::vector<int32_t> id(blocks.size());
  out.blocks.reserve(blocks.size());
  for (int32_t k : by_seq.items) {
    id[k] = static_cast<int32_t>(out.blocks.size());
    out.blocks.push_back(std::move(blocks[k]));
  }
  for (Item& item : out.items)
    for (int32_t& k : item.blocks) k = id[k];
  return out;
}

}  // namespace fcp::detail
