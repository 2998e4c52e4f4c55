#!/usr/bin/env bash
# Downloads (apt-get download, here, where the package mirror is reachable) the
# C++ build dependencies of fcp as .deb files into DIR, for a machine that has
# CUDA and torch but not these and no network (the GPU machine of
# scripts/gpu_check.sh and scripts/torch_gpu_check.sh). There, FCP_GPU_DEPS=DIR
# makes either script unpack them (scripts/gpu_deps_env.sh: dpkg -x, never
# into /) into a private prefix it builds against.
#
# Usage: scripts/gpu_build_deps.sh DIR        (about 22 MB of .deb files)
# The packages: OpenBLAS (the CPU kernel) and its Fortran runtime,
# nlohmann-json, fmt, CLI11 (found by the top-level CMakeLists.txt),
# pkg-config (pkgconf), through which CMake finds OpenBLAS; GoogleTest (the
# gpu-labelled C++ tests); Open MPI with the libraries it loads (the CUDA
# backend is built into the MPI runtime and `fcp run`).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/gpu_build_deps.sh DIR" >&2; exit 2; }
mkdir -p "$1"
cd "$1"
# The packages are named in one place: torch_gpu_check.sh's probe reports these names when they are missing.
packages=(libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 nlohmann-json3-dev libfmt-dev libfmt9
          libcli11-dev pkgconf pkgconf-bin libpkgconf3 libgtest-dev libgmock-dev
          libopenmpi-dev libopenmpi3 openmpi-common openmpi-bin libevent-core-2.1-7 libevent-pthreads-2.1-7
          libfabric1 libhwloc15 libibverbs1 ibverbs-providers libmunge2 libnl-3-200 libnl-route-3-200 libnuma1
          libpmix2 libpsm-infinipath1 libpsm2-2 librdmacm1 libucx0 libltdl7 libxnvctrl0)
apt-get download "${packages[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
missing=()
for p in "${packages[@]}"; do compgen -G "${p}_*.deb" >/dev/null || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_build_deps.sh: could not download: ${missing[*]}" >&2
  exit 1
fi
echo "gpu_build_deps.sh: $(ls ./*.deb | wc -l) packages in $(pwd) ($(du -sh . | cut -f1))"
