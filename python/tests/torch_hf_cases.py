"""Hugging Face cases of the fcp.torch tests (imported by the spawned ranks of
torch_cases.spawn): a stock LlamaForCausalLM (2 layers, GQA, random init) and
a Mistral-style sliding-window model on a packed batch, under 4 gloo ranks,
against one process running each sequence on its own.
"""

from __future__ import annotations


import torch
import torch.distributed as dist
import torch.nn.functional as F

# 1, exact multiples of the block size (64), and 700 tokens that span all four shards.
LENGTHS = [1, 64, 128, 700, 37, 3, 64]
VOCAB = 97
WINDOW = 48


def make_model(kind, attn):
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                  attn_implementation=attn)
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**common)).float()
    return MistralForCausalLM(MistralConfig(sliding_window=WINDOW, **common)).float()


def batch_tensors():
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, VOCAB, (sum(LENGTHS),), generator=g)
    targets = torch.full_like(ids, -100)  # next token of the same sequence; -100 at each sequence's end
    off = 0
    for n in LENGTHS:
        targets[off:off + n - 1] = ids[off + 1:off + n]
        off += n
    return ids, targets


def reference(kind):
    """Loss and gradients of one process running each sequence on its own."""
    model = make_model(kind, "eager")
    ids, targets = batch_tensors()
    valid = int((targets != -100).sum())
    loss, off = 0.0, 0
    for n in LENGTHS:
        logits = model(input_ids=ids[None, off:off + n], position_ids=torch.arange(n)[None]).logits[0]
        loss = loss + F.cross_entropy(logits, targets[off:off + n], ignore_index=-100, reduction="sum")
        off += n
    loss = loss / valid
    loss.backward()
    return loss.item(), {name: p.grad.clone() for name, p in model.named_parameters()}


def distributed(kind, layout):
    import fcp.torch as ft
    ft.hf.register()
    model = make_model(kind, "fcp")
    kw = dict(block_size=64, coalesce=2, heads_q=4, heads_kv=2, head_dim=16)
    if kind == "mistral":
        kw.update(mask="sliding_window", window=WINDOW)
    plan = ft.plan(LENGTHS, **kw)
    ids, targets = batch_tensors()
    valid = int((targets != -100).sum())
    lo, hi = plan.local_range
    if layout == "dataloader":
        my_ids, my_targets, pos = ids[lo:hi], targets[lo:hi], plan.position_ids("dataloader")
    else:
        my_ids, my_targets = ft.dispatch(ids[lo:hi], plan), ft.dispatch(targets[lo:hi], plan)
        pos = plan.position_ids()
    with ft.hf.batch(plan, layout=layout):
        logits = model(input_ids=my_ids[None], position_ids=pos[None]).logits[0]
    loss = F.cross_entropy(logits, my_targets, ignore_index=-100, reduction="sum") / valid
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total)
    grads = {}
    for name, p in model.named_parameters():
        g = p.grad.clone()
        dist.all_reduce(g)  # what DDP does: each rank's tokens contribute to every parameter
        grads[name] = g
    return total.item(), grads


def compare(kind, layout, ref):
    ref_loss, ref_grads = ref
    loss, grads = distributed(kind, layout)
    worst = max(((grads[n] - ref_grads[n]).norm() / ref_grads[n].norm().clamp_min(1e-30)).item() for n in ref_grads)
    return {"loss_rel_err": abs(loss - ref_loss) / abs(ref_loss), "worst_grad_rel_err": worst,
            "params": len(ref_grads), "loss": loss}


CASES = [(kind, layout) for kind in ("llama", "mistral") for layout in ("dataloader", "plan")]


def outside_batch(rank):
    import fcp.torch as ft
    ft.hf.register()
    model = make_model("llama", "fcp")
    try:
        model(input_ids=torch.zeros(1, 4, dtype=torch.long))
        return None
    except ValueError as e:
        return str(e)


def run(what, rank):
    """Every case in one spawn (importing transformers dominates a spawn's cost)."""
    out = {"outside_batch": outside_batch(rank)}
    for kind in ("llama", "mistral"):
        ref = reference(kind)
        for layout in ("dataloader", "plan"):
            out[kind, layout] = compare(kind, layout, ref)
    return out
