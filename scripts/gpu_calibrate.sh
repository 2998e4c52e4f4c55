#!/usr/bin/env bash
# Issue 40 in one command on a machine with one NVIDIA GPU (about 3-4 minutes
# on an H100 or H200 by the FLOP count; --limit-s bounds it, default 450 s):
# calibrates the simulator on the flash
# varlen kernels fcp.torch launches and measures fcp.torch's own cost on one
# GPU. No network is needed there. Steps:
#  1. makes the fcp module importable: the interpreter's own if it has one,
#     else built from this checkout into a private folder (pip --target, no
#     network; FCP_GPU_DEPS: the C++ build dependencies as .deb files made
#     here by scripts/gpu_build_deps.sh, unpacked by scripts/gpu_deps_env.sh);
#  2. scripts/gpu_calibrate.py measure: matrix rate, f(len) of the flash ops,
#     the fitted profile OUT/<chip>-measured-flash.json, fcp.torch's stage
#     launches against the simulator's rule (OUT/calibration.json, .md);
#  3. bench/torch_cuda_attention.py: fcp.torch.attention on one rank against
#     one flash call over a 32K-token batch, Llama-3-70B heads, block 2K/4K/8K
#     x coalesce 1/4/16, every mask, a profiler table per mask at 4K/16
#     (OUT/torch_cost.json, .md);
#  4. scripts/gpu_calibrate.py report: the markdown for docs/simulator.md and
#     docs/torch.md (OUT/report.md), printed last.
# Everything goes to OUT ($OUT on the device machine, else --out DIR): at most
# 7 files, none in subfolders, so all of them come back from the device tool.
#
# Usage: scripts/gpu_calibrate.sh [--out DIR] [--limit-s S] [--dry-run]
#   --limit-s   the whole run's time (default 450): the build gets at most 240 s,
#               step 3 what is left after step 2, and step 2's measurements at
#               most 150 s, less when the build took long, so that step 3 keeps
#               its 150 s (lengths and stages that do not fit are skipped and
#               listed; step 3 writes each row as it goes)
#   --dry-run   every step on the CPU with tiny shapes and a stand-in kernel
#               (checks the pipeline; its numbers mean nothing)
# Environment: PYTHON (the interpreter; default $FCP_TORCH_VENV/bin/python if
# FCP_TORCH_VENV is set, else python3, which on the GPU machine holds torch,
# scikit-build-core and nanobind), FCP_GPU_DEPS (above).
# Any failure: one line "gpu_calibrate.sh: FAILED: ..." on stderr and exit 1,
# after the steps that could still run (a failed build skips step 3 only).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
start=$(date +%s)
left_s() { echo $(( start + limit_s - $(date +%s) )); }
min() { echo $(( $1 < $2 ? $1 : $2 )); }

fail() { echo "gpu_calibrate.sh: FAILED: $*" >&2; exit 1; }

