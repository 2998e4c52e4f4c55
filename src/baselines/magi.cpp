// MagiAttention-like planner (fcp/baselines.h; PEERS.md section 1): fixed-size
// chunks of the token stream, MinHeap LPT on mask area with a cardinality cap
// of ceil(chunks / N) per rank, all remote K/V fetched in one stage, each
// rank receiving exactly the key rows its chunks attend and returning dK/dV
// for exactly those rows.
#include <algorithm>
#include <numeric>
#include <queue>
#include <tuple>

#include "baseline_common.h"
#include "fcp/baselines.h"
#include "fcp/mask.h"
#include "fcp/required_pairs.h"

namespace fcp {

Plan MakeMagiPlan(const std::vector<int64_t>& lengths, const PlannerConfig& config) {
  Plan plan = PlanHeader(lengths, config, "magi");
  const int32_t n = config.workers;
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  // MagiAttention's default chunk size: ceil(T / (8 N)) (MAGI_ATTENTION_MIN_CHUNKS_PER_RANK = 8).
  const int64_t chunk = std::max<int64_t>(1, (total + 8 * int64_t{n} - 1) / (8 * int64_t{n}));
  plan.block_size = chunk;

  // 1. Cut the concatenated token stream into chunks (a chunk may span sequences).
  std::vector<Block> chunks;
  std::vector<int64_t> area;  // allowed pairs of the chunk's queries against their whole sequences
  int64_t room = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    int64_t start = 0;
    while (start < lengths[s]) {
      if (room == 0) {
        chunks.push_back({0, {}});
        area.push_back(0);
        room = chunk;
      }
      const int64_t len = std::min(room, lengths[s] - start);
      chunks.back().segments.push_back({static_cast<int32_t>(s), start, len});
      area.back() += AllowedPairs(plan.mask, {start, start + len}, {0, lengths[s]});
      start += len;
      room -= len;
    }
  }
  // 2. LPT: largest area first (ties by chunk id) to the least-loaded rank
  // (ties by rank id) that holds fewer than ceil(chunks / N) chunks.
  const int32_t count = static_cast<int32_t>(chunks.size());
  const int32_t cap = (count + n - 1) / n;
  std::vector<int32_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return area[a] > area[b]; });
  using Load = std::tuple<int64_t, int32_t>;  // area so far, rank
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (int32_t w = 0; w < n; ++w) heap.push({0, w});
  std::vector<int32_t> held(n, 0);
  for (int32_t c : order) {
    auto [load, w] = heap.top();
    heap.pop();
    chunks[c].worker = w;
    if (++held[w] < cap) heap.push({load + area[c], w});
  }
  plan.blocks = std::move(chunks);

  // 3. One fetch stage overlapping the local work, then the remote work.
  const std::vector<RequiredPair> required = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  baselines::BuildPullStages(plan, required, baselines::PullEdges(plan, required),
                             /*pipelined=*/true);

  // 4. The rows each transfer carries. MagiAttention's static solver fetches
  // the exact key ranges a rank's chunks attend, less the rank's own (remote
  // k_ranges = the bucket's k_ranges' holes against the host ranges, moved by
  // all-to-all-v with split_alignment_kv = 1: meta/solver/dist_attn_solver.py,
  // _init_host_remote_ranges_global_this_rank), and GroupReduce returns dK/dV
  // over the same ranges. So a transfer of chunk j to rank w carries the rows
  // of j that w's chunks attend: under a causal or sliding-window mask a
  // suffix of j (the head of a sequence that goes on past j), exactly; under
  // a full mask the range covering j's first and last segments where both
  // are attended (AttendedRows), whole chunks otherwise.
  TrimTransfersToAttendedRows(plan, required);
  baselines::FinishPlan(plan, 1);
  return plan;
}

}  // namespace fcp
