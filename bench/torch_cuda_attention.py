"""fcp.torch.attention on one GPU (a 1-worker plan, one rank of a
cpu:gloo,cuda:nccl group) against the single-GPU kernel on the same packed
batch: torch.nn.attention.varlen.varlen_attn over the batch's cu_seqlens
(flash varlen, one launch; where this torch's varlen_attn takes no GQA K/V,
the flash varlen op it calls, directly), forward + backward, bfloat16.

    python bench/torch_cuda_attention.py [--tokens 32768] [--steps 10] [--block-size 2048[,4096,...]]
        [--coalesce 1,4,16] [--masks causal,full,sliding_window] [--heads-q 32 --heads-kv 8 --head-dim 128]
        [--profile | --profile-at 4096:16] [--json FILE] [--dry-run]

Prints a markdown table, one row per (mask, block size, coalesce):
milliseconds per step (median of --steps after 3 warm-up steps, CUDA events),
and fcp's time over the kernel's (timed once per mask). The difference is
fcp's per-stage gathers, the lse merge, the reshuffle (a no-op all_to_all
with one rank) and the Python stage loop. --profile adds, per row, where one
step of each goes (torch.profiler over 3 steps: self device time and calls
per operator, so each kernel counts once, under the op that launched it,
and the step's device-busy time against its wall time), to split fcp's
overhead into kernel time and launch / host time; --profile-at B:C profiles
only block size B with coalesce C. --json writes every number.

--dry-run runs the same pipeline on the CPU with tiny shapes (one gloo rank,
fcp.torch's CPU path, and _varlen's dense float64 stand-in of the flash op
as the baseline): its times say nothing about a GPU; it checks the script
(python/tests/test_gpu_calibrate.py). scripts/gpu_calibrate.sh runs this
with the Llama-3-70B heads (64/8) beside the kernel calibration.
"""

import argparse
import inspect
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

MASKS = ("causal", "full", "sliding_window")


def lengths_for(tokens):
    """A long-tailed packed batch: halving lengths from tokens/2, the rest in 256-token sequences."""
    out, n = [], tokens // 2
    while n >= 256 and sum(out) + n <= tokens:
        out.append(n)
        n //= 2
    while sum(out) + 256 <= tokens:
        out.append(256)
    if sum(out) < tokens:
        out.append(tokens - sum(out))
    return out


def has_gqa_switch(varlen_attn) -> bool:
    """Whether this torch's varlen_attn takes enable_gqa (2.12 does; 2.10's takes
    K/V with as many heads as Q only)."""
    return "enable_gqa" in inspect.signature(varlen_attn).parameters


def flash_window(mask, window):
    """The flash op's (left, right) for one whole sequence under our mask (fcp.torch._varlen's convention)."""
    if mask == "causal":
        return -1, 0
    if mask == "sliding_window":
        return window - 1, 0
    if mask == "full":
        return -1, -1
    raise ValueError(f"unknown mask {mask!r} (expected one of {', '.join(MASKS)})")


def kernel_step_fn(leaves, do, cu, max_len, window, scale, stand_in=False):
    """(label, one forward + backward of the single-GPU kernel over the whole batch).

    varlen_attn where it takes GQA K/V; otherwise the flash varlen op it calls
    (torch.ops.aten._flash_attention_forward / _backward, GQA native) as one
    launch over the batch, so the baseline never pays for repeated K/V heads.
    stand_in: _varlen's dense float64 reference of that op instead (CPU dry runs)."""
    from fcp.torch import _varlen as V
    if not stand_in:
        from torch.nn.attention.varlen import varlen_attn
        if has_gqa_switch(varlen_attn):
            def step():
                varlen_attn(*leaves, cu, cu, max_len, max_len, window_size=window, enable_gqa=True).backward(do)
            return "varlen_attn", step
    launch = V.Launch(window[0], window[1], None, None, None, cu, cu, max_len, max_len, None, None)
    q, k, v = (x.detach() for x in leaves)

    def step():
        forward, backward = (V.reference_forward, V.reference_backward) if stand_in else (V.flash_forward,
                                                                                          V.flash_backward)
        o, lse = forward(q, k, v, launch, scale)
        backward(do, q, k, v, o, lse, launch, scale)
    if stand_in:
        return "dense float64 stand-in of the flash varlen op (CPU dry run)", step
    return "flash varlen op (varlen_attn has no enable_gqa here)", step


def _sync(cuda):
    if cuda:
        torch.cuda.synchronize()


