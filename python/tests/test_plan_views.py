"""Plan header, numpy views, per-stage arrays and metrics on a hand-made plan.

hand_plan.json: sequences [4, 2, 1, 1] (global tokens 0-3 | 4-5 | 6 | 7) on 2
workers, causal, attention (heads_q 2, heads_kv 1, head_dim 4, 2 bytes):

    block 0  worker 1  seq 0 [0, 2)                  tokens 0 1
    block 1  worker 0  seq 0 [2, 4)                  tokens 2 3
    block 2  worker 0  seq 3 [0, 1), seq 1 [0, 1)    tokens 7 4
    block 3  worker 1  seq 1 [1, 2), seq 2 [0, 1)    tokens 5 6

Required pairs (allowed token pairs): (0,0) 3, (1,0) 4, (1,1) 3, (2,2) 2,
(3,2) 1, (3,3) 2. Forward FLOPs per token pair: 4 * 2 * 4 = 32; K/V bytes per
token: 2 * 1 * 4 * 2 = 16.
"""
import gc
import pickle

import numpy as np
import pytest

import fcp
from conftest import run_cli


def test_header(hand):
    assert (hand.planner, hand.workers, hand.mask, hand.window) == ("hand", 2, "causal", None)
    assert hand.attention == {"heads_q": 2, "heads_kv": 1, "head_dim": 4, "dtype_bytes": 2}
    assert (hand.block_size, hand.coalesce, hand.token_cap) == (2, 1, 4)
    assert (hand.num_sequences, hand.total_tokens, hand.num_blocks) == (4, 8, 4)
    assert (hand.num_forward_stages, hand.num_backward_stages) == (2, 3)
    assert hand.planning_seconds is None


def test_block_arrays(hand):
    np.testing.assert_array_equal(hand.sequences, [4, 2, 1, 1])
    assert hand.block_owner.dtype == np.int32
    np.testing.assert_array_equal(hand.block_owner, [1, 0, 0, 1])
    np.testing.assert_array_equal(hand.block_tokens, [2, 2, 2, 2])
    np.testing.assert_array_equal(hand.block_segment_offsets, [0, 1, 2, 4, 6])
    assert hand.segments.dtype == np.int64
    np.testing.assert_array_equal(hand.segments, [[0, 0, 0, 2], [1, 0, 2, 2], [2, 3, 0, 1],
                                                  [2, 1, 0, 1], [3, 1, 1, 1], [3, 2, 0, 1]])


def test_stage_arrays(hand):
    np.testing.assert_array_equal(hand.forward_send(0), [[0, 1, 0], [2, 0, 1]])
    np.testing.assert_array_equal(hand.forward_compute(0), [[0, 0, 1], [1, 1, 0], [2, 2, 0], [3, 3, 1]])
    assert hand.forward_send(1).shape == (0, 3)
    np.testing.assert_array_equal(hand.forward_compute(-1), [[1, 0, 0], [3, 2, 1]])
    np.testing.assert_array_equal(hand.backward_send_kv(0), [[0, 1, 0], [2, 0, 1]])
    np.testing.assert_array_equal(hand.backward_send_dkv(2), [[0, 0, 1], [2, 1, 0]])
    np.testing.assert_array_equal(hand.backward_compute(1), [[1, 0, 0], [3, 2, 1]])
    assert hand.backward_compute(2).shape == (0, 3)
    assert hand.forward_send(0).dtype == np.int32
    # Whole blocks: rows (0, block tokens).
    np.testing.assert_array_equal(hand.forward_send(0, rows=True), [[0, 1, 0, 0, 2], [2, 0, 1, 0, 2]])
    assert hand.forward_send(0, rows=True).dtype == np.int64
    assert hand.backward_send_dkv(1, rows=True).shape == (0, 5)
    assert hand.forward_send_q(0).shape == (0, 3) and hand.backward_send_dq(-1).shape == (0, 3)
    with pytest.raises(IndexError, match="forward stage 2 is not in"):
        hand.forward_send(2)
    with pytest.raises(IndexError, match="backward stage -1 is not in"):
        hand.backward_compute(-4)


