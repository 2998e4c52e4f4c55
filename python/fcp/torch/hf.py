"""fcp.torch.hf: FCP attention inside a stock Hugging Face transformers model.

::

    import fcp.torch as ft, fcp.torch.hf
    ft.hf.register()                                    # once: attn_implementation="fcp"
    model = LlamaForCausalLM(config)                    # config._attn_implementation = "fcp"
    plan = ft.plan(lengths, heads_q=..., heads_kv=..., head_dim=..., mask="causal")
    with ft.hf.batch(plan):                             # layout="dataloader" (default) or "plan"
        logits = model(input_ids=ids_shard[None], position_ids=pos_shard[None]).logits

Each rank feeds its own rows of the packed batch (B = 1): in the dataloader
layout its shard ``ids[lo:hi]`` with ``plan.position_ids("dataloader")``, in
the plan layout ``fcp.torch.dispatch(ids, plan)`` with ``plan.position_ids()``.
RoPE is applied per token from those positions, so it is right in either
layout; attention reshuffles (dataloader layout) or moves only K/V (plan).

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

from . import Plan, attention

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
    """Inside the block, "fcp" attention runs `plan` in `layout` ("dataloader" or "plan")."""
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
    """(plan, layout) of the innermost active :func:`batch`, or None."""
    return getattr(_state, "current", None)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                      scaling: Optional[float] = None, sliding_window: Optional[int] = None, **kwargs):
    active = current()
    if active is None:
        raise ValueError("fcp.torch.hf: attention called outside `with fcp.torch.hf.batch(plan):` "
                         "(the fcp attention needs the batch's plan)")
    plan, layout = active
    if query.shape[0] != 1:
        raise ValueError(f"fcp.torch.hf: a packed batch has batch size 1, got query of shape {tuple(query.shape)}")
    if dropout:
        raise ValueError(f"fcp.torch.hf: attention dropout is not supported, got {dropout}")
    mask, window = plan.plan.mask, plan.plan.window
    if sliding_window is not None and (mask != "sliding_window" or window != sliding_window):
        raise ValueError(f"fcp.torch.hf: the model uses sliding_window={sliding_window} but the plan's mask is "
                         f"{mask}" + (f" with window {window}" if window else ""))
    if sliding_window is None and mask == "sliding_window":
        raise ValueError(f"fcp.torch.hf: the plan has a sliding window of {window} but the model has none")
    q, k, v = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))  # [S, heads, D]
    o = attention(q, k, v, plan, layout=layout, scale=scaling)
    return o.unsqueeze(0), None
