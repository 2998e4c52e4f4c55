// MagiAttention's dynamic attention solver (MAGI_ATTENTION_QO_COMM=1,
// DynamicAttnSolver with BinaryGreedyParallelDynamicAttnAlgorithm: PEERS.md
// section 1; fcp/baselines.h), rebuilt from the rules of its code:
// sequential shards, the shard-by-shard grid, the binary search over a
// per-rank communication threshold, the simplex edge weights, the greedy edge
// selection and the greedy placement under a 1.10 x mean work cap; Q and
// partial O (backward dQ) move as well as K/V, in one overlap stage.
#include <algorithm>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "baseline_common.h"
#include "fcp/baselines.h"
#include "fcp/error.h"
#include "fcp/required_pairs.h"

namespace fcp {
namespace {

// Their solver's constants (binary_greedy_parallel.py / dyn_solver_alg.cpp).
constexpr double kUnbalanceRate = 1.10;  // the per-rank work cap, x the mean
constexpr int kMaxSearchIterations = 20;
constexpr double kSearchTolerance = 1e-2;
constexpr double kSolvedWeight = 0.95;  // simplex edge weight: assigned work share
constexpr double kBaseWeight = 0.05;    // ... and a flat share of the mean
constexpr int kRefineRounds = 5;
constexpr int32_t kChunksPerRank = 8;  // MAGI_ATTENTION_MIN_CHUNKS_PER_RANK

// One simplex edge: moving grid row `tag`'s Q (qo) from its owner u to v, or
// grid column `tag`'s K/V from its owner v to u; `cost` in tokens x heads.
struct Edge {
  int32_t u = 0, v = 0;
  double weight = 0;
  int64_t cost = 0;
  bool qo = false;
  int32_t tag = 0;
};

void SplitGrid(int32_t q0, int32_t q1, int32_t k0, int32_t k1, bool prefer_q,
               std::vector<std::pair<int32_t, int32_t>>& out) {
  const int32_t nq = q1 - q0, nk = k1 - k0;
  if (nq <= 0 || nk <= 0) return;
  if (nq == 1 && nk == 1) {
    out.push_back({q0, k0});
    return;
  }
  bool split_q = prefer_q;
  if (nq <= 1) split_q = false;
  if (nk <= 1 && nq > 1) split_q = true;
  if (split_q) {
    const int32_t mid = q0 + nq / 2;
    SplitGrid(q0, mid, k0, k1, !prefer_q, out);
    SplitGrid(mid, q1, k0, k1, !prefer_q, out);
  } else {
    const int32_t mid = k0 + nk / 2;
    SplitGrid(q0, q1, k0, mid, !prefer_q, out);
    SplitGrid(q0, q1, mid, k1, !prefer_q, out);
  }
}

class Solver {
 public:
  explicit Solver(const MagiDynamicProblem& p) : p_(p), n_(p.workers) {
    const size_t m = p.range_owner.size();
    rows_.resize(m);
    cols_.resize(m);
    row_sum_.assign(m, 0);
    col_sum_.assign(m, 0);
    int64_t total = 0;
    for (size_t c = 0; c < p.cells.size(); ++c) {
      const MagiDynamicCell& cell = p.cells[c];
      rows_[cell.q].push_back(static_cast<int32_t>(c));
      cols_[cell.k].push_back(static_cast<int32_t>(c));
      row_sum_[cell.q] += cell.area;
      col_sum_[cell.k] += cell.area;
      total += cell.area;
    }
    area_avg_ = static_cast<double>(total) / n_;
    words_ = (n_ + 63) / 64;
  }