def timed(fn, steps, warmup=3, cuda=True):
    """Median milliseconds of `steps` calls of fn after `warmup` calls: CUDA events, or the host clock."""
    for _ in range(warmup):
        fn()
    _sync(cuda)
    times = []
    for _ in range(steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _self_time_us(avg, cuda):
    if not cuda:
        return avg.self_cpu_time_total
    for name in ("self_device_time_total", "self_cuda_time_total"):  # renamed in torch 2.4
        if hasattr(avg, name):
            return getattr(avg, name)
    raise RuntimeError("torch.profiler: this torch reports no self device time per operator")


def profile(fn, label, steps=3, cuda=True, top=12):
    """Where `steps` steps of fn go (after a warm-up): a dict, also printed as a markdown table.

    Per operator (the op that launched each kernel, so each kernel counts
    once): self device time (CUDA) or self CPU time (dry run) in ms per step
    and calls per step, the top `top` of them and the rest as "other";
    wall_ms per step; on CUDA busy_ms (every kernel's device time summed,
    per step; the ops' total falls short of it by kernels no op launched,
    listed as "(no operator)") and kernel launches per step."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    fn()
    _sync(cuda)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        _sync(cuda)
        wall_ms = (time.perf_counter() - t0) * 1e3 / steps
    # Operators only: the kernels' own rows (device_type CUDA) would count each kernel twice.
    ops = sorted(((a.key, _self_time_us(a, cuda) / 1e3 / steps, a.count / steps) for a in prof.key_averages()
                  if a.device_type == torch.autograd.DeviceType.CPU), key=lambda row: -row[1])
    ops = [row for row in ops if row[1] > 0]
    result = {"label": label, "wall_ms": wall_ms, "busy_ms": None, "launches": None}
    if cuda:
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        result["busy_ms"] = sum(e.device_time_total for e in kernels) / 1e3 / steps
        result["launches"] = len(kernels) / steps
        unattributed = result["busy_ms"] - sum(ms for _, ms, _ in ops)
        if unattributed > 1e-3:
            ops.append(("(no operator)", unattributed, 0.0))
            ops.sort(key=lambda row: -row[1])
    shown, rest = ops[:top], ops[top:]
    if rest:
        shown.append(("other", sum(ms for _, ms, _ in rest), sum(n for _, _, n in rest)))
    result["ops"] = [{"op": name, "ms": ms, "calls": calls} for name, ms, calls in shown]
    print(f"\n{label}: {wall_ms:.2f} ms/step wall" + (
        f", {result['busy_ms']:.2f} ms/step device-busy (kernels summed), {result['launches']:.0f} kernel "
        "launches/step" if cuda else " (CPU dry run: self CPU time per op)"))
    print(f"| operator | {'device' if cuda else 'CPU'} ms/step | calls/step |")
    print("|---|---:|---:|")
    for row in result["ops"]:
        print(f"| {row['op'][:90]} | {row['ms']:.2f} | {row['calls']:.0f} |")
    return result


def int_list(text):
    """'2048,4096' -> [2048, 4096] (argparse type; positive integers)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def mask_list(text):
    masks = text.split(",")
    bad = [m for m in masks if m not in MASKS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown mask {bad[0]!r} (expected one of {', '.join(MASKS)})")
    return masks


def block_coalesce(text):
    """'4096:16' -> (4096, 16)."""
    try:
        block, coalesce = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected BLOCK:COALESCE, got {text!r}") from None
    return block, coalesce


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (not the usage block), exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message}\n")


def parse_args(argv=None):
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=None, help="batch tokens (default 32768; 1024 with --dry-run)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--block-size", type=int_list, default=None,
                    help="block sizes, comma-separated (default 2048; 128,256 with --dry-run)")
    ap.add_argument("--coalesce", type=int_list, default=None,
                    help="coalesce values, comma-separated (default: fcp.plan's)")
    ap.add_argument("--masks", type=mask_list, default=list(MASKS))
    ap.add_argument("--window", type=int, default=None, help="sliding window (default 4096; 256 with --dry-run)")
    ap.add_argument("--heads-q", type=int, default=None, help="default 32 (4 with --dry-run)")
    ap.add_argument("--heads-kv", type=int, default=None, help="default 8 (2 with --dry-run)")
    ap.add_argument("--head-dim", type=int, default=None, help="default 128 (32 with --dry-run)")
    ap.add_argument("--profile", action="store_true", help="also print where each step's device time goes")
    ap.add_argument("--profile-at", type=block_coalesce, default=None, metavar="BLOCK:COALESCE",
                    help="profile only this block size and coalesce (implies --profile)")
    ap.add_argument("--json", default=None, help="write every number to this file")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, tiny shapes, fcp.torch's CPU path and a dense stand-in baseline")
    args = ap.parse_args(argv)
    small = args.dry_run
    for name, gpu, cpu in (("tokens", 32768, 1024), ("block_size", [2048], [128, 256]), ("window", 4096, 256),
                           ("heads_q", 32, 4), ("heads_kv", 8, 2), ("head_dim", 128, 32)):
        if getattr(args, name) is None:
            setattr(args, name, cpu if small else gpu)
    for name in ("tokens", "steps", "window", "heads_q", "heads_kv", "head_dim"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.heads_q % args.heads_kv:
        ap.error(f"--heads-q {args.heads_q} is not a multiple of --heads-kv {args.heads_kv}")
    if args.tokens < 256:
        ap.error(f"--tokens must be at least 256, got {args.tokens}")
    args.profile = args.profile or args.profile_at is not None
    return args


def init_one_rank(cuda):
    """A world-size-1 process group: cpu:gloo,cuda:nccl on CUDA (fcp.torch's checks all-reduce CPU
    tensors), gloo on CPU."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo", rank=0, world_size=1)


def main(argv=None):
    args = parse_args(argv)
    import fcp.torch as ft

    cuda = not args.dry_run
    warmup, profile_steps = (3, 3) if cuda else (1, 1)  # the dry run checks the pipeline, not times
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_cuda_attention.py: torch.cuda.is_available() is false (use --dry-run on a machine "
                 "without a GPU)")
    device = "cuda" if cuda else "cpu"
    init_one_rank(cuda)
    hq, hkv, d = args.heads_q, args.heads_kv, args.head_dim
    lengths = lengths_for(args.tokens)
    total = sum(lengths)
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32).to(device)
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v, do = (torch.randn(total, h, d, device=device, generator=g, dtype=torch.bfloat16)
                   for h in (hq, hkv, hkv, hq))
    device_name = torch.cuda.get_device_name() if cuda else "CPU (dry run)"
    print(f"{total} tokens in {len(lengths)} sequences (longest {max(lengths)}), heads {hq}/{hkv}, dim {d}, "
          f"bf16, block {','.join(map(str, args.block_size))}, {device_name}")
    coalesces = args.coalesce or [None]
    report = {"device": device_name, "torch": torch.__version__, "dry_run": args.dry_run, "tokens": total,
              "lengths": lengths, "heads_q": hq, "heads_kv": hkv, "head_dim": d, "window": args.window,
              "steps": args.steps, "rows": [], "profiles": []}
    def save():  # after every row, so that a run stopped by a time limit keeps what it measured
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
                f.write("\n")

    header = False
    for mask in args.masks:
        window = flash_window(mask, args.window)
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        label, kernel_step = kernel_step_fn(leaves, do, cu, max(lengths), window, 1 / d ** 0.5,
                                            stand_in=args.dry_run)
        report["baseline"] = label
        ms_kernel = timed(kernel_step, args.steps, warmup, cuda)
        if not header:
            print(f"| mask | block | coalesce | stages | fcp.torch ms/step | {label} ms/step | ratio |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            header = True
        profiled_kernel = False
        for block in args.block_size:
            for coalesce in coalesces:
                kw = dict(block_size=block, mask=mask, heads_q=hq, heads_kv=hkv, head_dim=d)
                if coalesce is not None:
                    kw["coalesce"] = coalesce
                if mask == "sliding_window":
                    kw["window"] = args.window
                plan = ft.plan(lengths, **kw)

                def fcp_step(plan=plan):
                    ft.attention(*leaves, plan).backward(do)

                ms_fcp = timed(fcp_step, args.steps, warmup, cuda)
                row = {"mask": mask, "block_size": block, "coalesce": plan.plan.coalesce,
                       "forward_stages": plan.num_forward_stages, "fcp_ms": ms_fcp, "kernel_ms": ms_kernel,
                       "ratio": ms_fcp / ms_kernel}
                report["rows"].append(row)
                print(f"| {mask} | {block} | {row['coalesce']} | {row['forward_stages']} | {ms_fcp:.2f} | "
                      f"{ms_kernel:.2f} | {row['ratio']:.2f} |", flush=True)
                save()
                if args.profile and args.profile_at in (None, (block, row["coalesce"])):
                    where = f"{mask}, block {block}, coalesce {row['coalesce']}"
                    report["profiles"].append(dict(profile(fcp_step, f"fcp.torch, {where}", profile_steps, cuda),
                                                   mask=mask, block_size=block, coalesce=row["coalesce"]))
                    if not profiled_kernel:
                        report["profiles"].append(dict(profile(kernel_step, f"{label}, {mask}", profile_steps, cuda),
                                                       mask=mask, block_size=None, coalesce=None))
                        profiled_kernel = True
                    save()
    dist.destroy_process_group()
    return report


if __name__ == "__main__":
    main()
