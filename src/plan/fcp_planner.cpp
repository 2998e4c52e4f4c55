#include "fcp/error.h"
#include "fcp/planner.h"

namespace fcp {

Plan MakeFcpPlan(const std::vector<int64_t>&, const PlannerConfig&) {
  throw Error(ErrorCode::kInternal, "fcp planner: not implemented yet");
}

}  // namespace fcp
