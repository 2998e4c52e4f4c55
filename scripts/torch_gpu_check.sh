#!/usr/bin/env bash
# fcp.torch's CUDA path on a machine with an NVIDIA GPU (issue 18, item 6);
# under 6 minutes on an H200. Unattended; not called from scripts/test.sh.
#  1. checks that the venv's torch sees a CUDA device;
#  2. builds and installs this checkout into the venv (pip, no network:
#     --no-deps --no-build-isolation, so the venv needs scikit-build-core
#     and nanobind, as /work/torch-venv has);
#  3. runs the `gpu`-marked tests in bfloat16 (python/tests/test_torch_cuda.py:
#     flash stage launches of 1- and 4-worker plans against float64, each
#     window kind against the dense stand-in, fcp.torch.attention end to end
#     on one NCCL rank, the float32 refusal; a tiny transformers Llama with
#     transformers' activation checkpointing, backward after the with-block
#     (the recompute runs on autograd's CUDA thread), and with decoder layers
#     compiled by Inductor with fullgraph=True, against eager attention);
#  4. times fcp.torch.attention (1 rank) against varlen_attn on the same
#     batch (bench/torch_cuda_attention.py) and prints the table.
# Prints, between "---- docs/torch.md ----" markers, what docs/torch.md's
# "CUDA" section should record. On any error: one line "torch_gpu_check.sh:
# FAILED: <step> ..." on stderr and exit 1.
#
# Usage: scripts/torch_gpu_check.sh
# Environment: FCP_TORCH_VENV (a venv with a CUDA build of torch, pytest and
# the build tools; default ~/.cache/fcp/torch-venv if it exists, else the
# python3 on PATH, which on the GPU machine image holds torch, pytest,
# nanobind and scikit-build-core), FCP_GPU_DEPS (a folder of .deb files made
# here by scripts/gpu_build_deps.sh, for a machine without OpenBLAS,
# nlohmann-json, fmt or CLI11: unpacked into a private prefix, never into /),
# FCP_GPU_BENCH_TOKENS (default 32768), FCP_GPU_SKIP_INSTALL=1 (use the fcp
# already installed, which must be this checkout's).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
if [ -n "${FCP_TORCH_VENV:-}" ]; then
  py="$FCP_TORCH_VENV/bin/python"
elif [ -x "$HOME/.cache/fcp/torch-venv/bin/python" ]; then
  py="$HOME/.cache/fcp/torch-venv/bin/python"
else
  py=$(command -v python3 || echo python3)
fi
tokens=${FCP_GPU_BENCH_TOKENS:-32768}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
start=$(date +%s)

fail() { echo "torch_gpu_check.sh: FAILED: $*" >&2; exit 1; }

[ -x "$py" ] || fail "no python at $py (set FCP_TORCH_VENV to a venv with a CUDA build of torch)"
venv=$(dirname "$(dirname "$py")")
"$py" -c "import torch, sys; ok = torch.cuda.is_available(); ok or print(f'torch {torch.__version__}: torch.cuda.is_available() is false'); sys.exit(0 if ok else 1)" >"$work/probe.log" 2>&1 \
  || fail "torch in $venv does not see a CUDA device: $(tail -1 "$work/probe.log")"
device=$("$py" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())")

if [ -n "${FCP_GPU_DEPS:-}" ]; then
  echo "== unpack the build dependencies in $FCP_GPU_DEPS"
  # shellcheck source=scripts/gpu_deps_env.sh
  source "$repo/scripts/gpu_deps_env.sh"
  gpu_deps_env "$work/prefix" || fail "FCP_GPU_DEPS=$FCP_GPU_DEPS: unusable (see above)"
fi

if [ "${FCP_GPU_SKIP_INSTALL:-0}" = 1 ]; then
  echo "== using the fcp already installed in $venv (FCP_GPU_SKIP_INSTALL=1)"
else
  echo "== install this checkout into $venv"
  # That machine's compiler may be newer than CI's: its new warnings are
  # reported in the build log, not fatal (FCP_WARNINGS_AS_ERRORS, CMakeLists.txt).
  CMAKE_ARGS="${CMAKE_ARGS:-} -DFCP_WARNINGS_AS_ERRORS=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m pip install --quiet --no-deps --no-build-isolation \
    --force-reinstall "$repo" >"$work/pip.log" 2>&1 || {
    # CMake names what it did not find; say which packages that means.
    missing=$(grep -oE 'Could NOT find [A-Za-z0-9_]+|package configuration file provided by "[A-Za-z0-9_]+"|packages were not found|No package .openblas. found' \
              "$work/pip.log" | sort -u | tr '\n' ';')
    [ -n "$missing" ] && fail "pip install of $repo: the C++ build dependencies are missing ($missing); make them here with" \
      "scripts/gpu_build_deps.sh DIR and set FCP_GPU_DEPS=DIR (docs/torch.md)"
    fail "pip install of $repo (last line: $(tail -1 "$work/pip.log"))"
  }
fi
"$py" -c "import fcp.torch._varlen" >"$work/import.log" 2>&1 \
  || fail "import fcp.torch._varlen in $venv: $(tail -1 "$work/import.log")"

echo "== gpu tests (bfloat16)"
# From python/tests so that `import fcp` is the installed package.
(cd python/tests && timeout 240 "$py" -m pytest -q -p no:cacheprovider -m gpu -rs \
   test_torch_cuda.py) 2>&1 | tee "$work/tests.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail "gpu tests (pytest exit $rc; $(grep -E 'passed|failed|error' "$work/tests.log" | tail -1))"
grep -q "skipped" "$work/tests.log" && fail "gpu tests were skipped on a GPU machine: $(grep SKIPPED "$work/tests.log" | head -1)"

echo "== timing: fcp.torch.attention (1 rank) vs varlen_attn"
timeout 150 "$py" bench/torch_cuda_attention.py --tokens "$tokens" 2>&1 | tee "$work/bench.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail "bench/torch_cuda_attention.py (exit $rc; $(tail -1 "$work/bench.log"))"

echo "---- docs/torch.md ----"
echo "Run on $(date -u +%Y-%m-%d), torch $device, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'):"
echo "\`scripts/torch_gpu_check.sh\` passed in $(( $(date +%s) - start )) s;"
echo "gpu tests: $(grep -E '[0-9]+ passed' "$work/tests.log" | tail -1)."
echo
grep -E '^\||tokens in' "$work/bench.log"
echo "---- end ----"
