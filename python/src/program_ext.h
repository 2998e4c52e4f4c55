// Registration of the lowered-program bindings (program_ext.cpp) with the
// module; fcp_ext.cpp owns the plan type and passes how to reach a plan.
#pragma once

#include <nanobind/nanobind.h>

#include "fcp/plan.h"

namespace fcp::python {

// The plan held by a Python PlanHandle (validated first); throws for anything else.
using PlanOf = const Plan& (*)(nanobind::handle plan);

void RegisterProgramBindings(nanobind::module_& m, PlanOf plan_of);

}  // namespace fcp::python
