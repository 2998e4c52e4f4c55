"""The CUDA kernel path of fcp.torch: a stage's kernel calls as fused varlen
flash-attention launches, and the log-sum-exp merge of their partial outputs.

Kernel: ``torch.ops.aten._flash_attention_forward`` / ``_backward`` (the
FlashAttention-2 varlen kernels inside PyTorch, the ones
``torch.nn.attention.varlen.varlen_attn`` calls). Chosen over ``varlen_attn``
because its autograd backward recomputes from its *own* lse, while a
context-parallel backward needs the *merged* (final) o and lse of each query
row; and over the cuDNN op because that one only takes the windows (-1, -1)
and (-1, 0). The flash op gives: lse (float32, [heads_q, total_q] in varlen
mode), GQA (heads_q a multiple of heads_kv, dK/dV summed over the group),
windows (left, right) and a backward from a given (o, lse). Limits:
float16/bfloat16 only, head_dim <= 256 (a multiple of 8 is fastest), sm80 or
newer; the aten wrapper turns left or right >= max_k into -1 (unbounded),
which the pieces below never depend on.

Flash's mask, per (query piece of sq rows, key piece of sk rows), is
bottom-right aligned: query i may see key j iff
``i + sk - sq - left <= j <= i + sk - sq + right`` (-1: unbounded). Ours
(fcp/mask.h) is on token positions: causal ``k <= q``, sliding window
``q - W < k <= q``, full everything. :func:`kernel_pieces` turns a segment
pair (q_pos, q_len, k_pos, k_len) into pieces on which flash's rule is
exactly ours: keys that no query sees and queries that see no key are cut
off (so flash never meets an empty row, whose lse it reports as +inf), and
the query range is split where the key range ends, so that every piece is
either aligned (key range ends at the query range's end: right = 0) or has
all its keys before all its queries (right = -1). Causal pieces are then
(-1, 0) or (-1, -1); sliding-window pieces (W - 1, 0) or (W - 1 - d, -1) with
d = the piece's query end minus its key end. One launch per distinct window
of a stage's pieces (:func:`launches`): causal and full stages take at most
two, sliding-window stages one more per distinct d.

Everything here except :func:`flash_forward` / :func:`flash_backward` is
device-independent and tested on CPU (python/tests/test_torch_varlen.py).
"""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

UNBOUNDED = -1


class Piece(NamedTuple):
    """Query rows [q_row, q_row + q_len) against key rows [k_row, k_row + k_len), flash window (left, right)."""
    q_row: int
    q_len: int
    k_row: int
    k_len: int
    left: int
    right: int


def kernel_pieces(mask: str, window: int, q_row: int, k_row: int, q_pos: int, k_pos: int, q_len: int,
                  k_len: int) -> List[Piece]:
    """The flash pieces of one segment pair (rows absolute in the call's buffers); exact for our mask."""
    if q_len <= 0 or k_len <= 0:
        return []
    if mask == "full":
        return [Piece(q_row, q_len, k_row, k_len, UNBOUNDED, UNBOUNDED)]
    if mask not in ("causal", "sliding_window"):
        raise ValueError(f"fcp.torch: no CUDA kernel pieces for mask {mask!r}")
    q_end = q_pos + q_len
    k_lo, k_hi = k_pos, min(k_pos + k_len, q_end)          # keys after the last query: never seen
    q_lo, q_hi = max(q_pos, k_lo), q_end                   # queries before the first key: see none
    if mask == "sliding_window":
        if window <= 0:
            raise ValueError(f"fcp.torch: sliding window must be positive, got {window}")
        k_lo = max(k_lo, q_pos - window + 1)               # keys out of every query's window
        q_lo = max(q_pos, k_lo)
        q_hi = min(q_end, k_hi + window - 1)               # queries past every key's window
    if q_lo >= q_hi or k_lo >= k_hi:
        return []
    pieces = []
    kr, kl = k_row + (k_lo - k_pos), k_hi - k_lo
    left = UNBOUNDED if mask == "causal" else window - 1
    aligned_hi = min(q_hi, k_hi)
    if q_lo < aligned_hi:  # queries up to the key range's end: diagonal at the bottom right
        pieces.append(Piece(q_row + (q_lo - q_pos), aligned_hi - q_lo, kr, kl, left, 0))
    rest_lo = max(q_lo, k_hi)
    if rest_lo < q_hi:     # queries after every key: only the window's left edge binds
        d = q_hi - k_hi
        rest_left = UNBOUNDED if mask == "causal" else window - 1 - d
        pieces.append(Piece(q_row + (rest_lo - q_pos), q_hi - rest_lo, kr, kl, rest_left, UNBOUNDED))
    return pieces


