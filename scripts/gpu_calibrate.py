"""Calibrates the simulator's kernel model on the flash varlen kernels that
fcp.torch's CUDA path launches (issue 40), and writes it as a hardware
profile that `fcp simulate|compare --profile FILE` loads.

    python scripts/gpu_calibrate.py measure --out DIR [--budget-s 180] [--name NAME] [--repeats 5] [--dry-run]
    python scripts/gpu_calibrate.py report DIR

`measure`, on one CUDA GPU, bf16, the Llama-3-70B attention shape (64 query
heads, 8 KV heads, head dim 128):

1. the chip's bf16 matrix rate: one large torch.matmul (8192^3), the
   profile's peak_flops;
2. the fixed cost of one flash call: back-to-back forward calls on one
   128-token sequence, the profile's kernel_launch_us;
3. the flash varlen forward and backward ops of fcp/torch/_varlen.py
   (flash_forward / flash_backward, called as fcp.torch calls them) on
   32768-token calls cut into equal sequences of 256 .. 32768 tokens (many
   segments per call), causal, full and sliding window: f = forward FLOPs /
   (time x peak), FLOPs = 4 x heads_q x head_dim x allowed token pairs;
4. the fit: f(len) is the causal forward curve (the axis of fcp/cost_model.h),
   made non-decreasing by least squares (pool-adjacent-violators: where a
   longer sequence measured lower, the points are averaged) and kept in
   (0, 1]; backward_efficiency_ratio is the median over the causal lengths of
   2.5 x forward time / backward time; network and latencies come from gpu-x
   ("base": "gpu-x");
5. the check of the simulator's kernel rule on the shapes fcp.torch really
   launches: rank 0's stages of an 8-worker FCP plan (block 4096, coalesce
   16, a lognormal batch of 32768 tokens per worker), each stage's launches
   (_varlen.stage_launches) timed and set against the simulator's charge
   for them with the fitted profile: per query segment of q tokens with P
   allowed keys in the stage, FLOPs / (peak x f(2P/q)) (docs/simulator.md,
   "Kernel time"), on all SMs (the simulator also divides by
   compute_sm_fraction, the SMs left while communication runs). Needs the
   fcp module (built from this checkout); without it the step is skipped
   and says so.

It writes DIR/NAME.json (the profile; NAME from torch.cuda.get_device_name(),
e.g. h100-measured-flash), DIR/calibration.json (every timing, the fit and
the environment) and DIR/calibration.md (the same as tables), loads the
profile back through fcp.simulate when the module is there, and prints the
tables. --budget-s bounds steps 3 and 5: lengths and stages whose estimated
time would not fit are skipped and listed (default 180 s; the whole run
takes about 1-2 minutes on an H100 or H200 by the FLOP count).

--dry-run runs every step on the CPU with tiny shapes (4/2 heads of 32,
calls of 512 tokens, a 2-worker plan): the flash op is replaced by
_varlen's dense float64 stand-in (reference_forward / reference_backward,
same arguments), and the host clock replaces CUDA events. Its numbers say
nothing about any chip; it exists so that the pipeline is tested without a
GPU (python/tests/test_gpu_calibrate.py).

`report DIR` prints, from DIR/calibration.json and DIR/torch_cost.json
(bench/torch_cuda_attention.py --json, when present), the markdown that
docs/simulator.md ("Measured profile") and docs/torch.md (single-GPU cost)
record, with gpu-x's curve beside the measured one. scripts/gpu_calibrate.sh
runs both on a GPU machine.

Bad input or a missing GPU: one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
BACKWARD_FLOPS_FACTOR = 2.5  # fcp/cost_model.h kBackwardFlopsFactor
MASKS = ("causal", "full", "sliding_window")


class CalibrationError(Exception):
    """Bad input or an unusable environment: reported as one line, exit 1."""


def _load_by_path(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def import_fcp():
    """The fcp module (native extension) if importable, else None."""
    try:
        import fcp
        from fcp import _fcp  # noqa: F401
        return fcp
    except ImportError:
        return None


def import_varlen():
    """fcp.torch._varlen: the installed one, else this checkout's file (it needs only torch)."""
    try:
        from fcp.torch import _varlen
        return _varlen
    except ImportError:
        return _load_by_path("fcp_torch_varlen", REPO / "python" / "fcp" / "torch" / "_varlen.py")


def import_bench():
    """bench/torch_cuda_attention.py, for its timer."""
    return _load_by_path("torch_cuda_attention", REPO / "bench" / "torch_cuda_attention.py")


