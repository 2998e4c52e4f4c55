// RequiredPairs and SequenceIndex: hand-counted pairs of a packed block for
// every mask, tiling errors, and a brute-force check over random packings.
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_message.h"
#include "fcp/error.h"
#include "fcp/required_pairs.h"

namespace fcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two sequences, seq0 of 8 tokens and seq1 of 2, in two blocks:
//
//   seq 0: | A: [0,4) | B: [4,8) |
//   seq 1: | A: [0,2) |
//
// Block A is packed (two sequences, listed seq1 first); block B holds the
// second half of seq 0.
const std::vector<int64_t> kSequences = {8, 2};
const std::vector<Block> kBlocks = {{0, {{1, 0, 2}, {0, 0, 4}}}, {1, {{0, 4, 4}}}};

TEST(RequiredPairsTest, PackedBlockCausal) {
  // (A,A): seq0 4x4 lower triangle 1+2+3+4 = 10, plus seq1 2x2: 1+2 = 3 -> 13.
  // (A,B): seq0 queries [0,4) never see keys [4,8): not required.
  // (B,A): queries [4,8) see all of [0,4): 16.  (B,B): 10.
  EXPECT_THAT(RequiredPairs(kSequences, kBlocks, {MaskKind::kCausal, 0}),
              ElementsAre(RequiredPair{0, 0, 13}, RequiredPair{1, 0, 16}, RequiredPair{1, 1, 10}));
}

TEST(RequiredPairsTest, PackedBlockFull) {
  // (A,A): 16 + 4 = 20; every seq0 pair is 4x4 = 16; seq1 never meets block B.
  EXPECT_THAT(RequiredPairs(kSequences, kBlocks, {MaskKind::kFull, 0}),
              ElementsAre(RequiredPair{0, 0, 20}, RequiredPair{0, 1, 16}, RequiredPair{1, 0, 16},
                          RequiredPair{1, 1, 16}));
}

TEST(RequiredPairsTest, PackedBlockWindow2) {
  // W = 2: each query sees itself and its predecessor.
  // (A,A): seq0 1+2+2+2 = 7, seq1 1+2 = 3 -> 10. (B,A): only (q4, k3) -> 1.
  // (B,B): q4 -> {4}, q5 -> {4,5}, q6 -> {5,6}, q7 -> {6,7}: 7.
  EXPECT_THAT(RequiredPairs(kSequences, kBlocks, {MaskKind::kSlidingWindow, 2}),
              ElementsAre(RequiredPair{0, 0, 10}, RequiredPair{1, 0, 1}, RequiredPair{1, 1, 7}));
}

TEST(RequiredPairsTest, PackedBlockWindow1IsTheDiagonal) {
  // W = 1: (B,A) disappears; the diagonal gives 4 + 2 and 4.
  EXPECT_THAT(RequiredPairs(kSequences, kBlocks, {MaskKind::kSlidingWindow, 1}),
              ElementsAre(RequiredPair{0, 0, 6}, RequiredPair{1, 1, 4}));
}

TEST(RequiredPairsTest, WindowSkipsDistantBlocks) {
  // seq0 of 12 tokens in three blocks of 4, W = 5: block 2 ([8,12)) reaches
  // back to token 4 at most (q8 - 5 < k), so (2,0) is not required.
  const std::vector<Block> blocks = {{0, {{0, 0, 4}}}, {0, {{0, 4, 4}}}, {0, {{0, 8, 4}}}};
  // (1,0): q4..7 see k > q-5: q4 -> 0..3 (4), q5 -> 1..3 (3), q6 -> 2 (2), q7 -> 1: 10.
  // (1,1): 10. (2,1): q8 -> 4..7 (4), q9 -> 5..7 (3), q10 -> 2, q11 -> 1: 10. (2,2): 10.
  EXPECT_THAT(RequiredPairs({12}, blocks, {MaskKind::kSlidingWindow, 5}),
              ElementsAre(RequiredPair{0, 0, 10}, RequiredPair{1, 0, 10}, RequiredPair{1, 1, 10},
                          RequiredPair{2, 1, 10}, RequiredPair{2, 2, 10}));
}

