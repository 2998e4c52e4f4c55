"""The lowered per-rank program (fcp._fcp.Program) from Python, without torch:
its tables agree with the plan, and its kernel entry points check buffers.
"""

import numpy as np
import pytest

import fcp
from fcp import _fcp


@pytest.fixture(scope="module")
def plan():
    return fcp.plan([100, 37, 1, 256], workers=4, block_size=32, coalesce=2, heads_q=4, heads_kv=2, head_dim=8)


def test_tables_cover_the_plan(plan):
    calls = 0
    for rank in range(plan.workers):
        prog = _fcp.Program(plan._h, rank)
        owners = plan.block_owner
        rows, offsets = prog.table("forward", "compute")
        assert offsets[-1] == len(rows) and len(offsets) == plan.num_forward_stages + 1
        assert all(owners[q] == rank for q in rows[:, 1])
        calls += len(rows)
        assert prog.vector("in_send_counts").sum() == prog.dataloader_end - prog.dataloader_begin
        assert prog.vector("in_recv_counts").sum() == prog.local_rows
    assert calls == sum(len(plan.forward_compute(t)) for t in range(plan.num_forward_stages))


def test_single_rank_forward_equals_dense_softmax():
    lengths = [5, 3]
    p = fcp.plan(lengths, workers=1, block_size=4, mask="full", heads_q=1, heads_kv=1, head_dim=2)
    prog = _fcp.Program(p._h, 0)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((8, 1, 2)).astype(np.float32) for _ in range(3))
    o = np.zeros_like(q)
    lse = np.full((8, 1), -np.inf, dtype=np.float32)
    pool = np.zeros((0, 1, 2), dtype=np.float32)
    for t in range(prog.num_stages("forward")):
        prog.forward_stage(t, 1.0, 0, q, k, v, pool, pool, o, lse)
    # Rows are in the plan layout; map them back by their global token.
    tokens = prog.vector("local_token")
    expect = np.zeros_like(q)
    for lo, hi in ((0, 5), (5, 8)):
        idx = [i for i, g in enumerate(tokens) if lo <= g < hi]
        s = q[idx, 0] @ k[idx, 0].T
        w = np.exp(s - s.max(1, keepdims=True))
        expect[idx, 0] = (w / w.sum(1, keepdims=True)) @ v[idx, 0]
    np.testing.assert_allclose(o, expect, rtol=1e-5, atol=1e-6)


def test_bad_buffers_and_ranks_are_value_errors(plan):
    with pytest.raises(ValueError, match="rank 4 is not in"):
        _fcp.Program(plan._h, 4)
    prog = _fcp.Program(plan._h, 0)
    n = prog.local_rows
    q = np.zeros((n, 4, 8), np.float32)
    kv = np.zeros((n, 2, 8), np.float32)
    pool = np.zeros((prog.pool_rows("forward"), 2, 8), np.float32)
    lse = np.zeros((n, 4), np.float32)
    with pytest.raises(ValueError, match="buffer q has"):
        prog.forward_stage(0, 1.0, 0, q[:-1], kv, kv, pool, pool, q, lse)
    with pytest.raises(ValueError, match="stage 99 is not in"):
        prog.forward_stage(99, 1.0, 0, q, kv, kv, pool, pool, q, lse)
    # Inputs are float32 or bfloat16, all alike; what the kernel writes is float32.
    with pytest.raises(ValueError, match="q must be float32 or bfloat16, got float64"):
        prog.forward_stage(0, 1.0, 0, q.astype(np.float64), kv, kv, pool, pool, q, lse)
    with pytest.raises(ValueError, match="v_pool is float16 but q is float32"):
        prog.forward_stage(0, 1.0, 0, q, kv, kv, pool, pool.astype(np.float16), q, lse)
    with pytest.raises(TypeError):  # o must be float32 (nanobind's argument check)
        prog.forward_stage(0, 1.0, 0, q, kv, kv, pool, pool, q.astype(np.float16), lse)
    with pytest.raises(ValueError, match="pass must be"):
        prog.table("sideways", "compute")


