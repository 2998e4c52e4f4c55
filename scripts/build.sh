#!/usr/bin/env bash
# Configures and builds fcp. Usage: scripts/build.sh [release|asan] (default release).
# release -> build/, asan -> build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
jobs="$(nproc 2>/dev/null || echo 2)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFCP_SANITIZE=ON -DFCP_BUILD_BENCH=OFF) ;;
  *) echo "build.sh: unknown build kind '$kind' (expected release or asan)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${generator[@]}" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