def test_views_are_read_only_and_not_copies(hand):
    owner = hand.block_owner
    assert not owner.flags.writeable
    with pytest.raises(ValueError):
        owner[0] = 5
    # The same memory on every access: built once, owned by the plan.
    assert hand.segments.__array_interface__["data"][0] == hand.segments.__array_interface__["data"][0]
    assert hand.forward_send(0).__array_interface__["data"][0] == \
        hand.forward_send(0).__array_interface__["data"][0]
    assert hand.token_permutation().__array_interface__["data"][0] == \
        hand.token_permutation().__array_interface__["data"][0]
    # Per-worker arrays are the caller's own.
    mine = hand.token_permutation(0)
    mine[0] = -1
    assert hand.token_permutation(0)[0] == 2


def test_views_outlive_the_plan(hand_text):
    plan = fcp.Plan.from_json(hand_text)
    views = [plan.segments, plan.token_permutation(0), plan.forward_compute(0),
             plan.worker_metrics()["bytes_sent"], plan.sequences]
    del plan
    gc.collect()
    np.testing.assert_array_equal(views[0][-1], [3, 2, 0, 1])
    np.testing.assert_array_equal(views[1], [2, 3, 7, 4])
    np.testing.assert_array_equal(views[2][1], [1, 1, 0])
    np.testing.assert_array_equal(views[3], [32, 32])
    np.testing.assert_array_equal(views[4], [4, 2, 1, 1])


def test_metrics(hand):
    m = hand.metrics()
    assert m["total_tokens"] == 8 and m["max_tokens"] == 4
    assert m["total_forward_flops"] == 32 * 15
    assert m["max_pair_flops"] == 32 * 4
    assert m["required_pairs"] == 6 and m["transfer_edges"] == 2 and m["max_degree"] == 1
    assert (m["forward_stages"], m["forward_transfer_stages"], m["backward_stages"]) == (2, 1, 3)
    assert m["transfer_stage_lower_bound"] == 1
    assert m["compute_imbalance"] == pytest.approx((288 - 240) / 288)
    assert m["traffic_imbalance"] == 0 and m["token_imbalance"] == 0
    assert m["compute_lower_bound"] == 240 and m["max_compute"] == 288
    # Tokens 0, 1 (dataloader worker 0 -> plan worker 1) and 4, 7 (1 -> 0); each
    # moves Q, K, V in ((2 + 2*1) * 4 * 2 = 32 bytes) and O out (2 * 4 * 2 = 16).
    assert m["reshuffle_tokens"] == 4 and m["reshuffle_bytes"] == 4 * 48
    # Each worker takes 2 tokens in and sends 2 home: Q, K, V of two and O of two each way.
    assert m["max_worker_reshuffle_bytes_in"] == m["max_worker_reshuffle_bytes_out"] == 2 * 48
    # Home work 10 | 5, target 7: w0 sheds its row of 4 and w1 has no room: 1 + 1.
    assert (m["reshuffle_floor_tokens"], m["reshuffle_floor_shed_tokens"]) == (2, 1)
    # Both workers share one node of the built-in 8.
    assert m["gpus_per_node"] == 8 and m["nic_bytes"] == 0 and m["nvlink_bytes"] == 64


