#include "fcp/workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "enum_names.h"
#include "fcp/error.h"

namespace fcp {
namespace {

// Uniform double in [0, 1) from the top 53 bits: identical on every platform,
// unlike std::uniform_real_distribution.
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

int64_t UniformInt(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(Uniform01(rng) * static_cast<double>(hi - lo + 1));
}

double StandardNormal(std::mt19937_64& rng) {
  // Box-Muller; 1 - u keeps the log argument in (0, 1].
  const double u = 1.0 - Uniform01(rng);
  const double v = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
}

constexpr int kMaxRejections = 100;

// Draws from `draw` until a length lands in [min_len, max_len]. When that
// range holds almost none of the distribution (e.g. max_len = 1 takes ~600
// lognormal draws a sample) rejection would run for minutes or forever: after
// kMaxRejections draws the last one is clamped instead. That never happens in
// practice for ranges holding most of the mass (at 5% acceptance it hits 1
// sample in 170); it bounds the time of the rest.
template <typename Draw>
int64_t Truncated(const WorkloadConfig& c, Draw draw) {
  for (int attempt = 0;; ++attempt) {
    const int64_t len = static_cast<int64_t>(std::llround(std::min(draw(), 0x1.0p62)));
    if (len >= c.min_len && len <= c.max_len) return len;
    if (attempt + 1 >= kMaxRejections) return std::clamp(len, c.min_len, c.max_len);
  }
}

int64_t SampleLength(const WorkloadConfig& c, std::mt19937_64& rng) {
  switch (c.dist) {
    case LengthDistribution::kFixed:
      return c.max_len;
    case LengthDistribution::kUniform:
      return UniformInt(rng, c.min_len, c.max_len);
    case LengthDistribution::kBimodal:
      // One sequence in 200 is very long (half to all of max_len); the rest
      // are short documents of up to 4K tokens.
      if (Uniform01(rng) < 0.005)
        return UniformInt(rng, std::max(c.min_len, c.max_len / 2), c.max_len);
      return UniformInt(rng, c.min_len, std::min<int64_t>(c.max_len, 4096));
    case LengthDistribution::kLognormal:
      // Truncated, not clamped, so no spike of sequences sits exactly at max_len.
      return Truncated(
          c, [&] { return std::exp(c.lognormal_mu + c.lognormal_sigma * StandardNormal(rng)); });
    case LengthDistribution::kPareto:
      // Inverse CDF; 1 - u lies in (0, 1], so the power is finite.
      return Truncated(c, [&] {
        return static_cast<double>(c.pareto_scale) *
               std::pow(1.0 - Uniform01(rng), -1.0 / c.pareto_alpha);
      });
  }
  return c.max_len;
}

}  // namespace

constexpr detail::EnumName<LengthDistribution> kDistributionNames[] = {
    {LengthDistribution::kLognormal, "lognormal"}, {LengthDistribution::kUniform, "uniform"},
    {LengthDistribution::kFixed, "fixed"},         {LengthDistribution::kBimodal, "bimodal"},
    {LengthDistribution::kPareto, "pareto"},
};

const char* LengthDistributionName(LengthDistribution dist) {
  return detail::NameOf(kDistributionNames, dist);
}

LengthDistribution ParseLengthDistribution(const std::string& name) {
  return detail::ValueNamed(kDistributionNames, name, "workload: unknown distribution");
}

void WorkloadConfig::validate() const {
  const auto fail = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "workload: " + what);
  };
  if (workers < 1) fail("workers must be >= 1, got " + std::to_string(workers));
  if (tokens_per_worker < 1)
    fail("tokens_per_worker must be >= 1, got " + std::to_string(tokens_per_worker));
  if (min_len < 1) fail("min_len must be >= 1, got " + std::to_string(min_len));
  if (max_len < min_len)
    fail("max_len (" + std::to_string(max_len) + ") must be >= min_len (" +
         std::to_string(min_len) + ")");
  if (!(lognormal_sigma > 0) || !std::isfinite(lognormal_mu) || !std::isfinite(lognormal_sigma))
    fail("lognormal sigma must be > 0 and mu finite");
  if (!(pareto_alpha > 0) || !std::isfinite(pareto_alpha))
    fail("pareto alpha must be > 0 and finite, got " + std::to_string(pareto_alpha));
  if (pareto_scale < 1) fail("pareto scale must be >= 1, got " + std::to_string(pareto_scale));
  if (static_cast<double>(workers) * static_cast<double>(tokens_per_worker) > 0x1.0p40)
    fail("workers * tokens_per_worker exceeds 2^40 tokens");
  // At least ceil(T / max_len) sequences: refused before any is sampled.
  const double fewest =
      std::ceil(static_cast<double>(workers) * static_cast<double>(tokens_per_worker) /
                static_cast<double>(max_len));
  if (fewest > static_cast<double>(kMaxSequences))
    fail("the batch would hold at least " + std::to_string(static_cast<int64_t>(fewest)) +
         " sequences, more than 2^27 (raise max_len or lower the tokens)");
}

std::vector<int64_t> GenerateWorkload(const WorkloadConfig& config) {
  config.validate();
  std::mt19937_64 rng(config.seed);
  const int64_t total = static_cast<int64_t>(config.workers) * config.tokens_per_worker;
  std::vector<int64_t> lengths;
  int64_t filled = 0;
  while (filled < total) {
    if (static_cast<int64_t>(lengths.size()) == kMaxSequences)
      throw Error(ErrorCode::kInvalidArgument,
                  "workload: more than 2^27 sequences sampled before the batch was full (raise "
                  "min_len or mu, or lower the tokens)");
    const int64_t len = std::min(SampleLength(config, rng), total - filled);
    lengths.push_back(len);
    filled += len;
  }
  return lengths;
}

}  // namespace fcp