# ---- the simulator's kernel model (fcp/cost_model.h), for the stage check ------


def kernel_efficiency(points, kernel_tokens: float) -> float:
    """KernelEfficiency of fcp/cost_model.h: linear in log2(len) between points, proportional to
    len below the first, constant above the last."""
    if kernel_tokens <= 0:
        return points[0][1]
    if kernel_tokens <= points[0][0]:
        return points[0][1] * kernel_tokens / points[0][0]
    if kernel_tokens >= points[-1][0]:
        return points[-1][1]
    for (a_len, a_eff), (b_len, b_eff) in zip(points, points[1:]):
        if kernel_tokens < b_len:
            w = (math.log2(kernel_tokens) - math.log2(a_len)) / (math.log2(b_len) - math.log2(a_len))
            return a_eff + w * (b_eff - a_eff)
    return points[-1][1]


def allowed_pairs(mask: str, window: int, q_pos: int, k_pos: int, q_len: int, k_len: int) -> int:
    """(query, key) pairs our mask (fcp/mask.h) allows between positions [q_pos, q_pos + q_len) and
    [k_pos, k_pos + k_len) of one sequence: causal k <= q, sliding window q - W < k <= q, full all."""
    if mask == "full":
        return q_len * k_len
    import torch
    p = torch.arange(q_pos, q_pos + q_len, dtype=torch.int64)
    hi = torch.clamp(p + 1, max=k_pos + k_len)
    lo = torch.clamp(p - window + 1, min=k_pos) if mask == "sliding_window" else torch.full_like(p, k_pos)
    return int((hi - lo).clamp(min=0).sum())


def fit_monotone(values):
    """Least-squares non-decreasing fit (pool adjacent violators), equal weights."""
    blocks = []  # [mean, count]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(n)]


