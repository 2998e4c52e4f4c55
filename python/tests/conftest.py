"""Shared fixtures: the hand-made plan, the fcp command line, planner availability."""
import os
import pathlib
import shutil
import subprocess

import pytest

import fcp

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.fixture
def hand_text():
    return (HERE / "hand_plan.json").read_text()


@pytest.fixture
def hand(hand_text):
    return fcp.Plan.from_json(hand_text)


def _find_cli():
    """$FCP_CLI, else a build of this checkout (build/fcp, build*/fcp), else `fcp` on PATH."""
    env = os.environ.get("FCP_CLI")
    if env:
        return env if os.access(env, os.X_OK) else None
    # The release build first (build.sh release), then any other build tree.
    for candidate in [REPO / "build" / "fcp", *sorted(REPO.glob("build*/fcp"))]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("fcp")


@pytest.fixture(scope="session")
def cli():
    path = _find_cli()
    if path is None:
        pytest.skip("the fcp command line was not found: set FCP_CLI=/path/to/fcp or build it "
                    "(cmake --build build --target fcp_cli)")
    return path


def run_cli(cli, *args, stdin=None):
    return subprocess.run([cli, *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=120)


def _fcp_planner_works():
    try:
        fcp.plan([4096] * 4, workers=2)
        return True
    except RuntimeError as e:
        if "not implemented" in str(e):
            return False
        raise


@pytest.fixture(scope="session")
def fcp_planner():
    """Skips tests that need plans from the FCP planner while it is not built in."""
    if not _fcp_planner_works():
        pytest.skip("the FCP planner (src/plan/fcp_planner.cpp) is not implemented in this build")