def flash_allowed(sq: int, sk: int, left: int, right: int) -> torch.Tensor:
    """Flash's bottom-right-aligned window mask [sq, sk] (True: query i sees key j)."""
    i = torch.arange(sq).unsqueeze(1)
    j = torch.arange(sk).unsqueeze(0)
    diag = i + sk - sq
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    return ok


class Launch(NamedTuple):
    """One varlen launch: gather rows, cu_seqlens, and the merge's unique target rows (all int64 / int32)."""
    left: int
    right: int
    q_index: torch.Tensor     # [total_q] rows of q / o / lse, piece after piece
    k_index: torch.Tensor     # [total_k] rows of the K/V buffer (local rows, then the pool)
    dkv_index: torch.Tensor   # [total_k] rows of the dK/dV buffer (local rows, then the partials); backward
    cu_q: torch.Tensor        # int32 [pieces + 1]
    cu_k: torch.Tensor
    max_q: int
    max_k: int
    q_unique: torch.Tensor    # sorted distinct q_index
    q_inverse: torch.Tensor   # q_index = q_unique[q_inverse]
    # (start, stop) where the index above is exactly range(start, stop), else
    # None: such rows are read as a slice (a view, no gather kernel) and
    # accumulated into in place (no index_add, no cast), see rows / add_rows.
    q_span: Optional[Tuple[int, int]] = None
    k_span: Optional[Tuple[int, int]] = None
    dkv_span: Optional[Tuple[int, int]] = None

    def to(self, device) -> "Launch":
        return self._replace(**{f: getattr(self, f).to(device) for f in self._fields
                                if isinstance(getattr(self, f), torch.Tensor)})


def launches(pieces: List[Tuple[Piece, int]]) -> List[Launch]:
    """Groups (piece, dkv_row) by window into launches, in order of first appearance; pure."""
    groups: Dict[Tuple[int, int], List[Tuple[Piece, int]]] = {}
    for item in pieces:
        groups.setdefault((item[0].left, item[0].right), []).append(item)
    out = []
    for (left, right), items in groups.items():
        qi = torch.cat([torch.arange(p.q_row, p.q_row + p.q_len) for p, _ in items])
        ki = torch.cat([torch.arange(p.k_row, p.k_row + p.k_len) for p, _ in items])
        di = torch.cat([torch.arange(d, d + p.k_len) for p, d in items])
        cu_q = torch.tensor([0] + [p.q_len for p, _ in items], dtype=torch.int64).cumsum(0).to(torch.int32)
        cu_k = torch.tensor([0] + [p.k_len for p, _ in items], dtype=torch.int64).cumsum(0).to(torch.int32)
        unique, inverse = torch.unique(qi, sorted=True, return_inverse=True)
        out.append(Launch(left, right, qi, ki, di, cu_q, cu_k, max(p.q_len for p, _ in items),
                          max(p.k_len for p, _ in items), unique, inverse, _span(qi), _span(ki), _span(di)))
    return out


def _span(index: torch.Tensor) -> Optional[Tuple[int, int]]:
    """(start, stop) if index == arange(start, stop), else None."""
    if index.numel() == 0:
        return None
    start = int(index[0])
    if not torch.equal(index, torch.arange(start, start + index.numel(), dtype=index.dtype)):
        return None
    return start, start + index.numel()


def rows(x: torch.Tensor, index: torch.Tensor, span: Optional[Tuple[int, int]]) -> torch.Tensor:
    """x's rows `index` (a view where they are the slice `span`)."""
    return x[span[0]:span[1]] if span is not None else x.index_select(0, index)


def add_rows(acc: torch.Tensor, index: torch.Tensor, span: Optional[Tuple[int, int]], x: torch.Tensor) -> None:
    """acc[index] += x (float32 acc; rows of index may repeat), in place."""
    if span is not None:
        acc[span[0]:span[1]].add_(x)
    else:
        acc.index_add_(0, index, x.to(acc.dtype))


