"""fcp.torch.attention on one GPU (a 1-worker plan, one rank of a
cpu:gloo,cuda:nccl group) against the single-GPU kernel on the same packed
batch: torch.nn.attention.varlen.varlen_attn over the batch's cu_seqlens
(flash varlen, one launch; where this torch's varlen_attn takes no GQA K/V,
the flash varlen op it calls, directly), forward + backward, bfloat16.

    python bench/torch_cuda_attention.py [--tokens 32768] [--steps 10] [--block-size 2048] [--profile]

Prints a markdown table, one row per mask: milliseconds per step (median of
--steps after 3 warm-up steps, CUDA events), and fcp's time over the kernel's.
The difference is fcp's per-stage gathers, the lse merge, the reshuffle
(a no-op all_to_all with one rank) and the Python stage loop. --profile
adds, per mask, where one step of each goes on the device (torch.profiler
over 3 steps: device time and launches per kernel name, top 12, and the
step's device-busy time against its wall time), to split fcp's overhead
into kernel time and launch / host time.
"""

import argparse
import inspect
import os
import socket
import statistics

import torch
import torch.distributed as dist


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


def kernel_step_fn(leaves, do, cu, max_len, window, scale):
    """(label, one forward + backward of the single-GPU kernel over the whole batch).

    varlen_attn where it takes GQA K/V; otherwise the flash varlen op it calls
    (torch.ops.aten._flash_attention_forward / _backward, GQA native) as one
    launch over the batch, so the baseline never pays for repeated K/V heads."""
    from torch.nn.attention.varlen import varlen_attn
    if has_gqa_switch(varlen_attn):
        def step():
            varlen_attn(*leaves, cu, cu, max_len, max_len, window_size=window, enable_gqa=True).backward(do)
        return "varlen_attn", step
    from fcp.torch import _varlen as V
    launch = V.Launch(window[0], window[1], None, None, None, cu, cu, max_len, max_len, None, None)
    q, k, v = (x.detach() for x in leaves)

    def step():
        o, lse = V.flash_forward(q, k, v, launch, scale)
        V.flash_backward(do, q, k, v, o, lse, launch, scale)
    return "flash varlen op (varlen_attn has no enable_gqa here)", step


def timed(fn, steps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def profile(fn, label, steps=3):
    """Prints fn's device time per kernel name over `steps` steps (after a warm-up)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(steps):
            fn()
        end.record()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name = {}
    for e in kernels:
        t, n = by_name.get(e.name, (0.0, 0))
        by_name[e.name] = (t + getattr(e, "device_time", 0.0), n + 1)
    busy_ms = sum(t for t, _ in by_name.values()) / 1e3 / steps
    wall_ms = start.elapsed_time(end) / steps
    print(f"\n{label}: {wall_ms:.2f} ms/step wall, {busy_ms:.2f} ms/step device-busy (kernels summed), "
          f"{len(kernels) / steps:.0f} kernel launches/step")
    print("| kernel | ms/step | launches/step |")
    print("|---|---:|---:|")
    for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"| {name[:90]} | {t / 1e3 / steps:.2f} | {n / steps:.0f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--block-size", type=int, default=2048)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--profile", action="store_true", help="also print where each step's device time goes")
    args = ap.parse_args()
    import fcp.torch as ft

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    torch.cuda.set_device(0)
    dist.init_process_group("cpu:gloo,cuda:nccl", rank=0, world_size=1)
    hq, hkv, d = 32, 8, 128
    lengths = lengths_for(args.tokens)
    total = sum(lengths)
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(total, h, d, device="cuda", generator=g, dtype=torch.bfloat16)
                   for h in (hq, hkv, hkv, hq))
    print(f"{total} tokens in {len(lengths)} sequences (longest {max(lengths)}), heads {hq}/{hkv}, dim {d}, "
          f"bf16, block {args.block_size}, {torch.cuda.get_device_name()}")
    header = False
    for mask in ("causal", "full", "sliding_window"):
        kw = dict(block_size=args.block_size, mask=mask, heads_q=hq, heads_kv=hkv, head_dim=d)
        window = (-1, 0) if mask == "causal" else (-1, -1)
        if mask == "sliding_window":
            kw["window"] = args.window
            window = (args.window - 1, 0)
        plan = ft.plan(lengths, **kw)
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]

        def fcp_step():
            ft.attention(*leaves, plan).backward(do)

        label, kernel_step = kernel_step_fn(leaves, do, cu, max(lengths), window, 1 / d ** 0.5)
        if not header:
            print(f"| mask | fcp.torch ms/step | {label} ms/step | ratio |")
            print("|---|---|---|---|")
            header = True
        ms_fcp, ms_kernel = timed(fcp_step, args.steps), timed(kernel_step, args.steps)
        print(f"| {mask} | {ms_fcp:.2f} | {ms_kernel:.2f} | {ms_fcp / ms_kernel:.2f} |")
        if args.profile:
            profile(fcp_step, f"fcp.torch, {mask}")
            profile(kernel_step, f"{label}, {mask}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
