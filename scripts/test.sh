#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit, property and multi-rank (mpirun)
# tests in a Release build, the same again under AddressSanitizer +
# UndefinedBehaviorSanitizer, an LTO link of fcp that fails on any ODR
# violation, the Python module's tests, the fcp.torch tests
# (scripts/torch_test.sh: a reused venv with torch), a short fuzzing
# run of the plan reader, and a check that the C++ is formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc 2>/dev/null || echo 2)"
# Each phase's header ends the one before it with its wall time (CI's budget is 25 minutes).
phase_start=$SECONDS
phase() {
  [ -z "${phase_name:-}" ] || echo "-- $phase_name: $((SECONDS - phase_start)) s"
  phase_name=$1 phase_start=$SECONDS
  [ -z "$1" ] || echo "== $1"
}

phase "C++ formatting (clang-format-14, .clang-format)"
bash scripts/format_check.sh

phase "Release build and tests"
bash scripts/build.sh release
ctest --test-dir build -j "$jobs" --output-on-failure

phase "One Definition Rule: fcp linked with -flto -Wodr -Werror=odr"
bash scripts/odr_check.sh

phase "ASan + UBSan build and tests"
bash scripts/build.sh asan
ctest --test-dir build-asan -j "$jobs" --output-on-failure

# The Python module's wheel is built once, by python_test.sh, and reused by torch_test.sh.
export FCP_WHEEL_DIR="$PWD/build/wheel"
mkdir -p "$FCP_WHEEL_DIR"
if [ -f scripts/python_test.sh ]; then
  phase "Python module"
  bash scripts/python_test.sh
fi
if [ -f scripts/torch_test.sh ]; then
  phase "fcp.torch (torch and transformers extras, 4 gloo ranks)"
  bash scripts/torch_test.sh
fi
if [ -f scripts/fuzz.sh ]; then
  phase "Fuzzing the plan reader"
  bash scripts/fuzz.sh "${FCP_FUZZ_SECONDS:-20}"
fi
phase ""
echo "all tests passed in $SECONDS s"
