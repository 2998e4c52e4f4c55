// fcp/workload.h — batches of sequence lengths, generated (lengths files are
// read and written by fcp/lengths_file.h, one layer up).
//
// A workload is the list of sequence lengths of one batch, in dataloader
// order. Generators are pure functions of their config (seed included) and
// fill exactly workers * tokens_per_worker tokens, so a batch of N workers is
// comparable across planners. Determinism: std::mt19937_64 with fcp's own
// distribution code (the standard library's distributions differ between
// implementations), so a seed gives the same batch on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fcp {

enum class LengthDistribution {
  kLognormal,  // long-tailed, as the paper's training traces (Figure 2)
  kUniform,    // lengths uniform in [min_len, max_len]
  kFixed,      // every sequence max_len tokens (the last one shorter if needed)
  kBimodal,    // mostly short sequences plus a few very long ones (text with some video)
  kPareto,     // a power-law tail: P(length > x) = (pareto_scale / x)^pareto_alpha
};

const char* LengthDistributionName(LengthDistribution dist);
// "lognormal", "uniform", "fixed", "bimodal", "pareto"; Error(kInvalidArgument) otherwise.
LengthDistribution ParseLengthDistribution(const std::string& name);

struct WorkloadConfig {
  LengthDistribution dist = LengthDistribution::kLognormal;
  int32_t workers = 16;
  int64_t tokens_per_worker = 32768;
  int64_t max_len = 524288;  // no sequence is longer
  int64_t min_len = 1;       // no sequence is shorter (except the last, which fills the batch)
  // Parameters of ln(length) ~ Normal(mu, sigma), truncated to
  // [min_len, max_len]. Chosen to match the paper's Figure 2 (docs/workloads.md):
  // the token-weighted median is 4K (mu + sigma^2 = ln 4096), so sequences under
  // 4K carry about half of naive-CP traffic, and the FLOP-weighted median is
  // ~70K (mu + 2 sigma^2), so long sequences carry most of the compute.
  double lognormal_mu = 5.43;
  double lognormal_sigma = 1.7;
  // Pareto (type I) with scale x_m = pareto_scale tokens and tail index
  // alpha, truncated to [min_len, max_len] by rejection. alpha = 1.2 puts the
  // token-weighted median near 1.7K (docs/workloads.md): more short tokens
  // than the lognormal default, and a heavier tail of very long sequences.
  double pareto_alpha = 1.2;
  int64_t pareto_scale = 128;
  uint64_t seed = 0;

  void validate() const;  // Error(kInvalidArgument) naming the bad field
};

// The most sequences a batch may hold: every sequence gives at least one
// block pair, and no plan can list more than 2^27 (kMaxRequiredPairs), so
// a longer batch is refused when generated or read, before it is allocated.
inline constexpr int64_t kMaxSequences = int64_t{1} << 27;

// Lengths summing to exactly workers * tokens_per_worker, each in
// [1, max_len]. Sampling stops when the next length would overflow the total;
// the remainder becomes the last sequence. Error(kInvalidArgument) when the
// batch would hold more than kMaxSequences sequences (checked from the sizes
// first, then while sampling).
std::vector<int64_t> GenerateWorkload(const WorkloadConfig& config);

}  // namespace fcp