def stage_launches(program, pass_: str, stage: int, early: int, mask: str, window: int) -> List[Launch]:
    """The launches of one stage of a lowered program (fcp._fcp.Program), rows in the device buffers.

    K/V rows: local rows [0, local_rows), then pool rows (local_rows + pool row);
    dK/dV rows: local rows, then partial rows (local_rows + partial row).
    early: 0 all calls, 1 only the early ones, 2 all but the early ones (forward stage 0).
    """
    local = program.local_rows
    rows, offsets = program.table(pass_, "compute")
    segments = program.segments()
    items = []
    for c in rows[offsets[stage]:offsets[stage + 1]].tolist():
        (_, _, _, q_row, _, kv_in_pool, kv_row, _, dkv_in_partial, dkv_row, seg_lo, seg_hi, is_early) = c
        if (early == 1 and not is_early) or (early == 2 and is_early):
            continue
        k_base = kv_row + (local if kv_in_pool else 0)
        d_base = dkv_row + (local if dkv_in_partial else 0)
        for s_q_row, s_k_row, q_pos, k_pos, q_len, k_len in segments[seg_lo:seg_hi].tolist():
            for p in kernel_pieces(mask, window, q_row + s_q_row, k_base + s_k_row, q_pos, k_pos, q_len, k_len):
                items.append((p, d_base + (p.k_row - k_base)))  # dK/dV rows parallel the K/V rows
    return launches(merge_adjacent(items))


def merge_adjacent(items: List[Tuple[Piece, int]]) -> List[Tuple[Piece, int]]:
    """Joins each piece into the one before it where flash computes the pair as one piece; pure.

    Flash's rule for a piece of sq query rows and sk keys: row i sees key j iff
    i + sk - sq - left <= j <= i + sk - sq + right. Two pieces are one when the
    joined piece's rule, written in its own rows and keys, is each part's rule
    (the joined window is always the second part's, so no new window value
    appears; a left bound of at least the piece's keys never binds, so the
    aten wrapper's -1 for left >= max_k changes nothing):

    * keys after: the same query rows, the second's key rows (and dK/dV rows)
      following on; the first sees every key up to its end (right -1), and
      either neither has a left bound or the second's is the first's plus
      the second's keys. The second sees a key of its own from every row
      (kernel_pieces cuts empty rows), so no first-part key lies right of a
      row's joined diagonal. So a query block's keys, one pair per key block,
      become one launch row and the query rows are gathered (and
      accumulated) once.
    * rows after (then, on the result): the second's query rows following
      on, the same first key (and dK/dV) row, the same right; the second's
      keys extend the first's by exactly its own rows when right is bounded
      (by none when not), and the left bounds agree the same way (the
      second's is the first's plus that extension minus its rows). So a
      sequence computed whole on one worker is one piece again, as in one
      flash call over it.
    """
    def same_left(last: Piece, piece: Piece, shift: int) -> bool:
        if last.left == UNBOUNDED or piece.left == UNBOUNDED:
            return last.left == piece.left
        return piece.left == last.left + shift

    def keys_after(last: Piece, piece: Piece, last_dkv: int, dkv: int) -> bool:
        return (last.right == UNBOUNDED and (last.q_row, last.q_len) == (piece.q_row, piece.q_len)
                and last.k_row + last.k_len == piece.k_row and last_dkv + last.k_len == dkv
                and same_left(last, piece, piece.k_len))

    def rows_after(last: Piece, piece: Piece, last_dkv: int, dkv: int) -> bool:
        if not (last.right == piece.right and last.q_row + last.q_len == piece.q_row
                and last.k_row == piece.k_row and last_dkv == dkv):
            return False
        grow = piece.k_len - last.k_len
        return grow == (0 if piece.right == UNBOUNDED else piece.q_len) and same_left(last, piece, grow - piece.q_len)

    def join(items, joinable, joined):
        out: List[Tuple[Piece, int]] = []
        for piece, dkv in items:
            if out and joinable(out[-1][0], piece, out[-1][1], dkv):
                out[-1] = (joined(out[-1][0], piece), out[-1][1])
            else:
                out.append((piece, dkv))
        return out

    by_keys = join(items, keys_after, lambda a, b: Piece(a.q_row, a.q_len, a.k_row, a.k_len + b.k_len, b.left,
                                                         b.right))
    return join(by_keys, rows_after, lambda a, b: Piece(a.q_row, a.q_len + b.q_len, a.k_row, b.k_len, b.left,
                                                        b.right))


