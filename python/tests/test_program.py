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
