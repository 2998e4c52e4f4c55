"""fcp.torch.hf: FCP attention inside a stock Hugging Face transformers model.

::

    import fcp.torch as ft, fcp.torch.hf
    ft.hf.register()                                    # once: attn_implementation="fcp"
    model = LlamaForCausalLM(config)                    # config._attn_implementation = "fcp"
    plan = ft.plan(lengths, config=model.config)        # heads, head dim, sliding window from the config
    inputs = ft.shard(plan, input_ids=ids, labels=ids)  # this rank's rows, positions, labels, fcp_plan=plan
    loss = model(**inputs).loss

The plan reaches the attention as the model keyword ``fcp_plan`` (with
``fcp_layout``, "plan" or "dataloader"), which transformers passes down to
every attention call. It travels with the call: a layer recomputed in
backward by activation checkpointing (``gradient_checkpointing_enable()``,
``torch.utils.checkpoint``, ``checkpoint_wrapper``), on any thread, gets it
again; torch.compile sees an opaque operator. The older form, ``with
ft.hf.batch(plan, layout):`` around the forward, still works: a layer
recomputed in backward after the block has closed reuses the plan its
forward ran.

transformers calls ``fn(module, query, key, value, attention_mask, dropout=0.0,
scaling=None, **kwargs)`` with query ``[B, heads_q, S, D]`` and key/value
``[B, heads_kv, S, D]`` (GQA not repeated) and wants ``([B, S, heads_q, D],
None)``; Mistral-style models pass ``sliding_window=W``, which must match the
plan's mask. The mask hook returns None: the plan carries the mask.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Optional

import torch

from . import Plan, _attention_call

NAME = "fcp"
_state = threading.local()


def register(name: str = NAME) -> None:
    """Registers the attention (and a mask hook that builds no mask) under `name`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, _no_mask)


def _no_mask(*args, **kwargs):
    return None


@contextlib.contextmanager
def batch(plan: Plan, layout: str = "dataloader"):
    """Inside the block, "fcp" attention runs `plan` in `layout` ("dataloader" or "plan")
    when the model is called without ``fcp_plan=``."""
    if not isinstance(plan, Plan):
        raise TypeError(f"fcp.torch.hf.batch: plan must be an fcp.torch.Plan, got {type(plan).__name__}")
    if layout not in ("dataloader", "plan"):
        raise ValueError(f"fcp.torch.hf.batch: layout must be 'dataloader' or 'plan', got {layout!r}")
    previous = getattr(_state, "current", None)
    _state.current = (plan, layout)
    try:
        yield plan
    finally:
        _state.current = previous


def current() -> Optional[tuple]:
    """(plan, layout) of the innermost active :func:`batch` on this thread, or None."""
    return getattr(_state, "current", None)


def _plan_for(module: torch.nn.Module, fcp_plan, fcp_layout) -> tuple:
    """(plan, layout) of this call: the keywords; else the innermost `batch` block (remembered
    on the module); else, inside a backward (activation checkpointing recomputes the layer
    there, after the block and possibly on another thread), what the module's forward ran."""
    if fcp_plan is not None:
        if not isinstance(fcp_plan, Plan):
            raise TypeError(f"fcp.torch.hf: fcp_plan must be an fcp.torch.Plan, got {type(fcp_plan).__name__}")
        return fcp_plan, fcp_layout if fcp_layout is not None else "dataloader"
    active = current()
    if active is not None:
        module._fcp_batch = active
        return active
    if torch._C._current_graph_task_id() != -1 and getattr(module, "_fcp_batch", None) is not None:
        return module._fcp_batch
    raise ValueError("fcp.torch.hf: attention called without a plan: pass fcp_plan=plan to the model "
                     "(fcp.torch.shard(plan, ...) makes the keywords) or call it inside "
                     "`with fcp.torch.hf.batch(plan):`")


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                      scaling: Optional[float] = None, sliding_window: Optional[int] = None,
                      fcp_plan: Optional[Plan] = None, fcp_layout: Optional[str] = None, **kwargs):
    plan, layout = _plan_for(module, fcp_plan, fcp_layout)
    if query.shape[0] != 1:
        raise ValueError(f"fcp.torch.hf: a packed batch has batch size 1, got query of shape {tuple(query.shape)}")
    if dropout:
        raise ValueError(f"fcp.torch.hf: attention dropout is not supported, got {dropout}")
    q, k, v = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))  # [S, heads, D]
    # The model's window (0: none) is checked against the plan's mask inside the call, on every rank.
    o = _attention_call(q, k, v, plan, layout, scaling, sliding_window if sliding_window else 0)
    return o.unsqueeze(0), None
