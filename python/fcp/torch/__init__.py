"""fcp.torch: FCP context-parallel attention as a differentiable PyTorch call.

In a training step (docs/torch.md; examples/train_llama_fsdp.py)::

    plan = ft.plan(lengths, mesh=mesh, cp_dim="cp", config=model.config)
    out = model(**ft.shard(plan, input_ids=ids, labels=ids))   # this rank's rows, fcp_plan=plan
    ft.scale_loss(out.loss, plan, model).backward()            # gradients = the unsharded model's

Every call is collective over the plan's ranks (a process group, default the
default group, or a mesh's cp dimension); every rank passes identical
arguments. On CPU, communication runs on gloo and compute on fcp's own C++
kernel, called on the tensors' memory::

    import fcp.torch as ft
    plan = ft.plan(lengths, heads_q=8, heads_kv=2, head_dim=64, block_size=512)
    lo, hi = plan.local_range                  # this rank's dataloader shard
    o = ft.attention(q, k, v, plan)            # q [hi-lo, 8, 64], k, v [hi-lo, 2, 64]

or, with the dataloader permuting once per step (no reshuffle inside)::

    x_p = ft.dispatch(x, plan)                 # any trailing shape, differentiable
    o_p = ft.attention(q_p, k_p, v_p, plan, layout="plan")
    x = ft.undispatch(o_p, plan)
    pos = plan.position_ids()                  # positions in their sequences, for RoPE

The per-rank program (which K/V rows go to whom, pool slots, kernel segment
tables, the reshuffle's pieces) is computed once per plan by the C++ library
(fcp/lowering.h), the same program the MPI executor runs, and run by its
rules: on CPU one reshuffle message per (block, dataloader rank), each
kernel call starting once its own blocks are in, outputs and gradients going
home block by block once final. This module only issues its operations. On CUDA tensors (bfloat16 or
float16; never run on a GPU yet) the kernel calls become flash varlen
launches merged on device (_varlen.py) and stage transfers go on a side
stream over NCCL; use a cpu:gloo,cuda:nccl group. See docs/torch.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import threading
import time
import weakref
from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

import fcp
from fcp import _fcp

__all__ = ["Plan", "plan", "attention", "dispatch", "undispatch", "stats", "reset_stats", "trace",
           "attention_shape", "shard", "scale_loss", "reduce_gradients", "check_gradients"]

_KINDS = 4  # message kinds per (stage, block): K, V, dK, dV -- part of the tag
# Reshuffle message kinds per block (Plan.reshuffle_tag): Q|K|V in, o home, dO in, dq home, dK|dV home.
_IN_QKV, _HOME_O, _IN_DO, _HOME_DQ, _HOME_DKV = range(5)

# Counters of this process's attention calls (seconds unless named otherwise):
# calls; total_s (inside forward and backward of attention); kernel_s (inside
# the C++ kernel); wait_s (blocked on stage transfers after the kernel
# returned: the exposed part of the transfers); reshuffle_s (every reshuffle
# in and out on the calling thread: packing, posting, unpacking, and the
# waits); reshuffle_wait_s (of it, blocked on reshuffle messages: a call or
# a stage send waiting for its blocks, the pass's end waiting for the rest);
# reshuffle_waits (how many times a call or a stage send blocked on its
# blocks); post_s (posting the stage's P2P ops); stages_with_transfers.
_STATS_KEYS = ("calls", "total_s", "kernel_s", "wait_s", "reshuffle_s", "reshuffle_wait_s", "reshuffle_waits",
               "post_s", "stages_with_transfers")
_stats = dict.fromkeys(_STATS_KEYS, 0)


def stats() -> dict:
    """A copy of the counters (see _STATS_KEYS above); python_s = total - kernel - wait - reshuffle."""
    out = dict(_stats)
    out["python_s"] = out["total_s"] - out["kernel_s"] - out["wait_s"] - out["reshuffle_s"]
    return out


def reset_stats() -> None:
    for key in _STATS_KEYS:
        _stats[key] = 0


# Measurement only (bench/torch_attention_overhead.py --serialize): wait for a
# stage's transfers before its compute, so wait_s is the bare transfer time.
_serialize_stages = False

# Tests only (like the MPI executor's ExecutorOptions::before_reshuffle_send):
# called with (block, dst) before this rank posts its Q|K|V reshuffle message
# of `block` for rank `dst` (a test delays one to check the reshuffle rule).
_before_reshuffle_send = None


def _post(works_ops: list, comm_stream) -> list:
    if not works_ops:
        return []
    if comm_stream is None:
        return dist.batch_isend_irecv(works_ops)
    # CUDA: the transfers go on the communication stream once the compute
    # stream has produced what they send (and finished reading what they
    # overwrite); the compute stream waits on them in w.wait() below (NCCL's
    # wait is a stream dependency, not a host block).
    comm_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(comm_stream):
        return dist.batch_isend_irecv(works_ops)


# ---- trace (opt-in, CPU): fcp.torch.trace(path) --------------------------------
# While a trace is open, _trace holds this process's intervals as
# (lane, name, start, end) in time.perf_counter() seconds (CLOCK_MONOTONIC on
# Linux: shared by the ranks of one machine). Lanes and names are those of
# `fcp run --trace` (fcp/trace.h), so scripts/trace_overlap.py reads both.
_trace: Optional[list] = None
_LANE = {name: i for i, name in enumerate(_fcp.trace_lanes())}


def _record(lane: str, name: str, start: float, end: float) -> None:
    if _trace is not None:
        _trace.append((_LANE[lane], name, start, end))


@contextlib.contextmanager
def trace(path: str, group=None):
    """Records every fcp.torch attention call inside the block (CPU tensors) and
    writes one Chrome/Perfetto trace of all ranks of `group` (a process group or
    a 1-D DeviceMesh such as ``mesh["cp"]``) to `path` (rank 0
    writes; every rank passes the same path). Collective on exit.

    Lanes per rank (pid = rank): compute (a stage's kernel calls), send and
    recv (a stage transfer from its post to its observed completion), wait
    (blocked on the stage's transfers after its compute), reshuffle. While
    tracing, a helper thread per stage waits on the stage's transfers and
    stamps each completion (the kernel releases the GIL); without a trace
    nothing is recorded. Nothing is written if the block raises.
    """
    global _trace
    if _trace is not None:
        raise RuntimeError("fcp.torch.trace: a trace is already open in this process")
    group = _resolve_group(group, None, None, "fcp.torch.trace")[0]  # a process group or a 1-D DeviceMesh
    world, rank = _group_size_rank(group)
    _trace = []
    try:
        yield
        events = _trace
    finally:
        _trace = None
    gathered: List[Optional[list]] = [None] * world
    dist.all_gather_object(gathered, events, group=group)
    if rank == 0:
        origin = min((e[2] for r in gathered for e in r), default=0.0)
        text = _fcp.runtime_trace_document([[(lane, name, a - origin, b - origin) for lane, name, a, b in r]
                                            for r in gathered])
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:  # then renamed: a reader never sees half a trace
            f.write(text)
        os.replace(tmp, path)
    dist.barrier(group=group)


def _transfer_name(plan: "Plan", label: str, op) -> Tuple[str, str]:
    """(lane, event name) of one stage P2POp, from its tag (see Plan.tag) and peer."""
    block = op.tag // _KINDS % plan.num_blocks
    kind = "kv" if op.tag % _KINDS < 2 else "dkv"
    peer = plan._peer.index(op.peer)
    if op.op is dist.isend:
        return "send", f"{label} send {kind}{block} to {peer}"
    return "recv", f"{label} recv {kind}{block} from {peer}"


class _Waiter(threading.Thread):
    """Waits on a stage's works in order and stamps each completion (trace only)."""

    def __init__(self, works):
        super().__init__(daemon=True)
        self.works, self.done, self.error = works, [None] * len(works), None
        self.start()

    def run(self):
        try:
            for i, w in enumerate(self.works):
                w.wait()  # releases the GIL
                self.done[i] = time.perf_counter()
        except BaseException as e:  # re-raised by finish() on the calling thread
            self.error = e

    def finish(self):
        self.join()
        if self.error is not None:
            raise self.error


def _run_stage(works_ops: list, compute, comm_stream=None, plan=None, label: str = "", schedule=None) -> None:
    """Posts a stage's transfers, runs its compute, waits; counts where the time went
    (and, in a trace, records the intervals under `label`, e.g. "fwd s3").

    With `schedule` (CPU) instead of `compute`, schedule(post) runs the stage's
    calls one by one (_schedule) and calls post() once, when the blocks the
    stage sends from local rows are in; it counts its own kernel and reshuffle
    time. On CUDA (comm_stream given) the times are of the host issuing the work,
    not of the device.
    """
    state = dict(works=[], waiter=None, t0=None)

    def wait_all():
        # A gloo P2P work must not be waited on twice (it blocks).
        if state["waiter"] is not None:
            state["waiter"].finish()
        else:
            for w in state["works"]:
                w.wait()

    def post():
        t0 = time.perf_counter()
        works = _post(works_ops, comm_stream)
        t1 = time.perf_counter()
        _stats["post_s"] += t1 - t0
        _stats["stages_with_transfers"] += int(bool(works))
        state.update(works=works, t0=t0, waiter=_Waiter(works) if (_trace is not None and works) else None)
        state["traced"] = state["waiter"]
        if _serialize_stages:
            wait_all()
            state.update(works=[], waiter=None)
            _stats["wait_s"] += time.perf_counter() - t1

    t1 = time.perf_counter()
    if schedule is None:
        post()
        t1 = time.perf_counter()
        compute()
        t2 = time.perf_counter()
        _stats["kernel_s"] += t2 - t1
        _record("compute", label, t1, t2)
    else:
        schedule(post)
        t2 = time.perf_counter()
    wait_all()
    t3 = time.perf_counter()
    _stats["wait_s"] += t3 - t2
    if _trace is not None:
        if state["works"]:
            _record("wait", f"wait {label}", t2, t3)
        traced = state.get("traced")
        if traced is not None:
            flights = {}  # K and V of a block are two messages: one event from the post to the later
            for op, done in zip(works_ops, traced.done):
                key = _transfer_name(plan, label, op)
                flights[key] = max(done, flights.get(key, done))
            for (lane, name), done in flights.items():
                _record(lane, name, state["t0"], done)


def _group_size_rank(group) -> Tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("fcp.torch: torch.distributed is not initialised (call init_process_group first)")
    return dist.get_world_size(group), dist.get_rank(group)


def _agree(group, error: Optional[str], operation: str, plan: Optional["Plan"] = None) -> None:
    """Raises the same ValueError on every rank when any rank has an error, or when
    the ranks hold different plans (`plan`: this rank's; its digest is compared).

    One all_reduce when every rank is fine; the messages travel only on failure.
    """
    digest = plan._digest if plan is not None else 0
    flag = torch.tensor([0 if error is None else 1, digest, -digest], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    failed, high, neg_low = (int(x) for x in flag.tolist())
    if failed == 0 and high != -neg_low:
        # Their messages would not match: a hang or an abort inside gloo, never an error.
        raise ValueError(f"{operation}: the ranks hold different plans (make the plan with fcp.torch.plan, "
                         "collectively, from the same batch on every rank)")
    if failed == 0:
        return
    world, _ = _group_size_rank(group)
    messages: List[Optional[str]] = [None] * world
    dist.all_gather_object(messages, error, group=group)
    said = [(r, m) for r, m in enumerate(messages) if m is not None]
    if len(said) == world and len({m for _, m in said}) == 1:
        raise ValueError(f"{operation}: {said[0][1]}")  # every rank: the same mistake, said once
    detail = "; ".join(f"rank {r}: {m}" for r, m in said)
    raise ValueError(f"{operation}: {detail}")


# Live plans by handle: the custom operators get a plan's id (Plan._handle) and
# find it here; an entry leaves with its plan.
_plans: "weakref.WeakValueDictionary[int, Plan]" = weakref.WeakValueDictionary()
_plan_ids = itertools.count(1)


def _plan_of(handle: torch.Tensor, operation: str) -> "Plan":
    plan = _plans.get(int(handle))
    if plan is None:
        raise RuntimeError(f"{operation}: the fcp.torch.Plan of this call no longer exists (keep the plan "
                           "alive until the step's backward has returned)")
    return plan


class Plan:
    """A plan of the packed global batch, lowered for this rank of `group`.

    Attributes: ``plan`` (the :class:`fcp.Plan`), ``group``, ``rank``,
    ``workers``, ``local_range`` (the dataloader shard ``(floor(r*T/N),
    floor((r+1)*T/N))``), ``local_rows`` (rows in the plan layout),
    ``heads_q``, ``heads_kv``, ``head_dim``.
    """

    def __init__(self, plan: fcp.Plan, group=None, mesh=None, cp_dim: Optional[str] = None):
        world, rank = _group_size_rank(group)
        self.plan = plan
        self.group = group
        # The (dp, cp) mesh the plan was made on (None: a bare process group); cp_dim names
        # the context-parallel dimension, whose group is `group`.
        self.mesh, self.cp_dim = mesh, cp_dim
        # What an attention call carries instead of the plan (see "custom operators" below).
        self._id = next(_plan_ids)
        self._handle = torch.tensor(self._id, dtype=torch.int64)
        _plans[self._id] = self
        self.rank = rank
        self.workers = world
        self.program = _fcp.Program(plan._h, rank)
        # Compared across ranks by every call (_agree): ranks must run one plan.
        self._digest = int.from_bytes(hashlib.sha256(plan.to_json().encode()).digest()[:8], "little", signed=True)
        p = self.program
        self.local_range = (p.dataloader_begin, p.dataloader_end)
        self.local_rows = p.local_rows
        shape = plan.attention
        self.heads_q, self.heads_kv, self.head_dim = shape["heads_q"], shape["heads_kv"], shape["head_dim"]
        self.num_blocks = plan.num_blocks

        def vec(name):
            return torch.from_numpy(np.array(p.vector(name)))

        self._in_send_rows = vec("in_send_rows")
        self._in_recv_rows = vec("in_recv_rows")
        self._in_send_counts = [int(x) for x in p.vector("in_send_counts")]
        self._in_recv_counts = [int(x) for x in p.vector("in_recv_counts")]
        self._positions = vec("local_position")
        self._peer = [dist.get_global_rank(group, r) if group is not None else r for r in range(world)]
        self._tables = {}
        for pass_ in ("forward", "backward"):
            for name in ("kv_recv", "kv_send", "dkv_recv", "dkv_send"):
                rows, offsets = p.table(pass_, name)
                self._tables[pass_, name] = (np.array(rows).tolist(), np.array(offsets).tolist())
        self.num_forward_stages = p.num_stages("forward")
        self.num_backward_stages = p.num_stages("backward")
        self._dkv_final_stage = np.array(p.vector("backward_dkv_final_stage")).tolist()
        self._final_stage = {name: np.array(p.vector(name)).tolist() for name in
                             ("forward_final_stage", "backward_dq_final_stage", "backward_dkv_final_stage")}
        # Per pass and stage, the calls: (index, q_block, kv_block, q_row, q_rows, kv_in_pool).
        self._calls = {}
        for pass_ in ("forward", "backward"):
            rows, offsets = (np.array(x) for x in p.table(pass_, "compute"))
            self._calls[pass_] = [[(i - offsets[t], *map(int, rows[i, [1, 2, 3, 4, 5]]))
                                   for i in range(offsets[t], offsets[t + 1])] for t in range(len(offsets) - 1)]
        # The input reshuffles' pieces (block, src, dst, need_stage, dataloader rows, local rows).
        self._pieces = {}
        for name in ("reshuffle_in", "do_in"):
            for side in ("recv", "send", "self"):
                table, dl_rows, local_rows = (torch.from_numpy(np.array(x)) for x in p.reshuffle(name, side))
                pieces, at = [], 0
                for block, src, dst, rows, need in table.tolist():
                    pieces.append((block, src, dst, need, dl_rows[at:at + rows] if len(dl_rows) else None,
                                   local_rows[at:at + rows] if len(local_rows) else None))
                    at += rows
                self._pieces[name, side] = pieces
        self._on_device = {}  # (what, device) -> index tensors / DeviceProgram / stream; home tables: made on first use

    def _rows(self, name: str, device) -> torch.Tensor:
        """One of the reshuffle's row tables on `device`."""
        key = (name, str(device))
        if key not in self._on_device:
            self._on_device[key] = getattr(self, name).to(device)
        return self._on_device[key]

    def _device_program(self, device):
        key = ("program", str(device))
        if key not in self._on_device:
            from . import _varlen
            self._on_device[key] = _varlen.DeviceProgram(self.program, self.plan.mask, self.plan.window, device)
        return self._on_device[key]

    def _comm_stream(self, device):
        key = ("stream", str(device))
        if key not in self._on_device:
            self._on_device[key] = torch.cuda.Stream(device=device)
        return self._on_device[key]

    def position_ids(self, layout: str = "plan") -> torch.Tensor:
        """Each local token's position inside its sequence (int64), for RoPE."""
        if layout == "plan":
            return self._positions.clone()
        if layout == "dataloader":
            starts = np.cumsum([0] + list(self.plan.sequences))
            lo, hi = self.local_range
            tokens = np.arange(lo, hi)
            seq = np.searchsorted(starts, tokens, side="right") - 1
            return torch.from_numpy(tokens - starts[seq])
        raise ValueError(f"position_ids: layout must be 'plan' or 'dataloader', got {layout!r}")

    def rows(self, layout: str) -> int:
        if layout == "plan":
            return self.local_rows
        if layout == "dataloader":
            return self.local_range[1] - self.local_range[0]
        raise ValueError(f"fcp.torch: layout must be 'dataloader' or 'plan', got {layout!r}")

    def stage_ops(self, pass_: str, name: str, stage: int):
        rows, offsets = self._tables[pass_, name]
        return rows[offsets[stage]:offsets[stage + 1]]

    def tag(self, stage: int, block: int, kind: int) -> int:
        return (stage * self.num_blocks + block) * _KINDS + kind

    def reshuffle_tag(self, kind: int, index: int) -> int:
        """Tags of the reshuffle messages, above every stage tag: kind _IN_QKV, _IN_DO by
        block; _HOME_O, _HOME_DQ, _HOME_DKV by final stage + 1."""
        stages = max(self.num_forward_stages, self.num_backward_stages)
        base = max(stages, 1) * self.num_blocks * _KINDS
        return base + kind * max(self.num_blocks, stages + 1) + index

    def _home_table(self, final_name: str) -> dict:
        """Per stage t (-1: before the first) with blocks final at t (`final_name`: a
        *_final_stage vector): (sends [(dataloader rank, local rows)], receives [(owner,
        dataloader rows)], own (dataloader rows, local rows) or None). One message per
        (stage, rank pair) carries the rows of all its blocks final at t, blocks in id
        order on both sides: the MPI executor's per-block messages of one stage end,
        which leave at the same moment, as one. Built once per plan."""
        key = ("home", final_name)
        if key not in self._on_device:
            final = self._final_stage[final_name]
            parts = {}  # stage -> (sends, recvs, own) as {peer: [(block, rows)]}
            for side, which in (("recv", 0), ("send", 1), ("self", 2)):
                for block, src, dst, _, dl_rows, local in self._pieces["reshuffle_in", side]:
                    peer = src if which == 0 else dst
                    rows = local if which == 0 else dl_rows if which == 1 else (dl_rows, local)
                    parts.setdefault(final[block], ({}, {}, {}))[which].setdefault(peer, []).append((block, rows))

            def cat(items):
                return torch.cat([rows for _, rows in sorted(items, key=lambda x: x[0])])

            table = {}
            for stage, (sends, recvs, own) in parts.items():
                mine = [x for items in own.values() for x in items]
                table[stage] = ([(peer, cat(items)) for peer, items in sorted(sends.items())],
                                [(peer, cat(items)) for peer, items in sorted(recvs.items())],
                                (cat([(b, r[0]) for b, r in mine]), cat([(b, r[1]) for b, r in mine])) if mine else None)
            self._on_device[key] = table
        return self._on_device[key]

    def __repr__(self) -> str:
        return (f"fcp.torch.Plan(rank {self.rank}/{self.workers}, {self.plan.total_tokens} tokens, "
                f"local_range {self.local_range}, {self.local_rows} plan rows, "
                f"{self.num_forward_stages} forward stages)")


def _canonical_lengths(lengths) -> List[int]:
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.detach().cpu().tolist()
    elif isinstance(lengths, np.ndarray):
        lengths = lengths.tolist()
    return [int(x) for x in lengths]


def _resolve_group(group, mesh, cp_dim: Optional[str], operation: str):
    """(process group, mesh, cp_dim) from a process group, a 1-D DeviceMesh, or a mesh and the
    name of its context-parallel dimension; errors name `operation`."""
    from torch.distributed.device_mesh import DeviceMesh
    if isinstance(group, DeviceMesh):
        if mesh is not None:
            raise TypeError(f"{operation}: give the mesh once (group=mesh[\"cp\"] or mesh=mesh, cp_dim=\"cp\")")
        if group.ndim != 1:
            raise ValueError(f"{operation}: group is a {group.ndim}-D DeviceMesh; pass mesh=mesh, cp_dim=<the "
                             "context-parallel dimension's name> (or group=mesh[\"cp\"])")
        return group.get_group(), group, (group.mesh_dim_names or (None,))[0]
    if mesh is None:
        return group, None, None
    if group is not None:
        raise TypeError(f"{operation}: give either group= or mesh= (with cp_dim=), not both")
    names = tuple(mesh.mesh_dim_names or ())
    if mesh.ndim == 1 and cp_dim is None:
        return mesh.get_group(), mesh, names[0] if names else None
    if cp_dim not in names:
        raise ValueError(f"{operation}: the mesh has dimensions {names}, none named cp_dim={cp_dim!r} "
                         "(name the context-parallel dimension with cp_dim=)")
    return mesh.get_group(cp_dim), mesh, cp_dim


_SHAPE_KEYWORDS = ("heads_q", "heads_kv", "head_dim")


def plan(lengths, group=None, *, mesh=None, cp_dim: Optional[str] = None, config=None, tp: int = 1, **kw) -> Plan:
    """Plans the packed global batch `lengths` (list, numpy or torch) for the ranks of `group`.

    Collective over the context-parallel ranks: every rank must pass identical
    lengths and keywords (a hash is compared across ranks; disagreement raises
    the same ValueError on every rank). `lengths` may also be an
    :class:`fcp.Plan` made elsewhere.

    The ranks: `group` (a process group, or a 1-D DeviceMesh such as
    ``mesh["cp"]``), or `mesh` with `cp_dim` naming its context-parallel
    dimension (each data-parallel replica plans its own batch over its cp
    ranks). Default: the default group.

    The attention shape: ``config=model.config`` (a transformers config: heads,
    KV heads, head dim, sliding window; `tp` tensor-parallel ranks divide the
    heads, see :func:`attention_shape`), or ``heads_q=, heads_kv=, head_dim=``
    (and ``mask=``, ``window=``). One of the two is required: the plan must fit
    the tensors. The other `kw` are :func:`fcp.plan`'s (``block_size``,
    ``coalesce``, ...); ``workers`` defaults to the cp size and must equal it.
    """
    group, mesh, cp_dim = _resolve_group(group, mesh, cp_dim, "fcp.torch.plan")
    world, rank = _group_size_rank(group)
    where = f"the mesh's {cp_dim!r} dimension has" if mesh is not None else "the process group has"
    error = None
    if isinstance(lengths, fcp.Plan):
        made, text = lengths, lengths.to_json()
        if kw or config is not None:
            raise TypeError("fcp.torch.plan: keywords are not allowed with an fcp.Plan")
    else:
        made = None
        try:
            kw = _shape_keywords(kw, config, tp)
        except ValueError as e:
            error = str(e)
        text = json.dumps([_canonical_lengths(lengths), sorted(kw.items())], default=str)
    _agree(group, error, "fcp.torch.plan")
    digest = hashlib.sha256(text.encode()).digest()
    mine = torch.tensor([int.from_bytes(digest[i:i + 8], "little", signed=True) for i in (0, 8)], dtype=torch.int64)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    differ = [r for r in range(world) if not torch.equal(gathered[r], gathered[0])]
    if differ:
        raise ValueError("fcp.torch.plan: ranks disagree on the lengths or keywords (rank 0 differs from ranks "
                         f"{differ}); every rank must pass the same batch")
    if made is None:
        workers = kw.pop("workers", world)
        if workers != world:
            raise ValueError(f"fcp.torch.plan: workers={workers} but {where} {world} ranks")
        made = fcp.plan(_canonical_lengths(lengths), workers=world, **kw)
    elif made.workers != world:
        raise ValueError(f"fcp.torch.plan: the plan is for {made.workers} workers but {where} {world} ranks")
    result = Plan(made, group, mesh, cp_dim)
    training._watch(result)  # the first optimizer step compares gradients over the cp ranks
    return result


def _shape_keywords(kw: dict, config, tp: int) -> dict:
    """kw with the attention shape filled in from `config` (checked against any given)."""
    kw = dict(kw)
    if config is not None:
        for key, value in training.attention_shape(config, tp=tp).items():
            if key in kw and kw[key] != value:
                raise ValueError(f"{key}={kw[key]} but the config (tp={tp}) gives {value}; drop one of them")
            kw[key] = value
    elif tp != 1:
        raise ValueError(f"tp={tp} needs config= (the heads it divides)")
    missing = [key for key in _SHAPE_KEYWORDS if key not in kw]
    if missing:
        raise ValueError("the attention shape is missing: pass config=model.config, or "
                         + ", ".join(f"{key}=" for key in missing) + " (the heads and head dim of one rank's q, k, v)")
    return kw


# ---- layouts -------------------------------------------------------------------


def _reshuffle(plan: Plan, x: torch.Tensor, to_plan: bool, count: bool) -> torch.Tensor:
    """One all_to_all_single with uneven splits between the two layouts.

    The lowering's tables describe dataloader -> plan (rows sent from this
    rank's shard, per-peer counts, and where received rows land); the way back
    is the same tables with send and receive swapped."""
    start = time.perf_counter()
    send_rows, recv_rows = ("_in_send_rows", "_in_recv_rows") if to_plan else ("_in_recv_rows", "_in_send_rows")
    send_counts, recv_counts = ((plan._in_send_counts, plan._in_recv_counts) if to_plan
                                else (plan._in_recv_counts, plan._in_send_counts))
    out_rows = plan.local_rows if to_plan else plan.rows("dataloader")
    send = x.index_select(0, plan._rows(send_rows, x.device))
    recv = x.new_empty((out_rows,) + tuple(x.shape[1:]))
    dist.all_to_all_single(recv, send, output_split_sizes=recv_counts,
                           input_split_sizes=send_counts, group=plan.group)
    out = x.new_empty(recv.shape)
    out.index_copy_(0, plan._rows(recv_rows, x.device), recv)
    end = time.perf_counter()
    if count:
        _stats["reshuffle_s"] += end - start
    _record("reshuffle", "reshuffle in" if to_plan else "reshuffle out", start, end)
    return out


def _to_plan_layout(plan: Plan, x: torch.Tensor, count: bool = False) -> torch.Tensor:
    """Dataloader rows -> plan rows."""
    return _reshuffle(plan, x, True, count)


def _to_dataloader_layout(plan: Plan, x: torch.Tensor, count: bool = False) -> torch.Tensor:
    """Plan rows -> dataloader rows."""
    return _reshuffle(plan, x, False, count)


def _check_rows(plan: Plan, x: torch.Tensor, rows: int, what: str) -> Optional[str]:
    if not isinstance(x, torch.Tensor):
        return f"{what} must be a torch.Tensor, got {type(x).__name__}"
    if x.dim() < 1 or x.shape[0] != rows:
        return f"{what} has shape {tuple(x.shape)}, expected {rows} rows first"
    return None


class _Dispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, plan, to_plan):
        ctx.plan, ctx.to_plan = plan, to_plan
        x = x.detach().contiguous()
        return _to_plan_layout(plan, x) if to_plan else _to_dataloader_layout(plan, x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        return (_to_dataloader_layout(ctx.plan, g) if ctx.to_plan else _to_plan_layout(ctx.plan, g)), None, None


def dispatch(x: torch.Tensor, plan: Plan) -> torch.Tensor:
    """This rank's dataloader rows [hi-lo, ...] -> its plan rows [plan.local_rows, ...]. Differentiable."""
    _agree(plan.group, _check_rows(plan, x, plan.rows("dataloader"), "dispatch: x"), "fcp.torch.dispatch", plan)
    return _Dispatch.apply(x, plan, True)


def undispatch(x: torch.Tensor, plan: Plan) -> torch.Tensor:
    """The inverse of :func:`dispatch`. Differentiable."""
    _agree(plan.group, _check_rows(plan, x, plan.rows("plan"), "undispatch: x"), "fcp.torch.undispatch", plan)
    return _Dispatch.apply(x, plan, False)


# ---- attention -----------------------------------------------------------------

# CPU: fcp's kernel, which reads float32 or bfloat16 in place and computes in
# float32. CUDA: flash attention, which takes only
# 16-bit inputs; float32 is refused rather than silently cast (see docs/torch.md).
_DTYPES = {"cpu": (torch.float32, torch.bfloat16), "cuda": (torch.bfloat16, torch.float16)}


def _hint(plan: Plan, name: str, x, want: tuple, layout: str, q) -> str:
    """Why a shape does not fit the plan, and the keyword that fixes it."""
    if x.dim() != 3:
        return f": {name} is [tokens, heads, head_dim]"
    if name != "q" and isinstance(q, torch.Tensor) and q.dim() == 3 and x.shape[0] > q.shape[0]:
        return (f": {name} has more rows than q, as when a model appends to a KV cache; train with "
                "use_cache=False (model.config.use_cache = False)")
    if x.shape[1] != want[1]:
        key = "heads_q" if name == "q" else "heads_kv"
        return (f": {x.shape[1]} heads per rank, the plan has {want[1]} (plan with {key}={x.shape[1]}, or "
                "config=model.config with tp= the tensor-parallel ranks that divide the heads)")
    if x.shape[2] != want[2]:
        return f": head dim {x.shape[2]}, the plan has {want[2]} (plan with head_dim={x.shape[2]})"
    other = "plan" if layout == "dataloader" else "dataloader"
    if x.shape[0] == plan.rows(other) and plan.rows(other) != plan.rows(layout):
        return f": those are the {other} layout's rows (pass layout={other!r})"
    return f": this rank's {layout} rows are {want[0]} (the batch's tokens must be the plan's lengths)"


def _check_qkv(plan: Plan, q, k, v, layout: str) -> Optional[str]:
    try:
        rows = plan.rows(layout)
    except ValueError as e:
        return str(e)
    want = {"q": (rows, plan.heads_q, plan.head_dim), "k": (rows, plan.heads_kv, plan.head_dim),
            "v": (rows, plan.heads_kv, plan.head_dim)}
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            return f"{name} must be a torch.Tensor, got {type(x).__name__}"
        if tuple(x.shape) != want[name]:
            return f"{name} has shape {tuple(x.shape)}, the plan needs {want[name]} ({layout} layout)" + _hint(
                plan, name, x, want[name], layout, q)
        if x.device != q.device:
            return f"{name} is on {x.device} but q is on {q.device}"
        if x.device.type not in _DTYPES:
            return f"{name} is on {x.device}; fcp.torch runs attention on CPU or CUDA tensors"
        allowed = _DTYPES[x.device.type]
        if x.dtype not in allowed:
            return (f"{name} has dtype {x.dtype}, expected {' or '.join(map(str, allowed))} on {x.device.type}"
                    + (" (flash attention takes 16-bit inputs: cast with .to(torch.bfloat16))"
                       if x.device.type == "cuda" else ""))
        if x.dtype != q.dtype:
            return f"{name} has dtype {x.dtype} but q has {q.dtype}"
        if _trace is not None and x.device.type != "cpu":
            return f"{name} is on {x.device}: fcp.torch.trace records CPU runs only (host times are not device times)"
        if not x.is_contiguous():
            return f"{name} is not contiguous (call .contiguous())"
    return None


# ---- the reshuffle as messages, outputs home block by block (CPU) ---------------
# The MPI executor's rule (docs/runtime.md, steps 1 and 3-5), on the program's
# pieces: one message per (block, dataloader rank), posted in the order the
# owner needs the blocks; each call runs once its own blocks are in; each
# output block goes home once final. Messages are posted as one
# batch_isend_irecv per need stage (inbound) or per final stage (home): on
# gloo a batch is one work per op, so a call waits for its own pieces only;
# on NCCL a batch is one group (see docs/torch.md "How it runs").


def _split_works(works: list, ops: list) -> list:
    """Each op's work: gloo gives one per op; NCCL one for the batch, which every op then waits on."""
    return works if len(works) == len(ops) else [works[0]] * len(ops)


class _Inbound:
    """An input reshuffle in flight on this rank: Q|K|V (packed) before the forward,
    or dO before the backward. A buffer per received piece; a thread per source
    rank waits on its pieces in posting order (the sender's order: gloo carries
    one rank pair's messages in order) and marks each arrival, since a gloo
    work reports completion only to wait(). A block is unpacked into the local
    rows (`targets`) when a call or a stage send first takes it.
    """

    def __init__(self, plan: Plan, name: str, shard: torch.Tensor, targets: list):
        start = time.perf_counter()
        self.plan, self.targets, self.label = plan, targets, "reshuffle in" if name == "reshuffle_in" else "reshuffle do"
        self.widths = [math.prod(t.shape[1:]) for t in targets]
        kind = _IN_QKV if name == "reshuffle_in" else _IN_DO
        recv, send = plan._pieces[name, "recv"], plan._pieces[name, "send"]
        self.recv = recv
        self.bufs = [shard.new_empty((len(x[5]), shard.shape[1])) for x in recv]
        self.works = [None] * len(recv)
        self.arrived = [None] * len(recv)  # perf_counter() of the observed arrival
        self.of_block = {}
        for i, x in enumerate(recv):
            self.of_block.setdefault(x[0], []).append(i)
        self.taken = set()
        self.outgoing, self.send_works = [], []
        self.cond, self.count, self.error = threading.Condition(), 0, None
        by_stage = {}
        for i, x in enumerate(recv):
            by_stage.setdefault(x[3], ([], []))[0].append(i)
        for x in send:
            by_stage.setdefault(x[3], ([], []))[1].append(x)

        def post_ops(stage, items):
            recv_at, sends = items
            ops = [dist.P2POp(dist.irecv, self.bufs[i], plan._peer[recv[i][1]], plan.group,
                              plan.reshuffle_tag(kind, recv[i][0])) for i in recv_at]
            for block, _, dst, _, rows, _ in sends:
                if kind == _IN_QKV and _before_reshuffle_send is not None:
                    _before_reshuffle_send(block, dst)
                data = shard.index_select(0, rows)
                self.outgoing.append(data)  # alive until sent
                ops.append(dist.P2POp(dist.isend, data, plan._peer[dst], plan.group, plan.reshuffle_tag(kind, block)))
            if not ops:
                return
            works = _split_works(dist.batch_isend_irecv(ops), ops)
            for j, i in enumerate(recv_at):
                self.works[i] = works[j]
            self.send_works += works[len(recv_at):]

        self.posted = time.perf_counter()
        for stage in sorted(by_stage):
            post_ops(stage, by_stage[stage])
        for block, _, _, _, rows, local in plan._pieces[name, "self"]:
            self._place(local, shard.index_select(0, rows))
        by_src = {}
        for i, x in enumerate(recv):
            by_src.setdefault(x[1], []).append(i)
        self.threads = [threading.Thread(target=self._watch, args=(idx,), daemon=True) for idx in by_src.values()]
        for t in self.threads:
            t.start()
        _stats["reshuffle_s"] += time.perf_counter() - start

    def _watch(self, indices):
        try:
            for i in indices:
                self.works[i].wait()  # releases the GIL
                with self.cond:
                    self.arrived[i] = time.perf_counter()
                    self.count += 1
                    self.cond.notify_all()
        except BaseException as e:  # re-raised on the calling thread
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def _place(self, local_rows, data):
        for x, part in zip(self.targets, data.split(self.widths, dim=1)):
            x.index_copy_(0, local_rows, part.reshape((-1,) + tuple(x.shape[1:])))

    def ready(self, blocks) -> bool:
        return all(self.arrived[i] is not None for b in blocks for i in self.of_block.get(b, ()))

    def wait_any(self, seen: int) -> None:
        """Blocks until some piece arrives after `seen` arrivals (counted as a reshuffle wait)."""
        start = time.perf_counter()
        with self.cond:
            _stats["reshuffle_waits"] += int(self.count == seen and self.error is None)
            while self.count == seen and self.error is None:
                self.cond.wait()
        if self.error is not None:
            raise self.error
        spent = time.perf_counter() - start
        _stats["reshuffle_s"] += spent
        _stats["reshuffle_wait_s"] += spent

    def take(self, blocks) -> None:
        """Unpacks `blocks` (those not taken yet), first waiting for their pieces if needed."""
        blocks = [b for b in dict.fromkeys(blocks) if b not in self.taken]
        if not blocks:
            return
        start = time.perf_counter()
        if not self.ready(blocks):
            _stats["reshuffle_waits"] += 1
            with self.cond:
                while not self.ready(blocks) and self.error is None:
                    self.cond.wait()
            if self.error is not None:
                raise self.error
            _stats["reshuffle_wait_s"] += time.perf_counter() - start
        for b in blocks:
            self.taken.add(b)
            for i in self.of_block.get(b, ()):
                block, src = self.recv[i][:2]
                self._place(self.recv[i][5], self.bufs[i])
                self.bufs[i] = None
                _record("reshuffle", f"{self.label} b{block} from {src}", self.posted, self.arrived[i])
        _stats["reshuffle_s"] += time.perf_counter() - start

    def finish(self) -> None:
        """Takes in every piece left and waits for this rank's sends."""
        self.take(list(self.of_block))
        start = time.perf_counter()
        for t in self.threads:
            t.join()
        for w in self.send_works:
            w.wait()
        self.outgoing = []
        spent = time.perf_counter() - start
        _stats["reshuffle_s"] += spent
        _stats["reshuffle_wait_s"] += spent


class _Home:
    """One output (o; dq; dk|dv packed) going home to the dataloader layout, block by
    block: after stage t (t = -1: before the first) the blocks whose rows are
    final at t go to the dataloader ranks holding their tokens (the reshuffle
    in's pieces reversed; Plan._home_table), and this rank receives its rows of
    the blocks final at t; one batch per stage. `rows_of(local_rows)` gives the
    rows to send, [n, width] in the output dtype. finish() waits and returns the
    output [dataloader rows, width]."""

    def __init__(self, plan: Plan, kind: int, final_name: str, width: int, dtype, rows_of):
        self.plan, self.kind, self.rows_of = plan, kind, rows_of
        self.table = plan._home_table(final_name)
        self.out = torch.empty((plan.rows("dataloader"), width), dtype=dtype)
        self.done, self.incoming, self.works, self.outgoing = set(), [], [], []

    def stage_done(self, stage: int) -> None:
        if stage not in self.table or stage in self.done:
            return
        self.done.add(stage)
        start = time.perf_counter()
        sends, recvs, own = self.table[stage]
        plan, tag = self.plan, self.plan.reshuffle_tag(self.kind, stage + 1)
        if own is not None:
            self.out.index_copy_(0, own[0], self.rows_of(own[1]))
        ops = []
        for peer, rows in recvs:
            buf = self.out.new_empty((len(rows), self.out.shape[1]))
            self.incoming.append((rows, buf))
            ops.append(dist.P2POp(dist.irecv, buf, plan._peer[peer], plan.group, tag))
        for peer, local in sends:
            data = self.rows_of(local)
            self.outgoing.append(data)
            ops.append(dist.P2POp(dist.isend, data, plan._peer[peer], plan.group, tag))
        if ops:
            self.works += dist.batch_isend_irecv(ops)
        _stats["reshuffle_s"] += time.perf_counter() - start

    def finish(self) -> torch.Tensor:
        start = time.perf_counter()
        for stage in sorted(self.table):  # none left in a valid program: every final stage is run
            self.stage_done(stage)
        for w in self.works:
            w.wait()
        waited = time.perf_counter()
        for rows, buf in self.incoming:
            self.out.index_copy_(0, rows, buf)
        self.incoming, self.outgoing = [], []
        end = time.perf_counter()
        _stats["reshuffle_s"] += end - start
        _stats["reshuffle_wait_s"] += waited - start
        return self.out


class _AllIn:
    """The plan layout's stand-in for _Inbound: every block is here."""

    def ready(self, blocks) -> bool:
        return True

    def take(self, blocks) -> None:
        pass

    def finish(self) -> None:
        pass


def _schedule(post, calls, needs, writes, run, inbound, send_blocks, label: str) -> None:
    """Runs a stage's calls by the executors' rule (docs/runtime.md, step 1): in the
    program's order, except that a call whose blocks are in (needs(call)) goes
    ahead of earlier calls still waiting, unless it writes rows one of them
    writes (writes(call): a set of keys), so every output row takes its calls
    in the program's order whatever the arrival order. run(calls) runs a list of
    calls in its order: every call one scan finds runnable (one at a time in a
    trace, which records each call). post() (the stage's transfers) is called
    once the blocks the stage sends from local rows are in."""
    pending, posted = list(calls), False
    while pending or not posted:
        seen = getattr(inbound, "count", 0)
        if not posted and inbound.ready(send_blocks):
            inbound.take(send_blocks)
            post()
            posted = True
        picks, blocked = [], set()
        for c in pending:
            w = writes(c)
            if not (w & blocked) and inbound.ready(needs(c)):
                picks.append(c)  # runs before every later call of the scan
                if _trace is not None:
                    break
            else:
                blocked |= w
        if not picks:
            if pending:
                inbound.wait_any(seen)
            else:  # only the post is left
                inbound.take(send_blocks)
            continue
        for c in picks:
            pending.remove(c)
            inbound.take(needs(c))
        t0 = time.perf_counter()
        run(picks)
        t1 = time.perf_counter()
        _stats["kernel_s"] += t1 - t0
        if len(picks) == 1:
            _record("compute", f"{label} q{picks[0][1]} kv{picks[0][2]}", t0, t1)


def _with_pool(x: torch.Tensor, rows: int) -> torch.Tensor:
    """CUDA: local rows and a zeroed pool in one buffer, so one gather index reads either."""
    return torch.cat([x, x.new_zeros((rows,) + tuple(x.shape[1:]))])


def _kv_ops(plan: Plan, pass_: str, t: int, k, v, k_pool, v_pool) -> list:
    """Stage t's K/V receives (into pool slots) and sends (local rows or, relays, the pool)."""
    ops = []
    for _, block, src, row, rows in plan.stage_ops(pass_, "kv_recv", t):
        ops.append(dist.P2POp(dist.irecv, k_pool[row:row + rows], plan._peer[src], plan.group, plan.tag(t, block, 0)))
        ops.append(dist.P2POp(dist.irecv, v_pool[row:row + rows], plan._peer[src], plan.group, plan.tag(t, block, 1)))
    for _, block, dst, from_pool, row, rows in plan.stage_ops(pass_, "kv_send", t):
        kb, vb = (k_pool, v_pool) if from_pool else (k, v)
        ops.append(dist.P2POp(dist.isend, kb[row:row + rows], plan._peer[dst], plan.group, plan.tag(t, block, 0)))
        ops.append(dist.P2POp(dist.isend, vb[row:row + rows], plan._peer[dst], plan.group, plan.tag(t, block, 1)))
    return ops


def _local_sends(plan: Plan, pass_: str, t: int) -> list:
    """The blocks stage t sends from local rows (they must be in before the stage posts)."""
    return [block for _, block, _, from_pool, _, _ in plan.stage_ops(pass_, "kv_send", t) if not from_pool]


def _forward_pass(plan: Plan, q, k, v, scale, inbound=None, home=None):
    """The lowered forward on plan-layout q, k, v (the caller's dtype); returns float32 (o, lse)
    and the _Home of o. CPU only: `inbound` (an _Inbound filling q, k, v; None: all
    rows are here) and `home` (home(o) -> the _Home of o, or None)."""
    prog = plan.program
    pool, local = prog.pool_rows("forward"), plan.local_rows
    lse = torch.full((local, plan.heads_q), -math.inf, dtype=torch.float32, device=q.device)
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    if q.is_cuda:
        k_all, v_all = _with_pool(k, pool), _with_pool(v, pool)
        k, v, k_pool, v_pool = k_all[:local], v_all[:local], k_all[local:], v_all[local:]
        device, comm = plan._device_program(q.device), plan._comm_stream(q.device)
        for t in range(plan.num_forward_stages):
            _run_stage(_kv_ops(plan, "forward", t, k, v, k_pool, v_pool),
                       lambda: device.forward_stage(t, scale, 0, q, k_all, v_all, o, lse), comm, plan, f"fwd s{t}")
        return o, lse, None
    k_pool = k.new_zeros((pool, plan.heads_kv, plan.head_dim))  # received K/V travel in the inputs' dtype
    v_pool = torch.zeros_like(k_pool)
    inbound = inbound or _AllIn()
    home = home(o) if home is not None else None
    if home is not None:
        home.stage_done(-1)

    def needs(c):  # the query block, and the key block when it is local
        return (c[1],) if c[5] else (c[1], c[2])

    def writes(c):  # o, lse of the query block
        return {c[1]}

    for t in range(plan.num_forward_stages):
        label = f"fwd s{t}"

        def run(calls, t=t):
            prog.forward_calls(t, [c[0] for c in calls], scale, q, k, v, k_pool, v_pool, o, lse)

        def schedule(post, t=t, run=run, label=label):
            _schedule(post, plan._calls["forward"][t], needs, writes, run, inbound, _local_sends(plan, "forward", t),
                      label)

        _run_stage(_kv_ops(plan, "forward", t, k, v, k_pool, v_pool), None, None, plan, label, schedule)
        if home is not None:
            home.stage_done(t)
    inbound.finish()  # the rows no call read (the backward reads them all)
    return o, lse, home


def _backward_pass(plan: Plan, q, k, v, o, lse, d_o, scale, inbound=None, homes=None):
    """The lowered backward on plan-layout tensors (q, k, v, d_o in the caller's dtype; o, lse float32);
    returns float32 (dq, dk, dv). The dK/dV partials are float32 too: they are sums that owners add up.

    CPU: `inbound` (an _Inbound filling d_o; None: all rows are here) and
    `homes` (homes(dq, dk, dv) -> the _Homes of dq and of dk|dv, or None)."""
    prog = plan.program
    pool, partial, local = prog.pool_rows("backward"), prog.partial_rows, plan.local_rows
    shape_kv = (plan.heads_kv, plan.head_dim)
    comm = None
    f32 = dict(dtype=torch.float32, device=q.device)
    dk_all = torch.zeros((local + partial,) + shape_kv, **f32)  # dK rows: local, then the partials
    dv_all = torch.zeros_like(dk_all)
    dk, dv, dk_partial, dv_partial = dk_all[:local], dv_all[:local], dk_all[local:], dv_all[local:]
    dq = torch.zeros(q.shape, **f32)
    homes = homes(dq, dk, dv) if homes is not None else (None, None)
    if q.is_cuda:
        k_all, v_all = _with_pool(k, pool), _with_pool(v, pool)
        k, v, k_pool, v_pool = k_all[:local], v_all[:local], k_all[local:], v_all[local:]
        o_in = o.to(q.dtype)  # flash's backward takes o in the inputs' dtype
        device, comm = plan._device_program(q.device), plan._comm_stream(q.device)

        def stage_work(t):
            return (lambda: device.backward_stage(t, scale, q, k_all, v_all, d_o, o_in, lse, dq, dk_all, dv_all)), None
    else:
        k_pool = k.new_zeros((pool,) + shape_kv)
        v_pool = torch.zeros_like(k_pool)
        delta = torch.empty((local, plan.heads_q), **f32)
        have_delta = set()
        inbound = inbound or _AllIn()

        def needs(c):  # the query block's dO
            return (c[1],)

        def writes(c):  # dq of the query block, dK/dV of the key block
            return {("q", c[1]), ("kv", c[2])}

        def stage_work(t):
            def run(calls):
                for c in calls:
                    if c[1] not in have_delta:  # delta = rowsum(o * dO) of a block, before its first call
                        r = slice(c[3], c[3] + c[4])
                        delta[r] = (o[r] * d_o[r]).sum(-1)
                        have_delta.add(c[1])
                prog.backward_calls(t, [c[0] for c in calls], scale, q, k, v, k_pool, v_pool, d_o, lse, delta, dq,
                                    dk, dv, dk_partial, dv_partial)

            def schedule(post):
                _schedule(post, plan._calls["backward"][t], needs, writes, run, inbound,
                          _local_sends(plan, "backward", t), f"bwd s{t}")
            return None, schedule
    dq_home, dkv_home = homes
    for h in homes:
        if h is not None:
            h.stage_done(-1)
    # Received dK/dV partials in posting order: (block, into_partial, row, rows, bk, bv, works, name, posted).
    pending = []
    dkv_final = plan._dkv_final_stage

    def absorb(take):
        """Waits for the pending partials `take` selects and adds each into its rows in
        posting order (stage, then the plan's list order), never arrival order."""
        keep = []
        for p in pending:
            if not take(p):
                keep.append(p)
                continue
            _, into_partial, row, rows, bk, bv, works, name, posted = p
            t0 = time.perf_counter()
            for w in works:
                w.wait()
            t1 = time.perf_counter()
            _stats["wait_s"] += t1 - t0
            # Observed completion: when it was needed (an upper bound on its arrival).
            _record("recv", name, posted, t1)
            tk, tv = (dk_partial, dv_partial) if into_partial else (dk, dv)
            tk[row:row + rows] += bk
            tv[row:row + rows] += bv
        pending[:] = keep

    for t in range(plan.num_backward_stages):
        ops, partial_ops, incoming = _kv_ops(plan, "backward", t, k, v, k_pool, v_pool), [], []
        # Partials arrive into buffers of their own, posted as a batch of their
        # own that no stage end waits for (absorb() adds them where needed).
        for _, block, src, into_partial, row, rows in plan.stage_ops("backward", "dkv_recv", t):
            bk, bv = dk_partial.new_empty((rows,) + shape_kv), dk_partial.new_empty((rows,) + shape_kv)
            incoming.append((block, into_partial, row, rows, bk, bv, src))
            partial_ops.append(dist.P2POp(dist.irecv, bk, plan._peer[src], plan.group, plan.tag(t, block, 2)))
            partial_ops.append(dist.P2POp(dist.irecv, bv, plan._peer[src], plan.group, plan.tag(t, block, 3)))
        posted = time.perf_counter()
        works = _post(partial_ops, comm)
        for i, (block, into_partial, row, rows, bk, bv, src) in enumerate(incoming):
            # gloo: one work per op; NCCL coalesces the batch into one work, which every
            # partial of the batch waits on (on CUDA a wait is a stream dependency).
            mine = works[2 * i:2 * i + 2] if len(works) == len(partial_ops) else works
            pending.append((block, into_partial, row, rows, bk, bv, mine,
                            f"bwd s{t} recv dkv{block} from {src}", posted))
        sent = plan.stage_ops("backward", "dkv_send", t)
        for _, block, dst, row, rows in sent:
            # A relay forwards what it received for the block with its own share.
            absorb(lambda p: p[1] and p[0] == block and p[2] == row)
            ops.append(dist.P2POp(dist.isend, dk_partial[row:row + rows], plan._peer[dst], plan.group,
                                  plan.tag(t, block, 2)))
            ops.append(dist.P2POp(dist.isend, dv_partial[row:row + rows], plan._peer[dst], plan.group,
                                  plan.tag(t, block, 3)))
        compute, schedule = stage_work(t)
        _run_stage(ops, compute, comm, plan, f"bwd s{t}", schedule)
        # Sent partials are zeroed (a slot may be reused by a later partial).
        for _, _, _, row, rows in sent:
            dk_partial[row:row + rows].zero_()
            dv_partial[row:row + rows].zero_()
        if dq_home is not None:
            dq_home.stage_done(t)
        # An owner's dk, dv are final once the partials due by this stage are in.
        absorb(lambda p: not p[1] and dkv_final[p[0]] == t)
        if dkv_home is not None:
            dkv_home.stage_done(t)
    absorb(lambda p: True)  # none is left in a valid plan
    if inbound is not None:
        inbound.finish()
    return dq, dk, dv, homes


def _flat_rows(dtype, *xs):
    """A _Home's rows_of: the given local rows of xs (float32) side by side, [n, width], in `dtype`."""
    if len(xs) == 1:
        return lambda rows: xs[0].index_select(0, rows).reshape(len(rows), -1).to(dtype)
    return lambda rows: torch.cat([x.index_select(0, rows).reshape(len(rows), -1) for x in xs], dim=1).to(dtype)


def _attention_forward(plan: Plan, q, k, v, layout: str, scale: float):
    """The forward of one attention call: (out in q's layout and dtype, and what the backward
    needs in the plan layout: lse, o in float32, q|k|v). In the plan layout the backward
    reads q, k, v themselves (empty stand-ins here) and, for float32, out as o."""
    start = time.perf_counter()
    dtype = q.dtype
    # The kernels read the inputs' dtype in place (checked contiguous): no copies here.
    q_in, k_in, v_in = (x.detach() for x in (q, k, v))
    hq, hkv = plan.heads_q * plan.head_dim, plan.heads_kv * plan.head_dim
    if layout == "dataloader" and not q.is_cuda:
        # One message per (block, dataloader rank), each call running once its blocks are in;
        # each block's o heads home once final.
        rows = q_in.shape[0]
        packed = torch.cat([x.reshape(rows, -1) for x in (q_in, k_in, v_in)], dim=1)
        qkv = [q_in.new_zeros((plan.local_rows,) + tuple(x.shape[1:])) for x in (q_in, k_in, v_in)]
        inbound = _Inbound(plan, "reshuffle_in", packed, qkv)
        home = lambda o: _Home(plan, _HOME_O, "forward_final_stage", hq, dtype, _flat_rows(dtype, o))
        q_in, k_in, v_in = qkv
        o, lse, home = _forward_pass(plan, q_in, k_in, v_in, scale, inbound, home)
        out = home.finish().reshape(rows, plan.heads_q, plan.head_dim)
    elif layout == "dataloader":
        # CUDA: one all_to_all of q|k|v rows, and of o back (the device orders them).
        rows = q_in.shape[0]
        packed = torch.cat([x.reshape(rows, -1) for x in (q_in, k_in, v_in)], dim=1)
        recv = _to_plan_layout(plan, packed, count=True)
        q_in, k_in, v_in = (x.reshape((plan.local_rows,) + tuple(y.shape[1:])).contiguous()
                            for x, y in zip(recv.split([hq, hkv, hkv], dim=1), (q_in, k_in, v_in)))
        o, lse, _ = _forward_pass(plan, q_in, k_in, v_in, scale)
        out = _to_dataloader_layout(plan, o.to(dtype), count=True)  # cast first: 16-bit o travels
    else:
        o, lse, _ = _forward_pass(plan, q_in, k_in, v_in, scale)
        out = o.to(dtype)
        # The plan layout's backward reads the inputs; a float32 out is o itself.
        q_in, k_in, v_in = (x.new_empty((0,) + tuple(x.shape[1:])) for x in (q_in, k_in, v_in))
        if dtype == torch.float32:
            o = o.new_empty((0,) + tuple(o.shape[1:]))
    _stats["calls"] += 1
    _stats["total_s"] += time.perf_counter() - start
    return out, lse, o, q_in, k_in, v_in


def _attention_backward(plan: Plan, g, q, k, v, o, lse, layout: str, scale: float):
    """The backward of one call from what _attention_forward saved (q, k, v, o float32, lse
    in the plan layout); g and the returned dq, dk, dv in the call's layout and dtype."""
    start = time.perf_counter()
    dtype = q.dtype
    d_o = g.detach().to(dtype).contiguous()
    hq, hkv = plan.heads_q * plan.head_dim, plan.heads_kv * plan.head_dim
    if layout == "dataloader" and not q.is_cuda:
        d_o_local = d_o.new_zeros((plan.local_rows,) + tuple(d_o.shape[1:]))
        inbound = _Inbound(plan, "do_in", d_o.reshape(d_o.shape[0], -1), [d_o_local])
        homes = lambda dq, dk, dv: (
            _Home(plan, _HOME_DQ, "backward_dq_final_stage", hq, dtype, _flat_rows(dtype, dq)),
            _Home(plan, _HOME_DKV, "backward_dkv_final_stage", 2 * hkv, dtype, _flat_rows(dtype, dk, dv)))
        *_, (dq_home, dkv_home) = _backward_pass(plan, q, k, v, o, lse, d_o_local, scale, inbound, homes)
        dkv = dkv_home.finish()
        dq, dk, dv = dq_home.finish(), dkv[:, :hkv], dkv[:, hkv:]
    else:
        if layout == "dataloader":
            d_o = _to_plan_layout(plan, d_o, count=True)
        dq, dk, dv, _ = _backward_pass(plan, q, k, v, o, lse, d_o, scale)
        dq, dk, dv = (x.to(dtype) for x in (dq, dk, dv))
        if layout == "dataloader":
            packed = torch.cat([dq.reshape(-1, hq), dk.reshape(-1, hkv), dv.reshape(-1, hkv)], dim=1)
            back = _to_dataloader_layout(plan, packed, count=True)
            dq, dk, dv = back[:, :hq], back[:, hq:hq + hkv], back[:, hq + hkv:]
    dq = dq.reshape(-1, plan.heads_q, plan.head_dim).contiguous()
    dk = dk.reshape(-1, plan.heads_kv, plan.head_dim).contiguous()
    dv = dv.reshape(-1, plan.heads_kv, plan.head_dim).contiguous()
    _stats["total_s"] += time.perf_counter() - start
    return dq, dk, dv


# ---- the attention as custom operators (torch.library) ------------------------
# torch.compile sees fcp::attention and fcp::attention_backward as opaque
# operators with shape functions: Dynamo never traces the executor (its
# collectives, threads and C++ calls), so a compiled model has no graph break
# in fcp. The plan travels as a handle, a 0-d int64 tensor: a new batch's plan
# is a new input value, not a new graph. Saved state is outputs of the
# forward: the plan layout's rows (data-dependent in the dataloader layout,
# unbacked sizes in the fake), and nothing lives in thread-local state, so a
# recompute under activation checkpointing, on autograd's device thread or in
# backward after every `with` block has closed, runs the same plan.

@torch.library.custom_op(
    "fcp::attention", mutates_args=(),
    schema="(Tensor q, Tensor k, Tensor v, Tensor plan, str layout, float scale, int model_window) "
           "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
def _attention_op(q, k, v, handle, layout, scale, model_window):
    # Every device: the executor picks its CPU or CUDA path from the tensors.
    plan = _plan_of(handle, "fcp.torch.attention")
    _agree(plan.group, _check_qkv(plan, q, k, v, layout) or _check_window(plan, model_window),
           "fcp.torch.attention", plan)
    return _attention_forward(plan, q, k, v, layout, scale)


@_attention_op.register_fake
def _attention_op_fake(q, k, v, handle, layout, scale, model_window):
    if layout not in ("dataloader", "plan"):
        raise ValueError(f"fcp.torch.attention: layout must be 'dataloader' or 'plan', got {layout!r}")
    if layout == "plan":
        rows, o_rows, qkv_rows = q.shape[0], 0 if q.dtype == torch.float32 else q.shape[0], 0
    else:  # the plan layout's rows on this rank: known once the plan runs
        rows = o_rows = qkv_rows = torch.library.get_ctx().new_dynamic_size()
    f32 = dict(dtype=torch.float32, device=q.device)
    return (torch.empty_like(q), q.new_empty((rows, q.shape[1]), **f32),
            q.new_empty((o_rows,) + tuple(q.shape[1:]), **f32),
            *(x.new_empty((qkv_rows,) + tuple(x.shape[1:])) for x in (q, k, v)))


@torch.library.custom_op(
    "fcp::attention_backward", mutates_args=(),
    schema="(Tensor grad, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor plan, str layout, "
           "float scale) -> (Tensor, Tensor, Tensor)")
def _attention_backward_op(grad, q, k, v, o, lse, handle, layout, scale):
    plan = _plan_of(handle, "fcp.torch.attention (backward)")
    return _attention_backward(plan, grad, q, k, v, o, lse, layout, scale)


@_attention_backward_op.register_fake
def _attention_backward_op_fake(grad, q, k, v, o, lse, handle, layout, scale):
    if layout == "plan":
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # Gradients come back in the dataloader layout: grad's rows.
    rows = grad.shape[0]
    return tuple(x.new_empty((rows,) + tuple(x.shape[1:])) for x in (q, k, v))


def _attention_setup_context(ctx, inputs, output):
    q, k, v, handle, layout, scale, _ = inputs
    out, lse, o, q_plan, k_plan, v_plan = output
    ctx.layout, ctx.scale = layout, scale
    if layout == "plan":
        # float32: out is o (o is an empty stand-in); 16-bit: o in float32 was returned.
        ctx.save_for_backward(q, k, v, out if q.dtype == torch.float32 else o, lse, handle)
    else:
        ctx.save_for_backward(q_plan, k_plan, v_plan, o, lse, handle)


def _attention_op_backward(ctx, grad, *unused):
    q, k, v, o, lse, handle = ctx.saved_tensors
    dq, dk, dv = _attention_backward_op(grad, q, k, v, o, lse, handle, ctx.layout, ctx.scale)
    return dq, dk, dv, None, None, None, None


_attention_op.register_autograd(_attention_op_backward, setup_context=_attention_setup_context)


def _check_window(plan: Plan, model_window: int) -> Optional[str]:
    """model_window: -1 not stated (fcp.torch.attention), 0 the model has no sliding
    window, W > 0 the model's window (Hugging Face's sliding_window)."""
    if model_window < 0:
        return None
    mask, window = plan.plan.mask, plan.plan.window
    if model_window > 0 and (mask != "sliding_window" or window != model_window):
        return (f"the model uses sliding_window={model_window} but the plan's mask is {mask}"
                + (f" with window {window}" if window else "")
                + f" (plan with mask='sliding_window', window={model_window}, or config=model.config)")
    if model_window == 0 and mask == "sliding_window":
        return f"the plan has a sliding window of {window} but the model has none (plan with config=model.config)"
    return None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, layout: str = "dataloader",
              scale: Optional[float] = None) -> torch.Tensor:
    """Context-parallel attention of the packed batch of `plan`; differentiable in q, k, v.

    q [rows, heads_q, head_dim], k, v [rows, heads_kv, head_dim], rows = the
    rank's dataloader shard (layout="dataloader") or plan.local_rows
    (layout="plan"); contiguous; on CPU float32 or bfloat16 (read in place
    and computed in float32 by fcp's kernel), on CUDA bfloat16 or float16 (flash attention,
    float32 merge; see docs/torch.md "CUDA").
    Returns o like q, in the same layout. Softmax scale 1/sqrt(head_dim) unless
    given. Bad input raises the same ValueError on every rank. The call is the
    custom operator fcp::attention: torch.compile keeps it whole (no graph break),
    and the plan may change from batch to batch without a recompile.
    """
    return _attention_call(q, k, v, plan, layout, scale, -1)


def _attention_call(q, k, v, plan, layout, scale, model_window: int):
    if not isinstance(plan, Plan):
        raise TypeError(f"fcp.torch.attention: plan must be an fcp.torch.Plan, got {type(plan).__name__}")
    s = float(scale) if scale is not None else 1.0 / math.sqrt(plan.head_dim)
    return _attention_op(q, k, v, plan._handle, layout, s, model_window)[0]


def __getattr__(name):
    # fcp.torch.hf needs transformers: imported on first use only.
    if name == "hf":
        import importlib
        return importlib.import_module(".hf", __name__)
    raise AttributeError(f"module 'fcp.torch' has no attribute {name!r}")


# The training helpers need the names above (imported last: training imports this module).
from . import training  # noqa: E402
from .training import attention_shape, check_gradients, reduce_gradients, scale_loss, shard  # noqa: E402
