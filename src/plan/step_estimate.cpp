// The closed-form step estimate (fcp/step_estimate.h).
#include "fcp/step_estimate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "buckets.h"
#include "fcp/error.h"
#include "fcp/required_pairs.h"
#include "fcp/step_estimate_input.h"

namespace fcp {

void StepCosts::validate(const std::string& context) const {
  const auto fail = [&](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, context + ": " + what);
  };
  const auto positive = [&](const char* field, double v) {
    if (!(v > 0) || !std::isfinite(v)) fail(fmt::format("{} must be > 0, got {:g}", field, v));
  };
  const auto non_negative = [&](const char* field, double v) {
    if (!(v >= 0) || !std::isfinite(v)) fail(fmt::format("{} must be >= 0, got {:g}", field, v));
  };
  positive("compute_flops_per_s", compute_flops_per_s);
  positive("backward_flops_factor", backward_flops_factor);
  positive("backward_efficiency_ratio", backward_efficiency_ratio);
  non_negative("kernel_launch_us", kernel_launch_us);
  if (node_workers < 1) fail(fmt::format("node_workers must be >= 1, got {}", node_workers));
  positive("nvlink_bytes_per_us", nvlink_bytes_per_us);
  positive("nic_bytes_per_us", nic_bytes_per_us);
  non_negative("nvlink_latency_us", nvlink_latency_us);
  non_negative("nic_latency_us", nic_latency_us);
  ValidateEfficiencyTable(efficiency, context);
}

void ValidateEfficiencyTable(const std::vector<EfficiencyPoint>& curve,
                             const std::string& context) {
  const auto fail = [&](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, context + ": " + what);
  };
  if (curve.empty()) fail("efficiency table is empty");
  for (size_t i = 0; i < curve.size(); ++i) {
    const EfficiencyPoint& e = curve[i];
    if (!(e.tokens >= 1) || !std::isfinite(e.tokens))
      fail(fmt::format("efficiency point {}: tokens must be >= 1, got {:g}", i, e.tokens));
    if (!(e.efficiency > 0 && e.efficiency <= 1))
      fail(fmt::format("efficiency point {}: efficiency must be in (0, 1], got {:g}", i,
                       e.efficiency));
    if (i > 0 && !(e.tokens > curve[i - 1].tokens))
      fail(fmt::format("efficiency point {}: tokens must increase ({:g} after {:g})", i, e.tokens,
                       curve[i - 1].tokens));
  }
}

StepCosts GpuXStepCosts() {
  // The values of the gpu-x profile (src/model/cost_model.cpp has their
  // sources), converted as StepCostsOf converts them (the same roundings).
  StepCosts c;
  c.compute_flops_per_s = 989e12 * (126.0 / 132.0);
  c.efficiency = {{128, 0.07},  {256, 0.14},  {512, 0.25},    {1024, 0.38},   {2048, 0.50},
                  {4096, 0.58}, {8192, 0.62}, {16384, 0.645}, {32768, 0.655}, {65536, 0.66}};
  c.backward_flops_factor = 2.5;
  c.backward_efficiency_ratio = 0.75;
  c.kernel_launch_us = 8e-6 * 1e6;
  c.node_workers = 8;
  c.nvlink_bytes_per_us = 450e9 * 1e-6;
  c.nic_bytes_per_us = 50e9 * 1e-6;
  c.nvlink_latency_us = 4e-6 * 1e6;
  c.nic_latency_us = 8e-6 * 1e6;
  return c;
}

namespace {

// f(kernel_tokens) of `curve`, with log2 of its points' tokens read from
// `log2_tokens` where given (the estimate computes them once: the same
// values, a third of the logarithms) or computed here.
double Interpolate(const std::vector<EfficiencyPoint>& curve,
                   const std::vector<double>* log2_tokens, double kernel_tokens) {
  if (kernel_tokens <= 0) return curve.front().efficiency;  // no work: any positive value
  if (kernel_tokens <= curve.front().tokens)
    return curve.front().efficiency * kernel_tokens / curve.front().tokens;
  if (kernel_tokens >= curve.back().tokens) return curve.back().efficiency;
  const auto hi = std::upper_bound(curve.begin(), curve.end(), kernel_tokens,
                                   [](double x, const EfficiencyPoint& e) { return x < e.tokens; });
  const auto lo = hi - 1;
  const auto i = static_cast<size_t>(lo - curve.begin());
  const double a = log2_tokens ? (*log2_tokens)[i] : std::log2(lo->tokens);
  const double b = log2_tokens ? (*log2_tokens)[i + 1] : std::log2(hi->tokens);
  const double w = (std::log2(kernel_tokens) - a) / (b - a);
  return lo->efficiency + w * (hi->efficiency - lo->efficiency);
}

}  // namespace

