"""fcp.torch.attention on 4 gloo ranks (CPU) against a float64 reference:
causal, full and sliding-window masks, GQA, coalesce 1 and 16, FCP and ring
plans, an FCP plan relayed through nodes of two ranks, float32 and bfloat16,
both layouts; and bad input raising one clear error on every rank without a
hang. Skipped where torch is not installed.
"""

import pytest

torch = pytest.importorskip("torch")

import torch_cases  # noqa: E402  (after the skip)


@pytest.fixture(scope="module")
def attention_results():
    return torch_cases.spawn_ok("attention")[0]


@pytest.mark.parametrize("case", torch_cases.ATTENTION_CASES, ids=lambda c: "-".join(map(str, c)))
def test_attention_matches_float64_reference(attention_results, case):
    tol = 1e-4 if case[3] == "float32" else 2e-2
    res = attention_results[case]
    for layout in ("dataloader", "plan"):
        for name, err in res[layout].items():
            assert err < tol, f"{case} {layout}: {name} relative error {err:.3g} >= {tol}"
    # The two layouts run the same program on the same rows, each output row taking its
    # calls in the program's order (the plan layout's order: it waits for nothing).
    assert res["layouts_max_abs_diff"] == 0, f"{case}: o, dq, dk, dv differ between the layouts"


@pytest.fixture(scope="module")
def bad_input_results():
    return torch_cases.spawn_ok("bad_input", timeout_s=120)


@pytest.mark.parametrize("case, expected", [
    ("wrong_shape_on_rank_1", "rank 1: q has shape"),
    ("wrong_heads", "the plan needs (".replace("(", "")),
    ("workers_not_world", "workers=3 but the process group has 4 ranks"),
    ("lengths_disagree", "ranks disagree on the lengths"),
    ("non_contiguous_on_rank_3", "rank 3: k is not contiguous"),
    ("wrong_dtype", "dtype torch.float64"),
    ("dataloader_rows_in_plan_layout", "plan layout"),
    ("dispatch_wrong_rows", "dispatch: x has shape"),
    ("different_plan_on_rank_2", "the ranks hold different plans"),
])
def test_bad_input_is_one_error_on_every_rank(bad_input_results, case, expected):
    for rank, result in enumerate(bad_input_results):
        assert result[case] is not None, f"rank {rank}: {case} raised nothing"
        assert expected in result[case], f"rank {rank}: {result[case]}"
    # Every rank reports the same message.
    assert len({r[case] for r in bad_input_results}) == 1


def test_group_still_works_after_errors(bad_input_results):
    for result in bad_input_results:
        assert result["good_call_after_errors"] is None


def _run_program(prog, x, scale):
    """Every forward and backward stage of a 1-worker program (no pools) on x = (q, k, v, do)."""
    q, k, v, do = x
    empty = k.new_zeros((0,) + tuple(k.shape[1:]))
    f32 = dict(dtype=torch.float32)
    o = torch.zeros(q.shape, **f32)
    lse = torch.full(q.shape[:2], float("-inf"), **f32)
    for t in range(prog.num_stages("forward")):
        prog.forward_stage(t, scale, 0, q, k, v, empty, empty, o, lse)
    delta = (o * do.float()).sum(-1).contiguous()
    dq, dk, dv = torch.zeros(q.shape, **f32), torch.zeros(k.shape, **f32), torch.zeros(v.shape, **f32)
    part = torch.zeros((0,) + tuple(k.shape[1:]), **f32)
    for t in range(prog.num_stages("backward")):
        prog.backward_stage(t, scale, q, k, v, empty, empty, do, lse, delta, dq, dk, dv, part, part)
    return o, lse, dq, dk, dv


@pytest.mark.parametrize("mask", ["causal", "full", "sliding_window"])
def test_bfloat16_kernel_reads_tensors_in_place_like_float32_on_rounded_inputs(mask):
    """The extension's bfloat16 path (torch tensors through DLPack, no copy) gives the
    float32 kernel's bits on the same values widened: widening is exact and the
    arithmetic after it is the same (tests/attention_kernel_test.cpp)."""
    import fcp
    from fcp import _fcp
    kw = dict(window=50) if mask == "sliding_window" else {}
    lengths = [1, 64, 200, 37]
    plan = fcp.plan(lengths, workers=1, block_size=64, mask=mask, heads_q=4, heads_kv=2, head_dim=16, **kw)
    prog = _fcp.Program(plan._h, 0)
    g = torch.Generator().manual_seed(3)
    n = sum(lengths)
    x16 = [torch.randn(n, h, 16, generator=g).to(torch.bfloat16) for h in (4, 2, 2, 4)]
    got = _run_program(prog, x16, 0.25)
    want = _run_program(prog, [x.float() for x in x16], 0.25)
    for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        assert torch.equal(a, b), f"{mask}: {name} differs from float32 by {(a - b).abs().max().item()}"
    # Mixed dtypes are an error naming the buffer, not a silent cast.
    q, k, v, do = x16
    with pytest.raises(ValueError, match="k is float32 but q is bfloat16"):
        prog.forward_stage(0, 0.25, 0, q, k.float(), v, k[:0], k[:0], got[0], got[1])


def _overlap_s(a, b):
    return max(0.0, min(a["ts"] + a["dur"], b["ts"] + b["dur"]) - max(a["ts"], b["ts"])) * 1e-6


