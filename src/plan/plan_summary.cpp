// The human-readable plan report shared by `fcp inspect` and the Python
// module's Plan.summary(), so both print the same numbers the same way.
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "fcp/plan_metrics.h"

namespace fcp {
namespace {

std::string Percent(double x) { return fmt::format("{:.2f}%", 100 * x); }

template <typename... T>
void Append(std::string& out, fmt::format_string<T...> format, T&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<T>(args)...);
}

}  // namespace

std::string FormatPlanSummary(const Plan& plan, const PlanMetrics& m, double planning_seconds) {
  std::string out;
  const int32_t n = plan.workers;
  Append(out, "plan: planner {}, {} workers, {} sequences, {} tokens, {} blocks, mask {}{}\n",
         plan.planner, n, plan.sequences.size(), m.total_tokens, plan.blocks.size(),
         MaskKindName(plan.mask.kind),
         plan.mask.kind == MaskKind::kSlidingWindow ? fmt::format(" (window {})", plan.mask.window)
                                                    : std::string());
  Append(out, "  block size {}, coalesce {}, token cap {}\n", plan.block_size, plan.coalesce,
         plan.token_cap);
  // A per-worker table stops being readable past a screenful of workers.
  if (n <= 64) {
    Append(out, "  {:>6} {:>8} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}\n",
           "worker", "tokens", "fwd GFLOP", "sent MiB", "recv MiB", "blk sent", "blk recv",
           "NIC sent", "NIC recv", "tok in", "tok out");
    for (int32_t w = 0; w < n; ++w) {
      const WorkerMetrics& x = m.workers[w];
      Append(
          out,
          "  {:>6} {:>8} {:>12.1f} {:>10.1f} {:>10.1f} {:>10} {:>10} {:>10.1f} {:>10.1f} {:>8} {:>8}\n",
          w, x.tokens, x.forward_flops / 1e9, x.bytes_sent / 1048576.0,
          x.bytes_received / 1048576.0, x.kv_blocks_sent, x.kv_blocks_received,
          x.nic_bytes_sent / 1048576.0, x.nic_bytes_received / 1048576.0, x.reshuffle_tokens_in,
          x.reshuffle_tokens_out);
    }
  }
  double mean_traffic = 0, max_traffic = 0;
  for (const WorkerMetrics& x : m.workers) {
    mean_traffic += static_cast<double>(x.traffic_bytes()) / n;
    max_traffic = std::max(max_traffic, static_cast<double>(x.traffic_bytes()));
  }
  Append(out, "  tokens:   max {} (cap {}), imbalance {}\n", m.max_tokens, plan.token_cap,
         Percent(m.token_imbalance));
  Append(out, "  compute:  max {:.1f} GFLOP, lower bound {:.1f} (gap {}), imbalance {}\n",
         m.max_compute / 1e9, m.compute_lower_bound / 1e9,
         Percent(m.compute_lower_bound > 0 ? m.max_compute / m.compute_lower_bound - 1 : 0),
         Percent(m.compute_imbalance));
  Append(
      out,
      "  traffic:  max {:.1f} MiB sent+received, mean {:.1f}, imbalance {} (send {}, receive {})\n",
      max_traffic / 1048576.0, mean_traffic / 1048576.0, Percent(m.traffic_imbalance),
      Percent(m.send_imbalance), Percent(m.receive_imbalance));
  Append(
      out,
      "            lower bound on the max {:.1f} MiB (the K/V one query block needs beyond the cap)\n",
      m.traffic_lower_bound_bytes / 1048576.0);
  // Ports are full duplex: the busiest sender and receiver, not the sum, set the time.
  Append(out, "  ports:    busiest worker {:.1f} MiB sent, {:.1f} MiB received\n",
         m.max_bytes_sent / 1048576.0, m.max_bytes_received / 1048576.0);
  Append(
      out,
      "            across nodes of {} (NIC): {:.1f} of {:.1f} MiB; max {:.1f} sent (imbalance {}), "
      "{:.1f} received (imbalance {})\n",
      m.gpus_per_node, m.nic_bytes / 1048576.0, (m.nic_bytes + m.nvlink_bytes) / 1048576.0,
      m.max_nic_bytes_sent / 1048576.0, Percent(m.nic_send_imbalance),
      m.max_nic_bytes_received / 1048576.0, Percent(m.nic_receive_imbalance));
  Append(
      out,
      "  stages:   forward {} ({} with transfers; lower bound ceil(Delta/c) = ceil({}/{}) = {}), "
      "backward {}\n",
      m.forward_stages, m.forward_transfer_stages, m.max_degree, plan.coalesce,
      m.transfer_stage_lower_bound, m.backward_stages);
  Append(out, "  pairs:    {} required block pairs, {} K/V transfers\n", m.required_pairs,
         m.transfer_edges);
  Append(out,
         "  reshuffle: {} tokens ({}) leave their dataloader worker, {:.1f} MiB in + out; "
         "the busiest worker moves {} tokens in + out\n",
         m.reshuffle_tokens,
         Percent(m.total_tokens ? double(m.reshuffle_tokens) / m.total_tokens : 0),
         m.reshuffle_bytes / 1048576.0, m.max_worker_reshuffle_tokens);
  const ReshuffleFloor& f = m.reshuffle_floor;
  Append(
      out,
      "             floor {} tokens ({}: {} shed by {} overloaded homes + {} replacements); busiest "
      "worker's forward reshuffle {:.1f} MiB in, {:.1f} MiB out\n",
      f.tokens, Percent(m.total_tokens ? double(f.tokens) / m.total_tokens : 0), f.shed_tokens,
      f.overloaded_workers, f.replacement_tokens, m.max_worker_reshuffle_bytes_in / 1048576.0,
      m.max_worker_reshuffle_bytes_out / 1048576.0);
  if (planning_seconds >= 0) Append(out, "  planning time: {:.2f} ms\n", planning_seconds * 1e3);
  return out;
}

}  // namespace fcp