def test_worker_metrics(hand):
    w = hand.worker_metrics()
    np.testing.assert_array_equal(w["tokens"], [4, 4])
    np.testing.assert_array_equal(w["forward_flops"], [32 * 9, 32 * 6])  # blocks 1,2 | 0,3
    np.testing.assert_array_equal(w["kv_blocks_sent"], [1, 1])
    np.testing.assert_array_equal(w["kv_blocks_received"], [1, 1])
    np.testing.assert_array_equal(w["bytes_sent"], [32, 32])
    np.testing.assert_array_equal(w["bytes_received"], [32, 32])
    np.testing.assert_array_equal(w["nic_bytes_sent"], [0, 0])  # one node of the built-in 8
    np.testing.assert_array_equal(w["reshuffle_tokens_in"], [2, 2])
    np.testing.assert_array_equal(w["reshuffle_tokens_out"], [2, 2])


def test_summary_is_what_fcp_inspect_prints(hand, hand_text, cli, tmp_path):
    path = tmp_path / "hand.json"
    path.write_text(hand_text)
    result = run_cli(cli, "inspect", "--plan", path)
    assert result.returncode == 0, result.stderr
    assert hand.summary() == result.stdout
    assert "reshuffle: 4 tokens (50.00%)" in hand.summary()


def test_json_round_trip_and_pickle(hand):
    text = hand.to_json()
    again = fcp.Plan.from_json(text)
    assert again == hand and again.to_json() == text
    assert pickle.loads(pickle.dumps(hand)) == hand
    assert hand != fcp.Plan.from_json(text.replace('"planner": "hand"', '"planner": "other"'))


def test_validate(hand, hand_text):
    hand.validate()
    hand.validate(forbid_redundant_transfers=True)
    # Worker 1 also sends block 0 to itself: the rule src != dst.
    bad = fcp.Plan.from_json(hand_text.replace('"send": [[0, 1, 0],', '"send": [[0, 1, 1],'))
    with pytest.raises(fcp.InvalidPlanError):
        bad.validate()


def _all(plan, name, forward):
    stages = plan.num_forward_stages if forward else plan.num_backward_stages
    return [(t, row) for t in range(stages) for row in getattr(plan, name)(t, **(
        {"rows": True} if "send" in name else {})).tolist()]


def test_cut_transfers_show_their_rows():
    # magi sends each rank the key rows its chunks attend (a causal suffix of a
    # chunk whose sequence continues), not whole chunks.
    lengths = fcp.workload("lognormal", workers=4, tokens_per_worker=8192, seed=0)
    plan = fcp.plan(lengths, workers=4, planner="magi", block_size=1024)
    tokens = plan.block_tokens
    sends = [row for _, row in _all(plan, "forward_send", True)]
    assert sends and any(rows < tokens[b] for b, _, _, _, rows in sends)
    for b, _, _, begin, rows in sends:
        assert 0 <= begin and 0 < rows and begin + rows <= tokens[b]
    # The rows are what the plan's metrics count as moved.
    a = plan.attention
    kv_bytes_per_row = 2 * a["heads_kv"] * a["head_dim"] * a["dtype_bytes"]
    assert plan.worker_metrics()["bytes_received"].sum() == \
        kv_bytes_per_row * sum(rows for *_, rows in sends)


@pytest.mark.parametrize("forward", [True, False])
def test_remote_compute_names_the_computing_worker(forward):
    lengths = fcp.workload("lognormal", workers=4, tokens_per_worker=8192, seed=0)
    plan = fcp.plan(lengths, workers=4, planner="magi-dynamic", block_size=1024)
    owner = plan.block_owner
    computes = _all(plan, "forward_compute" if forward else "backward_compute", forward)
    remote = [(t, q, w) for t, (q, _, w) in computes if w != owner[q]]
    assert remote, "magi-dynamic computes some pairs away from their query block's owner"
    # Each remote worker got the query block in an earlier stage and returns its partial.
    sent_q = {(q, dst): t for t, (q, src, dst, _, _) in _all(plan, "forward_send_q" if forward else "backward_send_q", forward)}
    back = {(q, src) for _, (q, src, dst, _, _) in _all(plan, "forward_send_o" if forward else "backward_send_dq", forward)}
    for t, q, w in remote:
        assert sent_q[(q, w)] < t and (q, w) in back