double InterpolateEfficiency(const std::vector<EfficiencyPoint>& curve, double kernel_tokens) {
  return Interpolate(curve, nullptr, kernel_tokens);
}

namespace {

// Port classes and directions.
enum Port { kNicIn, kNicOut, kNvlinkIn, kNvlinkOut, kPorts };

struct PortBytes {
  double bytes[kPorts] = {0, 0, 0, 0};
  // The busier in-port's and out-port's times, us.
  double In(const StepCosts& c) const {
    return std::max(bytes[kNicIn] / c.nic_bytes_per_us, bytes[kNvlinkIn] / c.nvlink_bytes_per_us);
  }
  double Out(const StepCosts& c) const {
    return std::max(bytes[kNicOut] / c.nic_bytes_per_us, bytes[kNvlinkOut] / c.nvlink_bytes_per_us);
  }
  // Each port carrying its own bytes and its opposite direction's: the
  // backward's K/V, which go out again as the forward's did, with the
  // dK/dV partials of what came in going back out the same way.
  PortBytes BothWays() const {
    PortBytes both;
    for (int port = 0; port < kPorts; ++port) both.bytes[port] = bytes[port ^ 1] + bytes[port];
    return both;
  }
  // The busiest port's time, us.
  double Time(const StepCosts& c) const {
    return std::max({bytes[kNicIn] / c.nic_bytes_per_us, bytes[kNicOut] / c.nic_bytes_per_us,
                     bytes[kNvlinkIn] / c.nvlink_bytes_per_us,
                     bytes[kNvlinkOut] / c.nvlink_bytes_per_us});
  }
};

// `bytes` from src to dst on their ports (NIC across nodes, NVLink inside).
void Move(std::vector<PortBytes>& ports, int32_t src, int32_t dst, double bytes,
          int32_t node_workers) {
  const bool nic = src / node_workers != dst / node_workers;
  ports[src].bytes[nic ? kNicOut : kNvlinkOut] += bytes;
  ports[dst].bytes[nic ? kNicIn : kNvlinkIn] += bytes;
}

// One worker's terms of one pass, us.
struct WorkerPass {
  // compute: all of it; remote: its part with received K/V; stages: its
  // transfer stages (0: it receives nothing).
  double compute = 0, remote = 0, home_compute = 0, ports = 0, stages = 0, inflow = 0, outflow = 0;
  // Its receives group by group, each pull slowed by its sender's other
  // pulls (SenderSharing); 0 where it receives nothing.
  double chain = 0;
};

// A worker's pass: its pipeline (its compute with its transfers: the
// busiest port or the receive chain, the longer) and, with the reshuffle,
// the path of its blocks away from home. `base` is set to the pipeline.
double WorkerTime(const WorkerPass& p, double& base) {
  const double transfers = std::max(p.ports, p.chain);
  // The pipeline: the first received blocks wait for their stage's
  // transfers where the local compute is shorter, and the last stage's
  // compute follows the last transfer.
  base = std::max(p.compute, transfers);
  if (p.stages > 0) {
    const double lead = std::max(0.0, transfers / p.stages - (p.compute - p.remote));
    base = std::max(p.compute + lead, transfers + p.remote / p.stages);
  }
  // The blocks away from home: their inputs in, their compute, their
  // late outputs out, in series; the blocks at home compute meanwhile.
  const double away = p.inflow + (p.compute - p.home_compute) + p.outflow;
  return std::max(base, away);
}

PassEstimate CombinePass(const std::vector<WorkerPass>& workers, double latency_us) {
  PassEstimate best;
  best.time_us = -1;
  for (size_t w = 0; w < workers.size(); ++w) {
    const WorkerPass& p = workers[w];
    double base = 0;
    const double time = WorkerTime(p, base);
    const double fill = base - std::max({p.compute, p.ports, p.chain});
    if (time > best.time_us) {
      best.time_us = time;
      best.compute_us = p.compute;
      best.port_us = std::max(p.ports, p.chain);
      best.fill_us = fill;
      best.reshuffle_us = time - base;
      best.critical_worker = static_cast<int32_t>(w);
      best.binding = p.compute >= std::max(p.ports, p.chain) ? "compute" : "ports";
    }
  }
  best.time_us = std::max(best.time_us, 0.0) + latency_us;
  best.latency_us = latency_us;
  return best;
}

// One pass's K/V pulls: receiver w's are row w of `rows`, in the
// order its groups take them (by gate); each with its sender, port class,
// time alone on the ports and gate (when the sender holds the block: the
// end of its reshuffle inflow for a block away from home, else 0).
struct Pull {
  int32_t src = 0;
  bool nic = false;
  double alone_us = 0, gate_us = 0;
};
struct Pulls {
  detail::RowIndex<int64_t> rows;  // by receiver
  std::vector<Pull> pulls;
};

// Sets each worker's receive chain (WorkerPass::chain). A receiver takes
// its pulls c at a time, in gate order, a group done when its slowest pull
// and its in-port bytes are: time = max(time, the group's latest gate) +
// max(its slowest pull, its NIC bytes, its NVLink bytes). A pull shares
// its sender's out-port with the receivers pulling from it at the same
// time, as in a processor-sharing queue: alone_us / (1 - rho), rho the
// sender's out-port busy time of its class (`sender_nic_us`,
// `sender_nvlink_us`) less this pull's, over the pass time P. P is the
// pass's own time: the fixed point P = max over workers of their time with
// the chains of P, searched at and above the busiest sender's time. The
// right side falls as P grows, so there is one crossing; where the chains
// add nothing at the pass time without them, that time is the fixed point.
// Cost: O(pulls) per evaluation, a few evaluations (one where the chains
// add nothing).
void SenderSharing(std::vector<WorkerPass>& workers, const Pulls& pulls,
                   const std::vector<double>& sender_nic_us,
                   const std::vector<double>& sender_nvlink_us, int32_t coalesce) {
  double busiest = 0, unshared = 0;
  for (size_t w = 0; w < workers.size(); ++w) {
    busiest = std::max({busiest, sender_nic_us[w], sender_nvlink_us[w]});
    double base = 0;
    unshared = std::max(unshared, WorkerTime(workers[w], base));
  }
  if (pulls.pulls.empty()) return;
  const auto group = static_cast<size_t>(coalesce);
  // The longest worker's time with the chains at pass time P, less P.
  const auto excess = [&](double pass_us) {
    double longest = 0;
    for (size_t w = 0; w < workers.size(); ++w) {
      double time = 0;
      const auto end = static_cast<size_t>(pulls.rows.offset[w + 1]);
      for (auto first = static_cast<size_t>(pulls.rows.offset[w]); first < end; first += group) {
        double gate = 0, slowest = 0, nic = 0, nvlink = 0;
        for (size_t e = first; e < std::min(first + group, end); ++e) {
          const Pull& pull = pulls.pulls[e];
          const double sender = (pull.nic ? sender_nic_us : sender_nvlink_us)[pull.src];
          gate = std::max(gate, pull.gate_us);
          const double others = std::max(0.0, sender - pull.alone_us);
          slowest = std::max(slowest, pull.alone_us / (1 - others / pass_us));
          (pull.nic ? nic : nvlink) += pull.alone_us;
        }
        time = std::max(time, gate) + std::max({slowest, nic, nvlink});
      }
      workers[w].chain = time;
      double base = 0;
      longest = std::max(longest, WorkerTime(workers[w], base));
    }
    return longest - pass_us;
  };
  // g(P) = excess(P) falls as P grows. At a = the pass without chains (not
  // below the busiest sender) g >= 0 unless the chains add nothing there;
  // and since the right side F falls, F(a) = a + g(a) is at or above the
  // fixed point. Between them, regula falsi (Illinois): a few
  // evaluations to 1e-9 relative.
  double a = std::max(unshared, busiest), fa = excess(a);
  if (fa <= 0) return;  // the chains add nothing (or the fixed point is below the busiest sender)
  double b = a + fa, fb = excess(b);
  for (int i = 0; i < 60 && fb != 0 && std::abs(fb) > 1e-9 * b; ++i) {
    const double c = (a * fb - b * fa) / (fb - fa);
    const double fc = excess(c);
    if ((fc > 0) != (fb > 0)) {
      a = b;
      fa = fb;
    } else {
      fa /= 2;
    }
    b = c;
    fb = fc;
  }
  // The chains are those of the last evaluation, at b.
}

}  // namespace

