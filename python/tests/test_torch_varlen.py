"""The device-independent parts of fcp.torch's CUDA path (fcp/torch/_varlen.py),
on CPU: the flash pieces of a segment pair (exact values, and against our
mask on random segments), the log-sum-exp merge, and a whole lowered program
run through the launch tables with the dense stand-in of the flash kernel
(float64 kernel, float32 accumulators as on CUDA), against the dense
per-sequence reference.
"""

import math
import random

import pytest

torch = pytest.importorskip("torch")

import fcp  # noqa: E402
from fcp import _fcp  # noqa: E402
from fcp.torch import _varlen as V  # noqa: E402

import torch_cases  # noqa: E402

P = V.Piece


@pytest.mark.parametrize("mask, window, seg, expected", [
    # keys [0, 64) entirely before queries [100, 164): causal sees all of them
    ("causal", 0, (100, 0, 64, 64), [P(0, 64, 0, 64, -1, -1)]),
    # the diagonal block: aligned causal
    ("causal", 0, (0, 0, 64, 64), [P(0, 64, 0, 64, -1, 0)]),
    # queries [10, 74), keys [20, 84): queries before 20 see nothing, keys after 73 are never seen
    ("causal", 0, (10, 20, 64, 64), [P(10, 54, 0, 54, -1, 0)]),
    # queries [0, 64), keys [0, 32): 32 aligned rows, then 32 rows that see every key
    ("causal", 0, (0, 0, 64, 32), [P(0, 32, 0, 32, -1, 0), P(32, 32, 0, 32, -1, -1)]),
    # keys after every query: nothing
    ("causal", 0, (0, 64, 64, 64), []),
    # window 50, queries [100, 164), keys [0, 64): keys [51, 64) for queries [100, 113)
    ("sliding_window", 50, (100, 0, 64, 64), [P(0, 13, 51, 13, 0, -1)]),
    ("sliding_window", 50, (0, 0, 64, 64), [P(0, 64, 0, 64, 49, 0)]),
    # window 50, queries [0, 64), keys [0, 32): aligned 32 rows, then rows 32..63 with d = 32
    ("sliding_window", 50, (0, 0, 64, 32), [P(0, 32, 0, 32, 49, 0), P(32, 32, 0, 32, 17, -1)]),
    ("full", 0, (100, 0, 5, 7), [P(0, 5, 0, 7, -1, -1)]),
])
def test_kernel_pieces_exact(mask, window, seg, expected):
    q_pos, k_pos, q_len, k_len = seg
    assert V.kernel_pieces(mask, window, 0, 0, q_pos, k_pos, q_len, k_len) == expected


def our_mask(mask, window, q_pos, k_pos, q_len, k_len):
    q = torch.arange(q_pos, q_pos + q_len).unsqueeze(1)
    k = torch.arange(k_pos, k_pos + k_len).unsqueeze(0)
    if mask == "full":
        return torch.ones(q_len, k_len, dtype=torch.bool)
    ok = k <= q
    return ok & (q - window < k) if mask == "sliding_window" else ok


@pytest.mark.parametrize("mask", ["causal", "sliding_window", "full"])
def test_kernel_pieces_cover_our_mask_exactly(mask):
    rng = random.Random(18)
    for _ in range(400):
        q_len, k_len = rng.randint(1, 40), rng.randint(1, 40)
        q_pos, k_pos, window = rng.randint(0, 90), rng.randint(0, 90), rng.randint(1, 60)
        q_row, k_row = rng.randint(0, 5), rng.randint(0, 5)
        got = torch.zeros(q_len, k_len, dtype=torch.int32)
        for p in V.kernel_pieces(mask, window, q_row, k_row, q_pos, k_pos, q_len, k_len):
            allowed = V.flash_allowed(p.q_len, p.k_len, p.left, p.right)
            assert allowed.any(dim=1).all(), f"{p}: a query row sees no key (flash reports lse +inf)"
            got[p.q_row - q_row:p.q_row - q_row + p.q_len, p.k_row - k_row:p.k_row - k_row + p.k_len] += allowed
        want = our_mask(mask, window, q_pos, k_pos, q_len, k_len)
        assert got.max() <= 1, "pieces overlap"
        assert torch.equal(got.bool(), want), (mask, window, q_pos, k_pos, q_len, k_len)


