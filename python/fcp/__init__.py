"""fcp: flexible context parallelism for long-context attention, from Python.

A native module over the fcp C++ library (not a re-implementation): plans are
made by the same code as the ``fcp plan`` command and are byte-identical to it.

Typical use, once per batch in the dataloader::

    import fcp
    plan = fcp.plan(lengths, workers=8)          # lengths: one int per sequence
    order = plan.token_permutation(rank)          # global token ids this rank holds
    tokens_for_rank = batch_tokens[order]         # in the order the plan stores them

Arrays returned by a :class:`Plan` are read-only numpy views into memory the
plan owns (no copy); they stay valid after the Plan object is gone.

Errors raise ``ValueError`` (or a subclass: :class:`InvalidPlanError`,
:class:`InfeasibleError`, :class:`ParseError`) with the same message the
command line prints; ``TypeError`` for arguments of the wrong type.
"""

from __future__ import annotations

import difflib as _difflib
import importlib.metadata as _metadata
import inspect as _inspect
import json
import operator
import os
from typing import Dict, Iterable, Optional, Tuple, Union

import numpy as np

from . import _fcp
from ._fcp import InfeasibleError, InvalidPlanError, ParseError

__all__ = [
    "Plan",
    "plan",
    "planners",
    "simulate",
    "workload",
    "InvalidPlanError",
    "InfeasibleError",
    "ParseError",
]

try:
    __version__ = _metadata.version("fcp")  # one source: pyproject.toml
except _metadata.PackageNotFoundError:  # imported from a build tree, not installed
    __version__ = "unknown"

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


def _int(name: str, value) -> int:
    """``value`` as a Python int: TypeError for non-integers, ValueError beyond int64."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        result = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if not _INT64_MIN <= result <= _INT64_MAX:
        raise ValueError(f"{name} = {result} does not fit a 64-bit integer")
    return result


def _float(name: str, value) -> float:
    """``value`` as a float: TypeError for strings, bools and other non-numbers."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                      np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    return float(value)


def _bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def _token_cap(value) -> int:
    """token_cap as given: 0 is the library's "unset", which None spells here."""
    cap = _int("token_cap", value)
    if cap == 0:  # negative ones reach the library, which names the least cap
        raise ValueError("plan: token_cap must be >= 1 (None: ceil(T/N)), got 0")
    return cap


def _path(name: str, value) -> str:
    """A file name as a string: C++ would cut it at a NUL byte, as open() refuses to."""
    value = _str(name, os.fspath(value) if isinstance(value, os.PathLike) else value)
    if "\0" in value:
        raise ValueError(f"{name}: embedded null byte in {value!r}")
    return value