  MagiDynamicResult Run() {
    double threshold = 0;
    int64_t tokens = 0;
    for (int64_t t : p_.range_tokens) tokens += t;
    threshold += static_cast<double>(p_.heads_q) * static_cast<double>(tokens) * 2.0;
    threshold += static_cast<double>(p_.heads_kv) * static_cast<double>(tokens) * 2.0;
    const size_t cells = p_.cells.size();
    std::vector<int32_t> state(cells, -1), best, attempt;
    bool have_best = false;
    double low = 0, high = threshold;
    MagiDynamicResult result;
    std::vector<Edge> edges;
    std::vector<int32_t> sorted;
    bool dirty = true;
    for (int it = 0; it < kMaxSearchIterations; ++it) {
      const double mid = (low + high) / 2;
      ++result.iterations;
      if (dirty) {
        edges = Edges(state);
        sorted = SortedByScore(edges);
        dirty = false;
      }
      std::vector<int32_t> selected;
      if (it == 0) {
        selected.resize(edges.size());
        std::iota(selected.begin(), selected.end(), 0);
      } else {
        selected = Select(edges, sorted, mid);
      }
      bool feasible = false;
      attempt = Place(edges, selected, feasible);
      if (feasible) {
        best = attempt;
        have_best = true;
        high = mid;
        state = attempt;
        dirty = true;
      } else {
        low = mid;
      }
      if (high - low <= kSearchTolerance * high && low > 0) break;
    }
    result.feasible = have_best;
    result.rank = have_best ? best : attempt;
    for (size_t c = 0; c < cells; ++c)
      if (result.rank[c] < 0) result.rank[c] = p_.range_owner[p_.cells[c].q];
    result.work.assign(n_, 0);
    for (size_t c = 0; c < cells; ++c) result.work[result.rank[c]] += p_.cells[c].area;
    return result;
  }

 private:
  // The simplex edges for the current assignment (-1: not assigned): for
  // every grid row (column), one edge to every other rank, weighted by the
  // work of that row (column) the rank computes now plus an even share of
  // the unassigned work. Their C++ extension's weights (it scales the
  // unassigned share by 0.95 twice, where the Python fallback does once).
  std::vector<Edge> Edges(const std::vector<int32_t>& state) const {
    const int32_t m = static_cast<int32_t>(p_.range_owner.size());
    std::vector<Edge> edges;
    edges.reserve(static_cast<size_t>(2) * m * (n_ - 1));
    std::vector<double> assigned(n_);
    const double base = area_avg_ / n_ * kBaseWeight;
    for (int pass = 0; pass < 2; ++pass) {
      const bool qo = pass == 0;
      for (int32_t i = 0; i < m; ++i) {
        std::fill(assigned.begin(), assigned.end(), 0.0);
        double solved = 0;
        for (int32_t c : qo ? rows_[i] : cols_[i]) {
          if (state[c] < 0) continue;
          assigned[state[c]] += static_cast<double>(p_.cells[c].area);
          solved += static_cast<double>(p_.cells[c].area);
        }
        const double unsolved =
            (static_cast<double>(qo ? row_sum_[i] : col_sum_[i]) - solved) * (kSolvedWeight / n_);
        const int32_t owner = p_.range_owner[i];
        const int64_t cost = p_.range_tokens[i] * (qo ? p_.heads_q : p_.heads_kv);
        for (int32_t r = 0; r < n_; ++r) {
          if (r == owner) continue;
          const double weight = (assigned[r] + unsolved) * kSolvedWeight + base;
          edges.push_back(qo ? Edge{owner, r, weight, cost, true, i}
                             : Edge{r, owner, weight, cost, false, i});
        }
      }
    }
    return edges;
  }

  // Edge ids by weight / cost, largest first, ties by id (their full sort;
  // their C++ sorts only the top half of more than 2048 edges).
  static std::vector<int32_t> SortedByScore(const std::vector<Edge>& edges) {
    std::vector<double> score(edges.size());
    for (size_t e = 0; e < edges.size(); ++e)
      score[e] = edges[e].weight / std::max(static_cast<double>(edges[e].cost), 1e-6);
    std::vector<int32_t> order(edges.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return score[a] != score[b] ? score[a] > score[b] : a < b;
    });
    return order;
  }

