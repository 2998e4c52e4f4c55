"""fcp (Python) and the fcp command line give identical results."""
import numpy as np
import pytest

import fcp
from conftest import run_cli


@pytest.mark.parametrize("dist,workers,seed,extra", [
    ("lognormal", 8, 0, {}), ("bimodal", 16, 5, {}), ("uniform", 3, 9, {}), ("fixed", 4, 1, {}),
    ("pareto", 8, 2, {}), ("pareto", 8, 2, {"pareto_alpha": 1.5, "pareto_scale": 64})])
def test_workload_matches_cli(cli, dist, workers, seed, extra):
    args = dict(dist=dist, workers=workers, tokens_per_worker=8192, max_len=32768, seed=seed)
    lengths = fcp.workload(**args, **extra)
    flags = [x for k, v in extra.items() for x in ("--" + k.replace("_", "-"), v)]
    result = run_cli(cli, "workload", "--dist", dist, "--workers", workers,
                     "--tokens-per-worker", 8192, "--max-len", 32768, "--seed", seed, *flags)
    assert result.returncode == 0, result.stderr
    assert lengths.dtype == np.int64 and lengths.sum() == workers * 8192
    np.testing.assert_array_equal(lengths, [int(x) for x in result.stdout.split()])


# (fcp.plan keyword arguments, the same as fcp plan flags)
CONFIGS = [
    ({"workers": 8}, []),
    ({"workers": 8, "block_size": 1024, "coalesce": 4}, ["--block-size", 1024, "--coalesce", 4]),
    ({"workers": 5, "mask": "full", "block_size": 2048}, ["--mask", "full", "--block-size", 2048]),
    ({"workers": 6, "mask": "sliding_window", "window": 3000, "block_size": 1024},
     ["--mask", "sliding_window", "--window", 3000, "--block-size", 1024]),
    ({"workers": 4, "token_cap": 40000, "heads_q": 32, "heads_kv": 4, "head_dim": 64,
      "dtype_bytes": 4},
     ["--token-cap", 40000, "--heads-q", 32, "--heads-kv", 4, "--head-dim", 64,
      "--dtype-bytes", 4]),
    ({"workers": 7, "heavy_fraction": 0, "local_search": 0},
     ["--heavy-fraction", 0, "--local-search", 0]),
    ({"workers": 7, "heavy_fraction": 0.25, "max_split": 3}, ["--heavy-fraction", 0.25, "--max-split", 3]),
    ({"workers": 9, "network_flops_per_byte": 0}, ["--network-flops-per-byte", 0]),
    ({"workers": 9, "network_flops_per_byte": 3000.5}, ["--network-flops-per-byte", 3000.5]),
    ({"workers": 9, "max_imbalance": 1}, ["--max-imbalance", 1]),
    ({"workers": 9, "rescue_max_split": 0}, ["--rescue-max-split", 0]),
    ({"workers": 9, "reshuffle_locality": False}, ["--reshuffle-locality", "false"]),
    ({"workers": 9, "traffic_leveling": False}, ["--traffic-leveling", "false"]),
    ({"workers": 9, "node_workers": 2}, ["--node-workers", 2]),
    *[({"workers": 8, "planner": name}, ["--planner", name])
      for name in ["ring", "bytescale", "wlb", "magi", "fcp-nocoalesce"]],
    ({"workers": 8, "tune": "gpu-x"}, ["--tune"]),
    ({"workers": 8, "tune": "gpu-y", "reshuffle_locality": False},
     ["--tune", "--profile", "gpu-y", "--reshuffle-locality", "false"]),
]


@pytest.mark.parametrize("kwargs,flags", CONFIGS)
def test_plan_json_is_byte_identical_to_cli(fcp_planner, cli, tmp_path, kwargs, flags):
    workers = kwargs["workers"]
    lengths = fcp.workload("lognormal", workers=workers, tokens_per_worker=32768,
                           max_len=131072, seed=workers)
    lengths_path = tmp_path / "lengths.txt"
    lengths_path.write_text("\n".join(map(str, lengths)) + "\n")
    out = tmp_path / "plan.json"
    result = run_cli(cli, "plan", "--lengths", lengths_path, "--workers", workers, "--out", out,
                     *flags)
    assert result.returncode == 0, result.stderr
    plan = fcp.plan(lengths, **kwargs)
    assert plan.to_json().encode() == out.read_bytes()
    # A plain list gives the same plan as an int64 array.
    assert fcp.plan(list(map(int, lengths)), **kwargs) == plan
    assert plan.planning_seconds is not None and plan.planning_seconds >= 0
    plan.validate()


def test_every_planner_setting_is_a_keyword_and_a_flag(cli):
    """One table (include/fcp/planner_options.h) makes both: each row is a
    keyword of fcp.plan and the flag of the same name, and its default is the
    plan's when the keyword is left out."""
    help_text = run_cli(cli, "plan", "--help").stdout
    lengths = [5000, 300, 20000, 7]
    default = fcp.plan(lengths, workers=4)
    for keyword, _field, _kind, value, text, _recorded in fcp._fcp.planner_options():
        assert f"--{keyword.replace('_', '-')} " in help_text and text in help_text, keyword
        if keyword in ("workers", "token_cap"):  # spelled out by fcp.plan (token_cap: None)
            continue
        assert fcp.plan(lengths, workers=4, **{keyword: value}) == default, keyword
        assert f"    {keyword} (" in fcp.plan.__doc__, keyword


def _without_timing(text):
    return [line for line in text.splitlines() if not line.startswith("  planning time:")]


def test_planned_summary_matches_inspect(fcp_planner, cli, tmp_path):
    lengths = fcp.workload("lognormal", workers=8, tokens_per_worker=16384, max_len=65536, seed=2)
    plan = fcp.plan(lengths, workers=8, block_size=2048)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    result = run_cli(cli, "inspect", "--plan", path)
    assert result.returncode == 0, result.stderr
    assert _without_timing(plan.summary()) == _without_timing(result.stdout)
    assert "planning time:" in plan.summary()


def test_readme_one_liner(fcp_planner, tmp_path):
    import subprocess
    import sys
    result = subprocess.run(
        [sys.executable, "-c", "import fcp; print(fcp.plan([4096]*64, workers=8).summary())"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("plan: planner fcp, 8 workers, 64 sequences, 262144 tokens")
