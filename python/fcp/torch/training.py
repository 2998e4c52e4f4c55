"""fcp.torch in a training step: the attention shape from a model's config, this
rank's inputs from the packed batch, and gradients that equal the unsharded model's.

Context-parallel ranks each hold a part of every sequence, so each computes a
*partial* gradient: the sum over its own tokens. A step is right when every
parameter's gradient is the sum over the cp ranks (and the mean over the data-
parallel replicas, as usual). How a stack gets there:

====================================  ==========================  ==============================
model wrapper                         averages gradients over     what fcp.torch adds
====================================  ==========================  ==============================
FSDP2 over the flattened dp x cp mesh  dp x cp (reduce-scatter)    loss x cp   (scale_loss)
DDP over the world / dp x cp group     dp x cp (all-reduce)        loss x cp   (scale_loss)
FSDP2 over dp, DDP over dp, none       dp, or nothing              the sum over cp (reduce_gradients)
====================================  ==========================  ==============================

:func:`scale_loss` reads the wrapper and does the first column's part; where the
wrapper leaves cp out it requires :func:`reduce_gradients` after backward, and
the first optimizer step after it checks, with one small collective, that the
cp ranks hold the same gradients and weights (one clear error on every rank
otherwise, naming the fix) before the update is applied.
"""

from __future__ import annotations

import weakref
from typing import Dict, Optional

import numpy as np
import torch
import torch.distributed as dist

from . import Plan, _agree

__all__ = ["attention_shape", "shard", "scale_loss", "reduce_gradients", "check_gradients"]


# ---- the attention shape from a transformers config ---------------------------