TEST(RequiredPairsTest, SegmentsOfOneSequenceInOneBlockAreMerged) {
  // A block holding two non-adjacent pieces of one sequence: [0,2) and [4,6);
  // the other block holds [2,4). Causal.
  const std::vector<Block> blocks = {{0, {{0, 4, 2}, {0, 0, 2}}}, {0, {{0, 2, 2}}}};
  // (0,0): q0..1 x k0..1 = 3, q4..5 x k0..1 = 4, q4..5 x k4..5 = 3 -> 10.
  // (0,1): q4..5 x k2..3 = 4. (1,0): q2..3 x k0..1 = 4. (1,1): 3.
  EXPECT_THAT(RequiredPairs({6}, blocks, {MaskKind::kCausal, 0}),
              ElementsAre(RequiredPair{0, 0, 10}, RequiredPair{0, 1, 4}, RequiredPair{1, 0, 4},
                          RequiredPair{1, 1, 3}));
}

std::string IndexError(const std::vector<int64_t>& sequences, const std::vector<Block>& blocks) {
  return testing::ExpectedErrorMessage(ErrorCode::kInvalidPlan,
                                       [&] { SequenceIndex index(sequences, blocks); });
}

// AttendedRows on the blocks above: A's rows are seq1 [0,2) (rows 0-1) then
// seq0 [0,4) (rows 2-5). B's queries (seq0 [4,8)) attend, causal, all of
// seq0 [0,4): rows [2, 6); with W = 2 only key 3: row [5, 6); A never
// attends B causally (empty); with a full mask all of B.
TEST(RequiredPairsTest, AttendedRowsOfAPackedBlock) {
  const auto rows = [&](int32_t q, int32_t kv, Mask mask) {
    const TokenRange r = AttendedRows(kSequences, kBlocks[q], kBlocks[kv], mask);
    return std::pair(r.begin, r.end);
  };
  EXPECT_EQ(rows(1, 0, {MaskKind::kCausal, 0}), (std::pair<int64_t, int64_t>(2, 6)));
  EXPECT_EQ(rows(1, 0, {MaskKind::kSlidingWindow, 2}), (std::pair<int64_t, int64_t>(5, 6)));
  EXPECT_TRUE(AttendedRows(kSequences, kBlocks[0], kBlocks[1], {MaskKind::kCausal, 0}).empty());
  EXPECT_EQ(rows(0, 1, {MaskKind::kFull, 0}), (std::pair<int64_t, int64_t>(0, 4)));
  EXPECT_EQ(rows(0, 0, {MaskKind::kCausal, 0}), (std::pair<int64_t, int64_t>(0, 6)));
}