def test_launches_group_by_window_and_tabulate():
    items = [(P(0, 3, 10, 2, -1, 0), 100), (P(5, 2, 20, 4, -1, -1), 200), (P(1, 2, 30, 1, -1, 0), 300)]
    got = V.launches(items)
    assert [(x.left, x.right) for x in got] == [(-1, 0), (-1, -1)]
    a, b = got
    assert a.q_index.tolist() == [0, 1, 2, 1, 2]
    assert a.k_index.tolist() == [10, 11, 30]
    assert a.dkv_index.tolist() == [100, 101, 300]
    assert a.cu_q.tolist() == [0, 3, 5] and a.cu_k.tolist() == [0, 2, 3]
    assert (a.max_q, a.max_k) == (3, 2) and a.cu_q.dtype == torch.int32
    assert a.q_unique.tolist() == [0, 1, 2] and a.q_inverse.tolist() == [0, 1, 2, 1, 2]
    assert b.q_index.tolist() == [5, 6] and b.k_index.tolist() == [20, 21, 22, 23]
    # Spans: only an index that is exactly a range of rows is read and added as a slice.
    assert (a.q_span, a.k_span, a.dkv_span) == (None, None, None)
    assert (b.q_span, b.k_span) == ((5, 7), (20, 24))


def test_merge_adjacent_joins_exact_cases():
    # A query block's keys before it (all visible) then its own (aligned): one aligned piece.
    assert V.merge_adjacent([(P(10, 2, 0, 4, -1, -1), 100), (P(10, 2, 4, 2, -1, 0), 104)]) == \
        [(P(10, 2, 0, 6, -1, 0), 100)]
    # The next query block of the sequence, keys extended by its own rows: one piece over both.
    assert V.merge_adjacent([(P(0, 2, 0, 2, -1, 0), 0), (P(2, 3, 0, 5, -1, 0), 0)]) == [(P(0, 5, 0, 5, -1, 0), 0)]
    assert V.merge_adjacent([(P(0, 2, 0, 5, -1, -1), 7), (P(2, 3, 0, 5, -1, -1), 7)]) == [(P(0, 5, 0, 5, -1, -1), 7)]
    # Sliding window: the left bound moves with the joined keys (window 6: 5 = 2 + 3 keys)...
    assert V.merge_adjacent([(P(10, 2, 0, 4, 2, -1), 0), (P(10, 2, 4, 3, 5, 0), 4)]) == [(P(10, 2, 0, 7, 5, 0), 0)]
    # ...and with the rows: the same keys seen by the next rows (right -1), one row nearer the window's edge.
    assert V.merge_adjacent([(P(0, 2, 0, 3, 4, -1), 0), (P(2, 1, 0, 3, 3, -1), 0)]) == [(P(0, 3, 0, 3, 3, -1), 0)]
    # Not joined: aligned then all-visible; key rows or dK/dV rows not following on; a left bound
    # that does not move with the keys (or only one of two bounded); keys not extended by exactly
    # the new query rows.
    for items in ([(P(0, 2, 0, 2, -1, 0), 0), (P(0, 2, 2, 2, -1, -1), 2)],
                  [(P(0, 2, 0, 2, -1, -1), 0), (P(0, 2, 3, 2, -1, 0), 3)],
                  [(P(0, 2, 0, 2, -1, -1), 0), (P(0, 2, 2, 2, -1, 0), 9)],
                  [(P(0, 2, 0, 2, 5, -1), 0), (P(0, 2, 2, 2, 5, 0), 2)],
                  [(P(0, 2, 0, 2, -1, -1), 0), (P(0, 2, 2, 2, 5, 0), 2)],
                  [(P(0, 2, 0, 3, 4, -1), 0), (P(2, 1, 0, 3, 4, -1), 0)],
                  [(P(0, 2, 0, 2, -1, 0), 0), (P(2, 3, 0, 4, -1, 0), 0)]):
        assert V.merge_adjacent(items) == items