  // Greedy: take edges in score order while both ends stay within `threshold`.
  std::vector<int32_t> Select(const std::vector<Edge>& edges, const std::vector<int32_t>& sorted,
                              double threshold) const {
    std::vector<double> used(n_, 0.0);
    std::vector<int32_t> selected;
    for (int32_t e : sorted) {
      const Edge& x = edges[e];
      const double c = static_cast<double>(x.cost);
      if (used[x.u] + c <= threshold && used[x.v] + c <= threshold) {
        used[x.u] += c;
        used[x.v] += c;
        selected.push_back(e);
      }
    }
    return selected;
  }

  bool Test(const std::vector<uint64_t>& mask, size_t at, int32_t r) const {
    return (mask[at * words_ + r / 64] >> (r % 64)) & 1;
  }

  // Their greedy stand-in for max flow: a cell may go to the ranks that hold
  // (by ownership or a selected edge) both its Q and its K/V; cells with the
  // fewest choices first (then the largest), a cell both of whose shards a
  // rank owns to that rank, else to its Q owner while that is below the mean,
  // else to the least-loaded allowed rank; then up to 5 rounds moving cells
  // off ranks above the cap. Feasible when no rank is above the cap.
  std::vector<int32_t> Place(const std::vector<Edge>& edges, const std::vector<int32_t>& selected,
                             bool& feasible) const {
    const size_t m = p_.range_owner.size(), cells = p_.cells.size();
    std::vector<uint64_t> qo(m * words_, 0), kv(m * words_, 0);
    const auto set = [&](std::vector<uint64_t>& mask, size_t at, int32_t r) {
      mask[at * words_ + r / 64] |= uint64_t{1} << (r % 64);
    };
    for (size_t i = 0; i < m; ++i) {
      set(qo, i, p_.range_owner[i]);
      set(kv, i, p_.range_owner[i]);
    }
    for (int32_t e : selected) {
      const Edge& x = edges[e];
      if (x.qo)
        set(qo, x.tag, x.v);
      else
        set(kv, x.tag, x.u);
    }
    std::vector<uint64_t> allowed(cells * words_);
    std::vector<int32_t> degree(cells, 0);
    for (size_t c = 0; c < cells; ++c) {
      for (int32_t w = 0; w < words_; ++w) {
        const uint64_t both = qo[p_.cells[c].q * words_ + w] & kv[p_.cells[c].k * words_ + w];
        allowed[c * words_ + w] = both;
        degree[c] += __builtin_popcountll(both);
      }
      if (degree[c] == 0) {
        feasible = false;
        return std::vector<int32_t>(cells, -1);
      }
    }
    std::vector<int32_t> order(cells);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      if (degree[a] != degree[b]) return degree[a] < degree[b];
      return p_.cells[a].area > p_.cells[b].area;
    });
    std::vector<int64_t> load(n_, 0);
    std::vector<int32_t> rank(cells, -1);
    for (int32_t c : order) {
      const int32_t q_owner = p_.range_owner[p_.cells[c].q];
      int32_t to = -1;
      if (q_owner == p_.range_owner[p_.cells[c].k]) {
        to = q_owner;
      } else if (Test(allowed, c, q_owner) && static_cast<double>(load[q_owner]) < area_avg_) {
        to = q_owner;  // their "usp" and "ring" choices (both the Q owner with one head group)
      } else {
        int64_t least = std::numeric_limits<int64_t>::max();
        for (int32_t r = 0; r < n_; ++r)
          if (Test(allowed, c, r) && load[r] < least) least = load[r], to = r;
      }
      load[to] += p_.cells[c].area;
      rank[c] = to;
    }
    const double cap = area_avg_ * std::max(kUnbalanceRate, 1.0);
    const auto over = [&] {
      for (int32_t r = 0; r < n_; ++r)
        if (static_cast<double>(load[r]) > cap) return true;
      return false;
    };
    for (int round = 0; round < kRefineRounds && over(); ++round) {
      bool changed = false;
      for (int32_t c : order) {
        const int32_t from = rank[c];
        if (static_cast<double>(load[from]) <= cap) continue;
        const int64_t area = p_.cells[c].area;
        int64_t best_load = load[from];
        int32_t to = -1;
        for (int32_t r = 0; r < n_; ++r)
          if (r != from && Test(allowed, c, r) && load[r] + area < best_load)
            best_load = load[r] + area, to = r;
        if (to < 0) continue;
        load[from] -= area;
        load[to] += area;
        rank[c] = to;
        changed = true;
      }
      if (!changed) break;
    }
    feasible = !over();
    return rank;
  }

  const MagiDynamicProblem& p_;
  const int32_t n_;
  int32_t words_ = 1;
  double area_avg_ = 0;
  std::vector<std::vector<int32_t>> rows_, cols_;
  std::vector<int64_t> row_sum_, col_sum_;
};