// A direct-pull plan's transfers cut to the rows their receivers attend:
// block A to B's owner and back. Causal: rows [2, 6) (seq1's rows are not
// attended); window 2: row [5, 6); full: A's queries also pull B, which
// they attend whole (a whole transfer stays whole). A relayed block stays
// whole on every hop; the plan's other blocks are still cut.
TEST(RequiredPairsTest, TrimTransfersToAttendedRows) {
  for (const auto& [mask, begin, count] :
       std::vector<std::tuple<Mask, int64_t, int64_t>>{{{MaskKind::kCausal, 0}, 2, 4},
                                                       {{MaskKind::kSlidingWindow, 2}, 5, 1},
                                                       {{MaskKind::kFull, 0}, 2, 4}}) {
    Plan plan;
    plan.workers = 2;
    plan.mask = mask;
    plan.sequences = kSequences;
    plan.blocks = kBlocks;
    const std::vector<RequiredPair> required = RequiredPairs(kSequences, kBlocks, mask);
    // A to B's owner; under the full mask B to A's owner too.
    const bool full = mask.kind == MaskKind::kFull;
    plan.forward = {{{{0, 0, 1}}, {}}};
    plan.backward = {{{{0, 0, 1}}, {}, {}}, {{}, {{0, 1, 0}}, {}}};
    if (full) {
      plan.forward[0].send.push_back({1, 1, 0});
      plan.backward[0].send_kv.push_back({1, 1, 0});
      plan.backward[1].send_dkv.push_back({1, 0, 1});
    }
    TrimTransfersToAttendedRows(plan, required);
    SCOPED_TRACE(MaskKindName(mask.kind));
    EXPECT_EQ(plan.forward[0].send[0], (Transfer{0, 0, 1, begin, count}));
    EXPECT_EQ(plan.backward[0].send_kv[0], (Transfer{0, 0, 1, begin, count}));
    EXPECT_EQ(plan.backward[1].send_dkv[0], (Transfer{0, 1, 0, begin, count}));
    if (full) {  // A's queries attend all of B: whole
      EXPECT_TRUE(plan.forward[0].send[1].all_rows());
      EXPECT_TRUE(plan.backward[1].send_dkv[1].all_rows());
    }
    // B relayed (w0 sends it back to its owner, an odd but valid relay):
    // every transfer of B stays whole, A's are cut as in the direct plan.
    Plan relayed = plan;
    const auto whole = [](std::vector<Transfer>& ts) {
      for (Transfer& t : ts) t = {t.block, t.src, t.dst};
    };
    whole(relayed.forward[0].send);
    for (BackwardStage& st : relayed.backward) whole(st.send_kv), whole(st.send_dkv);
    relayed.forward[0].send.push_back({1, 0, 1});
    TrimTransfersToAttendedRows(relayed, required);
    EXPECT_EQ(relayed.forward[0].send[0], (Transfer{0, 0, 1, begin, count}));
    EXPECT_EQ(relayed.backward[1].send_dkv[0], (Transfer{0, 1, 0, begin, count}));
    for (const Transfer& t : relayed.forward[0].send) EXPECT_TRUE(t.block == 0 || t.all_rows());
    for (const BackwardStage& st : relayed.backward)
      for (const Transfer& t : st.send_dkv) EXPECT_TRUE(t.block == 0 || t.all_rows());
  }
}

TEST(RequiredPairsTest, SequenceIndexSortsPiecesByStart) {
  const SequenceIndex index(kSequences, kBlocks);
  ASSERT_EQ(index.pieces(0).size(), 2u);
  EXPECT_EQ(index.pieces(0)[0].start, 0);
  EXPECT_EQ(index.pieces(0)[0].block, 0);
  EXPECT_EQ(index.pieces(0)[1].start, 4);
  EXPECT_EQ(index.pieces(0)[1].block, 1);
  ASSERT_EQ(index.pieces(1).size(), 1u);
  EXPECT_EQ(index.pieces(1)[0].length, 2);
}

TEST(RequiredPairsTest, SequenceIndexRejectsBadTilings) {
  EXPECT_THAT(IndexError({8, 2}, {{0, {{1, 0, 2}, {0, 0, 4}}}, {0, {{0, 5, 3}}}}),
              HasSubstr("sequence 0: tokens [4, 5) are in no block"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{1, 0, 2}, {0, 0, 4}}}, {0, {{0, 4, 3}}}}),
              HasSubstr("sequence 0: tokens [7, 8) are in no block"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{0, 0, 8}}}}),
              HasSubstr("sequence 1: tokens [0, 2) are in no block"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{1, 0, 2}, {0, 0, 5}}}, {0, {{0, 4, 4}}}}),
              HasSubstr("sequence 0: token 4 lies in more than one segment"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{1, 0, 2}, {0, 0, 8}, {0, 0, 8}}}}),
              HasSubstr("token 0 lies in more than one segment"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{2, 0, 2}}}}), HasSubstr("sequence 2 does not exist"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{-1, 0, 2}}}}), HasSubstr("sequence -1 does not exist"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{0, 0, 0}}}}), HasSubstr("length must be > 0, got 0"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{0, -1, 3}}}}), HasSubstr("lies outside sequence 0"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{1, 1, 2}}}}),
              HasSubstr("[seq, start, length] = [1, 1, 2] lies outside sequence 1 of length 2"));
  // Huge values must not overflow the bounds check.
  EXPECT_THAT(IndexError({8, 2}, {{0, {{0, INT64_MAX, INT64_MAX}}}}),
              HasSubstr("lies outside sequence 0"));
  EXPECT_THAT(IndexError({8, 2}, {{0, {{0, 4, INT64_MAX}}}}), HasSubstr("lies outside sequence 0"));
}

