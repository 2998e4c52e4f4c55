"""fcp.simulate gives exactly what `fcp simulate --json --per-worker` prints."""
import json

import numpy as np
import pytest

import fcp
from conftest import run_cli


def _as_cli_json(result):
    """A simulate() result with worker_stats back in the CLI's row layout."""
    stats = result["worker_stats"]
    rows = [{name: float(stats[name][w]) for name in stats} for w in range(result["workers"])]
    return {**result, "worker_stats": rows}


def _cli_simulate(cli, tmp_path, plan, *flags):
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    result = run_cli(cli, "simulate", "--plan", path, "--json", "--per-worker", *flags)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("kwargs,flags", [
    ({}, []),
    ({"profile": "gpu-y", "reshuffle": "blocking"}, ["--profile", "gpu-y", "--reshuffle", "blocking"]),
    ({"reshuffle": "none", "dkv_bytes": 4}, ["--reshuffle", "none", "--dkv-bytes", 4]),
    ({"transfers": "grouped"}, ["--transfers", "grouped"]),
    ({"partials": "stage"}, ["--partials", "stage"]),
    ({"network": "fast", "reshuffle": "blocking"}, ["--network", "fast", "--reshuffle", "blocking"]),
    ({"network": "quantized", "network_quantum": 0.5},
     ["--network", "quantized", "--network-quantum", 0.5]),
])
def test_hand_plan_matches_cli(hand, cli, tmp_path, kwargs, flags):
    result = fcp.simulate(hand, **kwargs)
    assert _as_cli_json(result) == _cli_simulate(cli, tmp_path, hand, *flags)
    assert result["planner"] == "hand" and result["workers"] == 2
    assert set(result["worker_stats"]) >= {"busy_s", "exposed_comm_s", "forward_flops"}
    # The model's useful work is the plan's: 15 token pairs * 32 FLOPs forward.
    assert result["forward_flops"] == 480
    np.testing.assert_array_equal(result["worker_stats"]["forward_flops"], [288, 192])


@pytest.mark.parametrize("planner", ["fcp", "ring", "magi"])
def test_planned_batch_matches_cli(fcp_planner, cli, tmp_path, planner):
    lengths = fcp.workload("lognormal", workers=8, tokens_per_worker=16384, max_len=65536, seed=5)
    plan = fcp.plan(lengths, workers=8, planner=planner)
    result = plan.simulate()
    assert _as_cli_json(result) == _cli_simulate(cli, tmp_path, plan)
    # The fast network engine: the same max-min rates up to rounding.
    fast = plan.simulate(network="fast")
    assert fast["total_time_s"] == pytest.approx(result["total_time_s"], rel=1e-9)
    # The quantized one: an approximation (docs/simulator.md), the same CLI flags.
    quantized = plan.simulate(network="quantized")
    assert quantized["total_time_s"] == pytest.approx(result["total_time_s"], rel=0.01)
    assert _as_cli_json(quantized) == _cli_simulate(cli, tmp_path, plan, "--network", "quantized")
    assert result["total_time_s"] == pytest.approx(result["forward_time_s"] + result["backward_time_s"])
    assert 0 < result["mfu"] <= 1
    # The step's lower bound: the two passes' bounds, each the largest of its terms.
    assert result["bound_ratio"] >= 1
    assert result["bound_s"] == pytest.approx(result["forward_bounds"]["bound_s"] +
                                              result["backward_bounds"]["bound_s"])
    stats = result["worker_stats"]
    assert result["forward_bounds"]["max_compute_s"] == pytest.approx(stats["forward_bound_compute_s"].max())
    assert result["forward_bounds"]["nic_in_s"] == pytest.approx(stats["forward_bound_nic_in_s"].max())


def test_trace_is_the_cli_trace(hand, cli, tmp_path):
    fcp.simulate(hand, trace=tmp_path / "py.json")
    path = tmp_path / "plan.json"
    path.write_text(hand.to_json())
    result = run_cli(cli, "simulate", "--plan", path, "--trace", tmp_path / "cli.json")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert json.loads((tmp_path / "py.json").read_text())


@pytest.mark.parametrize("kwargs,flags,error", [
    ({"profile": "gpu-z"}, ["--profile", "gpu-z"], OSError),  # not built in: a file that is not there
    ({"reshuffle": "eventually"}, ["--reshuffle", "eventually"], ValueError),
    ({"transfers": "push"}, ["--transfers", "push"], ValueError),
    ({"network": "approx"}, ["--network", "approx"], ValueError),
    ({"partials": "eventually"}, ["--partials", "eventually"], ValueError),
    ({"network": "quantized", "network_quantum": 0}, ["--network", "quantized", "--network-quantum", 0],
     ValueError),
    ({"dkv_bytes": -2}, ["--dkv-bytes", -2], ValueError),
])
def test_errors_match_cli(hand, cli, tmp_path, kwargs, flags, error):
    path = tmp_path / "plan.json"
    path.write_text(hand.to_json())
    result = run_cli(cli, "simulate", "--plan", path, *flags)
    # A file that cannot be read is 1; a bad flag value is a usage error, 2.
    assert result.returncode == (1 if error is OSError else 2)
    with pytest.raises(error) as info:
        fcp.simulate(hand, **kwargs)
    assert result.stderr == f"fcp: {info.value}\n"


def test_bad_arguments(hand, hand_text):
    with pytest.raises(TypeError):
        fcp.simulate(hand_text)
    with pytest.raises(TypeError):
        fcp.simulate(hand, profile=3)
    broken = fcp.Plan.from_json(hand_text.replace('[[0, 0, 2]]', '[[9, 0, 2]]', 1))
    with pytest.raises(fcp.InvalidPlanError):
        fcp.simulate(broken)


def test_profile_file(hand, cli, tmp_path):
    profile = tmp_path / "slow.json"
    profile.write_text('{"base": "gpu-x", "name": "slow", "peak_flops": 1e12}\n')
    result = fcp.simulate(hand, profile=profile)  # a path object works as well as a str
    assert result["profile"] == "slow"
    assert _as_cli_json(result) == _cli_simulate(cli, tmp_path, hand, "--profile", profile)
    assert result["total_time_s"] > fcp.simulate(hand)["total_time_s"]
