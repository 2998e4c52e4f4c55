"""Where an fcp.torch attention step goes on CPU ranks: kernel time, exposed
transfer waits, reshuffles and the Python around them, at N = 4, 8, 16 gloo
ranks (torch.multiprocessing spawn, one thread each), from fcp.torch.stats().

    python bench/torch_attention_overhead.py [--workers 4,8,16] [--tokens-per-rank 1024] [--steps 5] [--serialize]
                                             [--dtype float32|bfloat16] [--trace PREFIX]
    torchrun --nproc-per-node N bench/torch_attention_overhead.py [...]   # the N ranks of torchrun instead

--serialize waits for each stage's transfers before its compute: its wait
column is then the bare transfer time, which the default run hides behind
the kernel (compare the two wait columns). --trace writes the last step of
each N as a Chrome trace PREFIX.N<N>.json (fcp.torch.trace; summarise it
with scripts/trace_overlap.py).

Prints one line per N: per step (forward + backward), averaged over ranks.
Needs fcp with the torch extra. On a machine with fewer cores than ranks the
waits include other ranks' compute; the kernel and Python columns are per
rank and stay meaningful (docs/torch.md).
"""

import argparse
import os
import socket
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


# Columns of stats() per step (reshuffle_wait: blank for fcp versions without it).
KEYS = ("total_s", "kernel_s", "wait_s", "reshuffle_s", "reshuffle_wait_s", "python_s", "post_s",
        "stages_with_transfers")


def rank_main(rank, world, port, args, out):
    if port is not None:  # else torchrun has set the rendezvous
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import fcp.torch as ft
    ft._serialize_stages = args.serialize
    rng = np.random.default_rng(7)
    total = args.tokens_per_rank * world
    lengths = []
    while sum(lengths) < total:
        lengths.append(int(min(max(1, rng.lognormal(5.0, 1.5)), total // 2)))
    lengths[-1] -= sum(lengths) - total
    lengths = [n for n in lengths if n > 0]
    plan = ft.plan(lengths, block_size=256, coalesce=4, heads_q=8, heads_kv=2, head_dim=64)
    lo, hi = plan.local_range
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(hi - lo, h, 64).to(dtype).requires_grad_() for h in (8, 2, 2))
    do = torch.randn(hi - lo, 8, 64).to(dtype)
    for step in range(args.steps + 1):
        if step == 1:
            ft.reset_stats()  # step 0 warms up
        if args.trace and step == args.steps:
            s = ft.stats()  # the traced step (its helper threads) is not counted
            with ft.trace(f"{args.trace}.N{world}.json"):
                ft.attention(q, k, v, plan).backward(do)
        else:
            ft.attention(q, k, v, plan).backward(do)
    if not args.trace:
        s = ft.stats()
    counted = args.steps - int(bool(args.trace))
    row = torch.tensor([s.get(key, float("nan")) / counted for key in KEYS], dtype=torch.float64)
    dist.all_reduce(row)
    if rank == 0:
        result = (row / world).tolist() + [plan.num_forward_stages, len(lengths)]
        if out is None:
            print_row(world, result)
        else:
            torch.save(result, out)
    dist.destroy_process_group()


def print_row(world, result):
    total, kernel, wait, resh, resh_wait, py, post, with_t, stages, seqs = result
    print(f"{world:<3} {int(seqs):4d} {int(stages):6d} | {total * 1e3:8.1f} {kernel * 1e3:8.1f} {wait * 1e3:8.1f} "
          f"{resh * 1e3:8.1f} {resh_wait * 1e3:8.1f} {py * 1e3:8.1f} ({post * 1e3:.1f}) | {with_t:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="4,8,16")
    ap.add_argument("--tokens-per-rank", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--serialize", action="store_true",
                    help="wait for each stage's transfers before its compute (no overlap), for comparison")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--trace", help="write the last step of each N as a Chrome trace PREFIX.N<N>.json")
    args = ap.parse_args()
    header = ("N   seqs stages | per step, mean over ranks (ms): total kernel wait reshuffle (of it blocked) "
              "python (post) | stages with transfers")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if rank == 0:
            print(header, flush=True)
        rank_main(rank, world, None, args, None)
        return
    print(header)
    for world in [int(x) for x in args.workers.split(",")]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = os.path.join(tempfile.mkdtemp(), "row")
        mp.spawn(rank_main, args=(world, port, args, out), nprocs=world)
        print_row(world, torch.load(out))


if __name__ == "__main__":
    main()
