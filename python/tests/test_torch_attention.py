"""fcp.torch.attention on 4 gloo ranks (CPU) against a float64 reference:
causal, full and sliding-window masks, GQA, coalesce 1 and 16, FCP and ring
plans, float32 and bfloat16, both layouts; and bad input raising one clear
error on every rank without a hang. Skipped where torch is not installed.
"""

import pytest

torch = pytest.importorskip("torch")

import torch_cases  # noqa: E402  (after the skip)


@pytest.fixture(scope="module")
def attention_results():
    return torch_cases.spawn_ok("attention")[0]


@pytest.mark.parametrize("case", torch_cases.ATTENTION_CASES, ids=lambda c: "-".join(map(str, c)))
def test_attention_matches_float64_reference(attention_results, case):
    tol = 1e-4 if case[3] == "float32" else 2e-2
    res = attention_results[case]
    for layout in ("dataloader", "plan"):
        for name, err in res[layout].items():
            assert err < tol, f"{case} {layout}: {name} relative error {err:.3g} >= {tol}"
    # The two layouts run the same program on the same rows.
    assert res["layouts_max_abs_diff"] < (1e-6 if case[3] == "float32" else 1e-2)


@pytest.fixture(scope="module")
def bad_input_results():
    return torch_cases.spawn_ok("bad_input", timeout_s=120)


@pytest.mark.parametrize("case, expected", [
    ("wrong_shape_on_rank_1", "rank 1: q has shape"),
    ("wrong_heads", "the plan needs (".replace("(", "")),
    ("workers_not_world", "workers=3 but the process group has 4 ranks"),
    ("lengths_disagree", "ranks disagree on the lengths"),
    ("non_contiguous_on_rank_3", "rank 3: k is not contiguous"),
    ("wrong_dtype", "dtype torch.float64"),
    ("dataloader_rows_in_plan_layout", "plan layout"),
    ("dispatch_wrong_rows", "dispatch: x has shape"),
])
def test_bad_input_is_one_error_on_every_rank(bad_input_results, case, expected):
    for rank, result in enumerate(bad_input_results):
        assert result[case] is not None, f"rank {rank}: {case} raised nothing"
        assert expected in result[case], f"rank {rank}: {result[case]}"
    # Every rank reports the same message.
    assert len({r[case] for r in bad_input_results}) == 1


def test_group_still_works_after_errors(bad_input_results):
    for result in bad_input_results:
        assert result["good_call_after_errors"] is None
