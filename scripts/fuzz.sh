#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz and
# runs the plan reader fuzzer briefly from the seed corpus.
#   scripts/fuzz.sh [seconds]        default 60
# New inputs go to build-fuzz/corpus (the seed corpus in tests/fuzz/corpus is
# read only); a crash leaves build-fuzz/crash-* and a nonzero exit.
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DFCP_FUZZ=ON -DFCP_BUILD_TESTS=OFF -DFCP_BUILD_BENCH=OFF \
  -DFCP_WITH_MPI=OFF >/dev/null
cmake --build "$build" -j2 --target plan_reader_fuzz
mkdir -p "$build/corpus"
cd "$build"
# -rss_limit_mb / -malloc_limit_mb: an input that makes the validator allocate
# gigabytes is a finding too (it must reject absurd sizes first).
./tests/fuzz/plan_reader_fuzz "$build/corpus" "$root/tests/fuzz/corpus" \
  -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -dict="$root/tests/fuzz/plan.dict" -print_final_stats=1
