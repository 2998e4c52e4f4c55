"""Trains a transformers Llama with FCP context parallelism the way torchtitan-style
stacks wire it: a 2-D (dp, cp) device mesh, FSDP2 over the flattened dp x cp mesh,
activation checkpointing and compiled decoder layers, the plan layout, AdamW.

    torchrun --nproc-per-node 4 examples/train_llama_fsdp.py              # 2 dp x 2 cp on CPU (gloo)
    torchrun --nproc-per-node 4 examples/train_llama_fsdp.py --check      # step 1 against one process

Each data-parallel replica draws its own packed batch of long-tailed sequences;
its cp ranks plan it together (fcp.torch.plan over the mesh's "cp" dimension),
take their rows with fcp.torch.shard (tokens, RoPE positions, next-token labels
within each sequence) and pass fcp_plan= to the model. fcp.torch.scale_loss makes
FSDP2's average over dp x cp the sum over cp that context parallelism needs.
--check compares step 1's loss and every parameter's gradient with one process
running each sequence alone with eager attention, and exits 1 if they differ.
Random init, no downloads. On CUDA, run with --device cuda (NCCL, bfloat16).
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import LlamaConfig, LlamaForCausalLM

import fcp.torch as ft

VOCAB = 128


def packed_batch(step: int, replica: int, tokens: int):
    """A replica's packed batch: lognormal lengths adding up to `tokens`, each sequence an
    arithmetic progression mod the vocabulary (something to learn)."""
    rng = np.random.default_rng(10_000 * step + replica)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(int(min(max(1, rng.lognormal(4.5, 1.5)), tokens)))
    lengths[-1] -= sum(lengths) - tokens
    lengths = [n for n in lengths if n > 0]
    ids = [(rng.integers(VOCAB) + rng.integers(1, 5) * np.arange(n)) % VOCAB for n in lengths]
    return lengths, torch.from_numpy(np.concatenate(ids))


def make_model(args, attn: str) -> LlamaForCausalLM:
    torch.manual_seed(0)  # every rank (and the one-process check) starts from the same weights
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=2,
                         head_dim=args.hidden // 8, max_position_embeddings=args.tokens,
                         attn_implementation=attn, use_cache=False)
    return LlamaForCausalLM(config).float()


def parallelize(model: LlamaForCausalLM, mesh, args) -> LlamaForCausalLM:
    """Per decoder layer: compile, checkpoint, shard; then the root (torchtitan's order)."""
    dp_cp = mesh["dp", "cp"]._flatten("dp_cp")
    layers = model.model.layers
    for i, layer in enumerate(layers):
        if args.compile:
            layer.compile(fullgraph=True, dynamic=True, backend=args.compile_backend)
        if args.checkpoint:
            layer = layers[i] = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
        fully_shard(layer, mesh=dp_cp)
    return fully_shard(model, mesh=dp_cp)


def one_process_reference(args, batches):
    """Loss and gradients of one process, each sequence alone, eager attention: the mean
    over replicas of each replica's (sum of next-token losses / its count)."""
    model = make_model(args, "eager")
    total = 0.0
    for lengths, ids in batches:
        loss, off = 0.0, 0
        for n in lengths:
            if n > 1:
                logits = model(input_ids=ids[None, off:off + n], position_ids=torch.arange(n)[None]).logits[0]
                loss = loss + F.cross_entropy(logits[:-1], ids[off + 1:off + n], reduction="sum")
            off += n
        total = total + loss / (sum(lengths) - len(lengths))
    total = total / len(batches)
    total.backward()
    return total.item(), {name: p.grad for name, p in model.named_parameters()}


def check(model, loss: float, reference) -> bool:
    ref_loss, ref_grads = reference
    worst_name, worst = None, 0.0
    for name, p in model.named_parameters():
        grad = p.grad.full_tensor()  # every rank joins the all-gather
        name = name.replace("_checkpoint_wrapped_module.", "")
        err = ((grad - ref_grads[name]).norm() / ref_grads[name].norm().clamp_min(1e-30)).item()
        if err > worst:
            worst_name, worst = name, err
    loss_err = abs(loss - ref_loss) / abs(ref_loss)
    ok = loss_err < 1e-4 and worst < 1e-4
    if dist.get_rank() == 0:
        print(f"check: loss {loss:.6f} vs one process {ref_loss:.6f} (relative error {loss_err:.2e}); "
              f"worst gradient relative error {worst:.2e} ({worst_name}): {'passed' if ok else 'FAILED'}",
              flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per replica per step")
    ap.add_argument("--dp", type=int, default=2, help="data-parallel replicas (cp = world / dp)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--layout", choices=["plan", "dataloader"], default="plan")
    ap.add_argument("--no-checkpoint", dest="checkpoint", action="store_false")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile backend (aot_eager compiles faster)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--check", action="store_true", help="compare step 1 with one process; exit 1 if it differs")
    args = ap.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world % args.dp:
        ap.error(f"--dp {args.dp} does not divide the {world} ranks")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.set_num_threads(1)
    mesh = init_device_mesh(args.device, (args.dp, world // args.dp), mesh_dim_names=("dp", "cp"))
    ft.hf.register()
    model = parallelize(make_model(args, "fcp"), mesh, args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    replica = mesh.get_local_rank("dp")
    ok, start = True, time.perf_counter()
    for step in range(1, args.steps + 1):
        step_start = time.perf_counter()
        lengths, ids = packed_batch(step, replica, args.tokens)
        plan = ft.plan(lengths, mesh=mesh, cp_dim="cp", config=model.config, block_size=args.block_size)
        inputs = ft.shard(plan, input_ids=ids, labels=ids, layout=args.layout)
        out = model(**inputs)
        ft.scale_loss(out.loss, plan, model).backward()
        loss = out.loss.detach().clone()
        dist.all_reduce(loss)  # each cp rank's part of its replica's loss; then the mean over replicas
        loss = loss.item() / args.dp
        if args.check and step == 1:
            ok = check(model, loss, one_process_reference(args, [packed_batch(1, r, args.tokens)
                                                                 for r in range(args.dp)]))
        optimizer.step()
        optimizer.zero_grad()
        if dist.get_rank() == 0:
            now = time.perf_counter()
            print(f"step {step:3d}  loss {loss:.4f}  {args.tokens * args.dp / (now - step_start):8.0f} tokens/s  "
                  f"{now - step_start:6.2f} s  ({len(lengths)} sequences on replica 0)", flush=True)
        if args.check and step == 1 and not ok:
            break
    if dist.get_rank() == 0:
        print(f"{step} steps in {time.perf_counter() - start:.1f} s (the first compiles the decoder layers)")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
