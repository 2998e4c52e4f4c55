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
#     on one NCCL rank, the float32 refusal);
#  4. times fcp.torch.attention (1 rank) against varlen_attn on the same
#     batch (bench/torch_cuda_attention.py) and prints the table.
# Prints, between "---- docs/torch.md ----" markers, what docs/torch.md's
# "CUDA" section should record. On any error: one line "torch_gpu_check.sh:
# FAILED: <step> ..." on stderr and exit 1.
#
# Usage: scripts/torch_gpu_check.sh
# Environment: FCP_TORCH_VENV (default ~/.cache/fcp/torch-venv; a venv with a
# CUDA build of torch, pytest and the build tools), FCP_GPU_BENCH_TOKENS
# (default 32768), FCP_GPU_SKIP_INSTALL=1 (use the fcp already in the venv, which
# must be this checkout's).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
venv=${FCP_TORCH_VENV:-$HOME/.cache/fcp/torch-venv}
py="$venv/bin/python"
tokens=${FCP_GPU_BENCH_TOKENS:-32768}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
start=$(date +%s)

fail() { echo "torch_gpu_check.sh: FAILED: $*" >&2; exit 1; }

[ -x "$py" ] || fail "no python at $py (set FCP_TORCH_VENV to a venv with a CUDA build of torch)"
"$py" -c "import torch, sys; ok = torch.cuda.is_available(); ok or print(f'torch {torch.__version__}: torch.cuda.is_available() is false'); sys.exit(0 if ok else 1)" >"$work/probe.log" 2>&1 \
  || fail "torch in $venv does not see a CUDA device: $(tail -1 "$work/probe.log")"
device=$("$py" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())")

if [ "${FCP_GPU_SKIP_INSTALL:-0}" = 1 ]; then
  echo "== using the fcp already installed in $venv (FCP_GPU_SKIP_INSTALL=1)"
else
  echo "== install this checkout into $venv"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m pip install --quiet --no-deps --no-build-isolation \
    --force-reinstall "$repo" >"$work/pip.log" 2>&1 || fail "pip install of $repo (last line: $(tail -1 "$work/pip.log"))"
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
