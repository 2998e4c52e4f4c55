"""A stock Hugging Face Llama (2 layers, GQA) and a Mistral-style sliding-window
model with attn_implementation="fcp" on 4 gloo ranks: the loss and every
parameter gradient equal one process running each sequence on its own, in
both layouts. Skipped where torch or transformers is not installed.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch_cases  # noqa: E402


import torch_hf_cases  # noqa: E402


@pytest.fixture(scope="module")
def hf_results():
    return torch_cases.spawn_ok("hf", timeout_s=300)


@pytest.mark.parametrize("case", torch_hf_cases.CASES, ids=lambda c: "-".join(c))
def test_model_matches_per_sequence_reference(hf_results, case):
    for res in hf_results:
        assert res[case]["loss_rel_err"] < 1e-4, res[case]
        assert res[case]["worst_grad_rel_err"] < 1e-4, res[case]


def test_attention_outside_batch_is_an_error(hf_results):
    for res in hf_results:
        assert res["outside_batch"] is not None
        assert "without a plan: pass fcp_plan=plan" in res["outside_batch"]