// Unique (block, worker) pairs, sorted, of the cells computed away from the
// owner of the cell's query (qo) or key (!qo) shard.
std::vector<std::pair<int32_t, int32_t>> Moves(const Plan& plan, const std::vector<BlockPair>& all,
                                               bool qo) {
  std::vector<std::pair<int32_t, int32_t>> moves;
  for (const BlockPair& p : all) {
    const int32_t block = qo ? p.q_block : p.kv_block;
    const int32_t at = ComputeWorker(plan.blocks, p);
    if (at != plan.blocks[block].worker) moves.push_back({block, at});
  }
  std::sort(moves.begin(), moves.end());
  moves.erase(std::unique(moves.begin(), moves.end()), moves.end());
  return moves;
}

}  // namespace

std::vector<std::pair<int32_t, int32_t>> MagiDynamicGridOrder(int32_t rows, int32_t cols) {
  std::vector<std::pair<int32_t, int32_t>> out;
  out.reserve(static_cast<size_t>(std::max(rows, 0)) * std::max(cols, 0));
  SplitGrid(0, rows, 0, cols, /*prefer_q=*/true, out);
  return out;
}

MagiDynamicResult SolveMagiDynamic(const MagiDynamicProblem& problem) {
  const size_t m = problem.range_owner.size();
  if (problem.workers < 1 || problem.heads_q < 1 || problem.heads_kv < 1 ||
      problem.range_tokens.size() != m)
    throw Error(ErrorCode::kInvalidArgument, "magi-dynamic: bad problem (workers " +
                                                 std::to_string(problem.workers) + ", shards " +
                                                 std::to_string(m) + ")");
  for (size_t i = 0; i < m; ++i)
    if (problem.range_owner[i] < 0 || problem.range_owner[i] >= problem.workers)
      throw Error(ErrorCode::kInvalidArgument,
                  "magi-dynamic: shard " + std::to_string(i) + " has owner " +
                      std::to_string(problem.range_owner[i]) + ", not a worker");
  for (const MagiDynamicCell& c : problem.cells)
    if (c.q < 0 || c.k < 0 || static_cast<size_t>(c.q) >= m || static_cast<size_t>(c.k) >= m ||
        c.area < 1)
      throw Error(ErrorCode::kInvalidArgument,
                  "magi-dynamic: cell (" + std::to_string(c.q) + ", " + std::to_string(c.k) +
                      ") with area " + std::to_string(c.area) + " is outside the grid or empty");
  return Solver(problem).Run();
}

