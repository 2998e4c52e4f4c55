// fcp estimate: a plan's closed-form step estimate (fcp/step_estimate.h) on a
// hardware profile, beside which `fcp simulate` gives the simulated step
// (scripts/estimate_check.py compares the two).
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "fcp/cost_model.h"
#include "fcp/plan_json.h"
#include "fcp/step_estimate.h"

namespace fcp::cli {

namespace {

std::string PassJson(const PassEstimate& p) {
  return fmt::format(
      "{{\"time_s\": {:.9g}, \"compute_s\": {:.9g}, \"port_s\": {:.9g}, \"fill_s\": {:.9g}, "
      "\"latency_s\": {:.9g}, \"reshuffle_s\": {:.9g}, \"critical_worker\": {}, "
      "\"binding\": \"{}\"}}",
      p.time_us * 1e-6, p.compute_us * 1e-6, p.port_us * 1e-6, p.fill_us * 1e-6,
      p.latency_us * 1e-6, p.reshuffle_us * 1e-6, p.critical_worker, p.binding);
}

}  // namespace

void AddEstimateCommand(CLI::App& app) {
  struct EstimateOptions {
    std::string plan, profile = "gpu-x", reshuffle = "overlap";
  };
  auto eo = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "estimate", "A plan's closed-form step estimate (JSON), the planner's ranking measure");
  cmd->add_option("--plan", eo->plan, "Plan file ('-' = stdin)")->required();
  cmd->add_option("--profile", eo->profile, "Hardware profile: gpu-x, gpu-y or a JSON file")
      ->capture_default_str();
  cmd->add_option("--reshuffle", eo->reshuffle,
                  "none (the plan's layout fed) | overlap (the reshuffle from the dataloader "
                  "layout charged)")
      ->check(CLI::IsMember({"none", "overlap"}))
      ->capture_default_str();
  cmd->callback([eo] {
    const HardwareProfile profile = ResolveProfile(eo->profile);
    const Plan plan = ReadPlanJsonFile(eo->plan);
    const StepEstimate e = EstimateStep(plan, StepCostsOf(profile, eo->reshuffle == "overlap"));
    fmt::print("{{\"total_s\": {:.9g}, \"forward\": {}, \"backward\": {}}}\n", e.total_us * 1e-6,
               PassJson(e.forward), PassJson(e.backward));
  });
}

}  // namespace fcp::cli
