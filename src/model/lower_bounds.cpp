// Pass lower bounds (fcp/lower_bounds.h): one sweep over the flows into
// per-worker port bytes, then maxima.
#include "fcp/lower_bounds.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "fcp/error.h"

namespace fcp {
namespace {

[[noreturn]] void BadInput(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "lower bounds: " + what);
}

bool NonNegative(double x) { return std::isfinite(x) && x >= 0; }

struct PortBytes {
  double nic_in_bytes = 0, nic_out_bytes = 0, nvlink_in_bytes = 0, nvlink_out_bytes = 0;
};

}  // namespace

PassBounds ComputePassBounds(const HardwareProfile& profile,
                             const std::vector<double>& busy_compute_s,
                             const std::vector<PortFlow>& flows) {
  profile.validate();
  const int32_t n = static_cast<int32_t>(busy_compute_s.size());
  PassBounds b;
  b.workers.resize(n);
  for (int32_t w = 0; w < n; ++w) {
    if (!NonNegative(busy_compute_s[w]))
      BadInput("worker " + std::to_string(w) + " has busy compute " +
               std::to_string(busy_compute_s[w]));
    b.workers[w].compute_s = busy_compute_s[w];
    b.mean_compute_s += busy_compute_s[w] / n;
    b.max_compute_s = std::max(b.max_compute_s, busy_compute_s[w]);
  }
  // Bytes first, divided once: a port's seconds do not depend on the order of its flows.
  std::vector<PortBytes> bytes(n);
  for (const PortFlow& f : flows) {
    if (f.src < 0 || f.src >= n || f.dst < 0 || f.dst >= n || f.src == f.dst)
      BadInput("flow " + std::to_string(f.src) + " -> " + std::to_string(f.dst) +
               " is not between two of " + std::to_string(n) + " workers");
    if (!NonNegative(f.bytes)) BadInput("flow of " + std::to_string(f.bytes) + " bytes");
    if (SameNode(profile, f.src, f.dst)) {
      bytes[f.src].nvlink_out_bytes += f.bytes;
      bytes[f.dst].nvlink_in_bytes += f.bytes;
    } else {
      bytes[f.src].nic_out_bytes += f.bytes;
      bytes[f.dst].nic_in_bytes += f.bytes;
    }
  }
  for (int32_t w = 0; w < n; ++w) {
    WorkerBounds& x = b.workers[w];
    x.nic_in_s = bytes[w].nic_in_bytes / profile.nic_bytes_per_s;
    x.nic_out_s = bytes[w].nic_out_bytes / profile.nic_bytes_per_s;
    x.nvlink_in_s = bytes[w].nvlink_in_bytes / profile.nvlink_bytes_per_s;
    x.nvlink_out_s = bytes[w].nvlink_out_bytes / profile.nvlink_bytes_per_s;
    b.nic_in_s = std::max(b.nic_in_s, x.nic_in_s);
    b.nic_out_s = std::max(b.nic_out_s, x.nic_out_s);
    b.nvlink_in_s = std::max(b.nvlink_in_s, x.nvlink_in_s);
    b.nvlink_out_s = std::max(b.nvlink_out_s, x.nvlink_out_s);
  }
  const std::pair<const char*, double> terms[] = {{"compute", b.max_compute_s},
                                                  {"nic_in", b.nic_in_s},
                                                  {"nic_out", b.nic_out_s},
                                                  {"nvlink_in", b.nvlink_in_s},
                                                  {"nvlink_out", b.nvlink_out_s}};
  b.binding = terms[0].first;
  b.bound_s = terms[0].second;
  for (const auto& [name, seconds] : terms)
    if (seconds > b.bound_s) {
      b.binding = name;
      b.bound_s = seconds;
    }
  return b;
}

}  // namespace fcp