// Brute force: the allowed (q, k) token pairs between two blocks, token by token.
int64_t BruteForcePairs(const Mask& mask, const Block& q, const Block& kv) {
  int64_t n = 0;
  for (const Segment& a : q.segments)
    for (const Segment& b : kv.segments) {
      if (a.seq != b.seq) continue;
      for (int64_t i = a.start; i < a.start + a.length; ++i)
        for (int64_t j = b.start; j < b.start + b.length; ++j)
          n += mask.kind == MaskKind::kFull ||
               (j <= i && (mask.kind == MaskKind::kCausal || j > i - mask.window));
    }
  return n;
}

// A hostile plan or batch: one 12000-token sequence in 1-token blocks under a
// full mask is 1.44e8 block pairs (gigabytes). Refused with a clear error
// before anything is allocated, by the planner and by the validator alike.
TEST(RequiredPairsTest, RefusesMoreThanTwoToThe27CandidatePairs) {
  std::vector<Block> blocks;
  for (int64_t t = 0; t < 12000; ++t) blocks.push_back({0, {{0, t, 1}}});
  const auto message = [&](const Mask& mask) {
    return testing::ErrorMessage(ErrorCode::kInvalidArgument,
                                 [&] { RequiredPairs({12000}, blocks, mask); });
  };
  EXPECT_THAT(message({MaskKind::kFull, 0}), HasSubstr("144000000 candidate block pairs"));
  EXPECT_EQ(message({MaskKind::kSlidingWindow, 10}), "");
}

// A ring plan's shape: every sequence cut into 2N chunks, block i holding
// chunks i and 2N-1-i of each. Rows list each K/V block once per chunk it
// meets (far more candidates than blocks), so they are summed per block
// instead of sorted; the pairs must be the same as brute force, and such
// plans are no longer refused for their candidate count (the bound is the
// N^2 pairs, not the candidates).
TEST(RequiredPairsTest, RingShapedRowsMatchBruteForce) {
  const int32_t n = 4;
  const std::vector<int64_t> sequences = {40, 24, 9, 16};
  std::vector<Block> blocks(n);
  for (int32_t i = 0; i < n; ++i) blocks[i].worker = i;
  for (size_t s = 0; s < sequences.size(); ++s)
    for (int32_t c = 0; c < 2 * n; ++c) {
      const int64_t begin = c * sequences[s] / (2 * n), end = (c + 1) * sequences[s] / (2 * n);
      if (end > begin)
        blocks[c < n ? c : 2 * n - 1 - c].segments.push_back(
            {static_cast<int32_t>(s), begin, end - begin});
    }
  for (const Mask& mask :
       {Mask{MaskKind::kCausal, 0}, Mask{MaskKind::kFull, 0}, Mask{MaskKind::kSlidingWindow, 5}}) {
    std::vector<RequiredPair> expected;
    for (int32_t q = 0; q < n; ++q)
      for (int32_t kv = 0; kv < n; ++kv)
        if (const int64_t pairs = BruteForcePairs(mask, blocks[q], blocks[kv]); pairs > 0)
          expected.push_back({q, kv, pairs});
    EXPECT_EQ(RequiredPairs(sequences, blocks, mask), expected) << MaskKindName(mask.kind);
  }
}

