#!/usr/bin/env bash
# Installs fcp with its torch and Hugging Face extras (pip install '.[torch,hf]')
# into one reused virtual environment and runs the fcp.torch tests: attention
# on 4 gloo ranks against float64, bad input, and a Hugging Face Llama/Mistral
# against per-sequence runs; the CUDA path's device-independent parts (test_torch_varlen.py);
# test_torch_cuda.py, which skips without a GPU. scripts/test.sh calls it after the Python module.
#
# Usage: scripts/torch_test.sh [pytest arguments...]
# Environment:
#   PYTHON           interpreter to make the venv from (default python3)
#   FCP_TORCH_VENV   the venv (default ~/.cache/fcp/torch-venv); created once and
#                    reused, since torch alone is about 3 GB (a 5.3 GB venv)
#   FCP_TORCH_MIN_GB free disk the first install needs (default 7)
#   FCP_WHEEL_DIR    a folder holding this checkout's fcp wheel (scripts/test.sh sets it):
#                    installed instead of building the extension again
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FCP_TORCH_VENV:-$HOME/.cache/fcp/torch-venv}
python=${PYTHON:-python3}
need_gb=${FCP_TORCH_MIN_GB:-7}

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
  parent=$(dirname "$venv")
  mkdir -p "$parent"
  free_gb=$(( $(df -Pk "$parent" | awk 'NR == 2 {print $4}') / 1024 / 1024 ))
  if [ "$free_gb" -lt "$need_gb" ]; then
    echo "torch_test.sh: installing torch and transformers needs about $need_gb GB free in $parent," \
         "only $free_gb GB free (set FCP_TORCH_VENV to a disk with room)" >&2
    exit 1
  fi
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
fi
if [ -n "${FCP_WHEEL_DIR:-}" ] && compgen -G "$FCP_WHEEL_DIR/fcp-*.whl" >/dev/null; then
  # scripts/test.sh: the wheel python_test.sh built from this checkout (one extension build, not two).
  wheel=$(ls "$FCP_WHEEL_DIR"/fcp-*.whl)
  "$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel"
  "$venv/bin/python" -m pip install --quiet "${wheel}[torch,hf]" "pytest>=7"
else
  "$venv/bin/python" -m pip install --quiet "$repo[torch,hf]" "pytest>=7"
fi

# Run from outside the checkout so `import fcp` is the installed package.
cd "$repo/python/tests"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" test_program.py test_torch_attention.py test_torch_hf.py \
  test_torch_training.py test_torch_example.py test_torch_varlen.py test_torch_cuda.py test_gpu_calibrate.py
