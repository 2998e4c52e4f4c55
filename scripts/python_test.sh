#!/usr/bin/env bash
# Installs the Python module `fcp` into a fresh virtual environment with
# `pip install .` (as a user would) and runs its pytest suite.
#
# Usage: scripts/python_test.sh [pytest arguments...]
# Environment:
#   PYTHON       interpreter to make the venv from (default python3)
#   FCP_PY_VENV  where the venv goes (default build/python-venv; recreated each run)
#   FCP_WHEEL_DIR  build the wheel into this folder first and install it (scripts/test.sh
#                sets it, so that torch_test.sh installs the same wheel)
#   FCP_CLI      the `fcp` command the comparison tests run (default: build*/fcp of
#                this checkout; those tests skip, saying why, when there is none)
# Needs the C++ build dependencies of scripts/setup.sh, python3-venv and
# python3-dev, and PyPI (or a pip mirror) for scikit-build-core, nanobind,
# numpy and pytest.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FCP_PY_VENV:-$repo/build/python-venv}
python=${PYTHON:-python3}

rm -rf "$venv"
"$python" -m venv "$venv"
if [ -n "${FCP_WHEEL_DIR:-}" ]; then
  # scripts/test.sh: build the wheel once; torch_test.sh installs the same one.
  rm -f "$FCP_WHEEL_DIR"/fcp-*.whl
  "$venv/bin/python" -m pip wheel --quiet --no-deps -w "$FCP_WHEEL_DIR" "$repo"
  "$venv/bin/python" -m pip install --quiet "$FCP_WHEEL_DIR"/fcp-*.whl "pytest>=7"
else
  "$venv/bin/python" -m pip install --quiet "$repo" "pytest>=7"
fi

# Run from outside the checkout so `import fcp` is the installed package.
cd "$repo/python/tests"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" .
