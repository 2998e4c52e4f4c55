"""What each fcp.torch layout costs per training step of an L-layer model
(docs/torch.md, "Layouts: measured cost").

    torchrun --nproc-per-node 4 bench/torch_layout_cost.py [--layers 2,8] [--tokens 4096] [--steps 6] \
        [--layouts plan,dataloader]

Every rank is a cp rank of one replica (a hand-written loop: plain module,
fcp.torch.reduce_gradients). Per layout and L: the median step time over the
steps after the first (forward, backward and the gradient reduction, a barrier
either side), fcp.torch's reshuffle seconds per step (fcp.torch.stats(): the
dataloader layout's reshuffles inside attention, max over ranks) and the
activation bytes the reshuffles move per step, from the plan: every attention
call sends the q, k, v rows of the tokens that leave their dataloader rank and
brings their o home, and its backward sends dO and brings dq, dk, dv home.
The plan layout moves none (fcp.torch.shard cuts each rank's tokens from the
packed batch every cp rank holds). Same batches and weights for both layouts.
"""

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

import fcp.torch as ft

VOCAB = 128


def batch(step, tokens):
    rng = np.random.default_rng(500 + step)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(int(min(max(1, rng.lognormal(5.0, 1.5)), tokens)))
    lengths[-1] -= sum(lengths) - tokens
    lengths = [n for n in lengths if n > 0]
    return lengths, torch.from_numpy(rng.integers(0, VOCAB, tokens))


def model_with(layers, hidden):
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
                                        num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
                                        head_dim=hidden // 8, attn_implementation="fcp", use_cache=False)).float()


def moved_tokens(plan):
    """Tokens of this rank's dataloader shard that the plan gives to another rank."""
    lo, hi = plan.local_range
    mine = plan.plan.token_permutation(plan.rank)
    return (hi - lo) - int(np.count_nonzero((mine >= lo) & (mine < hi)))


def run(layers, layout, args):
    model = model_with(layers, args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times, reshuffle, moved = [], [], []
    for step in range(args.steps + 1):
        lengths, ids = batch(step, args.tokens)
        plan = ft.plan(lengths, config=model.config, block_size=args.block_size)
        ft.reset_stats()
        dist.barrier()
        start = time.perf_counter()
        loss = model(**ft.shard(plan, input_ids=ids, labels=ids, layout=layout)).loss
        ft.scale_loss(loss, plan, model).backward()
        ft.reduce_gradients(model, plan)
        dist.barrier()
        if step:  # the first step warms up allocators and caches
            times.append(time.perf_counter() - start)
            reshuffle.append(ft.stats()["reshuffle_s"])
            moved.append(moved_tokens(plan))
        optimizer.step()
        optimizer.zero_grad()
    heads_q, heads_kv, dim = 8, 2, args.hidden // 8
    per_token = 4 * ((heads_q + 2 * heads_kv) * dim + heads_q * dim)  # float32: q|k|v out + o home, or dO + dq|dk|dv
    stats = torch.tensor([statistics.median(reshuffle), statistics.median(moved)], dtype=torch.float64)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    moved_bytes = layers * 2 * per_token * stats[1].item() if layout == "dataloader" else 0.0
    return statistics.median(times), stats[0].item(), moved_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="2,8")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layouts", default="plan,dataloader")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ft.hf.register()
    rows = []
    for layers in (int(x) for x in args.layers.split(",")):
        for layout in args.layouts.split(","):
            rows.append((layers, layout, *run(layers, layout, args)))
    if dist.get_rank() == 0:
        print(f"{dist.get_world_size()} cp ranks, {args.tokens} tokens per step, hidden {args.hidden} (8 query / 2 KV "
              f"heads of {args.hidden // 8}), block {args.block_size}, float32, median of {args.steps} steps")
        print("| layers | layout | step (ms) | reshuffle in attention (ms) | activation bytes reshuffled, busiest rank (MB) |")
        print("|---:|---|---:|---:|---:|")
        for layers, layout, step_s, reshuffle_s, moved in rows:
            print(f"| {layers} | {layout} | {1e3 * step_s:.0f} | {1e3 * reshuffle_s:.0f} | {moved / 1e6:.2f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