out=${OUT:-}
limit_s=450
dry=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || fail "--out needs a folder"; out=$2; shift 2 ;;
    --limit-s) [ $# -ge 2 ] || fail "--limit-s needs a number of seconds"; limit_s=$2; shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    *) fail "unknown argument '$1' (usage: scripts/gpu_calibrate.sh [--out DIR] [--limit-s S] [--dry-run])" ;;
  esac
done
[ -n "$out" ] || fail "no output folder: pass --out DIR (on the device machine \$OUT is used)"
[[ "$limit_s" =~ ^[0-9]+$ ]] && [ "$limit_s" -ge 120 ] || fail "--limit-s must be a whole number of seconds >= 120, got '$limit_s'"
mkdir -p "$out" || fail "cannot create $out"
out=$(cd "$out" && pwd)
if [ -n "${PYTHON:-}" ]; then
  py=$PYTHON
elif [ -n "${FCP_TORCH_VENV:-}" ]; then
  py=$FCP_TORCH_VENV/bin/python
else
  py=$(command -v python3 || echo python3)
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
log=$out/log.txt
: >"$log"
failures=()

# One interpreter start: torch, and a CUDA device unless --dry-run.
probe='
import sys
try:
    import torch
except Exception as e:
    sys.exit(f"cannot import torch ({type(e).__name__}: {e})")
cuda = torch.cuda.is_available()
if not cuda and sys.argv[1] == "gpu":
    sys.exit(f"torch {torch.__version__} sees no CUDA device (run with --dry-run to check the pipeline on the CPU)")
print("torch", torch.__version__, torch.cuda.get_device_name() if cuda else "CPU")'
device=$("$py" -c "$probe" "$([ ${#dry[@]} -eq 0 ] && echo gpu || echo dry)" 2>"$work/probe.log") \
  || fail "$py: $(tail -1 "$work/probe.log")"
echo "== $device; output in $out" | tee -a "$log"

echo "== 1. the fcp module" | tee -a "$log"
if "$py" -c "import fcp._fcp" >/dev/null 2>&1; then
  echo "using the installed one: $("$py" -c "import fcp; print(fcp.__file__)")" | tee -a "$log"
else
  if [ -n "${FCP_GPU_DEPS:-}" ]; then
    # shellcheck source=scripts/gpu_deps_env.sh
    source "$repo/scripts/gpu_deps_env.sh"
    gpu_deps_env "$work/prefix" || fail "FCP_GPU_DEPS=$FCP_GPU_DEPS: unusable (see above)"
  fi
  t0=$(date +%s)
  # A newer compiler's warnings are reported in the log, not fatal (FCP_WARNINGS_AS_ERRORS).
  if CMAKE_ARGS="${CMAKE_ARGS:-} -DFCP_WARNINGS_AS_ERRORS=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
     timeout "$(min 240 "$(( $(left_s) - 120 ))")" "$py" -m pip install --quiet --no-deps --no-build-isolation --no-index --target "$work/site" "$repo" \
     >"$work/pip.log" 2>&1; then
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
    echo "built from this checkout in $(( $(date +%s) - t0 )) s" | tee -a "$log"
  else
    tail -20 "$work/pip.log" >>"$log"
    failures+=("building the fcp module (last line: $(tail -1 "$work/pip.log"); without FCP_GPU_DEPS the C++ build dependencies must be installed)")
    echo "build failed: the kernel calibration runs without fcp (no stage check), the fcp.torch cost is skipped" | tee -a "$log"
  fi
fi

# What step 2 may measure for: the rest, less 150 s for step 3 and 60 s for its own start and writing.
budget_s=$(min 150 "$(( $(left_s) - 210 ))")
[ "$budget_s" -ge 20 ] || budget_s=20
echo "== 2. kernel calibration (measurements: $budget_s s)" | tee -a "$log"
timeout $(( budget_s + 60 )) "$py" scripts/gpu_calibrate.py measure --out "$out" --budget-s "$budget_s" "${dry[@]}" \
  2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || failures+=("scripts/gpu_calibrate.py measure (exit $rc)")

if "$py" -c "import fcp._fcp" >/dev/null 2>&1; then
  echo "== 3. fcp.torch on one GPU" | tee -a "$log"
  if [ ${#dry[@]} -eq 0 ]; then
    sizes=(--block-size 2048,4096,8192 --coalesce 1,4,16 --profile-at 4096:16 --heads-q 64 --heads-kv 8 --steps 5)
  else
    sizes=(--block-size 128,256 --coalesce 1,4 --profile-at 256:4 --steps 2)
  fi
  timeout "$(( $(left_s) - 10 > 30 ? $(left_s) - 10 : 30 ))" "$py" bench/torch_cuda_attention.py "${sizes[@]}" --json "$out/torch_cost.json" "${dry[@]}" \
    >"$out/torch_cost.md" 2>"$work/bench.err"
  rc=$?
  cat "$out/torch_cost.md" >>"$log"
  grep -v -e '^USDT:' -e 'profiler_st' "$work/bench.err" >>"$log"
  [ "$rc" -eq 0 ] || failures+=("bench/torch_cuda_attention.py (exit $rc; $(tail -1 "$work/bench.err"))")
fi

echo "== 4. report" | tee -a "$log"
if "$py" scripts/gpu_calibrate.py report "$out" >"$out/report.md" 2>"$work/report.err"; then
  cat "$out/report.md"
else
  failures+=("scripts/gpu_calibrate.py report: $(tail -1 "$work/report.err")")
fi
echo "== done in $(( $(date +%s) - start )) s: $(cd "$out" && ls | tr '\n' ' ')" | tee -a "$log"
[ ${#failures[@]} -eq 0 ] || fail "$(IFS=';'; echo "${failures[*]}")"