def attention_shape(config, tp: int = 1) -> Dict[str, object]:
    """The plan keywords of a transformers config's attention, for one of `tp`
    tensor-parallel ranks: ``heads_q``, ``heads_kv``, ``head_dim``, ``mask``
    (and ``window``).

    Tensor parallelism shards attention heads: each TP rank runs attention on
    ``heads / tp`` query heads and ``heads_kv / tp`` KV heads (when there are
    fewer KV heads than TP ranks, each rank holds one, replicated), over the
    same tokens, so the cp ranks of one TP rank run one plan made for the local
    head counts. A sliding window (Mistral-style ``sliding_window``) becomes the
    mask; models that mix sliding and full layers need a plan per mask and are
    refused.
    """
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"fcp.torch.attention_shape: tp must be a positive int, got {tp!r}")
    heads = getattr(config, "num_attention_heads", None)
    if not heads:
        raise ValueError(f"fcp.torch.attention_shape: {type(config).__name__} has no num_attention_heads")
    heads_kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if heads % tp:
        raise ValueError(f"fcp.torch.attention_shape: {heads} attention heads do not divide over tp={tp} ranks")
    if heads_kv % tp == 0:
        local_kv = heads_kv // tp
    elif tp % heads_kv == 0:
        local_kv = 1  # each TP rank holds one KV head, replicated over tp / heads_kv ranks
    else:
        raise ValueError(f"fcp.torch.attention_shape: {heads_kv} KV heads neither divide over nor replicate "
                         f"evenly across tp={tp} ranks")
    shape = dict(heads_q=heads // tp, heads_kv=local_kv, head_dim=int(head_dim), mask="causal")
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False:
        window = None
    kinds = set(getattr(config, "layer_types", None) or ())
    if window and len(kinds) > 1:
        raise ValueError(f"fcp.torch.attention_shape: the model mixes layer types {sorted(kinds)}; one fcp plan "
                         "serves one mask")
    if window:
        shape.update(mask="sliding_window", window=int(window))
    return shape


# ---- this rank's inputs ---------------------------------------------------------


def _global_1d(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.dim() == 2 and x.shape[0] == 1:
        x = x[0]
    if x.dim() != 1:
        raise ValueError(f"{name} must be the packed batch, [tokens] or [1, tokens], got shape {tuple(x.shape)}")
    return x


def _rows(plan: Plan, layout: str) -> torch.Tensor:
    """Global token ids of this rank's rows, in `layout`'s order."""
    if layout == "dataloader":
        lo, hi = plan.local_range
        return torch.arange(lo, hi)
    if layout == "plan":
        return torch.from_numpy(np.array(plan.plan.token_permutation(plan.rank), dtype=np.int64))
    raise ValueError(f"layout must be 'plan' or 'dataloader', got {layout!r}")


def shard(plan: Plan, input_ids, labels=None, position_ids=None, layout: str = "plan",
          ignore_index: int = -100) -> Dict[str, object]:
    """This rank's part of the packed global batch, as keywords for a transformers causal LM.

    `input_ids` (and `labels`, `position_ids`) hold the whole packed batch of
    the plan, ``[tokens]`` or ``[1, tokens]``, the same on every cp rank.
    Returns ``input_ids``, ``position_ids`` (each token's position in its
    sequence, for RoPE), ``fcp_plan``, ``fcp_layout`` and, with `labels`:
    ``shift_labels`` (each token's next label within its own sequence,
    `ignore_index` after a sequence's last token; transformers then does not
    shift), ``labels`` (the same: transformers computes a loss only when
    labels are given) and ``num_items_in_batch`` (the labels of the whole
    batch that count, so the rank's loss is its sum over this count), each
    ``[1, rows]``. `layout` "plan" (default: tokens permuted once here, attention
    moves only K/V) or "dataloader" (contiguous shards, attention reshuffles).

    Every tensor returned is on `input_ids`' device. Collective over the plan's
    ranks: a batch whose length differs from the plan's total raises the same
    ValueError on every rank.
    """
    error, tensors = None, {}
    try:
        tensors["input_ids"] = _global_1d("input_ids", input_ids)
        if labels is not None:
            tensors["labels"] = _global_1d("labels", labels)
        if position_ids is not None:
            tensors["position_ids"] = _global_1d("position_ids", position_ids)
        total = plan.plan.total_tokens
        for name, x in tensors.items():
            if x.shape[0] != total:
                error = (f"{name} has {x.shape[0]} tokens but the plan's lengths add up to {total} (plan the "
                         "batch's own sequence lengths, padding included)")
                break
        rows = _rows(plan, layout)
    except ValueError as e:
        error = str(e)
    _agree(plan.group, error, "fcp.torch.shard", plan)
    lengths = np.asarray(plan.plan.sequences, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    out: Dict[str, object] = {"input_ids": tensors["input_ids"][rows]}
    if "position_ids" in tensors:
        out["position_ids"] = tensors["position_ids"][rows]
    else:
        out["position_ids"] = plan.position_ids(layout).to(tensors["input_ids"].device)
    if "labels" in tensors:
        shifted = torch.full_like(tensors["labels"], ignore_index)
        shifted[:-1] = tensors["labels"][1:]
        shifted[torch.from_numpy(starts[1:] - 1)] = ignore_index  # the last token of each sequence
        out["shift_labels"] = out["labels"] = shifted[rows]
        # A tensor, not an int: a compiled model would specialise on an int's value.
        out["num_items_in_batch"] = (shifted != ignore_index).sum()
    for name in ("input_ids", "position_ids", "shift_labels", "labels"):
        if name in out:
            out[name] = out[name][None]
            # Each batch has its own row count: a compiled model treats the token dim as
            # dynamic from the first batch rather than recompiling on the second.
            torch._dynamo.maybe_mark_dynamic(out[name], 1)
    out["fcp_plan"], out["fcp_layout"] = plan, layout
    return out


# ---- gradients ------------------------------------------------------------------


def _ranks(group) -> list:
    return dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    while hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
        model = model._orig_mod
    return model


def _is_dtensor(p) -> bool:
    return type(p).__name__ == "DTensor" and hasattr(p, "device_mesh")


class _Reduction:
    """How a model's wrapper reduces gradients: its kind ("DDP", "FSDP2" or "none") and the
    global ranks it averages over (this rank's group)."""

    def __init__(self, model: torch.nn.Module):
        from torch.distributed.fsdp import FSDPModule
        from torch.nn.parallel import DistributedDataParallel
        model = _unwrap(model)
        self.group = None  # the process group it reduces over, where one stands for it
        if isinstance(model, DistributedDataParallel):
            self.kind, self.ranks, self.group = "DDP", set(_ranks(model.process_group)), model.process_group
        elif any(isinstance(m, FSDPModule) for m in model.modules()):
            # Sharded parameters are DTensors on the FSDP mesh (a root's stay unsharded
            # between its forward and backward, so any sharded one will do).
            meshes = {tuple(p.device_mesh.mesh.flatten().tolist()) for p in model.parameters() if _is_dtensor(p)}
            if len(meshes) != 1:
                raise ValueError(f"the model's FSDP2 parameters are on {len(meshes)} meshes; fcp.torch reads one")
            self.kind, self.ranks = "FSDP2", set(meshes.pop())
            mesh = next(p.device_mesh for p in model.parameters() if _is_dtensor(p))
            self.group = mesh.get_group() if mesh.ndim == 1 else None
        else:
            self.kind, self.ranks = "none", {dist.get_rank()}


def _cp_ranks(plan: Plan) -> set:
    return set(_ranks(plan.group))


_FIX = ("wrap the model over the flattened dp x cp mesh (fully_shard(..., mesh=mesh['dp', 'cp']._flatten()) "
        "or DDP(model, process_group=<a group of every dp and cp rank>)) and scale the loss with "
        "fcp.torch.scale_loss, or call fcp.torch.reduce_gradients(model, plan) after backward")


class _Armed:
    """What scale_loss left for the next optimizer step to check, per model."""

    def __init__(self, model, plan, reduction, checks):
        self.model, self.reduction, self.checks = weakref.ref(model), reduction, checks
        self.plan = weakref.ref(plan)  # the step's plan; the loop holds it until the step is done
        self.pending_reduce = reduction.needs_cp_sum
        self.steps = 0


_armed: Dict[int, _Armed] = {}
_hook = None


def scale_loss(loss: torch.Tensor, plan: Plan, model: torch.nn.Module, checks: str = "first") -> torch.Tensor:
    """The loss to call backward on, so that gradients equal the unsharded model's.

    `loss` is this rank's sum of per-token losses over the replica's count of
    counted tokens (what a transformers model returns for
    :func:`shard`'s keywords). `model` is what the optimizer steps: DDP,
    FSDP2 (``fully_shard``) or a plain module, compiled or not. Where the
    wrapper averages gradients over the cp ranks as well as dp (FSDP2 over the
    flattened dp x cp mesh, DDP over the world), the loss is multiplied by the
    cp size, so the average is the sum fcp needs. Where it does not (over dp
    only, or no wrapper), the loss is returned as is and
    :func:`reduce_gradients` must run after backward; an optimizer step
    without it raises. A wrapper that covers only some cp ranks is refused.

    `checks`: "first" (default: the first optimizer step of this model
    compares gradient and weight checksums across the cp ranks, one small
    all_gather), "always" (every step), or "never".
    """
    if checks not in ("first", "always", "never"):
        raise ValueError(f"fcp.torch.scale_loss: checks must be 'first', 'always' or 'never', got {checks!r}")
    if not isinstance(plan, Plan):
        raise TypeError(f"fcp.torch.scale_loss: plan must be an fcp.torch.Plan, got {type(plan).__name__}")
    error, reduction = None, None
    try:
        reduction = _Reduction(model)
        error = _classify(reduction, plan)
        error = _disagreement(reduction) or error  # collective over the wrapper's group: always run
    except ValueError as e:
        error = str(e)
    _agree(plan.group, error, "fcp.torch.scale_loss")
    entry = _armed.get(id(_unwrap(model)))
    if entry is None or entry.model() is not _unwrap(model):
        entry = _armed[id(_unwrap(model))] = _Armed(_unwrap(model), plan, reduction, checks)
    entry.plan, entry.reduction, entry.checks = weakref.ref(plan), reduction, checks
    entry.pending_reduce = entry.pending_reduce or reduction.needs_cp_sum
    _install_hook()
    return loss * reduction.loss_factor if reduction.loss_factor != 1 else loss


def _classify(reduction: _Reduction, plan: Plan) -> Optional[str]:
    """Sets the reduction's loss factor and whether it needs the cp sum; the error when its
    group holds only some of this rank's cp peers (factor 0 then)."""
    cp, me = _cp_ranks(plan), dist.get_rank()
    covered = cp & reduction.ranks
    reduction.loss_factor, reduction.needs_cp_sum = 0, False
    if covered == cp:
        reduction.loss_factor = len(cp)
    elif covered == {me}:
        reduction.loss_factor, reduction.needs_cp_sum = 1, True
    else:
        return (f"the model's {reduction.kind} averages gradients over ranks {sorted(reduction.ranks)}, which hold "
                f"{len(covered)} of the {len(cp)} context-parallel ranks {sorted(cp)}; it must hold all of them "
                f"or none: {_FIX}")
    return None


def _disagreement(reduction: _Reduction) -> Optional[str]:
    """Whether the ranks of the wrapper's group scale alike: a group that holds all of some
    ranks' cp peers but only part of others' averages partial sums with whole ones."""
    if reduction.group is None:
        return None
    factor = torch.tensor([reduction.loss_factor, -reduction.loss_factor], dtype=torch.int64)
    dist.all_reduce(factor, op=dist.ReduceOp.MAX, group=reduction.group)
    if int(factor[0]) == -int(factor[1]):
        return None
    return (f"the model's {reduction.kind} group {sorted(reduction.ranks)} holds all context-parallel peers of some "
            f"of its ranks and none of others'; it must be a union of whole cp groups: {_FIX}")


def reduce_gradients(model: torch.nn.Module, plan: Plan, dp_group=None) -> None:
    """Sums every gradient over the plan's cp ranks (for a wrapper over dp only, or none);
    with no wrapper it also averages over `dp_group` (default: the other dimension of
    the plan's 2-D mesh; none without a mesh). Collective; call after backward."""
    reduction = _Reduction(model)
    cp = _cp_ranks(plan)
    error = None
    if cp <= reduction.ranks and len(cp) > 1:
        error = (f"the model's {reduction.kind} already averages gradients over the cp ranks: scale the loss with "
                 "fcp.torch.scale_loss instead (summing them again would count every rank's part twice)")
    _agree(plan.group, error, "fcp.torch.reduce_gradients")
    cp_size = len(cp)
    if reduction.kind == "none" and dp_group is None and plan.mesh is not None and plan.mesh.ndim == 2:
        other = [n for n in plan.mesh.mesh_dim_names if n != plan.cp_dim]
        dp_group = plan.mesh.get_group(other[0])
    dp_size = dist.get_world_size(dp_group) if (reduction.kind == "none" and dp_group is not None) else 1
    for p in _unwrap(model).parameters():
        if p.grad is None:
            continue
        g = p.grad.to_local() if _is_dtensor(p.grad) else p.grad
        if cp_size > 1:
            dist.all_reduce(g, group=plan.group)
        if dp_size > 1:
            dist.all_reduce(g, group=dp_group)
            g.div_(dp_size)
    entry = _armed.get(id(_unwrap(model)))
    if entry is not None:
        entry.pending_reduce = False


def _replicated_over_cp(params, cp: set) -> list:
    """The parameters every cp rank holds a copy of: all but FSDP2 shards over a mesh that
    holds the cp ranks (their local shards differ by design)."""
    return [p for p in params if not (_is_dtensor(p) and cp <= set(p.device_mesh.mesh.flatten().tolist()))]


def _checksums(params) -> torch.Tensor:
    """float64 [5]: sum |g|, sum g^2, sum |w|, sum w^2 and the count of gradients, over this
    rank's local parameter data."""
    acc = torch.zeros(5, dtype=torch.float64)
    with torch.no_grad():
        for p in params:
            w = p.to_local() if _is_dtensor(p) else p
            acc[2] += w.detach().double().abs().sum().cpu()
            acc[3] += w.detach().double().square().sum().cpu()
            if p.grad is not None:
                g = p.grad.to_local() if _is_dtensor(p.grad) else p.grad
                acc[0] += g.double().abs().sum().cpu()
                acc[1] += g.double().square().sum().cpu()
                acc[4] += 1
    return acc


def _compare(params, plan: Plan, rtol: float) -> None:
    """The collective behind check_gradients, over any parameters."""
    mine = _checksums(_replicated_over_cp(params, _cp_ranks(plan)))
    world = dist.get_world_size(plan.group)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=plan.group)
    table = torch.stack(gathered)

    def differ(cols) -> bool:
        x = table[:, cols]
        return bool(((x - x[0]).abs() > rtol * x[0].abs().clamp_min(1e-30)).any())

    if differ([2, 3]):
        raise ValueError("fcp.torch: the context-parallel ranks hold different weights (sum |w| per cp rank: "
                         + ", ".join(f"{x:.6g}" for x in table[:, 2].tolist())
                         + "): every cp rank must start from the same weights (same seed, or broadcast them) "
                         "and apply the same update")
    if differ([0, 1, 4]):
        raise ValueError("fcp.torch: after backward the context-parallel ranks hold different gradients (sum |g| "
                         "per cp rank: " + ", ".join(f"{x:.6g}" for x in table[:, 0].tolist())
                         + "): each cp rank holds the partial sum over its own tokens; " + _FIX)


def check_gradients(model: torch.nn.Module, plan: Plan, rtol: float = 1e-5) -> None:
    """Raises the same ValueError on every cp rank when they hold different gradients or
    weights where they must hold the same (not where FSDP2 shards over cp: those shards
    differ by design). One all_gather of 5 numbers; call after the gradients are reduced."""
    _compare(_unwrap(model).parameters(), plan, rtol)


# The first plan this process made over more than one rank, until the first optimizer
# step after it has compared the optimizer's parameters over its cp ranks: the check a
# loop gets without scale_loss (its own wiring), once.
_unchecked = None  # None: no plan yet; a weakref: the check is due; False: done


def _watch(plan: Plan) -> None:
    """Called by fcp.torch.plan: arms the first-step check of a loop's own wiring."""
    global _unchecked
    if _unchecked is not False and plan.workers > 1:  # the latest plan until the first step
        _unchecked = weakref.ref(plan)
        _install_hook()


def _before_step(optimizer, args, kwargs) -> None:
    """A global optimizer step pre-hook, before the update: the checks scale_loss armed, and
    once, for a loop without scale_loss, the optimizer's parameters over the cp ranks."""
    global _unchecked
    for key, entry in list(_armed.items()):
        model = entry.model()
        if model is None:
            del _armed[key]
            continue
        if entry.pending_reduce:
            entry.pending_reduce = False  # said once; the next scale_loss arms it again
            how = ("the model has no DDP or FSDP2 wrapper" if entry.reduction.kind == "none"
                   else f"the model's {entry.reduction.kind} averages over none of the cp ranks")
            raise ValueError(f"fcp.torch: an optimizer step with gradients not summed over the context-parallel "
                             f"ranks ({how}); {_FIX}")
        plan = entry.plan()
        if plan is not None and (entry.checks == "always" or (entry.checks == "first" and entry.steps == 0)):
            _unchecked = False  # the loop uses scale_loss: its checks stand for this one
            check_gradients(model, plan)
        entry.steps += 1
    plan = _unchecked() if _unchecked else None
    if plan is not None:
        _unchecked = False
        _compare([p for group in optimizer.param_groups for p in group["params"]], plan, 1e-5)


def _install_hook() -> None:
    global _hook
    if _hook is None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook
        _hook = register_optimizer_step_pre_hook(_before_step)