Plan MakeMagiDynamicPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  Plan plan = PlanHeader(lengths, config, "magi-dynamic");
  const int32_t n = config.workers;
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  // MagiAttention's dispatch chunk, ceil(T / 8N) (MIN_CHUNKS_PER_RANK = 8):
  // sequential dispatch gives rank r chunks 8r .. 8r+7.
  plan.block_size = std::max<int64_t>(1, (total + 8 * int64_t{n} - 1) / (8 * int64_t{n}));

  // 1. One block per chunk: each worker's dataloader share cut into
  // kChunksPerRank near-equal chunks (MagiAttention pads the batch to a
  // multiple of 8N chunks; the dataloader layout is not padded).
  const std::vector<int64_t> offsets = SequenceOffsets(lengths);
  for (int32_t w = 0; w < n; ++w) {
    const int64_t share_begin = DataloaderBegin(total, n, w);
    const int64_t share = DataloaderBegin(total, n, w + 1) - share_begin;
    for (int32_t c = 0; c < kChunksPerRank; ++c) {
      const int64_t begin = share_begin + ZigZagChunkBegin(share, kChunksPerRank, c);
      const int64_t end = share_begin + ZigZagChunkBegin(share, kChunksPerRank, c + 1);
      if (begin == end) continue;
      Block block{w, {}};
      size_t s = std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin() - 1;
      for (int64_t at = begin; at < end; ++s) {
        const int64_t stop = std::min(end, offsets[s + 1]);
        block.segments.push_back({static_cast<int32_t>(s), at - offsets[s], stop - at});
        at = stop;
      }
      plan.blocks.push_back(std::move(block));
    }
  }

  // 2. The grid: one cell per required (query chunk, key chunk) pair, with
  // its mask area, in their KD split order.
  const std::vector<RequiredPair> required = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  const int32_t m = static_cast<int32_t>(plan.blocks.size());
  std::unordered_map<int64_t, int64_t> area;
  for (const RequiredPair& r : required) area[int64_t{r.q_block} * m + r.kv_block] = r.token_pairs;
  MagiDynamicProblem problem;
  problem.workers = n;
  problem.heads_q = plan.attention.heads_q;
  problem.heads_kv = plan.attention.heads_kv;
  for (const Block& b : plan.blocks) {
    problem.range_owner.push_back(b.worker);
    problem.range_tokens.push_back(b.tokens());
  }
  for (const auto& [q, k] : MagiDynamicGridOrder(m, m)) {
    const auto it = area.find(int64_t{q} * m + k);
    if (it != area.end()) problem.cells.push_back({q, k, it->second});
  }
  const MagiDynamicResult solved = SolveMagiDynamic(problem);

  // 3. Stages (their overlap degree is 1 with Q/O communication): stage 0
  // fetches Q and K/V for the remote cells while each rank computes the
  // cells it holds both chunks of; stage 1 computes the rest; stage 2
  // returns partial O (backward: dK/dV and dQ) to the owners.
  std::vector<BlockPair> local, remote;
  for (size_t c = 0; c < problem.cells.size(); ++c) {
    const MagiDynamicCell& cell = problem.cells[c];
    const int32_t at = solved.rank[c];
    const int32_t q_owner = plan.blocks[cell.q].worker;
    BlockPair pair{cell.q, cell.k, at == q_owner ? kOwner : at};
    (at == q_owner && at == plan.blocks[cell.k].worker ? local : remote).push_back(pair);
  }
  const auto by_block = [](const BlockPair& a, const BlockPair& b) {
    return std::tie(a.q_block, a.kv_block) < std::tie(b.q_block, b.kv_block);
  };
  std::sort(local.begin(), local.end(), by_block);
  std::sort(remote.begin(), remote.end(), by_block);
  plan.forward.resize(3);
  plan.backward.resize(3);
  for (const auto& [block, at] : Moves(plan, remote, /*qo=*/false)) {
    const Transfer t{block, plan.blocks[block].worker, at};
    plan.forward[0].send.push_back(t);
    plan.backward[0].send_kv.push_back(t);
    plan.backward[2].send_dkv.push_back({block, at, plan.blocks[block].worker});
  }
  for (const auto& [block, at] : Moves(plan, remote, /*qo=*/true)) {
    const Transfer t{block, plan.blocks[block].worker, at};
    plan.forward[0].send_q.push_back(t);
    plan.backward[0].send_q.push_back(t);
    plan.forward[2].send_o.push_back({block, at, plan.blocks[block].worker});
    plan.backward[2].send_dq.push_back({block, at, plan.blocks[block].worker});
  }
  plan.forward[0].compute = local;
  plan.backward[0].compute = local;
  plan.forward[1].compute = remote;
  plan.backward[1].compute = remote;
  baselines::FinishPlan(plan, 1);
  return plan;
}

}  // namespace fcp