def _coverage(items, rows):
    """How many times each (query row, key row) is computed by the pieces, under flash's rule."""
    cover = torch.zeros(rows, rows, dtype=torch.int32)
    for p, _ in items:
        cover[p.q_row:p.q_row + p.q_len, p.k_row:p.k_row + p.k_len] += \
            V.flash_allowed(p.q_len, p.k_len, p.left, p.right).to(torch.int32)
    return cover


@pytest.mark.parametrize("mask", ["causal", "full", "sliding_window"])
def test_merge_adjacent_computes_the_same_pairs_on_random_layouts(mask):
    # Sequences cut into blocks laid out in order (rows = positions, as one worker holds them),
    # every block pair's pieces listed query block by query block (or shuffled): joining
    # never changes which (query, key) pairs are computed, nor how often.
    rng = random.Random(7)
    for _ in range(60):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 4))]
        block, window = rng.randint(1, 16), rng.randint(1, 20)
        items, base = [], 0
        for n in lengths:
            cuts = list(range(0, n, block))
            for qs in cuts:
                for ks in cuts:
                    ql, kl = min(block, n - qs), min(block, n - ks)
                    for p in V.kernel_pieces(mask, window, base + qs, base + ks, qs, ks, ql, kl):
                        items.append((p, p.k_row))
            base += n
        shuffled = rng.random() < 0.3
        if shuffled:
            rng.shuffle(items)
        joined = V.merge_adjacent(items)
        assert len(joined) <= len(items)
        assert torch.equal(_coverage(joined, base), _coverage(items, base))
        if mask != "sliding_window" and not shuffled:  # in order: one piece a sequence, as one flash call
            assert len(joined) == len(lengths), (lengths, block, joined)


def test_rows_and_add_rows_agree_on_both_paths():
    x = torch.arange(12.0).reshape(6, 2)
    acc_slice, acc_index = torch.zeros(6, 2), torch.zeros(6, 2)
    index = torch.tensor([2, 3, 4])
    part = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.bfloat16)
    assert torch.equal(V.rows(x, index, (2, 5)), V.rows(x, index, None))
    assert V.rows(x, index, (2, 5)).data_ptr() == x[2].data_ptr()  # a view, no copy
    V.add_rows(acc_slice, index, (2, 5), part)
    V.add_rows(acc_index, index, None, part)
    assert torch.equal(acc_slice, acc_index) and acc_slice.dtype == torch.float32
    assert acc_slice[2:5].tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]] and acc_slice[:2].abs().sum() == 0


def test_merge_partials_is_the_log_sum_exp_rule():
    # Row 0 has (o=1, lse=log 1) and takes partials (o=3, lse=log 3) twice: weights 1:3:3.
    # Row 1 has nothing yet (lse -inf) and takes (o=5, lse=2). Row 2 is untouched.
    o = torch.tensor([[[1.0]], [[0.0]], [[7.0]]])
    lse = torch.tensor([[0.0], [-math.inf], [1.0]])
    launch = V.launches([(P(0, 1, 0, 1, -1, -1), 0), (P(0, 2, 0, 1, -1, -1), 0)])[0]
    assert launch.q_index.tolist() == [0, 0, 1]
    o_part = torch.tensor([[[3.0]], [[3.0]], [[5.0]]])
    lse_part = torch.tensor([[math.log(3)], [math.log(3)], [2.0]])
    V.merge_partials(o, lse, launch, o_part, lse_part)
    assert o[0, 0, 0].item() == pytest.approx((1 * 1 + 3 * 3 + 3 * 3) / 7, rel=1e-6)
    assert lse[0, 0].item() == pytest.approx(math.log(7), rel=1e-6)
    assert (o[1, 0, 0].item(), lse[1, 0].item()) == (5.0, 2.0)
    assert (o[2, 0, 0].item(), lse[2, 0].item()) == (7.0, 1.0)


