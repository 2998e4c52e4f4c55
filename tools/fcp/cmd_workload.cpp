// fcp workload: generate a batch of sequence lengths.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "fcp/error.h"
#include "fcp/file_io.h"
#include "fcp/lengths_file.h"
#include "fcp/workload.h"

namespace fcp::cli {
namespace {

struct WorkloadOptions {
  std::string dist = "lognormal";
  WorkloadConfig config;
  std::string out = "-";
  bool stats = false;
};

// Shares that characterise a batch (the paper's Figure 2): tokens and naive
// (ring) CP traffic are proportional to length, causal FLOPs to length^2.
void PrintStats(const std::vector<int64_t>& lengths) {
  double tokens = 0, flops = 0, short_tokens = 0, long_flops = 0;
  int64_t longest = 0, short_count = 0;
  for (int64_t len : lengths) {
    const double l = static_cast<double>(len);
    tokens += l;
    flops += l * l;
    longest = std::max(longest, len);
    if (len < 4096) short_tokens += l, ++short_count;
    if (len >= 65536) long_flops += l * l;
  }
  std::fprintf(stderr,
               "workload: %zu sequences, %.0f tokens, longest %lld; sequences < 4K: %.1f%% of "
               "sequences, %.1f%% of tokens (= naive-CP traffic); sequences >= 64K: %.1f%% of "
               "causal FLOPs\n",
               lengths.size(), tokens, static_cast<long long>(longest),
               100.0 * short_count / lengths.size(), 100.0 * short_tokens / tokens,
               100.0 * long_flops / flops);
}

}  // namespace

void AddWorkloadShapeFlags(CLI::App& command, WorkloadConfig& config,
                           const std::string& seed_help) {
  command
      .add_option("--tokens-per-worker", config.tokens_per_worker,
                  "Tokens per worker; the batch holds exactly N times this")
      ->capture_default_str();
  command.add_option("--max-len", config.max_len, "Longest sequence")->capture_default_str();
  command.add_option("--min-len", config.min_len, "Shortest sequence")->capture_default_str();
  command.add_option("--mu", config.lognormal_mu, "lognormal: mean of ln(length)")
      ->capture_default_str();
  command.add_option("--sigma", config.lognormal_sigma, "lognormal: std dev of ln(length)")
      ->capture_default_str();
  command.add_option("--pareto-alpha", config.pareto_alpha, "pareto: tail index alpha")
      ->capture_default_str();
  command.add_option("--pareto-scale", config.pareto_scale, "pareto: scale x_m, tokens")
      ->capture_default_str();
  command.add_option("--seed", config.seed, seed_help)->check(kNotNegative)->capture_default_str();
}

void AddWorkloadCommand(CLI::App& app) {
  auto options = std::make_shared<WorkloadOptions>();
  CLI::App* cmd = app.add_subcommand("workload", "Generate a batch of sequence lengths");
  // Checked at parse time so a bad name is a usage error (exit 2).
  cmd->add_option("--dist", options->dist, "lognormal | uniform | fixed | bimodal | pareto")
      ->capture_default_str()
      ->check(CLI::IsMember({LengthDistributionName(LengthDistribution::kLognormal),
                             LengthDistributionName(LengthDistribution::kUniform),
                             LengthDistributionName(LengthDistribution::kFixed),
                             LengthDistributionName(LengthDistribution::kBimodal),
                             LengthDistributionName(LengthDistribution::kPareto)}));
  cmd->add_option("--workers", options->config.workers, "Number of workers N")
      ->capture_default_str();
  AddWorkloadShapeFlags(*cmd, options->config, "Random seed");
  cmd->add_option("--out", options->out, "Output file, one length per line ('-' = stdout)")
      ->capture_default_str();
  cmd->add_flag("--stats", options->stats, "Print length, token and FLOP shares to stderr");
  cmd->callback([options] {
    options->config.dist = ParseLengthDistribution(options->dist);
    CheckFlags([&] { options->config.validate(); });
    const std::vector<int64_t> lengths = GenerateWorkload(options->config);
    const std::string text = FormatLengths(lengths);
    WriteOutput(options->out, text, "workload");
    if (options->stats) PrintStats(lengths);
  });
}

}  // namespace fcp::cli
