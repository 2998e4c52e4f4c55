"""fcp.torch in the training stacks users run, on 4 gloo ranks as 2 data-parallel
replicas x 2 context-parallel ranks: FSDP2 over the flattened dp x cp mesh, FSDP2
over dp and DDP over the world; activation checkpointing off, transformers' and
checkpoint_wrapper; decoder layers compiled with fullgraph=True; both layouts; a
sliding-window model. Loss and every parameter gradient equal one process running
each sequence with eager attention. The wirings that gave wrong gradients without a
word end in one error on every rank; inputs that do not fit the plan too. Skipped
where torch or transformers is not installed.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch_cases  # noqa: E402
import torch_training_cases as cases  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return torch_cases.spawn_ok("training", timeout_s=600)


@pytest.mark.parametrize("case", cases.TRAIN_CASES, ids=lambda c: "-".join(map(str, c)))
def test_gradients_equal_one_process(results, case):
    for rank, res in enumerate(results):
        assert res[case]["loss_rel_err"] < 1e-4, (rank, res[case])
        assert res[case]["worst_grad_rel_err"] < 1e-4, (rank, res[case])


@pytest.mark.parametrize("case, expected", [
    ("ddp_on_dp", "gradients not summed over the context-parallel ranks (the model's DDP averages over none"),
    ("hand_loop_without_reduce", "(the model has no DDP or FSDP2 wrapper)"),
    ("different_weights", "the context-parallel ranks hold different weights"),
    ("raw_ddp_on_dp", "the context-parallel ranks hold different gradients"),
    ("partial_group", "must be a union of whole cp groups"),
    ("reduce_after_ddp_over_world", "already averages gradients over the cp ranks"),
])
def test_wrong_wiring_is_one_error_on_every_rank(results, case, expected):
    messages = [res["wrong_wirings"][case] for res in results]
    for rank, message in enumerate(messages):
        assert message is not None and expected in message, (rank, message)
    if case != "partial_group":  # there, ranks of different cp groups say why from their own side
        for replica in (0, 1):  # the cp ranks of one replica: one message
            assert messages[2 * replica] == messages[2 * replica + 1], messages
    assert "mesh['dp', 'cp']._flatten()" in messages[0] or case in ("different_weights",
                                                                   "reduce_after_ddp_over_world")


@pytest.mark.parametrize("case, expected", [
    ("tokens_not_lengths", "tokens but the plan's lengths add up to"),
    ("no_shape", "pass config=model.config, or heads_q=, heads_kv=, head_dim="),
    ("wrong_heads", "plan with heads_q=4, or config=model.config"),
    ("mesh_cp_size", "the plan is for 4 workers but the mesh's 'cp' dimension has 2 ranks"),
    ("cp_dim_name", "none named cp_dim='context'"),
    ("checkpoint_with_cache", "train with use_cache=False"),
])
def test_inputs_that_do_not_fit_are_one_error_on_every_rank(results, case, expected):
    for rank, res in enumerate(results):
        message = res["bad_inputs"][case]
        assert message is not None and expected in message, (rank, message)
    # The cp ranks of one replica see the same error (replicas plan batches of their own).
    for replica in (0, 1):
        assert len({results[2 * replica + r]["bad_inputs"][case] for r in (0, 1)}) == 1


def test_extra_tokens_are_named(results):
    # Replica 0's batch: 597 tokens planned, 50 more given.
    assert "input_ids has 647 tokens but the plan's lengths add up to 597" in results[0]["bad_inputs"]["tokens_not_lengths"]


def test_group_still_works_after_errors(results):
    for res in results:
        assert res["bad_inputs"]["good_after_errors"] is None


def test_heads_under_tensor_parallelism(results):
    shapes = results[0]["heads_under_tp"]
    assert shapes[1] == dict(heads_q=64, heads_kv=8, head_dim=128, mask="causal")
    assert shapes[2] == dict(heads_q=32, heads_kv=4, head_dim=128, mask="causal")
    assert shapes[8]["heads_kv"] == 1 and shapes[8]["heads_q"] == 8
    assert shapes[16] == dict(heads_q=4, heads_kv=1, head_dim=128, mask="causal")  # KV heads replicated
    assert shapes["mistral"]["mask"] == "sliding_window" and shapes["mistral"]["window"] == 4096
    assert "do not divide over tp=3" in shapes["tp3"]


def test_compiled_model_has_no_graph_break_and_does_not_recompile(results):
    for res in results:
        assert res["recompiles"]["graph_breaks"] == 0, res["recompiles"]
        # One graph for the first batch; the second batch (other lengths, another plan) reuses it.
        assert res["recompiles"]["unique_graphs_after_each_step"] == [1, 1], res["recompiles"]


@pytest.fixture(scope="module")
def one_rank_results():
    return torch_cases.spawn_ok("single_rank_stack", world=1, timeout_s=300)[0]


@pytest.mark.parametrize("form", ["keyword", "with_block", "compiled"])
def test_one_rank_checkpointed_and_compiled(one_rank_results, form):
    # The shape scripts/torch_gpu_check.sh runs on a GPU (test_torch_cuda.py), here in float32 on CPU.
    res = one_rank_results[form]
    assert res["loss_rel_err"] < 1e-4 and res["worst_grad_rel_err"] < 1e-4, res
