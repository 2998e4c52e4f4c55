#include "fcp/plan_metrics.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "fcp/error.h"
#include "fcp/required_pairs.h"

namespace fcp {

double Imbalance(const std::vector<double>& values) {
  if (values.empty()) return 0;
  const double max = *std::max_element(values.begin(), values.end());
  if (max <= 0) return 0;
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  return (max - mean) / max;
}

PlanMetrics ComputePlanMetrics(const Plan& plan, int32_t gpus_per_node) {
  if (gpus_per_node < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "plan metrics: gpus_per_node must be >= 1, got " + std::to_string(gpus_per_node));
  PlanMetrics m;
  m.gpus_per_node = gpus_per_node;
  const int32_t n = plan.workers;
  m.workers.resize(n);
  std::vector<int64_t> block_tokens(plan.blocks.size());
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    block_tokens[b] = plan.blocks[b].tokens();
    m.workers[plan.blocks[b].worker].tokens += block_tokens[b];
  }
  m.total_tokens = plan.total_tokens();

  // Compute: every pair, charged to its query block's owner. A valid plan
  // computes exactly the required pairs, whose token counts the sequence
  // index gives without pairing every segment of one block with every
  // segment of the other (ring plans hold thousands of segments per block).
  // A pair computed away from its query block's owner (the remote-compute
  // extension) is charged to the worker that computes it in the forward.
  std::unordered_map<uint64_t, int32_t> remote_worker;
  const auto pair_key = [](int32_t q, int32_t kv) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(q)) << 32) | static_cast<uint32_t>(kv);
  };
  for (const ForwardStage& stage : plan.forward)
    for (const BlockPair& p : stage.compute)
      if (p.worker != kOwner) remote_worker[pair_key(p.q_block, p.kv_block)] = p.worker;
  std::vector<double> q_block_flops(plan.blocks.size(), 0);
  for (const RequiredPair& p : RequiredPairs(plan.sequences, plan.blocks, plan.mask)) {
    const double flops = ForwardFlops(plan.attention, p.token_pairs);
    const auto remote = remote_worker.find(pair_key(p.q_block, p.kv_block));
    m.workers[remote == remote_worker.end() ? plan.blocks[p.q_block].worker : remote->second]
        .forward_flops += flops;
    // A query block's pairs all run on its owner, unless the plan moves queries.
    if (remote_worker.empty())
      q_block_flops[p.q_block] += flops;
    else
      q_block_flops[p.q_block] = std::max(q_block_flops[p.q_block], flops);
    m.max_pair_flops = std::max(m.max_pair_flops, flops);
    m.total_forward_flops += flops;
    ++m.required_pairs;
  }

  // Forward bytes of a transfer: K/V, or (remote-compute extension) Q or a
  // partial O with its LSE.
  const auto count_bytes = [&](const Transfer& t, int64_t bytes) {
    m.workers[t.src].bytes_sent += bytes;
    m.workers[t.dst].bytes_received += bytes;
    if (t.src / gpus_per_node == t.dst / gpus_per_node) {
      m.workers[t.src].nvlink_bytes_sent += bytes;
      m.workers[t.dst].nvlink_bytes_received += bytes;
      m.nvlink_bytes += bytes;
    } else {
      m.workers[t.src].nic_bytes_sent += bytes;
      m.workers[t.dst].nic_bytes_received += bytes;
      m.nic_bytes += bytes;
    }
  };
  for (const ForwardStage& stage : plan.forward) {
    for (const Transfer& t : stage.send_q)
      count_bytes(t, QueryTransferBytes(plan.attention, block_tokens[t.block], false));
    for (const Transfer& t : stage.send_o)
      count_bytes(t, PartialOutputBytes(plan.attention, block_tokens[t.block]));
  }
  for (const ForwardStage& stage : plan.forward) {
    if (!stage.send.empty()) ++m.forward_transfer_stages;
    for (const Transfer& t : stage.send) {
      const int64_t bytes = KvTransferBytes(plan.attention, t.rows(block_tokens[t.block]));
      m.workers[t.src].kv_blocks_sent++;
      m.workers[t.dst].kv_blocks_received++;
      count_bytes(t, bytes);
      ++m.transfer_edges;
    }
  }
  m.forward_stages = static_cast<int32_t>(plan.forward.size());
  m.backward_stages = static_cast<int32_t>(plan.backward.size());

  std::vector<double> compute(n), traffic(n), sent(n), received(n), nic_sent(n), nic_received(n),
      tokens(n);
  for (int32_t w = 0; w < n; ++w) {
    const WorkerMetrics& x = m.workers[w];
    compute[w] = x.forward_flops;
    traffic[w] = static_cast<double>(x.traffic_bytes());
    sent[w] = static_cast<double>(x.bytes_sent);
    received[w] = static_cast<double>(x.bytes_received);
    nic_sent[w] = static_cast<double>(x.nic_bytes_sent);
    nic_received[w] = static_cast<double>(x.nic_bytes_received);
    tokens[w] = static_cast<double>(x.tokens);
    m.max_bytes_sent = std::max(m.max_bytes_sent, x.bytes_sent);
    m.max_bytes_received = std::max(m.max_bytes_received, x.bytes_received);
    m.max_nic_bytes_sent = std::max(m.max_nic_bytes_sent, x.nic_bytes_sent);
    m.max_nic_bytes_received = std::max(m.max_nic_bytes_received, x.nic_bytes_received);
    m.max_degree = std::max<int32_t>(
        m.max_degree, static_cast<int32_t>(std::max(x.kv_blocks_sent, x.kv_blocks_received)));
    m.max_tokens = std::max(m.max_tokens, x.tokens);
    m.max_compute = std::max(m.max_compute, x.forward_flops);
  }
  m.transfer_stage_lower_bound =  // in 64 bits: coalesce may be near 2^31
      static_cast<int32_t>((int64_t{m.max_degree} + plan.coalesce - 1) / plan.coalesce);
  m.compute_imbalance = Imbalance(compute);
  m.traffic_imbalance = Imbalance(traffic);
  m.send_imbalance = Imbalance(sent);
  m.receive_imbalance = Imbalance(received);
  m.nic_send_imbalance = Imbalance(nic_sent);
  m.nic_receive_imbalance = Imbalance(nic_received);
  m.token_imbalance = Imbalance(tokens);
  m.compute_lower_bound = m.total_forward_flops / n;
  for (double f : q_block_flops) m.compute_lower_bound = std::max(m.compute_lower_bound, f);

  // Where transfers may carry part of a block (docs/plan-format.md), a query
  // block needs only the rows it attends.
  bool row_ranges = false;
  for (const ForwardStage& stage : plan.forward)
    for (const Transfer& t : stage.send) row_ranges = row_ranges || !t.all_rows();
  std::vector<int64_t> needed_tokens(plan.blocks.size(), 0);
  for (const ForwardStage& stage : plan.forward)
    for (const BlockPair& p : stage.compute)
      needed_tokens[p.q_block] += row_ranges ? AttendedRows(plan.sequences, plan.blocks[p.q_block],
                                                            plan.blocks[p.kv_block], plan.mask)
                                                   .size()
                                             : block_tokens[p.kv_block];
  for (int64_t tokens : needed_tokens)
    m.traffic_lower_bound_bytes =
        std::max(m.traffic_lower_bound_bytes,
                 KvTransferBytes(plan.attention, std::max<int64_t>(0, tokens - plan.token_cap)));
  for (const WorkerMetrics& x : m.workers)
    m.max_traffic_bytes = std::max(m.max_traffic_bytes, x.traffic_bytes());

  // Reshuffle: walk each block's segments in global token order against the
  // dataloader shares.
  const std::vector<int64_t> offsets = SequenceOffsets(plan.sequences);
  for (const Block& b : plan.blocks)
    for (const Segment& s : b.segments)
      ForEachDataloaderRun(s, offsets, n, [&](int32_t r, int64_t tokens) {
        if (r == b.worker) return;
        m.reshuffle_tokens += tokens;
        m.workers[r].reshuffle_tokens_out += tokens;
        m.workers[b.worker].reshuffle_tokens_in += tokens;
      });
  const int64_t bytes_per_token_in =
      (int64_t{plan.attention.heads_q} + 2 * int64_t{plan.attention.heads_kv}) *
      plan.attention.head_dim * plan.attention.dtype_bytes;
  const int64_t bytes_per_token_out =
      int64_t{plan.attention.heads_q} * plan.attention.head_dim * plan.attention.dtype_bytes;
  for (WorkerMetrics& x : m.workers) {
    x.reshuffle_bytes_in =
        x.reshuffle_tokens_in * bytes_per_token_in + x.reshuffle_tokens_out * bytes_per_token_out;
    x.reshuffle_bytes_out =
        x.reshuffle_tokens_in * bytes_per_token_out + x.reshuffle_tokens_out * bytes_per_token_in;
    m.max_worker_reshuffle_tokens =
        std::max(m.max_worker_reshuffle_tokens, x.reshuffle_tokens_in + x.reshuffle_tokens_out);
    m.max_worker_reshuffle_bytes_in =
        std::max(m.max_worker_reshuffle_bytes_in, x.reshuffle_bytes_in);
    m.max_worker_reshuffle_bytes_out =
        std::max(m.max_worker_reshuffle_bytes_out, x.reshuffle_bytes_out);
  }
  m.reshuffle_bytes = m.reshuffle_tokens * (bytes_per_token_in + bytes_per_token_out);
  ReshuffleFloorConfig floor;
  floor.workers = n;
  floor.mask = plan.mask;
  floor.token_cap = std::max(plan.token_cap, (m.total_tokens + n - 1) / n);
  m.reshuffle_floor = ComputeReshuffleFloor(plan.sequences, floor);
  return m;
}

}  // namespace fcp