def test_trace_shows_stage_transfers_in_flight_while_the_stage_computes():
    """fcp.torch.trace on 4 gloo ranks: the runtime's trace layout (as `fcp run --trace`),
    and on some rank a transfer of stage t (carrying K/V for stage t+1) in flight
    while stage t's kernel runs."""
    import json
    import pathlib
    import subprocess
    import sys
    result = torch_cases.spawn_ok("trace")[0]
    doc = json.loads(pathlib.Path(result["path"]).read_text())
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert {e["args"]["name"] for e in meta if e["name"] == "process_name"} == {f"rank {r}" for r in range(4)}
    assert {e["args"]["name"] for e in meta if e["name"] == "thread_name"} == {
        "compute", "send", "recv", "wait", "reshuffle"}
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in events)
    label_of = lambda e: " ".join(e["name"].split()[:2])  # "fwd s3 q4 kv2" -> "fwd s3"
    for r in range(4):
        names = {label_of(e) for e in events if e["pid"] == r and e["cat"] == "compute"}
        assert {"fwd s0", "bwd s0"} <= names, f"rank {r}: {sorted(names)}"
    overlapping, in_flight_s, hidden_s = 0, 0.0, 0.0
    for t in (e for e in events if e["cat"] in ("send", "recv")):
        # One compute event per kernel call, named like `fcp run --trace`'s ("fwd s3 q4 kv2");
        # none in a stage where this rank only relays or sends.
        computes = [c for c in events if c["pid"] == t["pid"] and c["cat"] == "compute" and label_of(c) == label_of(t)]
        hidden = sum(_overlap_s(t, c) for c in computes)
        in_flight_s += t["dur"] * 1e-6
        hidden_s += hidden
        overlapping += hidden > 0
    assert in_flight_s > 0, "no stage transfers in the trace"
    assert overlapping > 0, "no transfer was in flight while its stage computed"
    print(f"{overlapping} transfers overlap their stage's compute; {100 * hidden_s / in_flight_s:.0f}% of "
          f"the transfers' in-flight time lies under compute")
    # The same schema as `fcp run --trace`: the repository's overlap script reads it.
    script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "trace_overlap.py"
    out = subprocess.run([sys.executable, str(script), result["path"]], capture_output=True, text=True, check=True)
    assert "overlapped with compute" in out.stdout


def test_partials_never_hold_back_a_later_stage_and_grads_are_deterministic():
    """The runtime rules of docs/runtime.md on 4 gloo ranks: a received dK/dV partial is
    not awaited at its stage's end, so on some rank a later backward stage computes
    before an earlier stage's partial was taken in (the old rule waited for it
    first); and two runs give bitwise identical gradients."""
    import json
    import pathlib
    results = torch_cases.spawn_ok("rules")
    assert all(r["identical"] for r in results), [r["identical"] for r in results]
    events = [e for e in json.loads(pathlib.Path(results[0]["path"]).read_text())["traceEvents"] if e["ph"] == "X"]
    stage = lambda e: int(e["name"].split()[1][1:])  # "bwd s3 ..." -> 3
    partials = [e for e in events if e["cat"] == "recv" and " dkv" in e["name"]]
    assert partials, "no dK/dV partials in the trace"
    later = [(p["name"], c["name"]) for p in partials for c in events
             if c["pid"] == p["pid"] and c["cat"] == "compute" and c["name"].startswith("bwd s")
             and stage(c) > stage(p) and c["ts"] < p["ts"] + p["dur"]]
    assert later, "every partial was taken in before the next stage computed (the old rule)"


def test_reshuffle_in_is_per_block_and_outputs_do_not_depend_on_arrival_order():
    """The input reshuffle's rule of docs/runtime.md, step 1, on 4 gloo ranks (FCP causal and
    MagiAttention-style full plans): rank 0 holds back its last Q|K|V message (block B for rank D) for
    1 s. On D a stage-0 call that reads neither B nor only D's own rows must start
    before B's message arrives (with the old rule, one all-to-all before every call but
    those on the rank's own rows, none does), and every rank's o, dq, dk, dv are bitwise
    those of the run without the delay."""
    import json
    import pathlib
    results = torch_cases.spawn_ok("reshuffle_rule")
    for name in ("fcp", "magi"):
        assert all(r[name]["identical"] for r in results), (name, [r[name]["identical"] for r in results])
        block, dst = results[0][name]["block"], results[0][name]["dst"]
        calls = set(results[dst][name]["calls"])
        assert calls, f"{name}: rank {dst} has no stage-0 call that needs another rank's rows but not block {block}"
        events = [e for e in json.loads(pathlib.Path(results[0][name]["path"]).read_text())["traceEvents"]
                  if e["ph"] == "X" and e["pid"] == dst]
        arrival = [e["ts"] + e["dur"] for e in events if e["name"] == f"reshuffle in b{block} from 0"]
        assert len(arrival) == 1, f"{name}: no reshuffle event of block {block} from rank 0 on rank {dst}"
        early = [e["name"] for e in events if e["cat"] == "compute" and e["name"] in calls and e["ts"] < arrival[0]]
        assert early, f"{name}: on rank {dst} every call needing another rank's rows waited for block {block}"
        for r, res in enumerate(results):
            dl, pl = res[name]["stats"]["dataloader"], res[name]["stats"]["plan"]
            assert dl["calls"] == pl["calls"] == 1
            assert 0 <= dl["reshuffle_wait_s"] <= dl["reshuffle_s"] < dl["total_s"], (r, dl)
            assert dl["reshuffle_s"] > 0 and dl["reshuffle_waits"] >= 0, (r, dl)
            assert pl["reshuffle_s"] == pl["reshuffle_wait_s"] == pl["reshuffle_waits"] == 0, (r, pl)
            assert pl["kernel_s"] > 0 and abs(pl["python_s"] + pl["kernel_s"] + pl["wait_s"] - pl["total_s"]) < 1e-9
