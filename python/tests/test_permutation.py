"""token_permutation and its inverse: exact on the hand plan, properties on
random plans and, when the FCP planner is built in, on planned batches."""
import numpy as np
import pytest

import fcp
import plangen


def test_hand_permutation(hand):
    np.testing.assert_array_equal(hand.token_permutation(0), [2, 3, 7, 4])  # block 2: seq 3 first
    np.testing.assert_array_equal(hand.token_permutation(1), [0, 1, 5, 6])
    np.testing.assert_array_equal(hand.token_permutation(), [2, 3, 7, 4, 0, 1, 5, 6])
    np.testing.assert_array_equal(hand.token_offsets, [0, 4, 8])
    np.testing.assert_array_equal(hand.inverse_token_permutation(), [4, 5, 0, 1, 3, 6, 7, 2])
    np.testing.assert_array_equal(hand.dataloader_offsets, [0, 4, 8])
    # Dataloader worker 1 holds tokens 4..7; they go to positions 3, 6, 7, 2.
    np.testing.assert_array_equal(hand.inverse_token_permutation(1), [3, 6, 7, 2])
    owner, index = hand.token_placement(0)  # tokens 0..3
    np.testing.assert_array_equal(owner, [1, 1, 0, 0])
    np.testing.assert_array_equal(index, [0, 1, 0, 1])
    owner, index = hand.token_placement()
    assert owner.dtype == np.int32 and index.dtype == np.int64
    np.testing.assert_array_equal(owner, [1, 1, 0, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(index, [0, 1, 0, 1, 3, 2, 3, 2])


@pytest.mark.parametrize("worker", [-1, 2, 10**12])
def test_worker_out_of_range(hand, worker):
    with pytest.raises(ValueError, match=r"worker .* is not in \[0, 2\)"):
        hand.token_permutation(worker)
    with pytest.raises(ValueError):
        hand.inverse_token_permutation(worker)


def test_worker_must_be_an_integer(hand):
    with pytest.raises(TypeError):
        hand.token_permutation(1.0)
    with pytest.raises(TypeError):
        hand.token_permutation("0")


def check_permutation(plan, reference=None):
    """Every invariant of the permutation API on one plan."""
    t, n = plan.total_tokens, plan.workers
    full = plan.token_permutation()
    inverse = plan.inverse_token_permutation()
    assert full.shape == (t,) and inverse.shape == (t,)
    np.testing.assert_array_equal(np.sort(full), np.arange(t))
    np.testing.assert_array_equal(full[inverse], np.arange(t))
    np.testing.assert_array_equal(inverse[full], np.arange(t))
    np.testing.assert_array_equal(np.diff(plan.token_offsets), plan.worker_metrics()["tokens"])
    owner, index = plan.token_placement()
    loader = plan.dataloader_offsets
    for w in range(n):
        perm = plan.token_permutation(w)
        if reference is not None:
            np.testing.assert_array_equal(perm, reference(w))
        np.testing.assert_array_equal(owner[perm], w)
        np.testing.assert_array_equal(index[perm], np.arange(len(perm)))
        np.testing.assert_array_equal(plan.inverse_token_permutation(w), inverse[loader[w]:loader[w + 1]])
    # Tokens whose plan owner differs from their dataloader worker: the metric.
    dataloader_worker = np.searchsorted(loader, np.arange(t), side="right") - 1
    assert int(np.sum(owner != dataloader_worker)) == plan.metrics()["reshuffle_tokens"]


@pytest.mark.parametrize("mask", ["causal", "full", "sliding_window"])
def test_random_plans(mask):
    rng = np.random.default_rng(20261129)
    for _ in range(60):
        text, spec = plangen.random_plan(rng, mask)
        plan = fcp.Plan.from_json(text)
        check_permutation(plan, lambda w: plangen.reference_permutation(spec, w))


@pytest.mark.parametrize("workers,dist", [(8, "lognormal"), (5, "bimodal"), (16, "uniform")])
def test_planned_batches(fcp_planner, workers, dist):
    lengths = fcp.workload(dist, workers=workers, tokens_per_worker=16384, max_len=65536, seed=3)
    plan = fcp.plan(lengths, workers=workers, block_size=1024, coalesce=4)
    check_permutation(plan)
    # Placing a batch with the permutation gives each worker exactly its blocks' tokens.
    tokens = np.arange(plan.total_tokens) * 10
    seq_start = np.concatenate([[0], np.cumsum(plan.sequences)])
    for w in range(workers):
        expected = [seq_start[seq] + np.arange(start, start + length)
                    for block, seq, start, length in plan.segments if plan.block_owner[block] == w]
        np.testing.assert_array_equal(tokens[plan.token_permutation(w)],
                                      10 * np.concatenate(expected) if expected else [])