def chip_slug(device_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200'."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", device_name) if w and w.lower() not in ("nvidia", "tesla")]
    return words[0].lower() if words else "gpu"


# ---- measuring -----------------------------------------------------------------


class Setup:
    """Shapes, kernels and timer of one run: the GPU's, or the CPU dry run's."""

    def __init__(self, args):
        import torch
        self.torch = torch
        self.dry_run = args.dry_run
        self.cuda = not args.dry_run
        if self.cuda and not torch.cuda.is_available():
            raise CalibrationError(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is "
                                   "false); run with --dry-run to check the pipeline on the CPU")
        self.device = "cuda" if self.cuda else "cpu"
        self.V = import_varlen()
        self.bench = import_bench()
        self.fcp = import_fcp()
        small = args.dry_run
        self.heads_q, self.heads_kv, self.head_dim = (4, 2, 32) if small else (64, 8, 128)
        self.lengths = [64, 128, 256] if small else [256 << i for i in range(8)]  # 256 .. 32768
        self.call_tokens = max(self.lengths)
        self.window = 128 if small else 4096
        self.gemm_n = 256 if small else 8192
        self.launch_tokens = 16 if small else 128
        self.stage_plan = (dict(workers=2, tokens_per_worker=256, block_size=64) if small else
                           dict(workers=8, tokens_per_worker=32768, block_size=4096))
        self.coalesces = (1, 4) if small else (1, 4, 16)
        self.repeats = args.repeats or (2 if small else 5)
        self.warmup = 1 if small else 2
        self.launch_calls = 5 if small else 50
        self.scale = 1 / math.sqrt(self.head_dim)
        self.forward = self.V.reference_forward if small else self.V.flash_forward
        self.backward = self.V.reference_backward if small else self.V.flash_backward
        self.device_name = torch.cuda.get_device_name() if self.cuda else f"CPU ({platform.machine()}), dry run"
        self.generator = torch.Generator(device=self.device).manual_seed(0)

    def randn(self, *shape, dtype=None):
        torch = self.torch
        return torch.randn(*shape, device=self.device, generator=self.generator, dtype=dtype or torch.bfloat16)

    def time_ms(self, fn, repeats=None):
        return self.bench.timed(fn, repeats or self.repeats, warmup=self.warmup, cuda=self.cuda)

    def launch(self, cu_q, cu_k, max_q, max_k, left, right):
        return self.V.Launch(left, right, None, None, None, cu_q.to(self.device), cu_k.to(self.device), max_q, max_k,
                             None, None)


def measure_matmul(s: Setup) -> dict:
    n = s.gemm_n
    a, b = s.randn(n, n), s.randn(n, n)
    ms = s.time_ms(lambda: s.torch.matmul(a, b), repeats=max(s.repeats, 10))
    return {"n": n, "ms": ms, "flops_per_s": 2.0 * n ** 3 / (ms * 1e-3)}


def measure_launch(s: Setup) -> dict:
    """Per-call time of back-to-back forward calls on one short causal sequence: the fixed cost."""
    torch, n, calls = s.torch, s.launch_tokens, s.launch_calls
    q, k, v = s.randn(n, s.heads_q, s.head_dim), s.randn(n, s.heads_kv, s.head_dim), s.randn(n, s.heads_kv,
                                                                                             s.head_dim)
    cu = torch.tensor([0, n], dtype=torch.int32)
    launch = s.launch(cu, cu, n, n, -1, 0)

    def burst():
        for _ in range(calls):
            s.forward(q, k, v, launch, s.scale)
    return {"tokens": n, "calls": calls, "us": s.time_ms(burst) * 1e3 / calls}


def measure_sweep(s: Setup, deadline: float, rows: list, skipped: list) -> None:
    """Step 3: equal-length sequences per call, every mask and length; appends to rows / skipped."""
    torch = s.torch
    total = s.call_tokens
    q, do = s.randn(total, s.heads_q, s.head_dim), s.randn(total, s.heads_q, s.head_dim)
    k, v = s.randn(total, s.heads_kv, s.head_dim), s.randn(total, s.heads_kv, s.head_dim)
    flops_per_pair = 4.0 * s.heads_q * s.head_dim
    for mask in MASKS:
        last = None  # (pairs per call, seconds of fwd + bwd) of the last measured length
        for length in s.lengths:
            segments = total // length
            pairs = allowed_pairs(mask, s.window, 0, 0, length, length) * segments
            estimate_s = 0.0 if last is None else last[1] * pairs / last[0]
            if time.monotonic() + (s.warmup + s.repeats + 1) * estimate_s > deadline:
                skipped.append(f"{mask} {length}")
                continue
            rows_used = segments * length
            cu = torch.arange(0, rows_used + 1, length, dtype=torch.int32)
            launch = s.launch(cu, cu, length, length, *s.bench.flash_window(mask, s.window))
            qs, ks, vs, dos = q[:rows_used], k[:rows_used], v[:rows_used], do[:rows_used]
            o, lse = s.forward(qs, ks, vs, launch, s.scale)
            fwd_ms = s.time_ms(lambda: s.forward(qs, ks, vs, launch, s.scale))
            bwd_ms = s.time_ms(lambda: s.backward(dos, qs, ks, vs, o, lse, launch, s.scale))
            last = (pairs, (fwd_ms + bwd_ms) * 1e-3)
            rows.append({"mask": mask, "tokens": length, "segments": segments, "pairs": pairs,
                         "equivalent_tokens": 2.0 * pairs / rows_used,
                         "forward_flops": flops_per_pair * pairs, "forward_ms": fwd_ms, "backward_ms": bwd_ms})


def fit_profile(s: Setup, name: str, matmul: dict, launch: dict, sweep: list) -> dict:
    peak = matmul["flops_per_s"]
    causal = [r for r in sweep if r["mask"] == "causal"]
    if not causal:
        raise CalibrationError("no causal length was measured within the time budget: raise --budget-s")
    for r in sweep:
        r["forward_efficiency"] = r["forward_flops"] / (r["forward_ms"] * 1e-3 * peak)
        r["backward_efficiency"] = BACKWARD_FLOPS_FACTOR * r["forward_flops"] / (r["backward_ms"] * 1e-3 * peak)
    fitted = fit_monotone([r["forward_efficiency"] for r in causal])
    efficiency = [[float(r["tokens"]), min(1.0, max(1e-6, f))] for r, f in zip(causal, fitted)]
    ratios = [BACKWARD_FLOPS_FACTOR * r["forward_ms"] / r["backward_ms"] for r in causal]
    ratio = statistics.median(ratios)
    kernel = "dense float64 stand-in of the flash varlen op (CPU dry run)" if s.dry_run else \
        "flash varlen ops of fcp.torch (torch.ops.aten._flash_attention_forward/_backward)"
    return {
        "base": "gpu-x",
        "name": name,
        "description": (f"{s.device_name}: {kernel}, {s.heads_q}/{s.heads_kv} heads, dim {s.head_dim}, bf16, "
                        f"causal {s.call_tokens}-token calls of equal sequences; peak = torch.matmul bf16 "
                        f"{matmul['n']}^3; measured by scripts/gpu_calibrate.py on "
                        f"{datetime.date.today().isoformat()}; network and latencies from gpu-x"),
        "peak_flops": peak,
        "kernel_launch_us": launch["us"],
        "backward_efficiency_ratio": min(1.0, ratio),
        "efficiency": efficiency,
    }


def stage_model_s(program, pass_: str, stage: int, mask: str, window: int, flops_per_pair: float,
                  peak: float, points) -> float:
    """The simulator's compute charge for a rank's stage (all SMs, no launch cost): per query segment of q
    tokens with P allowed keys over the stage's calls, flops(P) / (peak x f(2P/q))."""
    rows, offsets = program.table(pass_, "compute")
    segments = program.segments()
    per_query = {}
    for c in rows[offsets[stage]:offsets[stage + 1]].tolist():
        q_row, seg_lo, seg_hi = c[3], c[10], c[11]
        for s_q_row, s_k_row, q_pos, k_pos, q_len, k_len in segments[seg_lo:seg_hi].tolist():
            pairs = allowed_pairs(mask, window, q_pos, k_pos, q_len, k_len)
            key = (q_row + s_q_row, q_len)
            per_query[key] = per_query.get(key, 0) + pairs
    total = 0.0
    for (_, q_len), pairs in per_query.items():
        if pairs:
            total += flops_per_pair * pairs / (peak * kernel_efficiency(points, 2.0 * pairs / q_len))
    return total


def stage_buffers(s: Setup, program, device_program, pass_: str) -> dict:
    """Random inputs and zeroed accumulators of one rank's pass, shaped as fcp.torch's CUDA path holds them;
    the backward's o and lse are the forward pass's on the same q (so that exp(s - lse) stays in range)."""
    torch, local = s.torch, program.local_rows
    kv_rows = local + program.pool_rows(pass_)
    b = {"q": s.randn(local, s.heads_q, s.head_dim), "k_all": s.randn(kv_rows, s.heads_kv, s.head_dim),
         "v_all": s.randn(kv_rows, s.heads_kv, s.head_dim), "d_o": s.randn(local, s.heads_q, s.head_dim),
         "o": torch.zeros(local, s.heads_q, s.head_dim, device=s.device),
         "lse": torch.full((local, s.heads_q), -math.inf, device=s.device)}
    if pass_ == "backward":
        forward = stage_buffers(s, program, device_program, "forward")
        pass_fn(device_program, program.num_stages("forward"), forward, "forward", s.scale)()
        dkv_rows = local + program.partial_rows
        b.update(q=forward["q"], o=forward["o"].to(forward["q"].dtype), lse=forward["lse"],
                 dq=torch.zeros(local, s.heads_q, s.head_dim, device=s.device),
                 dk_all=torch.zeros(dkv_rows, s.heads_kv, s.head_dim, device=s.device),
                 dv_all=torch.zeros(dkv_rows, s.heads_kv, s.head_dim, device=s.device))
    return b


def stage_kernels_fn(s: Setup, launches, b: dict, pass_: str):
    """The stage's flash calls alone, on rows gathered beforehand (what the kernels cost)."""
    V = s.V
    args = [(V.rows(b["q"], L.q_index, L.q_span), V.rows(b["k_all"], L.k_index, L.k_span),
             V.rows(b["v_all"], L.k_index, L.k_span), V.rows(b["d_o"], L.q_index, L.q_span), L) for L in launches]
    if pass_ == "forward":
        def run():
            for qs, ks, vs, _, L in args:
                s.forward(qs, ks, vs, L, s.scale)
        return run
    outs = [s.forward(qs, ks, vs, L, s.scale) for qs, ks, vs, _, L in args]

    def run():
        for (qs, ks, vs, dos, L), (o, lse) in zip(args, outs):
            s.backward(dos, qs, ks, vs, o, lse, L, s.scale)
    return run


def pass_fn(device_program, stages: int, b: dict, pass_: str, scale: float):
    """One rank's whole pass as fcp.torch's CUDA path computes it (_varlen.DeviceProgram: gathers, flash
    calls, the lse merge or the gradient accumulation, per stage), without the transfers."""
    if pass_ == "forward":
        def run():
            b["o"].zero_()
            b["lse"].fill_(-math.inf)
            for t in range(stages):
                device_program.forward_stage(t, scale, 0, b["q"], b["k_all"], b["v_all"], b["o"], b["lse"])
        return run

    def run():
        for name in ("dq", "dk_all", "dv_all"):
            b[name].zero_()
        for t in range(stages):
            device_program.backward_stage(t, scale, b["q"], b["k_all"], b["v_all"], b["d_o"], b["o"], b["lse"],
                                          b["dq"], b["dk_all"], b["dv_all"])
    return run


def measure_stages(s: Setup, profile: dict, deadline: float, stage_rows: list, pass_rows: list,
                   skipped: list) -> str:
    """Step 5 for each coalesce value and mask: per stage, the flash calls alone against the simulator's
    charge (stage_rows); per pass, the sum of both and fcp.torch's stage loop (pass_rows). Returns a note
    saying what ran, or why not."""
    if s.fcp is None:
        return "skipped: the fcp module is not importable (build it from this checkout: scripts/gpu_calibrate.sh)"
    fcp, V = s.fcp, s.V
    cfg = s.stage_plan
    lengths = [int(x) for x in fcp.workload("lognormal", workers=cfg["workers"],
                                            tokens_per_worker=cfg["tokens_per_worker"], seed=0)]
    flops_per_pair = 4.0 * s.heads_q * s.head_dim
    peak, points, ratio = profile["peak_flops"], profile["efficiency"], profile["backward_efficiency_ratio"]
    for coalesce in s.coalesces:
        for mask in MASKS:
            kw = dict(block_size=cfg["block_size"], coalesce=coalesce, mask=mask, heads_q=s.heads_q,
                      heads_kv=s.heads_kv, head_dim=s.head_dim)
            if mask == "sliding_window":
                kw["window"] = s.window
            program = fcp._fcp.Program(fcp.plan(lengths, workers=cfg["workers"], **kw)._h, 0)
            device_program = V.DeviceProgram(program, mask, s.window, s.device, forward=s.forward,
                                              backward=s.backward)
            for pass_ in ("forward", "backward"):
                stages = program.num_stages(pass_)
                factor = 1.0 if pass_ == "forward" else BACKWARD_FLOPS_FACTOR / ratio
                models = [factor * stage_model_s(program, pass_, t, mask, s.window, flops_per_pair, peak, points)
                          for t in range(stages)]
                # Each stage timed alone, then the pass: about 2 x (warm-up + repeats) passes.
                if time.monotonic() + 3 * (s.warmup + s.repeats + 1) * sum(models) > deadline:
                    skipped.append(f"coalesce {coalesce} {mask} {pass_}")
                    continue
                b = stage_buffers(s, program, device_program, pass_)
                kernels_ms, launches = 0.0, 0
                for t in range(stages):
                    stage_launches = device_program.launches(pass_, t)
                    if not stage_launches:
                        continue
                    ms = s.time_ms(stage_kernels_fn(s, stage_launches, b, pass_))
                    kernels_ms += ms
                    launches += len(stage_launches)
                    stage_rows.append({"coalesce": coalesce, "mask": mask, "pass": pass_, "stage": t,
                                       "launches": len(stage_launches),
                                       "query_rows": sum(int(L.q_index.numel()) for L in stage_launches),
                                       "key_rows": sum(int(L.k_index.numel()) for L in stage_launches),
                                       "measured_ms": ms, "model_ms": models[t] * 1e3})
                pass_rows.append({"coalesce": coalesce, "mask": mask, "pass": pass_, "stages": stages,
                                  "launches": launches, "kernels_ms": kernels_ms, "model_ms": sum(models) * 1e3,
                                  "fcp_torch_ms": s.time_ms(pass_fn(device_program, stages, b, pass_, s.scale))})
    return (f"rank 0 of {cfg['workers']}-worker FCP plans (block {cfg['block_size']}, coalesce "
            f"{', '.join(map(str, s.coalesces))}; {cfg['tokens_per_worker']} tokens per worker, lognormal seed 0)")


def check_profile_loads(s: Setup, path: pathlib.Path) -> str:
    """Loads the written profile through the simulator (fcp.simulate) when the module is there."""
    if s.fcp is None:
        return "not checked here: the fcp module is not importable (load it with fcp simulate --profile)"
    plan = s.fcp.plan([4096, 2048, 1024, 1024], workers=2, block_size=1024)
    result = s.fcp.simulate(plan, profile=str(path), reshuffle="none")
    return f"loaded by fcp.simulate: a 2-worker 8K-token plan simulates in {result['total_time_s'] * 1e3:.3f} ms"


def environment(s: Setup) -> dict:
    torch = s.torch
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "device": s.device_name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "dry_run": s.dry_run, "command": " ".join(sys.argv)}
    try:
        env["commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["commit"] = None
    return env


def measure(args) -> int:
    start = time.monotonic()
    deadline = start + args.budget_s
    if args.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.name):
        raise CalibrationError(f"--name {args.name!r}: use letters, digits, '.', '_' and '-' only (it names a file)")
    s = Setup(args)
    out = pathlib.Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CalibrationError(f"--out {out}: cannot create it ({e.strerror})") from None
    name = args.name or ("cpu-dry-run" if s.dry_run else f"{chip_slug(s.device_name)}-measured-flash")
    print(f"{s.device_name}, torch {s.torch.__version__}: heads {s.heads_q}/{s.heads_kv}, dim {s.head_dim}, bf16, "
          f"calls of {s.call_tokens} tokens, budget {args.budget_s:.0f} s", flush=True)
    matmul = measure_matmul(s)
    launch = measure_launch(s)
    print(f"matrix rate {matmul['flops_per_s'] / 1e12:.1f} TFLOP/s (matmul {matmul['n']}^3), "
          f"one short call {launch['us']:.1f} us", flush=True)
    sweep, stages, passes, skipped = [], [], [], []
    # The sweep may use 70% of what is left; the stage check the rest.
    measure_sweep(s, time.monotonic() + 0.7 * (deadline - time.monotonic()), sweep, skipped)
    profile = fit_profile(s, name, matmul, launch, sweep)
    stage_note = measure_stages(s, profile, deadline, stages, passes, skipped)
    path = out / f"{name}.json"
    path.write_text(json.dumps(profile, indent=2) + "\n")
    load_note = check_profile_loads(s, path)
    record = {"environment": environment(s), "shape": {"heads_q": s.heads_q, "heads_kv": s.heads_kv,
                                                        "head_dim": s.head_dim, "dtype": "bfloat16",
                                                        "call_tokens": s.call_tokens, "window": s.window},
              "budget_s": args.budget_s, "repeats": s.repeats, "warmup": s.warmup, "matmul": matmul,
              "launch": launch, "sweep": sweep, "profile_file": path.name, "profile": profile,
              "stages": stages, "passes": passes, "stage_note": stage_note, "skipped": skipped, "load_check": load_note,
              "elapsed_s": time.monotonic() - start}
    (out / "calibration.json").write_text(json.dumps(record, indent=1) + "\n")
    text = calibration_markdown(record)
    (out / "calibration.md").write_text(text)
    print(text)
    print(f"profile {name} written to {path} ({load_note}); calibration took {record['elapsed_s']:.0f} s")
    return 0