StepEstimate EstimateStep(const Plan& plan, const StepCosts& costs) {
  costs.validate();
  const std::vector<RequiredPair> pairs = RequiredPairs(plan.sequences, plan.blocks, plan.mask);
  std::vector<int32_t> owner;
  owner.reserve(plan.blocks.size());
  for (const Block& block : plan.blocks) owner.push_back(block.worker);
  return detail::EstimateStep({&plan.sequences, &plan.blocks, &owner, &pairs, plan.mask,
                               plan.attention, plan.workers, plan.coalesce},
                              costs);
}

StepEstimate detail::EstimateStep(const StepEstimateInput& in, const StepCosts& costs) {
  costs.validate();
  const int32_t n = in.workers;
  const int32_t node = costs.node_workers;
  const std::vector<Block>& plan_blocks = *in.blocks;
  const std::vector<int32_t>& owner = *in.owner;
  const std::vector<RequiredPair>& pairs = *in.pairs;
  const size_t blocks = plan_blocks.size();
  const AttentionShape& shape = in.attention;
  const int32_t coalesce = std::max(in.coalesce, 1);
  if (owner.size() != blocks)
    throw Error(ErrorCode::kInvalidPlan,
                fmt::format("step estimate: {} owners for {} blocks", owner.size(), blocks));
  const double us_per_flop = 1e6 / costs.compute_flops_per_s;
  const double flops_per_pair = ForwardFlops(shape, 1);
  std::vector<double> log2_tokens;
  log2_tokens.reserve(costs.efficiency.size());
  for (const EfficiencyPoint& e : costs.efficiency) log2_tokens.push_back(std::log2(e.tokens));
  // Forward seconds of `token_pairs` in kernels of `kernel_tokens`, us.
  const auto kernel_us = [&](double token_pairs, double kernel_tokens) {
    return token_pairs * flops_per_pair * us_per_flop /
           Interpolate(costs.efficiency, &log2_tokens, kernel_tokens);
  };
  // Per block: the query tokens of its largest sequence (the kernel length
  // of its pairs with other blocks) and its pairs with itself, per query
  // segment, as the simulator merges them.
  std::vector<double> q_tokens(blocks, 0), diagonal_us(blocks, 0);
  for (size_t b = 0; b < blocks; ++b) {
    const Block& block = plan_blocks[b];
    if (owner[b] < 0 || owner[b] >= n)
      throw Error(ErrorCode::kInvalidPlan, fmt::format("step estimate: block {} has worker {} "
                                                       "outside [0, {})",
                                                       b, owner[b], n));
    for (const Segment& q : block.segments) {
      int64_t same_sequence = 0, diagonal = 0;
      for (const Segment& k : block.segments) {
        if (k.seq != q.seq) continue;
        same_sequence += k.length;
        diagonal +=
            AllowedPairs(in.mask, {q.start, q.start + q.length}, {k.start, k.start + k.length});
      }
      q_tokens[b] = std::max(q_tokens[b], static_cast<double>(same_sequence));
      if (diagonal > 0)
        diagonal_us[b] +=
            kernel_us(static_cast<double>(diagonal),
                      2.0 * static_cast<double>(diagonal) / static_cast<double>(q.length));
    }
  }
  // Per query block: its other pairs, local (K/V owned by its worker) and
  // received, and how many blocks it receives.
  std::vector<double> block_us(diagonal_us), remote_us(blocks, 0);
  std::vector<double> remote_pairs(blocks, 0), received_blocks(blocks, 0);
  std::vector<uint8_t> receives_kv(blocks, 0), sent(blocks, 0);
  // Query block q's pairs: [pairs_begin[q], pairs_end[q]) (none: empty).
  std::vector<int64_t> pairs_begin(blocks, 0), pairs_end(blocks, 0);
  for (size_t i = 0; i < pairs.size();) {
    const int32_t q = pairs[i].q_block;
    pairs_begin[q] = static_cast<int64_t>(i);
    double local = 0, remote = 0;
    int64_t received = 0;
    for (; i < pairs.size() && pairs[i].q_block == q; ++i) {
      const RequiredPair& p = pairs[i];
      if (p.kv_block == q) continue;
      if (owner[p.kv_block] == owner[q]) {
        local += static_cast<double>(p.token_pairs);
      } else {
        remote += static_cast<double>(p.token_pairs);
        ++received;
      }
    }
    pairs_end[q] = static_cast<int64_t>(i);
    if (local > 0) block_us[q] += kernel_us(local, 2.0 * local / q_tokens[q]);
    receives_kv[q] = received > 0;
    remote_pairs[q] = remote;
    received_blocks[q] = static_cast<double>(received);
  }
  // One K/V transfer per (block, receiving worker): the query blocks'
  // pairs visited worker by worker, a stamp per K/V block holding the last
  // worker that counted it (O(P + B); sorting the pairs' edges took most of
  // the estimate's time). The port sums below add whole bytes, exactly, so
  // their order does not change the estimate.
  const Buckets owned =
      BucketBy(static_cast<size_t>(n), blocks, [&](int32_t b) { return owner[b]; });
  std::vector<int32_t> counted_for(blocks, -1);
  std::vector<std::pair<int32_t, int32_t>> edges;  // (K/V block, receiver), each once
  Pulls pulls;  // the forward's; the backward's are the same, ungated
  pulls.rows.offset.assign(static_cast<size_t>(n) + 1, 0);
  for (int32_t w = 0; w < n; ++w) {
    pulls.rows.offset[w] = static_cast<int64_t>(edges.size());
    for (const int32_t q : owned.row(static_cast<size_t>(w))) {
      for (int64_t i = pairs_begin[q]; i < pairs_end[q]; ++i) {
        const int32_t kv_block = pairs[i].kv_block;
        if (owner[kv_block] == w || counted_for[kv_block] == w) continue;
        counted_for[kv_block] = w;
        edges.emplace_back(kv_block, w);
      }
    }
  }
  pulls.rows.offset[n] = static_cast<int64_t>(edges.size());
  // K/V transfers: per worker, blocks received and sent, and port bytes.
  std::vector<int64_t> receives(n, 0), sends(n, 0);
  std::vector<PortBytes> kv(n);
  bool any_nic = false;
  pulls.pulls.reserve(edges.size());
  // Per block, its K/V bytes: an edge per (block, receiver), so computed
  // once a block rather than once an edge (Block::tokens sums its segments).
  std::vector<double> kv_transfer_bytes(blocks);
  for (size_t b = 0; b < blocks; ++b)
    kv_transfer_bytes[b] = static_cast<double>(KvTransferBytes(shape, plan_blocks[b].tokens()));
  for (const auto& [kv_block, dst] : edges) {
    const int32_t src = owner[kv_block];
    ++receives[dst];
    ++sends[src];
    sent[kv_block] = 1;
    const bool nic = src / node != dst / node;
    any_nic = any_nic || nic;
    const double bytes = kv_transfer_bytes[kv_block];
    Move(kv, src, dst, bytes, node);
    pulls.pulls.push_back(
        {src, nic, bytes / (nic ? costs.nic_bytes_per_us : costs.nvlink_bytes_per_us), 0});
  }
  int64_t degree = 0;
  for (int32_t w = 0; w < n; ++w) degree = std::max({degree, receives[w], sends[w]});
  const double transfer_stages = std::ceil(static_cast<double>(degree) / coalesce);
  const double latency = any_nic ? costs.nic_latency_us : costs.nvlink_latency_us;
  // A query block's received K/V arrive spread over the pass's transfer
  // stages (the colouring deals a worker's receives over up to all of
  // them), one kernel a stage.
  for (size_t q = 0; q < blocks; ++q) {
    if (remote_pairs[q] == 0) continue;
    const double groups =
        std::min(received_blocks[q], std::ceil(static_cast<double>(receives[owner[q]]) / coalesce));
    remote_us[q] = kernel_us(remote_pairs[q], 2.0 * remote_pairs[q] / q_tokens[q] / groups);
    block_us[q] += remote_us[q];
  }
  // The reshuffle: per token away from its dataloader worker, the bytes
  // each pass moves in before its compute, and the outputs that become
  // final only at the pass's end (O and dQ of a block that computes with
  // received K/V; dK, dV of a block whose partials come back), which wait
  // after it (the others go while the worker computes).
  const double head_bytes = static_cast<double>(shape.head_dim) * shape.dtype_bytes;
  const double q_bytes = head_bytes * shape.heads_q;
  const double kv_bytes = head_bytes * 2.0 * shape.heads_kv;
  std::vector<PortBytes> in_fwd(n), out_fwd(n), in_bwd(n), out_bwd(n);
  std::vector<uint8_t> home(blocks, 1);
  // (owner, dataloader worker) of each run of tokens that moves: a pair may
  // repeat (the maxima below are the same however often or in whatever
  // order they see it).
  std::vector<std::pair<int32_t, int32_t>> links;
  std::vector<uint8_t> receives_reshuffle(n, 0);  // per worker: owns tokens away from home
  if (costs.reshuffle) {
    const std::vector<int64_t> offsets = SequenceOffsets(*in.sequences);
    for (size_t b = 0; b < blocks; ++b) {
      const int32_t w = owner[b];
      const double late_q = receives_kv[b] ? q_bytes : 0;
      const double late_kv = sent[b] ? kv_bytes : 0;
      for (const Segment& s : plan_blocks[b].segments)
        ForEachDataloaderRun(s, offsets, n, [&](int32_t h, int64_t tokens) {
          if (h == w) return;
          home[b] = 0;
          receives_reshuffle[w] = 1;
          links.emplace_back(w, h);
          const double t = static_cast<double>(tokens);
          Move(in_fwd, h, w, (q_bytes + kv_bytes) * t, node);     // Q, K, V
          Move(in_bwd, h, w, q_bytes * t, node);                  // dO
          if (late_q > 0) Move(out_fwd, w, h, late_q * t, node);  // O
          if (late_q + late_kv > 0) Move(out_bwd, w, h, (late_q + late_kv) * t, node);
        });
    }
  }
  // A worker's inputs have all arrived when its in-port and each of its
  // dataloader workers' out-ports have carried their reshuffle bytes (the
  // flows share them and finish together); its late outputs are out when
  // its out-port has carried them (counting the receivers' in-ports too
  // ranked candidates worse: docs/simulator.md, the step estimate).
  // Maxima are exact: the links unsorted, with repeats, and each port's
  // time computed once give the same values as each distinct link taking
  // max(in-port, its dataloader worker's out-port) in turn.
  std::vector<double> inflow_fwd(n, 0), outflow_fwd(n, 0), inflow_bwd(n, 0), outflow_bwd(n, 0);
  std::vector<double> sender_fwd(n), sender_bwd(n);  // a dataloader worker's out-port time
  for (int32_t h = 0; h < n; ++h) {
    sender_fwd[h] = in_fwd[h].Out(costs);
    sender_bwd[h] = in_bwd[h].Out(costs);
  }
  for (const auto& [w, h] : links) {
    inflow_fwd[w] = std::max(inflow_fwd[w], sender_fwd[h]);
    inflow_bwd[w] = std::max(inflow_bwd[w], sender_bwd[h]);
  }
  for (int32_t w = 0; w < n; ++w) {
    if (!receives_reshuffle[w]) continue;
    inflow_fwd[w] = std::max(inflow_fwd[w], in_fwd[w].In(costs));
    inflow_bwd[w] = std::max(inflow_bwd[w], in_bwd[w].In(costs));
    outflow_fwd[w] = out_fwd[w].Out(costs);
    outflow_bwd[w] = out_bwd[w].Out(costs);
  }
  // Per worker: compute, its share at home, stages with compute.
  std::vector<double> compute(n, 0), remote(n, 0), home_compute(n, 0);
  for (size_t b = 0; b < blocks; ++b) {
    compute[owner[b]] += block_us[b];
    remote[owner[b]] += remote_us[b];
    if (home[b]) home_compute[owner[b]] += block_us[b];
  }
  std::vector<WorkerPass> forward(n), backward(n);
  const double backward_scale = costs.backward_flops_factor / costs.backward_efficiency_ratio;
  for (int32_t w = 0; w < n; ++w) {
    const double received_stages = std::ceil(static_cast<double>(receives[w]) / coalesce);
    const double launches = (compute[w] > 0 ? 1 : 0) + received_stages;
    WorkerPass& f = forward[w];
    f.compute = compute[w] + launches * costs.kernel_launch_us;
    f.remote = remote[w] + received_stages * costs.kernel_launch_us;
    f.home_compute = home_compute[w];
    f.ports = kv[w].Time(costs);
    f.stages = received_stages;
    f.inflow = inflow_fwd[w];
    f.outflow = outflow_fwd[w];
    // The backward sends the K/V again and the dK/dV partials back.
    WorkerPass& g = backward[w];
    g.compute = compute[w] * backward_scale + launches * costs.kernel_launch_us;
    g.remote = remote[w] * backward_scale + received_stages * costs.kernel_launch_us;
    g.home_compute = home_compute[w] * backward_scale;
    g.ports = kv[w].BothWays().Time(costs);
    g.stages = received_stages;
    g.inflow = inflow_bwd[w];
    g.outflow = outflow_bwd[w];
  }
  // The receive chains. A sender's out-port carries its K/V (forward; the
  // backward its K/V again and the partials of what it received) and, with
  // the reshuffle, its dataloader tokens' inputs to their owners (Q, K, V;
  // dO). The forward's pulls of blocks away from home wait for their
  // sender's inflow; the backward's K/V are where the forward left them.
  std::vector<double> sender_nic(n), sender_nvlink(n);
  const auto sharing = [&](std::vector<WorkerPass>& pass, bool backward_pass) {
    for (int32_t w = 0; w < n; ++w) {
      const PortBytes& reshuffled = backward_pass ? in_bwd[w] : in_fwd[w];
      const PortBytes sent = backward_pass ? kv[w].BothWays() : kv[w];
      sender_nic[w] = (sent.bytes[kNicOut] + reshuffled.bytes[kNicOut]) / costs.nic_bytes_per_us;
      sender_nvlink[w] =
          (sent.bytes[kNvlinkOut] + reshuffled.bytes[kNvlinkOut]) / costs.nvlink_bytes_per_us;
    }
    SenderSharing(pass, pulls, sender_nic, sender_nvlink, coalesce);
  };
  sharing(backward, true);
  if (costs.reshuffle) {
    for (size_t e = 0; e < edges.size(); ++e)
      if (!home[edges[e].first]) pulls.pulls[e].gate_us = inflow_fwd[pulls.pulls[e].src];
    // Each receiver's pulls in gate order, by counting: the senders ranked
    // by inflow (home blocks first, gate 0), the pulls bucketed by rank and
    // dealt back to their receivers' ranges (O(pulls + N log N)).
    std::vector<int32_t> senders(n);
    std::iota(senders.begin(), senders.end(), 0);
    std::stable_sort(senders.begin(), senders.end(),
                     [&](int32_t x, int32_t y) { return inflow_fwd[x] < inflow_fwd[y]; });
    std::vector<int32_t> rank(n);
    for (int32_t i = 0; i < n; ++i) rank[senders[i]] = i + 1;
    const Buckets by_gate = BucketBy(static_cast<size_t>(n) + 1, edges.size(), [&](int32_t e) {
      return home[edges[e].first] ? 0 : rank[pulls.pulls[e].src];
    });
    std::vector<Pull> ordered(edges.size());
    std::vector<int64_t> cursor = pulls.rows.RowStarts();
    for (const int32_t e : by_gate.items) ordered[cursor[edges[e].second]++] = pulls.pulls[e];
    pulls.pulls = std::move(ordered);
  }
  sharing(forward, false);
  StepEstimate estimate;
  estimate.forward = CombinePass(forward, transfer_stages * latency);
  estimate.backward =
      CombinePass(backward, (transfer_stages > 0 ? transfer_stages + 2 : 0) * latency);
  estimate.total_us = estimate.forward.time_us + estimate.backward.time_us;
  return estimate;
}

}  // namespace fcp