@pytest.mark.parametrize("planner, mask", [("fcp", "causal"), ("fcp", "full"), ("magi", "full"), ("ring", "causal")])
def test_reshuffle_pieces_carry_every_row_once_and_match_between_ranks(planner, mask):
    """Program.reshuffle (the MPI executor's pieces, which fcp.torch posts): each side's
    rows are the same tokens, every dataloader and local row is in one piece, what r
    sends s is, message by message, what s receives from r, and both lists are in
    need order."""
    p = fcp.plan([100, 37, 1, 256, 3, 90], workers=4, block_size=32, coalesce=2, mask=mask, planner=planner,
                 heads_q=4, heads_kv=2, head_dim=8)
    progs = [_fcp.Program(p._h, r) for r in range(p.workers)]

    def pieces(prog, name, side):
        table, dl, local = prog.reshuffle(name, side)
        out, at = [], 0
        for block, src, dst, rows, need in table.tolist():
            out.append((block, src, dst, need, dl[at:at + rows].tolist() if len(dl) else None,
                        local[at:at + rows].tolist() if len(local) else None))
            at += rows
        assert at == max(len(dl), len(local))
        return out

    for name, stages in (("reshuffle_in", p.num_forward_stages), ("do_in", p.num_backward_stages)):
        for r, prog in enumerate(progs):
            tokens = prog.vector("local_token")
            recv, send, own = (pieces(prog, name, side) for side in ("recv", "send", "self"))
            assert sorted(i for x in recv + own for i in x[5]) == list(range(prog.local_rows))
            assert sorted(i for x in send + own for i in x[4]) == list(range(prog.dataloader_end -
                                                                             prog.dataloader_begin))
            for block, src, dst, need, dl, local in own:
                assert src == dst == r and p.block_owner[block] == r
                assert [tokens[i] for i in local] == [prog.dataloader_begin + i for i in dl]
            for lst in (recv, send):
                needs = [x[3] for x in lst]
                assert needs == sorted(needs) and all(0 <= n <= stages for n in needs)
            assert all(x[2] == r and x[1] != r and p.block_owner[x[0]] == r for x in recv)
            for s, peer in enumerate(progs):
                mine = [x for x in send if x[2] == s]
                theirs = [x for x in pieces(peer, name, "recv") if x[1] == r]
                assert [x[0] for x in mine] == [x[0] for x in theirs], (name, r, s)
                peer_tokens = peer.vector("local_token")
                for a, b in zip(mine, theirs):
                    assert [prog.dataloader_begin + i for i in a[4]] == [peer_tokens[i] for i in b[5]]
    with pytest.raises(ValueError, match="no reshuffle 'out' side 'recv'"):
        progs[0].reshuffle("out", "recv")


def test_one_call_at_a_time_equals_the_stage(plan):
    """forward_calls / backward_calls over a stage's calls, one by one in order or as
    one list, give forward_stage's and backward_stage's bits (fcp.torch runs lists)."""
    rng = np.random.default_rng(2)
    prog = _fcp.Program(plan._h, 1)
    n, f32 = prog.local_rows, np.float32
    q, do = (rng.standard_normal((n, 4, 8)).astype(f32) for _ in range(2))
    k, v = (rng.standard_normal((n, 2, 8)).astype(f32) for _ in range(2))
    kp, vp = (rng.standard_normal((prog.pool_rows("forward"), 2, 8)).astype(f32) for _ in range(2))
    calls = prog.table("forward", "compute")[1]
    results = []
    for mode in ("stage", "one by one", "list"):
        o, lse = np.zeros_like(q), np.full((n, 4), -np.inf, f32)
        for t in range(prog.num_stages("forward")):
            n_calls = calls[t + 1] - calls[t]
            if mode == "stage":
                prog.forward_stage(t, 0.3, 0, q, k, v, kp, vp, o, lse)
            for group in ([[i] for i in range(n_calls)] if mode == "one by one" else
                          [list(range(n_calls))] if mode == "list" else []):
                prog.forward_calls(t, group, 0.3, q, k, v, kp, vp, o, lse)
        delta = (o * do).sum(-1)
        bp = np.zeros((prog.pool_rows("backward"), 2, 8), f32)
        grads = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)]
        part = [np.zeros((prog.partial_rows, 2, 8), f32) for _ in range(2)]
        bcalls = prog.table("backward", "compute")[1]
        for t in range(prog.num_stages("backward")):
            args = (0.3, q, k, v, bp, bp, do, lse, delta, *grads, *part)
            n_calls = bcalls[t + 1] - bcalls[t]
            if mode == "stage":
                prog.backward_stage(t, *args)
            for group in ([[i] for i in range(n_calls)] if mode == "one by one" else
                          [list(range(n_calls))] if mode == "list" else []):
                prog.backward_calls(t, group, *args)
        results.append([o, lse, *grads, *part])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"forward_calls: call 99 is not in \[0, "):
        prog.forward_calls(0, [0, 99], 0.3, q, k, v, kp, vp, o, lse)


def test_remote_compute_plans_are_refused_on_every_rank():
    # magi-dynamic computes some pairs away from their query block's owner (the remote-compute
    # extension, docs/plan-format.md): the MPI runtime runs it, this program (fcp.torch's) not yet.
    plan = fcp.plan([1, 16, 37, 5, 32, 60, 9, 1, 23], workers=4, block_size=16, planner="magi-dynamic",
                    heads_q=4, heads_kv=2, head_dim=8)
    assert '"send_q"' in plan.to_json()
    for rank in range(plan.workers):
        with pytest.raises(ValueError, match=r"^fcp\.torch: plan 'magi-dynamic' computes pairs away from "
                           r"their query block's owner \(send_q / send_o / send_dq, the remote-compute "
                           r"extension\), which fcp\.torch does not run yet \(fcp run does\)$"):
            _fcp.Program(plan._h, rank)
