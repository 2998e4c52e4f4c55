#!/usr/bin/env bash
# Downloads (apt-get download, here, where the package mirror is reachable) the
# C++ build dependencies of the fcp extension as .deb files into DIR, for a
# machine that has torch but not these and no network (the GPU machine of
# scripts/torch_gpu_check.sh). There, FCP_GPU_DEPS=DIR makes torch_gpu_check.sh
# unpack them (dpkg -x, never into /) into a private prefix it builds against.
#
# Usage: scripts/gpu_build_deps.sh DIR        (about 13 MB of .deb files)
# The packages: OpenBLAS (the CPU kernel the extension links) and its Fortran
# runtime, nlohmann-json, fmt, CLI11 (found by the top-level CMakeLists.txt),
# and pkg-config (pkgconf), through which CMake finds OpenBLAS.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/gpu_build_deps.sh DIR" >&2; exit 2; }
mkdir -p "$1"
cd "$1"
# The packages are named in one place: torch_gpu_check.sh's probe reports these names when they are missing.
packages=(libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 nlohmann-json3-dev libfmt-dev libfmt9
          libcli11-dev pkgconf pkgconf-bin libpkgconf3)
apt-get download "${packages[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
missing=()
for p in "${packages[@]}"; do compgen -G "${p}_*.deb" >/dev/null || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_build_deps.sh: could not download: ${missing[*]}" >&2
  exit 1
fi
echo "gpu_build_deps.sh: $(ls ./*.deb | wc -l) packages in $(pwd) ($(du -sh . | cut -f1))"