def test_merge_partials_on_a_span_of_rows_is_the_same_rule():
    # Rows 1..2 once each, in order (the slice path): row 1 has (o=1, lse=0) and takes
    # (o=3, lse=log 3), weights 1:3; row 2 has nothing yet and takes (o=5, lse=2). Rows 0, 3 untouched.
    o = torch.tensor([[[9.0]], [[1.0]], [[0.0]], [[8.0]]])
    lse = torch.tensor([[4.0], [0.0], [-math.inf], [6.0]])
    launch = V.launches([(P(1, 2, 0, 1, -1, -1), 0)])[0]
    assert launch.q_span == (1, 3)
    V.merge_partials(o, lse, launch, torch.tensor([[[3.0]], [[5.0]]]), torch.tensor([[math.log(3)], [2.0]]))
    assert o[1, 0, 0].item() == pytest.approx((1 * 1 + 3 * 3) / 4, rel=1e-6)
    assert lse[1, 0].item() == pytest.approx(math.log(4), rel=1e-6)
    assert (o[2, 0, 0].item(), lse[2, 0].item()) == (5.0, 2.0)
    assert (o[0, 0, 0].item(), lse[0, 0].item(), o[3, 0, 0].item(), lse[3, 0].item()) == (9.0, 4.0, 8.0, 6.0)


def test_merge_partials_keeps_rows_without_keys_empty():
    o, lse = torch.zeros(1, 1, 2), torch.full((1, 1), -math.inf)
    launch = V.launches([(P(0, 1, 0, 1, -1, -1), 0)])[0]
    V.merge_partials(o, lse, launch, torch.zeros(1, 1, 2), torch.full((1, 1), -math.inf))
    assert torch.equal(o, torch.zeros(1, 1, 2)) and lse.item() == -math.inf