# ---- report --------------------------------------------------------------------


def builtin_profile(name: str) -> dict:
    """peak, backward ratio and curve of a built-in profile, read from src/model/cost_model.cpp
    (the one place they are written); {} if that file or profile is not there."""
    path = REPO / "src" / "model" / "cost_model.cpp"
    if not path.is_file():
        return {}
    text = path.read_text()
    at = text.find(f'p.name = "{name}";')
    if at < 0:
        return {}
    body = text[at:text.find("return p;", at)]
    number = r"([0-9.]+(?:e[0-9]+)?)"
    peak = re.search(r"p\.peak_flops = " + number, body)
    ratio = re.search(r"p\.backward_efficiency_ratio = " + number, body)
    table = re.search(r"p\.efficiency = \{(.*?)\};", body, re.S)
    if not (peak and ratio and table):
        return {}
    points = [[float(a), float(b)] for a, b in re.findall(r"\{\s*" + number + r",\s*" + number + r"\s*\}",
                                                          table.group(1))]
    return {"name": name, "peak_flops": float(peak.group(1)), "backward_efficiency_ratio": float(ratio.group(1)),
            "efficiency": points}


def calibration_markdown(record: dict) -> str:
    env, shape, profile = record["environment"], record["shape"], record["profile"]
    peak = profile["peak_flops"]
    fitted = dict((int(t), f) for t, f in profile["efficiency"])
    gpu_x = builtin_profile("gpu-x")
    lines = [f"Measured on {env['date']}: {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), commit "
             f"{env['commit']}; `{env['command']}`.",
             "",
             f"Shape: {shape['heads_q']}/{shape['heads_kv']} heads, dim {shape['head_dim']}, {shape['dtype']}; each "
             f"call {shape['call_tokens']} tokens cut into equal sequences; sliding window {shape['window']}; median "
             f"of {record['repeats']} after {record['warmup']} warm-up calls.",
             f"Matrix rate (peak_flops): {peak / 1e12:.1f} TFLOP/s (torch.matmul bf16 {record['matmul']['n']}^3). "
             f"One short flash call ({record['launch']['tokens']} tokens, back to back): "
             f"{record['launch']['us']:.1f} us (kernel_launch_us).",
             f"Backward/forward ratio (2.5 x forward time / backward time, median over causal lengths): "
             f"{profile['backward_efficiency_ratio']:.3f}" + (f" (gpu-x {gpu_x['backward_efficiency_ratio']})"
                                                             if gpu_x else "") + ".",
             "",
             "Causal forward efficiency f(len) (fraction of the measured matrix rate); fitted = the profile's "
             "non-decreasing curve" + ("; gpu-x's curve and its TFLOP/s at its 989 TFLOP/s peak beside it:"
                                       if gpu_x else ":"),
             "",
             "| tokens | fwd ms | bwd ms | measured f | fitted f | TFLOP/s | " +
             ("gpu-x f | gpu-x TFLOP/s |" if gpu_x else ""),
             "|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if gpu_x else "")]
    for r in record["sweep"]:
        if r["mask"] != "causal":
            continue
        line = (f"| {r['tokens']} | {r['forward_ms']:.3f} | {r['backward_ms']:.3f} | {r['forward_efficiency']:.3f} | "
                f"{fitted[r['tokens']]:.3f} | {r['forward_efficiency'] * peak / 1e12:.1f} |")
        if gpu_x:
            fx = kernel_efficiency(gpu_x["efficiency"], r["tokens"])
            line += f" {fx:.3f} | {fx * gpu_x['peak_flops'] / 1e12:.1f} |"
        lines.append(line)
    lines += ["", "Every mask against the fitted curve at the simulator's kernel length 2P/q (P allowed pairs, q "
              "query tokens): measured f / fitted f(2P/q) is how far the simulator's rule is off on that shape.",
              "", "| mask | tokens | 2P/q | fwd ms | bwd ms | measured f | fitted f(2P/q) | measured / model | "
              "bwd/fwd ratio |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in record["sweep"]:
        model = kernel_efficiency(profile["efficiency"], r["equivalent_tokens"])
        lines.append(f"| {r['mask']} | {r['tokens']} | {r['equivalent_tokens']:.0f} | {r['forward_ms']:.3f} | "
                     f"{r['backward_ms']:.3f} | {r['forward_efficiency']:.3f} | {model:.3f} | "
                     f"{r['forward_efficiency'] / model:.2f} | "
                     f"{r['backward_efficiency'] / r['forward_efficiency']:.3f} |")
    lines += ["", f"fcp.torch's own launches on {record['stage_note']}, no transfers: per pass, the stages' flash "
              "calls alone (rows gathered beforehand), the simulator's charge for them with the fitted profile "
              "(per query segment f(2P/q), all SMs, no launch cost), and fcp.torch's CUDA stage loop "
              "(_varlen.DeviceProgram: gathers, calls, lse merge or gradient accumulation):"]
    if record["passes"]:
        lines += ["", "| coalesce | mask | pass | stages | launches | kernels ms | model ms | kernels / model | "
                  "stage loop ms | loop / kernels |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in record["passes"]:
            lines.append(f"| {r['coalesce']} | {r['mask']} | {r['pass']} | {r['stages']} | {r['launches']} | "
                         f"{r['kernels_ms']:.3f} | {r['model_ms']:.3f} | {r['kernels_ms'] / r['model_ms']:.2f} | "
                         f"{r['fcp_torch_ms']:.3f} | {r['fcp_torch_ms'] / r['kernels_ms']:.2f} |")
        widest = max(r["coalesce"] for r in record["stages"])
        lines += ["", f"Per stage at coalesce {widest} (calibration.json has every coalesce):", "",
                  "| mask | pass | stage | launches | q rows | k rows | kernels ms | model ms | kernels / model |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in record["stages"]:
            if r["coalesce"] == widest:
                lines.append(f"| {r['mask']} | {r['pass']} | {r['stage']} | {r['launches']} | {r['query_rows']} | "
                             f"{r['key_rows']} | {r['measured_ms']:.3f} | {r['model_ms']:.3f} | "
                             f"{r['measured_ms'] / r['model_ms']:.2f} |")
    if record["skipped"]:
        lines += ["", f"Skipped (time budget {record['budget_s']:.0f} s): {', '.join(record['skipped'])}."]
    lines += ["", f"Profile `{record['profile_file']}`: {record['load_check']}.", "", "```json",
              json.dumps(profile, indent=2), "```", ""]
    return "\n".join(lines)


def torch_cost_markdown(cost: dict) -> str:
    lines = [f"{cost['tokens']} tokens in {len(cost['lengths'])} sequences (longest {max(cost['lengths'])}), heads "
             f"{cost['heads_q']}/{cost['heads_kv']}, dim {cost['head_dim']}, bf16, forward + backward, median of "
             f"{cost['steps']}, one rank, {cost['device']}, torch {cost['torch']}; baseline: {cost['baseline']}.",
             "", "| mask | block | coalesce | stages | fcp.torch ms/step | one flash call ms/step | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in cost["rows"]:
        lines.append(f"| {r['mask']} | {r['block_size']} | {r['coalesce']} | {r['forward_stages']} | "
                     f"{r['fcp_ms']:.2f} | {r['kernel_ms']:.2f} | {r['ratio']:.2f} |")
    if all(r["forward_stages"] == 1 for r in cost["rows"]):
        lines += ["", "With one rank every plan has one stage, so coalesce changes nothing here; what it does on one "
                  "rank of several is in the stage-loop table of the simulator section."]
    target = [r for r in cost["rows"] if (r["mask"], r["block_size"], r["coalesce"]) == ("causal", 4096, 16)]
    if target:
        ratio = target[0]["ratio"]
        lines += ["", f"Causal, block 4096, coalesce 16: {ratio:.2f}x the single flash call (issue 40's target: "
                  f"within 10%): {'met' if ratio <= 1.10 else 'NOT met'}."]
    for p in cost["profiles"]:
        busy = (f", {p['busy_ms']:.2f} ms device-busy, {p['launches']:.0f} kernel launches"
                if p["busy_ms"] is not None else "")
        lines += ["", f"{p['label']}, per step: {p['wall_ms']:.2f} ms wall{busy}.", "",
                  "| operator | ms/step | calls/step |", "|---|---:|---:|"]
        lines += [f"| {o['op'][:90]} | {o['ms']:.2f} | {o['calls']:.0f} |" for o in p["ops"]]
    return "\n".join(lines) + "\n"


def read_json(path: pathlib.Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CalibrationError(f"{path}: no such file ({what})") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{path}: not valid JSON ({e})") from None


def report(args) -> int:
    folder = pathlib.Path(args.dir)
    if not folder.is_dir():
        raise CalibrationError(f"{folder}: not a folder (give the --out folder of `measure`)")
    record = read_json(folder / "calibration.json", "written by `gpu_calibrate.py measure`")
    try:
        text = ["## docs/simulator.md: measured profile", "", calibration_markdown(record)]
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise CalibrationError(f"{folder / 'calibration.json'}: not a calibration record ({type(e).__name__}: {e})")
    name = record["profile"]["name"]
    text += ["Compare with gpu-x (here, with the profile copied to profiles/):", "",
             f"    build/fcp compare --dist lognormal --workers 16,32,64,128 --profile profiles/{name}.json "
             "--reshuffle none --planners fcp,ring,bytescale,wlb,magi", ""]
    cost_path = folder / "torch_cost.json"
    if cost_path.is_file():
        cost = read_json(cost_path, "written by bench/torch_cuda_attention.py --json")
        try:
            text += ["## docs/torch.md: fcp.torch on one GPU", "", torch_cost_markdown(cost)]
        except (KeyError, TypeError, ValueError) as e:
            raise CalibrationError(f"{cost_path}: not a bench/torch_cuda_attention.py record "
                                   f"({type(e).__name__}: {e})")
    else:
        text += [f"(no {cost_path.name}: fcp.torch's single-GPU cost was not measured)", ""]
    print("\n".join(text))
    return 0


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (not the usage block), exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message}\n")


def main(argv=None) -> int:
    ap = OneLineParser(prog="gpu_calibrate.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the kernels and write the profile")
    m.add_argument("--out", required=True, help="folder for the profile, calibration.json and calibration.md")
    m.add_argument("--budget-s", type=float, default=180.0, help="time for the kernel sweep and the stage check")
    m.add_argument("--repeats", type=int, default=None,
                   help="timed calls per measurement, median (default 5; 2 with --dry-run)")
    m.add_argument("--name", default=None, help="profile name (default: the chip's, e.g. h100-measured-flash)")
    m.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, dense stand-in kernel")
    r = sub.add_parser("report", help="markdown for the docs from a measure folder")
    r.add_argument("dir")
    args = ap.parse_args(argv)
    try:
        if args.command == "measure":
            if not args.budget_s > 0:
                raise CalibrationError(f"--budget-s must be positive, got {args.budget_s}")
            if args.repeats is not None and args.repeats < 1:
                raise CalibrationError(f"--repeats must be at least 1, got {args.repeats}")
            return measure(args)
        return report(args)
    except CalibrationError as e:
        print(f"gpu_calibrate.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
