// fcp: plan, inspect, simulate and run flexible context-parallel attention.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "fcp/error.h"
#include "fcp/file_io.h"

namespace fcp::cli {

void RejectIntegerOverflow(CLI::App& app) {
  const auto fits = [](auto zero) {
    return CLI::Validator(
        [](std::string& text) {
          decltype(zero) value{};
          const char* end = text.data() + text.size();
          const char* first = text.data() + (text.size() > 1 && text[0] == '+');
          const auto [ptr, ec] = std::from_chars(first, end, value);
          return ec == std::errc::result_out_of_range && ptr == end
                     ? "is out of range for a " + std::to_string(8 * sizeof value) +
                           "-bit integer: " + text
                     : std::string();
        },
        "");
  };
  for (CLI::Option* option : app.get_options()) {
    // The type name, less the descriptions of its other checks ("UINT:NOT NEGATIVE").
    const std::string type = option->get_type_name().substr(0, option->get_type_name().find(':'));
    if (type == "INT") option->check(fits(int64_t{}));
    if (type == "UINT") option->check(fits(uint64_t{}));
  }
  for (CLI::App* sub : app.get_subcommands({})) RejectIntegerOverflow(*sub);
}

void WriteOutput(const std::string& path, std::string_view text, const std::string& what) {
  if (path != "-") return WriteFileAtomically(path, text, what);
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
  if (!std::cout) throw Error(ErrorCode::kIo, what + ": cannot write to stdout");
}

}  // namespace fcp::cli

namespace {

// The command's result as main's; see main() for why exit is not used.
int Run(int argc, char** argv) {
  CLI::App app{"fcp: flexible context parallelism for long-context attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fcp 0.1.0");
  fcp::cli::AddWorkloadCommand(app);
  fcp::cli::AddPlanCommands(app);
  fcp::cli::AddSimulateCommands(app);
  fcp::cli::AddEstimateCommand(app);
#ifdef FCP_WITH_MPI
  fcp::cli::AddRunCommands(app);
#endif
  fcp::cli::RejectIntegerOverflow(app);
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
  } catch (const std::bad_alloc&) {
    // Readers and planners refuse oversize inputs from their sizes first;
    // this is what is left when the machine still has too little memory.
    std::fprintf(stderr, "fcp: out of memory (std::bad_alloc)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fcp: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

// Ends without the exit handlers of shared libraries: under an address-space
// limit (ulimit -v) an OpenBLAS worker thread can be stuck retrying its
// 128 MB buffer forever, and OpenBLAS's handler joins it, so a command that
// has finished would hang. Everything fcp owns is released inside Run; the
// output streams are flushed here.
int main(int argc, char** argv) {
  const int code = Run(argc, argv);
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
