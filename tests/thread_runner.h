// Runs a plan on plan.workers threads over the in-process communicator, for
// the executor tests of every backend (CPU kernel, CUDA kernel): random
// global inputs, each thread's dataloader slice, outputs reassembled in
// global token order, errors compared with the float64 reference.
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/executor.h"
#include "fcp/plan.h"
#include "fcp/trace.h"

namespace fcp::testing {

struct PlanRunErrors {
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;  // relative to float64
  int64_t peak_received_blocks = 0;               // max over ranks
  int64_t carried_calls = 0;                      // summed over ranks
  int64_t partials_sent_early = 0;                // summed over ranks
  // o, lse, dq, dk, dv in global token order (the last three empty without
  // backward), for bitwise comparisons between runs.
  std::vector<std::vector<float>> outputs;
};

// Normal(0, 1) inputs (seeded), executed with `options` on plan.workers
// threads (each blocking wait bounded by timeout_s); rethrows the first
// rank's error. dq, dk, dv errors are 0 unless options.backward. With
// `traces`, it gets one Trace per rank.
PlanRunErrors RunPlanOnThreads(const Plan& plan, const ExecutorOptions& options,
                               double timeout_s = 10.0, uint64_t seed = 5,
                               std::vector<Trace>* traces = nullptr);

}  // namespace fcp::testing
