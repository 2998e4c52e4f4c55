// Simulation results as text: the Chrome trace-event file and the JSON summary.
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "fcp/chrome_trace.h"
#include "fcp/error.h"
#include "fcp/file_io.h"
#include "fcp/simulator.h"

namespace fcp {

void WriteChromeTrace(const SimResult& result, std::ostream& out) {
  ChromeTraceLayout layout;
  layout.other_data = {{"planner", result.planner}, {"profile", result.profile}};
  layout.process_label = "worker";
  layout.tracks = {"compute", "send", "receive"};
  WriteChromeTrace(layout, result.workers, result.trace, out);
}

void WriteChromeTraceFile(const SimResult& result, const std::string& path) {
  std::ostringstream text;
  WriteChromeTrace(result, text);
  WriteFileAtomically(path, text.str(), "simulate: trace");
}

namespace {

// The four port terms, which PassBounds and WorkerBounds name alike.
template <typename Bounds>
void AddPortTerms(const std::string& prefix, const Bounds& b, nlohmann::ordered_json& j) {
  j[prefix + "nic_in_s"] = b.nic_in_s;
  j[prefix + "nic_out_s"] = b.nic_out_s;
  j[prefix + "nvlink_in_s"] = b.nvlink_in_s;
  j[prefix + "nvlink_out_s"] = b.nvlink_out_s;
}

nlohmann::ordered_json PassBoundsJson(const PassBounds& b) {
  nlohmann::ordered_json j;
  j["mean_compute_s"] = b.mean_compute_s;
  j["max_compute_s"] = b.max_compute_s;
  AddPortTerms("", b, j);
  j["bound_s"] = b.bound_s;
  j["binding"] = b.binding;
  return j;
}

}  // namespace

std::string SimResultJson(const SimResult& r, bool per_worker) {
  nlohmann::ordered_json j;
  j["planner"] = r.planner;
  j["profile"] = r.profile;
  j["partial_return"] = PartialReturnName(r.partial_return);
  j["workers"] = r.workers;
  j["forward_time_s"] = r.forward_time_s;
  j["backward_time_s"] = r.backward_time_s;
  j["total_time_s"] = r.total_time_s;
  j["forward_flops"] = r.forward_flops;
  j["backward_flops"] = r.backward_flops;
  j["mfu"] = r.mfu;
  j["normalized_mfu"] = r.normalized_mfu;
  j["reference_efficiency"] = r.reference_efficiency;
  j["batch_normalized_mfu"] = r.batch_normalized_mfu;
  j["compute_imbalance"] = r.compute_imbalance;
  j["traffic_imbalance"] = r.traffic_imbalance;
  j["total_traffic_imbalance"] = r.total_traffic_imbalance;
  j["mean_busy_s"] = r.mean_busy_s;
  j["mean_exposed_comm_s"] = r.mean_exposed_comm_s;
  j["max_exposed_comm_s"] = r.max_exposed_comm_s;
  j["transfers"] = r.transfers;
  j["reshuffle_flows"] = r.reshuffle_flows;
  j["bound_s"] = r.bound_s;
  j["bound_ratio"] = r.bound_ratio;
  j["forward_bounds"] = PassBoundsJson(r.forward_bounds);
  j["backward_bounds"] = PassBoundsJson(r.backward_bounds);
  if (per_worker) {
    nlohmann::ordered_json workers = nlohmann::ordered_json::array();
    for (const WorkerSimStats& s : r.worker_stats) {
      nlohmann::ordered_json w;
      w["busy_s"] = s.busy_s;
      w["exposed_comm_s"] = s.exposed_comm_s;
      w["idle_s"] = s.idle_s;
      w["forward_flops"] = s.forward_flops;
      w["backward_flops"] = s.backward_flops;
      w["forward_kv_bytes_sent"] = s.forward_kv_bytes_sent;
      w["forward_kv_bytes_received"] = s.forward_kv_bytes_received;
      w["bytes_sent"] = s.bytes_sent;
      w["bytes_received"] = s.bytes_received;
      w["reshuffle_bytes_sent"] = s.reshuffle_bytes_sent;
      w["reshuffle_bytes_received"] = s.reshuffle_bytes_received;
      // Flat numbers, one per field, as every other per-worker statistic
      // (Python turns each field into one array).
      const size_t k = workers.size();
      for (const auto& [pass, bounds] :
           {std::pair{"forward", &r.forward_bounds}, std::pair{"backward", &r.backward_bounds}}) {
        if (k >= bounds->workers.size()) continue;
        const std::string prefix = std::string(pass) + "_bound_";
        w[prefix + "compute_s"] = bounds->workers[k].compute_s;
        AddPortTerms(prefix, bounds->workers[k], w);
      }
      workers.push_back(w);
    }
    j["worker_stats"] = workers;
  }
  return j.dump(2) + "\n";
}

}  // namespace fcp