def run_program_emulated(workers, mask, device, forward, backward, dtype, coalesce=16):
    """Every rank of a lowered plan of torch_cases.LENGTHS in this one process, through DeviceProgram's
    stages, the transfers done as copies in the program's stage order; relative errors vs float64."""
    hq, hkv, d, window = 4, 2, 16, 50
    kw = dict(block_size=64, coalesce=coalesce, mask=mask, heads_q=hq, heads_kv=hkv, head_dim=d)
    if mask == "sliding_window":
        kw["window"] = window
    plan = fcp.plan(torch_cases.LENGTHS, workers=workers, **kw)
    progs = [_fcp.Program(plan._h, r) for r in range(workers)]
    devs = [V.DeviceProgram(p, mask, window, device, forward, backward) for p in progs]
    total = sum(torch_cases.LENGTHS)
    g = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(total, h, d, generator=g) for h in (hq, hkv, hkv, hq))
    scale = 1 / math.sqrt(d)
    ref = [x.double().requires_grad_() for x in (q, k, v)]
    o_ref = torch_cases.reference_attention(torch_cases.LENGTHS, *ref, mask, window, scale)
    o_ref.backward(do.double())
    perms = [torch.from_numpy(p.vector("local_token").copy()) for p in progs]  # plan rows -> global tokens

    def zeros(rows, heads):
        return torch.zeros(rows, heads, d, device=device)

    def table(r, pass_, name, t):
        rows, offsets = progs[r].table(pass_, name)
        return rows[offsets[t]:offsets[t + 1]].tolist()

    def move(pass_, t, src_all, kinds, dst_all, add):
        """The stage's sends of `kinds` into the matching receipts (block, peer) of the other ranks."""
        send_name, recv_name = kinds
        for r in range(workers):
            for row in table(r, pass_, send_name, t):
                block, dst = row[1], row[2]
                at = [x for x in table(dst, pass_, recv_name, t) if x[1] == block and x[2] == r]
                assert len(at) == 1, (pass_, t, block, r, dst)
                if send_name == "dkv_send":
                    src_row, rows = progs[r].local_rows + row[3], row[4]
                    into, dst_row = at[0][3], at[0][4]
                    dst_row += progs[dst].local_rows if into else 0
                else:
                    src_row = row[4] + (progs[r].local_rows if row[3] else 0)
                    rows, dst_row = row[5], progs[dst].local_rows + at[0][3]
                for s_buf, d_buf in zip(src_all[r], dst_all[dst]):
                    if add:
                        d_buf[dst_row:dst_row + rows] += s_buf[src_row:src_row + rows]
                    else:
                        d_buf[dst_row:dst_row + rows] = s_buf[src_row:src_row + rows]
        if add:  # sent partials are zeroed after the stage
            for r in range(workers):
                for row in table(r, pass_, "dkv_send", t):
                    for buf in src_all[r]:
                        buf[progs[r].local_rows + row[3]:progs[r].local_rows + row[3] + row[4]] = 0

    qs, dos = ([x[p].to(device, dtype) for p in perms] for x in (q, do))
    kv = {}
    for pass_ in ("forward", "backward"):
        kv[pass_] = [[torch.cat([x[p].to(device, dtype), zeros(progs[r].pool_rows(pass_), hkv).to(dtype)])
                      for x in (k, v)] for r, p in enumerate(perms)]
    os_ = [zeros(len(p), hq) for p in perms]
    lses = [torch.full((len(p), hq), -math.inf, device=device) for p in perms]
    for t in range(progs[0].num_stages("forward")):
        for r in range(workers):
            devs[r].forward_stage(t, scale, 0, qs[r], *kv["forward"][r], os_[r], lses[r])
        move("forward", t, kv["forward"], ("kv_send", "kv_recv"), kv["forward"], add=False)
    dqs = [zeros(len(p), hq) for p in perms]
    dkv = [[zeros(len(p) + progs[r].partial_rows, hkv) for _ in range(2)] for r, p in enumerate(perms)]
    for t in range(progs[0].num_stages("backward")):
        for r in range(workers):
            devs[r].backward_stage(t, scale, qs[r], *kv["backward"][r], dos[r], os_[r].to(dtype), lses[r], dqs[r],
                                   *dkv[r])
        move("backward", t, kv["backward"], ("kv_send", "kv_recv"), kv["backward"], add=False)
        move("backward", t, dkv, ("dkv_send", "dkv_recv"), dkv, add=True)

    def err(xs, want):
        got = torch.zeros(want.shape, dtype=torch.float64)
        for x, p in zip(xs, perms):
            got[p] = x[:len(p)].double().cpu()
        want = want.detach()
        return ((got - want).norm() / want.norm()).item()
    return {"o": err(os_, o_ref), "dq": err(dqs, ref[0].grad), "dk": err([x[0] for x in dkv], ref[1].grad),
            "dv": err([x[1] for x in dkv], ref[2].grad)}


@pytest.mark.parametrize("mask", ["causal", "sliding_window", "full"])
@pytest.mark.parametrize("workers, coalesce", [(1, 16), (4, 1), (4, 16)])
def test_device_stages_with_the_dense_stand_in_match_float64(mask, workers, coalesce):
    errs = run_program_emulated(workers, mask, "cpu", V.reference_forward, V.reference_backward, torch.float64,
                                coalesce)
    for name, e in errs.items():
        assert e < 1e-6, f"{mask}, {workers} workers, coalesce {coalesce}: {name} relative error {e:.3g}"


