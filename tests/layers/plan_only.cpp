// The planning layer on its own: this program links fcp_plan and nothing
// else of fcp (tests/CMakeLists.txt), so it builds only while planning needs
// neither the I/O layer, the cost model, the simulator, the baselines nor
// the registry. It makes an FCP plan for a small causal batch, validates it
// and checks its header, the way a user of fcp_plan alone would.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "fcp/error.h"
#include "fcp/plan.h"
#include "fcp/planner.h"

int main() {
  try {
    const std::vector<int64_t> lengths = {4096, 1000, 2500, 300, 8192, 700};
    fcp::PlannerConfig config;
    config.workers = 4;
    config.block_size = 1024;
    config.coalesce = 2;
    const fcp::Plan plan = fcp::MakeFcpPlan(lengths, config);
    fcp::ValidatePlan(plan);  // throws on any broken rule of PLAN_FORMAT.md
    int64_t tokens = 0;
    for (const fcp::Block& block : plan.blocks) tokens += block.tokens();
    if (plan.planner != "fcp" || plan.workers != 4 || plan.sequences != lengths ||
        tokens != 16788) {
      std::fprintf(stderr, "plan_only: unexpected plan (planner %s, %d workers, %lld tokens)\n",
                   plan.planner.c_str(), plan.workers, static_cast<long long>(tokens));
      return 1;
    }
    std::printf("plan_only: valid fcp plan, %zu blocks, %zu forward stages, from fcp_plan alone\n",
                plan.blocks.size(), plan.forward.size());
    return 0;
  } catch (const fcp::Error& e) {
    std::fprintf(stderr, "plan_only: %s\n", e.what());
    return 1;
  }
}