def merge_partials(o: torch.Tensor, lse: torch.Tensor, launch: Launch, o_part: torch.Tensor,
                   lse_part: torch.Tensor) -> None:
    """Merges partial (o_part [total_q, h, d], lse_part [total_q, h]) into rows q_index of (o, lse), in place.

    The log-sum-exp rule of fcp/attention_kernel.h over every partial of a row
    at once (a row may take several pieces in one launch): with m the max of
    the row's lse's, lse'' = m + log(sum exp(lse_i - m)), o'' = sum o_i
    exp(lse_i - lse''). Only exponentials of non-positive numbers; a row with
    no keys yet (lse = -inf everywhere) stays (0, -inf). o, lse float32.
    """
    if launch.q_span is not None:
        # Every row once, in order: the rule on two terms, in place on the slice.
        a, b = launch.q_span
        o_s, lse_s = o[a:b], lse[a:b]
        m = torch.maximum(lse_s, lse_part)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        w_old, w_part = torch.exp(lse_s - m), torch.exp(lse_part - m)
        total = w_old + w_part
        safe = torch.where(total > 0, total, torch.ones_like(total))
        o_s.mul_((w_old / safe).unsqueeze(-1)).add_(o_part * (w_part / safe).unsqueeze(-1))
        lse_s.copy_(m + torch.log(total))
        return
    u, inv = launch.q_unique, launch.q_inverse
    lse_u, o_u = lse.index_select(0, u), o.index_select(0, u)
    m = lse_u.scatter_reduce(0, inv.unsqueeze(1).expand_as(lse_part), lse_part, "amax", include_self=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w_old = torch.exp(lse_u - m)
    w_part = torch.exp(lse_part - m.index_select(0, inv))
    total = w_old.index_add(0, inv, w_part)
    acc = (o_u * w_old.unsqueeze(-1)).index_add(0, inv, (o_part * w_part.unsqueeze(-1)).to(o.dtype))
    safe = torch.where(total > 0, total, torch.ones_like(total))
    o.index_copy_(0, u, acc / safe.unsqueeze(-1))
    lse.index_copy_(0, u, m + torch.log(total))


# ---- the kernels ---------------------------------------------------------------


def flash_forward(q, k, v, launch: Launch, scale: float):
    """(o [total_q, hq, d] in q's dtype, lse [total_q, hq] float32) of one launch; CUDA, fp16/bf16."""
    out, lse, _, _, _ = torch.ops.aten._flash_attention_forward(
        q, k, v, launch.cu_q, launch.cu_k, launch.max_q, launch.max_k, 0.0, launch.right == 0 and launch.left < 0,
        False, scale=scale, window_size_left=launch.left, window_size_right=launch.right)
    return out, _lse_rows(lse, q.shape[0])


def flash_backward(d_o, q, k, v, o, lse, launch: Launch, scale: float):
    """(dq, dk, dv) of one launch from the merged o and lse ([total_q, hq] float32) of its query rows."""
    rng = torch.zeros(2, dtype=torch.uint64, device=q.device)  # no dropout: the state is unused
    unused = torch.empty(0, device=q.device)
    return torch.ops.aten._flash_attention_backward(
        d_o, q, k, v, o, lse.t().contiguous(), launch.cu_q, launch.cu_k, launch.max_q, launch.max_k, 0.0,
        launch.right == 0 and launch.left < 0, rng, unused, scale=scale, window_size_left=launch.left,
        window_size_right=launch.right)


def _lse_rows(lse: torch.Tensor, total_q: int) -> torch.Tensor:
    # Varlen flash returns lse as [heads_q, total_q]; older builds padded the row axis.
    if lse.dim() != 2:
        raise RuntimeError(f"fcp.torch: flash attention returned lse of shape {tuple(lse.shape)}, expected 2-D")
    return lse[:, :total_q].t().float()


def reference_forward(q, k, v, launch: Launch, scale: float):
    """What flash_forward computes, densely in float64 on any device (tests and CPU emulation)."""
    outs, lses = [], []
    group = q.shape[1] // k.shape[1]
    cq, ck = launch.cu_q.tolist(), launch.cu_k.tolist()
    for a, b, c, e in zip(cq, cq[1:], ck, ck[1:]):
        qs = q[a:b].double()
        ks = k[c:e].double().repeat_interleave(group, dim=1)
        vs = v[c:e].double().repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        allowed = flash_allowed(b - a, e - c, launch.left, launch.right).to(q.device)
        s = s.masked_fill(~allowed, -math.inf)
        lse = torch.logsumexp(s, dim=-1)
        outs.append(torch.einsum("hqk,khd->qhd", torch.exp(s - lse.unsqueeze(-1)), vs))
        lses.append(lse.t())
    return torch.cat(outs).to(q.dtype), torch.cat(lses).float()


def reference_backward(d_o, q, k, v, o, lse, launch: Launch, scale: float):
    """What flash_backward computes, densely in float64 (tests and CPU emulation)."""
    dqs, dks, dvs = [], [], []
    hq, hkv = q.shape[1], k.shape[1]
    group = hq // hkv
    cq, ck = launch.cu_q.tolist(), launch.cu_k.tolist()
    for a, b, c, e in zip(cq, cq[1:], ck, ck[1:]):
        qs, dos, os_ = q[a:b].double(), d_o[a:b].double(), o[a:b].double()
        ks = k[c:e].double().repeat_interleave(group, dim=1)
        vs = v[c:e].double().repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        allowed = flash_allowed(b - a, e - c, launch.left, launch.right).to(q.device)
        p = torch.exp(s - lse[a:b].double().t().unsqueeze(-1)).masked_fill(~allowed, 0.0)
        delta = (dos * os_).sum(-1).t().unsqueeze(-1)             # [h, q, 1]
        dp = torch.einsum("qhd,khd->hqk", dos, vs)
        ds = p * (dp - delta) * scale
        dqs.append(torch.einsum("hqk,khd->qhd", ds, ks))
        dk = torch.einsum("hqk,qhd->khd", ds, qs)
        dv = torch.einsum("hqk,qhd->khd", p, dos)
        dks.append(dk.reshape(e - c, hkv, group, -1).sum(2))
        dvs.append(dv.reshape(e - c, hkv, group, -1).sum(2))
    return torch.cat(dqs).to(q.dtype), torch.cat(dks).to(q.dtype), torch.cat(dvs).to(q.dtype)


class DeviceProgram:
    """A lowered program's stages run as varlen launches on one device (CUDA: flash; tests: the reference).

    Launch tables are built on first use per (pass, stage, early) and kept on
    the device. Buffers: q, o, d_o [local_rows, hq, d]; k_all, v_all [local +
    pool rows, hkv, d] (local rows first); lse [local_rows, hq] float32; the
    forward's o and every gradient buffer float32 accumulators.
    """

    def __init__(self, program, mask: str, window: int, device, forward=flash_forward, backward=flash_backward):
        self.program, self.mask, self.window, self.device = program, mask, window, device
        self._forward, self._backward = forward, backward
        self._cache: Dict[Tuple[str, int, int], List[Launch]] = {}

    def launches(self, pass_: str, stage: int, early: int = 0) -> List[Launch]:
        key = (pass_, stage, early)
        if key not in self._cache:
            made = stage_launches(self.program, pass_, stage, early, self.mask, self.window)
            self._cache[key] = [x.to(self.device) for x in made]
        return self._cache[key]

    def forward_stage(self, stage, scale, early, q, k_all, v_all, o, lse) -> None:
        for L in self.launches("forward", stage, early):
            out, part_lse = self._forward(rows(q, L.q_index, L.q_span), rows(k_all, L.k_index, L.k_span),
                                          rows(v_all, L.k_index, L.k_span), L, scale)
            merge_partials(o, lse, L, out, part_lse)

    def backward_stage(self, stage, scale, q, k_all, v_all, d_o, o, lse, dq, dk_all, dv_all) -> None:
        """o: the merged forward output in q's dtype; accumulates into dq, dk_all, dv_all (float32)."""
        for L in self.launches("backward", stage):
            qi, qs, ki, ks = L.q_index, L.q_span, L.k_index, L.k_span
            dq_, dk_, dv_ = self._backward(rows(d_o, qi, qs), rows(q, qi, qs), rows(k_all, ki, ks),
                                           rows(v_all, ki, ks), rows(o, qi, qs), rows(lse, qi, qs), L, scale)
            add_rows(dq, qi, qs, dq_)
            add_rows(dk_all, L.dkv_index, L.dkv_span, dk_)
            add_rows(dv_all, L.dkv_index, L.dkv_span, dv_)
