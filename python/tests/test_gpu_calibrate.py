"""The simulator's calibration on a GPU (issue 40: scripts/gpu_calibrate.sh,
scripts/gpu_calibrate.py, bench/torch_cuda_attention.py), without a GPU:
the whole pipeline in its CPU dry run (tiny shapes, _varlen's dense stand-in
of the flash op), the profile it writes read back by the simulator, the
pieces of the fit and of the model on hand-made input, every committed
profile under profiles/ read back, and bad input.
"""

import importlib.util
import json
import math
import os
import pathlib
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import fcp  # noqa: E402
from conftest import run_cli  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
WRAPPER = REPO / "scripts" / "gpu_calibrate.sh"
FILES = {"cpu-dry-run.json", "calibration.json", "calibration.md", "torch_cost.json", "torch_cost.md", "report.md",
         "log.txt"}


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cal = _load("gpu_calibrate", REPO / "scripts" / "gpu_calibrate.py")


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """scripts/gpu_calibrate.sh --dry-run with this interpreter: (folder, completed process)."""
    out = tmp_path_factory.mktemp("calibration")
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["PYTHON"] = sys.executable
    done = subprocess.run(["bash", str(WRAPPER), "--dry-run", "--out", str(out)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done


def _json(path):
    return json.loads(pathlib.Path(path).read_text())


def test_dry_run_writes_every_file_and_the_report(dry):
    out, done = dry
    assert {p.name for p in out.iterdir()} == FILES
    report = (out / "report.md").read_text()
    assert "== done in" in done.stdout and report.rstrip() in done.stdout
    assert "## docs/simulator.md: measured profile" in report and "## docs/torch.md: fcp.torch on one GPU" in report
    # gpu-x's curve is read from src/model/cost_model.cpp and shown beside the measured one.
    assert "gpu-x f" in report and "(gpu-x 0.75)" in report
    cost = _json(out / "torch_cost.json")
    assert {(r["mask"], r["block_size"], r["coalesce"]) for r in cost["rows"]} == {
        (m, b, c) for m in ("causal", "full", "sliding_window") for b in (128, 256) for c in (1, 4)}
    assert all(r["fcp_ms"] > 0 and r["kernel_ms"] > 0 for r in cost["rows"])
    # One profile of fcp.torch and one of the baseline per mask, at --profile-at 256:4.
    assert [(p["mask"], p["block_size"]) for p in cost["profiles"]] == [
        (m, b) for m in ("causal", "full", "sliding_window") for b in (256, None)]
    assert all(p["ops"] and p["wall_ms"] > 0 for p in cost["profiles"])


def test_profile_is_the_fit_of_the_measurements(dry):
    out, _ = dry
    record, profile = _json(out / "calibration.json"), _json(out / "cpu-dry-run.json")
    assert record["profile"] == profile and record["profile_file"] == "cpu-dry-run.json"
    assert set(profile) == {"base", "name", "description", "peak_flops", "kernel_launch_us",
                            "backward_efficiency_ratio", "efficiency"}
    assert profile["base"] == "gpu-x" and profile["name"] == "cpu-dry-run"
    assert profile["peak_flops"] > 0 and profile["kernel_launch_us"] > 0
    assert 0 < profile["backward_efficiency_ratio"] <= 1
    lengths = [t for t, _ in profile["efficiency"]]
    values = [f for _, f in profile["efficiency"]]
    assert lengths == sorted(set(lengths)) and all(0 < f <= 1 for f in values)
    assert values == sorted(values), "the fitted curve must not fall with length"
    causal = [r for r in record["sweep"] if r["mask"] == "causal"]
    assert [r["tokens"] for r in causal] == lengths == [64, 128, 256]
    fitted = cal.fit_monotone([r["forward_efficiency"] for r in causal])
    assert values == pytest.approx([min(1.0, max(1e-6, f)) for f in fitted], rel=1e-12)
    for r in record["sweep"]:
        assert r["forward_efficiency"] == pytest.approx(
            r["forward_flops"] / (r["forward_ms"] * 1e-3 * profile["peak_flops"]), rel=1e-12)
    assert {r["mask"] for r in record["sweep"]} == {"causal", "full", "sliding_window"}
    # fcp.torch's stages of a 2-worker plan: every coalesce, mask and pass, the model charged for each stage.
    assert {(r["coalesce"], r["mask"], r["pass"]) for r in record["passes"]} == {
        (c, m, p) for c in (1, 4) for m in ("causal", "full", "sliding_window") for p in ("forward", "backward")}
    assert all(r["kernels_ms"] > 0 and r["model_ms"] > 0 and r["fcp_torch_ms"] > 0 for r in record["passes"])
    assert record["skipped"] == [] and record["load_check"].startswith("loaded by fcp.simulate")


def test_profile_loads_in_fcp_simulate_and_compare(dry, cli, tmp_path):
    out, _ = dry
    path = out / "cpu-dry-run.json"
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(fcp.plan([2048, 1024, 512, 512], workers=2, block_size=512).to_json())
    done = run_cli(cli, "simulate", "--plan", plan_path, "--profile", path)
    assert done.returncode == 0, done.stderr
    assert "profile cpu-dry-run" in done.stdout
    done = run_cli(cli, "compare", "--dist", "lognormal", "--workers", "2", "--tokens-per-worker", "4096",
                   "--planners", "fcp,ring", "--profile", path)
    assert done.returncode == 0, done.stderr
    assert "profile cpu-dry-run" in done.stdout


def _round_trip(profile_path, tmp_path):
    """The simulator's times of single causal sequences on one worker, from the profile read by the C++
    loader, against the profile's fields read here (compute_sm_fraction set to 1 in a copy, so that what
    the file says is all there is): kernel launch + FLOPs / (peak x f(2P/q)), backward 2.5x / ratio."""
    profile = _json(profile_path)
    profile["compute_sm_fraction"] = 1.0
    copy = tmp_path / "profile.json"
    copy.write_text(json.dumps(profile))
    heads_q, head_dim = 4, 32
    points = profile["efficiency"]
    first, last = points[0][0], points[-1][0]
    # Below the table, between two points, and past the end.
    for length in sorted({max(2, int(first // 2)), int(math.sqrt(first * points[min(1, len(points) - 1)][0])),
                          int(last * 2)}):
        plan = fcp.plan([length], workers=1, block_size=max(length, 64), heads_q=heads_q, heads_kv=2,
                        head_dim=head_dim)
        sim = fcp.simulate(plan, profile=str(copy), reshuffle="none")
        pairs = length * (length + 1) // 2
        flops = 4.0 * heads_q * head_dim * pairs
        f = cal.kernel_efficiency(points, 2.0 * pairs / length)
        launch_s = profile["kernel_launch_us"] * 1e-6
        assert sim["forward_time_s"] == pytest.approx(launch_s + flops / (profile["peak_flops"] * f), rel=1e-9)
        assert sim["backward_time_s"] == pytest.approx(
            launch_s + 2.5 * flops / (profile["peak_flops"] * f * profile["backward_efficiency_ratio"]), rel=1e-9)


def test_written_profile_round_trips_through_the_simulator(dry, tmp_path):
    _round_trip(dry[0] / "cpu-dry-run.json", tmp_path)


@pytest.mark.parametrize("path", sorted((REPO / "profiles").glob("*.json")), ids=lambda p: p.name)
def test_committed_profiles_round_trip_through_the_simulator(path, tmp_path):
    profile = _json(path)
    assert profile["name"] == path.stem, "a profile file is named after its profile"
    _round_trip(path, tmp_path)


def test_fit_is_the_least_squares_non_decreasing_curve():
    assert cal.fit_monotone([0.1, 0.3, 0.2, 0.4]) == pytest.approx([0.1, 0.25, 0.25, 0.4])
    assert cal.fit_monotone([0.5, 0.4, 0.3]) == pytest.approx([0.4, 0.4, 0.4])
    assert cal.fit_monotone([0.1, 0.2]) == [0.1, 0.2]


def test_allowed_pairs_counts_our_mask():
    rng = random.Random(4)
    for _ in range(200):
        mask = rng.choice(["causal", "full", "sliding_window"])
        window = rng.randint(1, 40)
        q_pos, k_pos, q_len, k_len = (rng.randint(0, 60) for _ in range(4))
        expected = sum(1 for q in range(q_pos, q_pos + q_len) for k in range(k_pos, k_pos + k_len)
                       if mask == "full" or (k <= q and (mask == "causal" or q - window < k)))
        assert cal.allowed_pairs(mask, window, q_pos, k_pos, q_len, k_len) == expected


def test_chip_names():
    assert cal.chip_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert cal.chip_slug("NVIDIA H200") == "h200"
    assert cal.chip_slug("NVIDIA GeForce RTX 4090") == "geforce"


def _one_line_error(capsys, argv, expect):
    assert cal.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_calibrate.py: ") and expect in err[0], err


def test_bad_input_is_one_line_and_exit_1(capsys, tmp_path):
    _one_line_error(capsys, ["measure", "--out", str(tmp_path), "--budget-s", "0"], "--budget-s must be positive")
    _one_line_error(capsys, ["measure", "--out", str(tmp_path), "--dry-run", "--name", "../x"], "--name '../x'")
    _one_line_error(capsys, ["report", str(tmp_path / "missing")], "not a folder")
    _one_line_error(capsys, ["report", str(tmp_path)], "calibration.json: no such file")
    (tmp_path / "calibration.json").write_text("{")
    _one_line_error(capsys, ["report", str(tmp_path)], "not valid JSON")
    (tmp_path / "calibration.json").write_text('{"environment": {}}')
    _one_line_error(capsys, ["report", str(tmp_path)], "not a calibration record")
    if not torch.cuda.is_available():
        _one_line_error(capsys, ["measure", "--out", str(tmp_path)], "sees no CUDA device")
    with pytest.raises(SystemExit) as exit_:
        cal.main(["measure"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0], err


def test_wrapper_bad_input_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["PYTHON"] = sys.executable
    cases = [(["--bogus"], "unknown argument '--bogus'"),
             (["--out", str(tmp_path), "--limit-s", "60"], "--limit-s must be a whole number of seconds >= 120")]
    if not torch.cuda.is_available():
        cases.append((["--out", str(tmp_path)], "sees no CUDA device"))
    for args, expect in cases:
        done = subprocess.run(["bash", str(WRAPPER), *args], capture_output=True, text=True, env=env, timeout=120)
        err = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(err) == 1 and err[0].startswith("gpu_calibrate.sh: FAILED: ") \
            and expect in err[0], done.stderr
