"""Trains a tiny Hugging Face Llama (random init, no downloads) with FCP
context-parallel attention on CPU ranks, and the same run on one process.

    torchrun --nproc-per-node 4 examples/train_tiny_llama.py     # FCP on 4 gloo ranks
    python examples/train_tiny_llama.py                           # one process, each sequence on its own

Each step packs a long-tailed batch of sequences (lengths from 1 to ~1500,
about 3000 tokens) into one row; each rank feeds its dataloader shard of the
tokens and their positions (for RoPE) from fcp.torch.shard, FCP attention
reshuffles inside, and fcp.torch.reduce_gradients sums the ranks' partial
gradients (a hand-written loop; examples/train_llama_fsdp.py wires FSDP2). Sequences are arithmetic
progressions mod the vocabulary, so the loss has something to learn and falls.
Both runs start from the same weights and see the same batches, so their
losses agree to float32 rounding (the script prints them; docs/torch.md).
Options: --steps (20), --layout dataloader|plan, --tokens (3072).
"""

import argparse
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 64


def make_batch(step, tokens):
    rng = np.random.default_rng(1000 + step)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(int(min(max(1, rng.lognormal(4.0, 1.5)), 1500)))
    lengths[-1] -= sum(lengths) - tokens
    if lengths[-1] == 0:
        lengths.pop()
    ids, targets = [], []
    for n in lengths:
        start, stride = rng.integers(VOCAB), rng.integers(1, 4)
        seq = (start + stride * np.arange(n)) % VOCAB
        ids.append(seq)
        targets.append(np.concatenate([seq[1:], [-100]]))  # no target after a sequence's last token
    return lengths, torch.from_numpy(np.concatenate(ids)), torch.from_numpy(np.concatenate(targets))


def model_for(attn):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                         attn_implementation=attn)
    return LlamaForCausalLM(config).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=3072)
    ap.add_argument("--layout", choices=["dataloader", "plan"], default="dataloader")
    args = ap.parse_args()
    torch.set_num_threads(1)
    distributed = "RANK" in os.environ
    if distributed:
        import fcp.torch as ft
        import fcp.torch.hf
        dist.init_process_group("gloo")
        ft.hf.register()
        rank = dist.get_rank()
    else:
        rank = 0
    model = model_for("fcp" if distributed else "eager")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(args.steps):
        start = time.perf_counter()
        lengths, ids, targets = make_batch(step, args.tokens)
        valid = int((targets != -100).sum())
        opt.zero_grad()
        if distributed:
            # A hand-written loop (no DDP/FSDP2): every rank is a cp rank of one replica.
            plan = ft.plan(lengths, config=model.config, block_size=256, coalesce=4)
            loss = model(**ft.shard(plan, input_ids=ids, labels=ids, layout=args.layout)).loss
            ft.scale_loss(loss, plan, model).backward()
            ft.reduce_gradients(model, plan)  # the sum over the cp ranks of their partial gradients
            reported = loss.detach().clone()
            dist.all_reduce(reported)
        else:
            loss, off = 0.0, 0
            for n in lengths:
                logits = model(input_ids=ids[None, off:off + n], position_ids=torch.arange(n)[None]).logits[0]
                loss = loss + F.cross_entropy(logits, targets[off:off + n], ignore_index=-100, reduction="sum")
                off += n
            loss = loss / valid
            loss.backward()
            reported = loss.detach()
        opt.step()
        if rank == 0:
            print(f"step {step:2d}  loss {reported.item():.6f}  ({len(lengths)} sequences, longest {max(lengths)}, "
                  f"{time.perf_counter() - start:.2f} s)", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
