#!/usr/bin/env bash
# Installs everything fcp needs to build, test and run on a fresh Debian 12 machine.
# Idempotent: packages already present are skipped by apt-get.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and benchmarks
  nlohmann-json3-dev                            # plan files and hardware profiles (JSON)
  libcli11-dev                                  # the fcp command line
  libfmt-dev                                    # formatting of messages and tables
  libopenmpi-dev openmpi-bin                    # the CPU runtime (mpirun)
  libopenblas-dev                               # the CPU attention kernel's matrix products
  python3-matplotlib python3-numpy              # docs/ plots and the evaluation script
  python3-dev python3-venv                      # `pip install .` of the Python module (headers, venv)
  clang libclang-rt-14-dev                      # libFuzzer target for the plan reader
  clang-format-14                               # the C++ style check (scripts/format_check.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