// Enough candidate pairs (over 2^17) that the rows are listed in two parts
// on two threads: one sequence of 640 blocks of 8 tokens, numbered in token
// order and in reverse (unsorted rows), every pair counted by hand: under
// the causal mask 8 x 8 token pairs below the diagonal block and 8 x 9 / 2
// on it; under the full mask 8 x 8 everywhere.
TEST(RequiredPairsTest, ManyRowsMatchTheirCounts) {
  const int32_t n_blocks = 640;
  const int64_t block_tokens = 8;
  const std::vector<int64_t> sequences = {n_blocks * block_tokens};
  for (const bool reversed : {false, true}) {
    // Block b holds the tokens of position p(b) in the sequence.
    const auto position = [&](int32_t b) { return reversed ? n_blocks - 1 - b : b; };
    std::vector<Block> blocks(n_blocks);
    for (int32_t b = 0; b < n_blocks; ++b)
      blocks[b].segments = {{0, position(b) * block_tokens, block_tokens}};
    for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kFull}) {
      std::vector<RequiredPair> expected;
      for (int32_t q = 0; q < n_blocks; ++q)
        for (int32_t kv = 0; kv < n_blocks; ++kv) {
          const int32_t pq = position(q), pkv = position(kv);
          if (kind == MaskKind::kFull || pkv < pq)
            expected.push_back({q, kv, block_tokens * block_tokens});
          else if (pkv == pq)
            expected.push_back({q, kv, block_tokens * (block_tokens + 1) / 2});
        }
      ASSERT_GT(expected.size(), size_t{1} << 17);
      EXPECT_EQ(RequiredPairs(sequences, blocks, Mask{kind, 0}), expected)
          << MaskKindName(kind) << (reversed ? ", blocks in reverse" : "");
    }
  }
}

TEST(RequiredPairsTest, MatchesBruteForceOnRandomPackings) {
  std::mt19937_64 rng(7);
  const Mask masks[] = {{MaskKind::kCausal, 0},
                        {MaskKind::kFull, 0},
                        {MaskKind::kSlidingWindow, 1},
                        {MaskKind::kSlidingWindow, 3},
                        {MaskKind::kSlidingWindow, 10}};
  for (int trial = 0; trial < 200; ++trial) {
    // Random sequences cut into random pieces, dealt to random blocks.
    std::vector<int64_t> sequences(1 + rng() % 4);
    for (int64_t& len : sequences) len = 1 + rng() % 20;
    const int32_t n_blocks = 1 + static_cast<int32_t>(rng() % 5);
    std::vector<Block> blocks(n_blocks);
    for (size_t s = 0; s < sequences.size(); ++s)
      for (int64_t start = 0; start < sequences[s];) {
        const int64_t len = std::min<int64_t>(sequences[s] - start, 1 + rng() % 7);
        blocks[rng() % n_blocks].segments.push_back({static_cast<int32_t>(s), start, len});
        start += len;
      }
    for (const Mask& mask : masks) {
      const std::vector<RequiredPair> pairs = RequiredPairs(sequences, blocks, mask);
      std::vector<RequiredPair> expected;
      for (int32_t q = 0; q < n_blocks; ++q)
        for (int32_t kv = 0; kv < n_blocks; ++kv)
          if (const int64_t n = BruteForcePairs(mask, blocks[q], blocks[kv]); n > 0)
            expected.push_back({q, kv, n});
      ASSERT_EQ(pairs, expected) << "trial " << trial << " mask " << MaskKindName(mask.kind)
                                 << " window " << mask.window;
      // Split across two threads whatever the count: the same pairs.
      ASSERT_EQ(RequiredPairs(sequences, blocks, mask, /*spare_core=*/true), expected)
          << "trial " << trial << " mask " << MaskKindName(mask.kind) << " window " << mask.window;
    }
  }
}

