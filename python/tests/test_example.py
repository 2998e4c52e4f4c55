"""examples/dataloader_reshuffle.py: its all-to-all index arithmetic puts every
token where the plan says and brings every output back."""
import importlib.util

import numpy as np
import pytest

import fcp
import plangen
from conftest import REPO


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("dataloader_reshuffle",
                                                  REPO / "examples" / "dataloader_reshuffle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reshuffle_round_trip_on_random_plans(example):
    rng = np.random.default_rng(11)
    for _ in range(40):
        plan = fcp.Plan.from_json(plangen.random_plan(rng)[0])
        batch = rng.integers(0, 1000, size=plan.total_tokens)
        loader = plan.dataloader_offsets
        local = [batch[loader[r]:loader[r + 1]] for r in range(plan.workers)]
        ranks = [example.Reshuffle(plan, r) for r in range(plan.workers)]
        planned = example.reshuffle_in(ranks, local)
        for r in range(plan.workers):
            np.testing.assert_array_equal(planned[r], batch[plan.token_permutation(r)])
        back = example.reshuffle_out(ranks, [x * 3 for x in planned])
        np.testing.assert_array_equal(np.concatenate(back), batch * 3)


def test_positions_follow_the_segments(example, hand):
    ranks = [example.Reshuffle(hand, r) for r in range(2)]
    # Worker 0 holds seq 0 tokens 2, 3, then seq 3 token 0 and seq 1 token 0.
    np.testing.assert_array_equal(ranks[0].seq, [0, 0, 3, 1])
    np.testing.assert_array_equal(ranks[0].position, [2, 3, 0, 0])
    np.testing.assert_array_equal(ranks[1].seq, [0, 0, 1, 2])
    np.testing.assert_array_equal(ranks[1].position, [0, 1, 1, 0])


def test_training_steps_run(example, fcp_planner, capsys):
    plan = example.train_step(step=1, workers=4)
    assert plan.workers == 4
    assert "outputs back in place" in capsys.readouterr().out