def _str(name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    return value


def _lengths(lengths) -> np.ndarray:
    """Sequence lengths as a contiguous int64 vector (a copy only when needed)."""
    if not hasattr(lengths, "__len__") and hasattr(lengths, "__iter__"):
        lengths = list(lengths)  # a generator or other one-pass iterable
    array = np.asarray(lengths)
    if array.ndim != 1:
        raise ValueError(f"plan: lengths must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)  # the planner reports the empty batch
    if array.dtype.kind not in "iu":
        raise ValueError(f"plan: lengths must be integers, got dtype {array.dtype}")
    if array.dtype.kind == "u" and int(array.max()) > _INT64_MAX:
        raise ValueError(f"plan: length {int(array.max())} does not fit a 64-bit integer")
    return np.ascontiguousarray(array, dtype=np.int64)


class Plan:
    """How one batch is computed by context-parallel attention on N workers.

    The Python face of ``fcp::Plan`` (see PLAN_FORMAT.md for the meaning of
    every field). Make one with :func:`fcp.plan` or :meth:`Plan.from_json`.
    Immutable; picklable (as its JSON text), so it can cross process
    boundaries such as DataLoader workers.
    """

    __slots__ = ("_h", "__weakref__")

    def __init__(self, handle: "_fcp.PlanHandle"):
        if not isinstance(handle, _fcp.PlanHandle):
            raise TypeError("Plan objects come from fcp.plan() or fcp.Plan.from_json()")
        self._h = handle

    # ---- serialisation -------------------------------------------------------

    def to_json(self) -> str:
        """The plan file text, byte-identical to what ``fcp plan --out`` writes."""
        return self._h.to_json()

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """Parses plan file text. Raises :class:`ParseError` for malformed text.

        The rules of the format are checked on first use of anything that
        depends on them (metrics, permutations, summary) or by :meth:`validate`.
        """
        return cls(_fcp.from_json(_str("text", text)))

    def validate(self, forbid_redundant_transfers: bool = False) -> None:
        """Checks every rule of the plan format; raises :class:`InvalidPlanError`
        naming the first broken one. ``forbid_redundant_transfers`` also rejects
        K/V sent to a worker that does not use it or sent twice."""
        self._h.validate(_bool("forbid_redundant_transfers", forbid_redundant_transfers))

    def __reduce__(self):
        return (Plan.from_json, (self.to_json(),))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return self._h.equals(other._h)

    __hash__ = None  # equal plans compare equal; hashing would walk the whole plan

    def __repr__(self) -> str:
        return (f"<fcp.Plan planner={self.planner!r} workers={self.workers} "
                f"sequences={self.num_sequences} tokens={self.total_tokens} "
                f"blocks={self.num_blocks} stages={self.num_forward_stages}+{self.num_backward_stages}>")

    # ---- header ---------------------------------------------------------------

    @property
    def planner(self) -> str:
        """Name of the planner that made the plan."""
        return self._h.planner

    @property
    def workers(self) -> int:
        """Number of workers N."""
        return self._h.workers

    @property
    def mask(self) -> str:
        """'causal', 'full' or 'sliding_window'."""
        return self._h.mask

    @property
    def window(self) -> Optional[int]:
        """Window of a sliding_window mask, else None."""
        return self._h.window if self._h.mask == "sliding_window" else None

    @property
    def attention(self) -> Dict[str, int]:
        """Attention shape: heads_q, heads_kv, head_dim, dtype_bytes."""
        h = self._h
        return {"heads_q": h.heads_q, "heads_kv": h.heads_kv, "head_dim": h.head_dim,
                "dtype_bytes": h.dtype_bytes}

    @property
    def block_size(self) -> int:
        return self._h.block_size

    @property
    def coalesce(self) -> int:
        """Congestion bound c: sends (and receives) per worker per stage."""
        return self._h.coalesce

    @property
    def token_cap(self) -> int:
        """Most tokens any one worker may own."""
        return self._h.token_cap

    @property
    def total_tokens(self) -> int:
        return self._h.total_tokens

    @property
    def num_sequences(self) -> int:
        return len(self.sequences)

    @property
    def num_blocks(self) -> int:
        return self._h.num_blocks

    @property
    def num_forward_stages(self) -> int:
        return self._h.num_forward_stages

    @property
    def num_backward_stages(self) -> int:
        return self._h.num_backward_stages

    @property
    def planning_seconds(self) -> Optional[float]:
        """Wall time the planner took (fcp.plan only; None for parsed plans)."""
        s = self._h.planning_seconds
        return s if s >= 0 else None

    # ---- arrays (read-only numpy views owned by the plan) ---------------------

    @property
    def sequences(self) -> np.ndarray:
        """int64 [sequences]: lengths in dataloader (global token) order."""
        return self._h.sequences()

    @property
    def block_owner(self) -> np.ndarray:
        """int32 [blocks]: the worker that owns each block."""
        return self._h.block_owner()

    @property
    def block_tokens(self) -> np.ndarray:
        """int64 [blocks]: tokens in each block."""
        return self._h.block_tokens()

    @property
    def segments(self) -> np.ndarray:
        """int64 [segments, 4]: rows (block, seq, start, length), blocks in id
        order and each block's segments in its storage order."""
        return self._h.segments()

    @property
    def block_segment_offsets(self) -> np.ndarray:
        """int64 [blocks + 1]: block b's rows of :attr:`segments` are
        ``[offsets[b], offsets[b + 1])``."""
        return self._h.block_segment_offsets()

    def _stage(self, stage, count: int) -> int:
        stage = _int("stage", stage)
        return stage + count if stage < 0 else stage

    def _transfers(self, name: str, stage, forward: bool, rows: bool) -> np.ndarray:
        count = self.num_forward_stages if forward else self.num_backward_stages
        return self._h.stage_transfers(name, self._stage(stage, count), bool(rows))

    def forward_send(self, stage: int, rows: bool = False) -> np.ndarray:
        """int32 [sends, 3]: rows (kv_block, src, dst) of forward stage ``stage``.
        ``rows=True``: int64 [sends, 5], (kv_block, src, dst, row_begin, rows),
        the block's rows each send carries (all of them unless the plan cuts
        the send to the rows its receiver attends, docs/plan-format.md)."""
        return self._transfers("forward_send", stage, True, rows)

    def forward_compute(self, stage: int) -> np.ndarray:
        """int32 [pairs, 3]: rows (q_block, kv_block, worker) computed in forward
        stage ``stage``; ``worker`` computes the pair (the query block's owner,
        unless the plan uses the remote-compute extension)."""
        return self._h.forward_compute(self._stage(stage, self.num_forward_stages))

    def forward_send_q(self, stage: int, rows: bool = False) -> np.ndarray:
        """Remote-compute extension: query blocks sent to the worker that computes
        with them in forward stage ``stage``, as :meth:`forward_send`."""
        return self._transfers("forward_send_q", stage, True, rows)

    def forward_send_o(self, stage: int, rows: bool = False) -> np.ndarray:
        """Remote-compute extension: partial outputs returned to their query
        block's owner in forward stage ``stage``, as :meth:`forward_send`."""
        return self._transfers("forward_send_o", stage, True, rows)

    def backward_send_kv(self, stage: int, rows: bool = False) -> np.ndarray:
        """int32 [sends, 3]: K/V sends (kv_block, src, dst) of backward stage
        ``stage``; ``rows`` as in :meth:`forward_send`."""
        return self._transfers("backward_send_kv", stage, False, rows)

    def backward_send_dkv(self, stage: int, rows: bool = False) -> np.ndarray:
        """int32 [sends, 3]: partial dK/dV returns (kv_block, src, dst) of backward
        stage ``stage``; ``rows`` as in :meth:`forward_send`."""
        return self._transfers("backward_send_dkv", stage, False, rows)

    def backward_compute(self, stage: int) -> np.ndarray:
        """int32 [pairs, 3]: rows (q_block, kv_block, worker) computed in backward
        stage ``stage``, as :meth:`forward_compute`."""
        return self._h.backward_compute(self._stage(stage, self.num_backward_stages))

    def backward_send_q(self, stage: int, rows: bool = False) -> np.ndarray:
        """Remote-compute extension: Q, O, dO and LSE of query blocks sent to the
        worker that computes with them in backward stage ``stage``."""
        return self._transfers("backward_send_q", stage, False, rows)

    def backward_send_dq(self, stage: int, rows: bool = False) -> np.ndarray:
        """Remote-compute extension: partial dQ returned to the query block's
        owner in backward stage ``stage``."""
        return self._transfers("backward_send_dq", stage, False, rows)

    # ---- metrics ---------------------------------------------------------------

    def metrics(self) -> Dict[str, Union[int, float]]:
        """Plan-wide counts (as ``fcp inspect``): tokens, FLOPs, transfers,
        stage counts and lower bounds, imbalances, NIC / NVLink bytes (nodes of
        8 GPUs, the built-in profiles), reshuffle volume and its floor."""
        return self._h.metrics()

    def worker_metrics(self) -> Dict[str, np.ndarray]:
        """Per-worker arrays [workers]: tokens, forward_flops, kv_blocks_sent,
        kv_blocks_received, bytes_sent, bytes_received, nic_bytes_sent,
        nic_bytes_received, reshuffle_tokens_in, reshuffle_tokens_out."""
        return self._h.worker_metrics()

    def summary(self) -> str:
        """Multi-line report, the same text ``fcp inspect`` prints."""
        return self._h.summary()

    def simulate(self, profile: str = "gpu-x", reshuffle: str = "overlap",
                 transfers: str = "pull", dkv_bytes: int = 0,
                 trace: Optional[str] = None, network: str = "auto",
                 network_quantum: Optional[float] = None,
                 partials: str = "auto") -> Dict[str, object]:
        """:func:`fcp.simulate` of this plan."""
        return simulate(self, profile=profile, reshuffle=reshuffle, transfers=transfers,
                        dkv_bytes=dkv_bytes, trace=trace, network=network,
                        network_quantum=network_quantum, partials=partials)

    # ---- token placement ---------------------------------------------------------

    @property
    def token_offsets(self) -> np.ndarray:
        """int64 [workers + 1]: worker w's slice of :meth:`token_permutation`
        ``()`` is ``[offsets[w], offsets[w + 1])``."""
        return self._h.token_offsets()

    @property
    def dataloader_offsets(self) -> np.ndarray:
        """int64 [workers + 1]: the dataloader layout; worker r holds global
        tokens ``[floor(r*T/N), floor((r+1)*T/N))``."""
        self._h.ensure_valid()  # a parsed plan's workers and lengths are checked first
        n, t = self.workers, self.total_tokens
        return np.arange(n + 1, dtype=np.int64) * t // n  # r*T < 2^60: no overflow

    def token_permutation(self, worker: Optional[int] = None) -> np.ndarray:
        """Global token indices in plan order (int64).

        With ``worker``: the tokens that worker owns, its blocks in increasing
        block id, each block's segments in order, so ``tokens[perm]`` is the
        worker's input in the layout the plan computes on; a new array, built
        in O(its tokens + blocks). Without: all workers' orders concatenated
        (a permutation of ``range(T)``), a view built once per plan.
        """
        if worker is None:
            return self._h.token_order()
        return self._h.worker_token_order(self._worker(worker))

    def inverse_token_permutation(self, worker: Optional[int] = None) -> np.ndarray:
        """Position in :meth:`token_permutation` ``()`` of each global token (int64).

        ``token_permutation()[inverse] == arange(T)``, a view built once per
        plan. With ``worker``: only the tokens of that worker's dataloader share
        (:attr:`dataloader_offsets`), i.e. where each token the dataloader gave
        it must go; a new array, built in O(its tokens).
        """
        if worker is None:
            return self._h.inverse_token_order()
        return self._h.planned_positions(*self._share(worker))

    def token_placement(self, worker: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
        """For each global token (or each token of dataloader worker ``worker``):
        the worker that owns it under the plan (int32) and its index in that
        worker's :meth:`token_permutation` (int64). What an all-to-all that
        moves tokens from the dataloader layout into the plan needs. New
        arrays, built in O(their size)."""
        if worker is None:
            return self._h.placement(0, self.total_tokens)
        return self._h.placement(*self._share(worker))

    def _share(self, worker) -> Tuple[int, int]:
        """Dataloader worker ``worker``'s global tokens [begin, end)."""
        worker = self._worker(worker)
        n, t = self.workers, self.total_tokens
        return worker * t // n, (worker + 1) * t // n

    def _worker(self, worker) -> int:
        worker = _int("worker", worker)
        if not 0 <= worker < self.workers:
            raise ValueError(f"plan: worker {worker} is not in [0, {self.workers})")
        return worker


# The planner's settings, one row each, from the library's table
# (include/fcp/planner_options.h): keyword -> (field, type, default, help).
# fcp.plan takes every one as a keyword; the CLI's flags come from the same rows.
_OPTIONS = {keyword: (field, kind, default, text)
            for keyword, field, kind, default, text, _recorded in _fcp.planner_options()}
_CONVERT = {"int": _int, "float": _float, "bool": _bool}
# Keywords fcp.plan spells out itself, for their Python meaning.
_EXPLICIT = ("workers", "token_cap")


def _planner_options(options: dict) -> dict:
    """The table's keywords converted to their types; None keeps the default.
    An unknown keyword is a TypeError naming it and the closest known ones."""
    converted = {}
    for name, value in options.items():
        if name not in _OPTIONS or name in _EXPLICIT:
            # Every keyword fcp.plan takes: its signature (with the table's rows).
            known = sorted(k for k, p in _inspect.signature(plan).parameters.items()
                           if k != "lengths" and p.kind != p.VAR_KEYWORD)
            close = _difflib.get_close_matches(name, known, n=3)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            raise TypeError(f"plan: unknown keyword {name!r} ({hint}keywords: {', '.join(known)})")
        if value is not None:
            converted[name] = _CONVERT[_OPTIONS[name][1]](name, value)
    return converted


def plan(lengths: Iterable[int], workers: int, *, mask: str = "causal",
         window: Optional[int] = None, token_cap: Optional[int] = None, planner: str = "fcp",
         check: bool = False, tune: Optional[str] = None, profile: Optional[str] = None,
         **options) -> Plan:
    """Plans one batch: the same as ``fcp plan`` with the same arguments.

    lengths: one positive int per sequence, in dataloader order (list or numpy array).
    workers: N. mask: 'causal', 'full' or 'sliding_window' (needs ``window``).
    token_cap: most tokens per worker (None: ceil(T/N)).
    planner: see :func:`planners`. check: validate the result (debug self-check).
    tune: a hardware profile (built-in name such as 'gpu-x', or a JSON file):
    FCP's plans at a few heavy-split fractions and imbalance bounds, with node
    relays, with whole-block sends and with spread stages, are each simulated on it and the
    fastest is returned, as ``fcp plan --tune
    --profile P`` (a planning and a simulation per candidate; planner must be
    'fcp').
    profile: the hardware profile (built-in name or JSON file) FCP ranks its
    candidates for by the step estimate, as ``fcp plan --profile P``
    (default: tune's profile, else gpu-x's numbers).
    options: the planner's settings below, each the ``fcp plan`` flag of the
    same name (``block_size`` is ``--block-size``); None keeps the default
    (docs/planner.md, "Knobs"). The GIL is released while the planner runs.
    """
    mask = _str("mask", mask)
    if mask == "sliding_window" and window is None:
        raise ValueError("plan: mask='sliding_window' needs window=W")
    options = _planner_options(options)
    options["workers"] = _int("workers", workers)
    if token_cap is not None:
        options["token_cap"] = _token_cap(token_cap)
    # Lists and tuples are read in C++ directly; anything else via numpy.
    if type(lengths) not in (list, tuple):
        lengths = _lengths(lengths)
    if tune is not None and _str("planner", planner) != "fcp":
        raise ValueError(f"plan: tune= tunes the fcp planner, not '{planner}'")
    return Plan(_fcp.plan(lengths, mask, 0 if window is None else _int("window", window),
                          _str("planner", planner), _bool("check", check), options,
                          "" if tune is None else _str("tune", tune),
                          "" if profile is None else _str("profile", profile)))


def _document_plan_options():
    """Appends the table's keywords to fcp.plan's docstring and signature, so
    that help(fcp.plan) lists every one with its default (passing None also
    means the default)."""
    rows = [f"    {keyword} ({kind}, default {default!r}): {text}"
            for keyword, (_field, kind, default, text) in _OPTIONS.items()
            if keyword not in _EXPLICIT]
    if plan.__doc__ is not None:  # None under python -OO
        plan.__doc__ += "\n    Planner settings:\n\n" + "\n".join(rows) + "\n"
    signature = _inspect.signature(plan)
    parameters = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    parameters += [_inspect.Parameter(keyword, _inspect.Parameter.KEYWORD_ONLY, default=default)
                   for keyword, (_field, _kind, default, _text) in _OPTIONS.items()
                   if keyword not in _EXPLICIT]
    plan.__signature__ = signature.replace(parameters=parameters)


_document_plan_options()


def simulate(plan: Plan, profile: str = "gpu-x", reshuffle: str = "overlap",
             transfers: str = "pull", dkv_bytes: int = 0,
             trace: Optional[str] = None, network: str = "auto",
             network_quantum: Optional[float] = None,
             partials: str = "auto") -> Dict[str, object]:
    """Runs ``plan`` on the event-driven model cluster, as ``fcp simulate``.

    profile: 'gpu-x' (H100-like), 'gpu-y' (B200-like) or a JSON profile file.
    reshuffle: 'overlap', 'blocking' or 'none' (the dataloader already gives
    the plan's layout). transfers: 'pull' (receivers pull K/V when their
    buffer is free, dK/dV partials pushed on their own stream: the paper's
    runtime) or 'grouped' (one send/receive call per worker and stage).
    dkv_bytes: bytes per element of partial dK/dV
    transfers (0 = the plan's dtype). trace: also write a Chrome trace there.
    network: 'auto' (the default: 'exact' up to 256 workers, 'quantized'
    above), 'exact' (the reference), 'fast' (flows bundled per port pair:
    the same max-min rates up to rounding, 1.2-1.5x less CPU on large plans)
    or 'quantized' (rates recomputed at most once per quantum of simulated
    time: an approximation for large N, its error in docs/simulator.md).
    network_quantum: the quantized engine's quantum as a fraction of the
    pass's mean stage transfer time at NIC bandwidth (``--network-quantum``;
    None: 0.02 up to 256 workers, 0.2 above, as docs/simulator.md measured).
    partials: when a dK/dV partial leaves its sender (``--partials``): 'auto'
    (the plan's planner's runtime: per block for FCP's planners, per stage
    for the baselines and fcp-nopipe), 'block' (once its block's pairs of
    the stage are done) or 'stage' (after the stage's compute).

    Returns the fields of ``fcp simulate --json --per-worker`` (times in
    seconds, FLOPs, MFU, imbalances, exposed communication); ``worker_stats``
    is a dict of float64 arrays [workers] (busy_s, exposed_comm_s, idle_s,
    forward_flops, ..., reshuffle_bytes_received). The GIL is released while
    the simulation runs.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"simulate: plan must be an fcp.Plan, got {type(plan).__name__}")
    result = json.loads(_fcp.simulate(
        plan._h, _path("profile", profile), _str("reshuffle", reshuffle),
        _str("transfers", transfers), _str("network", network),
        None if network_quantum is None else _float("network_quantum", network_quantum),
        _int("dkv_bytes", dkv_bytes),
        None if trace is None else _path("trace", trace), _str("partials", partials)))
    rows = result["worker_stats"]
    names = list(rows[0]) if rows else []
    result["worker_stats"] = {name: np.array([row[name] for row in rows], dtype=np.float64)
                              for name in names}
    return result


def planners() -> Dict[str, str]:
    """Available planners: name -> one-line description."""
    return dict(_fcp.planners())


def workload(dist: str = "lognormal", workers: int = 16, tokens_per_worker: int = 32768,
             max_len: int = 524288, seed: int = 0, min_len: int = 1, mu: float = 5.43,
             sigma: float = 1.7, pareto_alpha: float = 1.2, pareto_scale: int = 128) -> np.ndarray:
    """A batch of sequence lengths, as ``fcp workload`` makes it (int64 array).

    dist: 'lognormal', 'uniform', 'fixed', 'bimodal' or 'pareto'. The lengths
    sum to exactly ``workers * tokens_per_worker``, each in [min_len, max_len]
    (the last may be shorter). mu, sigma: lognormal parameters of ln(length);
    pareto_alpha, pareto_scale: P(length > x) = (pareto_scale / x)^pareto_alpha.
    Deterministic in ``seed`` on every platform.
    """
    seed = _int("seed", seed)
    if seed < 0:
        raise ValueError(f"workload: seed must be >= 0, got {seed}")
    return _fcp.workload(_str("dist", dist), _int("workers", workers),
                         _int("tokens_per_worker", tokens_per_worker), _int("max_len", max_len),
                         _int("min_len", min_len), _float("mu", mu), _float("sigma", sigma),
                         _float("pareto_alpha", pareto_alpha), _int("pareto_scale", pareto_scale), seed)
