// fcp: plan, inspect, simulate and run flexible context-parallel attention.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "fcp/error.h"

int main(int argc, char** argv) {
  CLI::App app{"fcp: flexible context parallelism for long-context attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fcp 0.1.0");
  fcp::cli::AddWorkloadCommand(app);
  fcp::cli::AddPlanCommands(app);
  fcp::cli::AddSimulateCommands(app);
#ifdef FCP_WITH_MPI
  fcp::cli::AddRunCommands(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fcp: %s\n", e.what());
    return 2;
  } catch (const fcp::cli::ReportedError& e) {
    return e.exit_code;
  } catch (const fcp::cli::UsageError& e) {
    std::fprintf(stderr, "fcp: %s\n", e.what());
    return 2;
  } catch (const fcp::Error& e) {
    std::fprintf(stderr, "fcp: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fcp: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