// Every transfer of a direct-pull plan over random packings and owners, cut
// by TrimTransfersToAttendedRows, carries exactly the smallest row range
// holding every row of its block that a query of its receiver attends
// (token by token), or the whole block where that range is the block; the
// partial back carries the same rows. Covers the shortcut for blocks of one
// segment under the causal and full masks (whole or not attended at all).
TEST(RequiredPairsTest, TrimmedRowsMatchBruteForceOnRandomPackings) {
  std::mt19937_64 rng(11);
  const Mask masks[] = {{MaskKind::kCausal, 0},
                        {MaskKind::kFull, 0},
                        {MaskKind::kSlidingWindow, 2},
                        {MaskKind::kSlidingWindow, 9}};
  int cut = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Plan plan;
    plan.workers = 2 + static_cast<int32_t>(rng() % 3);
    plan.sequences.resize(1 + rng() % 4);
    for (int64_t& len : plan.sequences) len = 1 + rng() % 20;
    plan.blocks.resize(1 + rng() % 6);
    for (size_t s = 0; s < plan.sequences.size(); ++s)
      for (int64_t start = 0; start < plan.sequences[s];) {
        const int64_t len = std::min<int64_t>(plan.sequences[s] - start, 1 + rng() % 7);
        plan.blocks[rng() % plan.blocks.size()].segments.push_back(
            {static_cast<int32_t>(s), start, len});
        start += len;
      }
    std::erase_if(plan.blocks, [](const Block& b) { return b.segments.empty(); });
    for (Block& b : plan.blocks) b.worker = static_cast<int32_t>(rng() % plan.workers);
    for (const Mask& mask : masks) {
      plan.mask = mask;
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " mask " << MaskKindName(mask.kind)
                                        << " window " << mask.window);
      const std::vector<RequiredPair> pairs = RequiredPairs(plan.sequences, plan.blocks, mask);
      // Brute force: per (K/V block, receiving worker), its attended rows.
      std::map<std::pair<int32_t, int32_t>, std::pair<int64_t, int64_t>> want;  // [lo, hi)
      for (const RequiredPair& p : pairs) {
        const Block& q = plan.blocks[p.q_block];
        const Block& kv = plan.blocks[p.kv_block];
        if (q.worker == kv.worker) continue;
        auto& [lo, hi] = want.try_emplace({p.kv_block, q.worker}, kv.tokens(), 0).first->second;
        int64_t row = 0;
        for (const Segment& k : kv.segments)
          for (int64_t j = k.start; j < k.start + k.length; ++j, ++row)
            for (const Segment& a : q.segments)
              for (int64_t i = a.start; i < a.start + a.length; ++i)
                if (a.seq == k.seq &&
                    BruteForcePairs(mask, {0, {{a.seq, i, 1}}}, {0, {{k.seq, j, 1}}}) > 0)
                  lo = std::min(lo, row), hi = std::max(hi, row + 1);
      }
      Plan direct = plan;
      direct.forward = {{}, {}};
      direct.backward = {{}, {}};
      for (const auto& [edge, rows] : want) {
        const auto [block, receiver] = edge;
        const int32_t owner = plan.blocks[block].worker;
        direct.forward[0].send.push_back({block, owner, receiver});
        direct.backward[0].send_kv.push_back({block, owner, receiver});
        direct.backward[1].send_dkv.push_back({block, receiver, owner});
      }
      TrimTransfersToAttendedRows(direct, pairs);
      const auto check = [&](const Transfer& t, int32_t receiver) {
        const auto [lo, hi] = want.at({t.block, receiver});
        if (lo == 0 && hi == plan.blocks[t.block].tokens()) {
          EXPECT_TRUE(t.all_rows()) << "block " << t.block << " to " << receiver;
        } else {
          EXPECT_EQ(t.row_begin, lo) << "block " << t.block << " to " << receiver;
          EXPECT_EQ(t.row_count, hi - lo) << "block " << t.block << " to " << receiver;
          ++cut;
        }
      };
      for (const Transfer& t : direct.forward[0].send) check(t, t.dst);
      for (const Transfer& t : direct.backward[0].send_kv) check(t, t.dst);
      for (const Transfer& t : direct.backward[1].send_dkv) check(t, t.src);
    }
  }
  EXPECT_GT(cut, 100);  // the random packings do cut transfers
}

}  // namespace
}  // namespace fcp
