"""CPU cost of one fcp.torch.attention call (forward + backward) on one rank
(world size 1: no transfers), for comparing kernel paths and dtypes.

    OPENBLAS_NUM_THREADS=1 python bench/torch_attention_call.py [--dtype bfloat16|float32] [--calls 12]

4096 tokens in lognormal sequences (seed 7, as bench/torch_attention_overhead.py),
8 query / 2 KV heads of 64, causal, block 256, coalesce 4. Prints the
smallest wall time and the smallest CPU time of the calling thread
(time.thread_time) over the calls: on a shared machine the CPU time is the
steadier of the two (docs/torch.md).
"""

import argparse
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=4096)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1)
    import fcp.torch as ft
    rng = np.random.default_rng(7)
    lengths = []
    while sum(lengths) < args.tokens:
        lengths.append(int(min(max(1, rng.lognormal(5.0, 1.5)), args.tokens // 2)))
    lengths[-1] -= sum(lengths) - args.tokens
    lengths = [n for n in lengths if n > 0]
    plan = ft.plan(lengths, block_size=256, coalesce=4, heads_q=8, heads_kv=2, head_dim=64)
    dtype = getattr(torch, args.dtype)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(args.tokens, h, 64, generator=g).to(dtype).requires_grad_() for h in (8, 2, 2))
    do = torch.randn(args.tokens, 8, 64, generator=g).to(dtype)
    walls, cpus = [], []
    for _ in range(args.calls):
        w0, c0 = time.perf_counter(), time.thread_time()
        ft.attention(q, k, v, plan).backward(do)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.thread_time() - c0)
    print(f"{args.dtype}: {len(lengths)} sequences, {args.tokens} tokens; per call (forward + backward), "
          f"min over {args.calls}: wall {min(walls) * 1e3:.1f} ms, thread CPU {min(cpus) * 1e3:.1f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
