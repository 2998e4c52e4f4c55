#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz and
# runs each briefly:
#   plan_reader_fuzz     bytes -> ReadPlanJson -> ValidatePlan -> metrics,
#                        seeded from tests/fuzz/corpus (valid plans);
#   plan_validator_fuzz  bytes choose a valid plan and mutate it (deep
#                        coverage of the validator's stage rules and metrics);
#   profile_reader_fuzz  bytes -> ParseProfileJson, seeded from tests/fuzz/profiles;
#   lengths_reader_fuzz  bytes -> ParseLengths, seeded from tests/fuzz/lengths.
#   scripts/fuzz.sh [seconds per target]        default 60
# New inputs go to build-fuzz/corpus-*; a finding leaves build-fuzz/crash-*
# (copy it to tests/fuzz/regressions/ once fixed) and a nonzero exit.
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DFCP_FUZZ=ON -DFCP_BUILD_TESTS=OFF -DFCP_BUILD_BENCH=OFF \
  -DFCP_WITH_MPI=OFF >/dev/null
cmake --build "$build" -j2 --target plan_reader_fuzz plan_validator_fuzz profile_reader_fuzz \
  lengths_reader_fuzz
mkdir -p "$build/corpus-reader" "$build/corpus-validator" "$build/corpus-profile" "$build/corpus-lengths"
cd "$build"
# -rss_limit_mb / -malloc_limit_mb: an input that makes the validator allocate
# gigabytes is a finding too (it must reject absurd sizes first).
limits=(-max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1)
./tests/fuzz/plan_reader_fuzz "$build/corpus-reader" "$root/tests/fuzz/corpus" \
  "$root/tests/fuzz/regressions" -max_len=4096 -dict="$root/tests/fuzz/plan.dict" "${limits[@]}"
./tests/fuzz/plan_validator_fuzz "$build/corpus-validator" -max_len=512 "${limits[@]}"
./tests/fuzz/profile_reader_fuzz "$build/corpus-profile" "$root/tests/fuzz/profiles" -max_len=4096 \
  -dict="$root/tests/fuzz/plan.dict" "${limits[@]}"
./tests/fuzz/lengths_reader_fuzz "$build/corpus-lengths" "$root/tests/fuzz/lengths" -max_len=4096 "${limits[@]}"