@pytest.mark.parametrize("mask", ["causal", "sliding_window", "full"])
def test_flash_calls_are_well_formed_on_meta_tensors(mask):
    """The real flash ops' argument lists and result shapes, through the stage loop, without a GPU
    (PyTorch's meta kernels of _flash_attention_forward / _backward check shapes and dtypes)."""
    hq, hkv, d = 4, 2, 16
    kw = dict(block_size=64, coalesce=1, mask=mask, heads_q=hq, heads_kv=hkv, head_dim=d)
    if mask == "sliding_window":
        kw["window"] = 50
    plan = fcp.plan(torch_cases.LENGTHS, workers=4, **kw)
    prog = _fcp.Program(plan._h, 1)
    dev = V.DeviceProgram(prog, mask, 50, "meta")
    local = prog.local_rows

    def empty(rows, heads, dtype=torch.bfloat16):
        return torch.empty(rows, heads, d, device="meta", dtype=dtype)
    q, o = empty(local, hq), empty(local, hq, torch.float32)
    lse = torch.empty(local, hq, device="meta")
    kv = [empty(local + prog.pool_rows("forward"), hkv) for _ in range(2)]
    for t in range(prog.num_stages("forward")):
        dev.forward_stage(t, 0.25, 0, q, *kv, o, lse)
    kv = [empty(local + prog.pool_rows("backward"), hkv) for _ in range(2)]
    dq, dkv = empty(local, hq, torch.float32), [empty(local + prog.partial_rows, hkv, torch.float32) for _ in range(2)]
    for t in range(prog.num_stages("backward")):
        dev.backward_stage(t, 0.25, q, *kv, q, q, lse, dq, *dkv)
    assert sum(len(dev.launches("forward", t)) for t in range(prog.num_stages("forward"))) > 0


# ---- scripts/torch_gpu_check.sh and its benchmark, without a GPU -----------------

_REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _cuda_bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location("torch_cuda_attention", _REPO / "bench" / "torch_cuda_attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_bench_baseline_follows_this_torchs_varlen_api(monkeypatch):
    """varlen_attn's enable_gqa exists in some torch versions only (not 2.10's);
    without it the baseline is the flash op it calls, as one launch over the
    batch (the device calls are mocked: only their arguments are checked)."""
    import torch.nn.attention.varlen as varlen
    bench = _cuda_bench()
    real = varlen.varlen_attn
    q, k, v, do = torch.zeros(10, 4, 8), torch.zeros(10, 2, 8), torch.zeros(10, 2, 8), torch.zeros(10, 4, 8)
    cu = torch.tensor([0, 3, 10], dtype=torch.int32)
    if "enable_gqa" in __import__("inspect").signature(real).parameters:
        assert bench.kernel_step_fn([q, k, v], do, cu, 7, (-1, 0), 0.5)[0] == "varlen_attn"

    def old_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                        window_size=(-1, -1)):
        raise AssertionError("not called: it takes no GQA K/V")
    calls = []
    monkeypatch.setattr(varlen, "varlen_attn", old_varlen_attn)
    monkeypatch.setattr(V, "flash_forward", lambda *a: calls.append(("fwd", a)) or (q, torch.zeros(10, 4)))
    monkeypatch.setattr(V, "flash_backward", lambda *a: calls.append(("bwd", a)))
    label, step = bench.kernel_step_fn([q, k, v], do, cu, 7, (49, 0), 0.5)
    assert label.startswith("flash varlen op")
    step()
    assert [c[0] for c in calls] == ["fwd", "bwd"]
    launch = calls[0][1][3]
    assert (launch.left, launch.right, launch.max_q, launch.max_k) == (49, 0, 7, 7)
    assert torch.equal(launch.cu_q, cu) and torch.equal(launch.cu_k, cu)
    assert calls[0][1][1].shape == (10, 2, 8)  # K/V heads not repeated


def test_gpu_check_without_a_gpu_fails_with_one_clear_line():
    import subprocess
    import sys
    env = dict(__import__("os").environ, FCP_TORCH_VENV=sys.prefix)
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the script would run for real")
    out = subprocess.run(["bash", str(_REPO / "scripts" / "torch_gpu_check.sh")], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torch_gpu_check.sh: FAILED: ") and "CUDA device" in lines[0], \
        out.stderr
