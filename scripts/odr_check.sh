#!/usr/bin/env bash
# One Definition Rule check: builds the fcp binary (and the libraries linked
# into it, not the test suite or benchmarks) with link-time optimisation, where
# GCC compares every type's definition across translation units, and fails on
# any -Wodr warning. Build dir build-odr/. The CUDA backend is left out: nvcc's
# objects carry no LTO type information for GCC to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
flags="-flto=auto -Wodr -Werror=odr"
cmake -S . -B build-odr "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DFCP_BUILD_TESTS=OFF -DFCP_BUILD_BENCH=OFF -DFCP_WITH_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build build-odr -j "$jobs" --target fcp_cli
echo "odr_check: fcp built with $flags, no ODR warning"
