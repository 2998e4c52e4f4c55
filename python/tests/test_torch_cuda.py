"""fcp.torch on CUDA (marker `gpu`; skipped with the reason where no device is
visible). bfloat16 against the float64 reference, relative error < 2e-2:

- the stage kernels (flash varlen launches + lse merge) of 1- and 4-worker
  plans, the 4 ranks emulated in one process on one GPU (NCCL cannot pair
  two ranks on one device), transfers done as device copies;
- the same launches against the dense stand-in of the flash kernel, so a
  difference in flash's mask or lse conventions shows up per launch;
- fcp.torch.attention end to end (both layouts, forward and backward, the
  reshuffle and the stage loop with the communication stream) on one rank
  of a cpu:gloo,cuda:nccl group.

Run by scripts/torch_gpu_check.sh; passed on one H200 (docs/torch.md "CUDA").
"""

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is false)"),
]

from fcp.torch import _varlen as V  # noqa: E402

import torch_cases  # noqa: E402
from test_torch_varlen import run_program_emulated  # noqa: E402

TOL = 2e-2


@pytest.mark.parametrize("mask", ["causal", "sliding_window", "full"])
@pytest.mark.parametrize("workers, coalesce", [(1, 16), (4, 1), (4, 16)])
def test_flash_stages_match_float64(mask, workers, coalesce):
    errs = run_program_emulated(workers, mask, "cuda", V.flash_forward, V.flash_backward, torch.bfloat16, coalesce)
    for name, e in errs.items():
        assert e < TOL, f"{mask}, {workers} workers, coalesce {coalesce}: {name} relative error {e:.3g}"


@pytest.mark.parametrize("left, right", [(-1, 0), (-1, -1), (49, 0), (17, -1), (0, -1)])
def test_flash_launch_matches_the_dense_stand_in(left, right):
    items = [(V.Piece(0, 40, 0, 40, left, right), 0), (V.Piece(40, 13, 40, 70, left, right), 40)]
    launch = V.launches(items)[0].to("cuda")
    g = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(n, h, 64, generator=g).cuda().bfloat16() for n, h in
                   ((53, 8), (110, 2), (110, 2), (53, 8)))
    scale = 1 / 8
    o, lse = V.flash_forward(q, k, v, launch, scale)
    o_ref, lse_ref = V.reference_forward(q, k, v, launch, scale)
    assert lse.shape == (53, 8) and lse.dtype == torch.float32
    assert (lse - lse_ref).abs().max().item() < 5e-2
    assert ((o.float() - o_ref.float()).norm() / o_ref.float().norm()).item() < TOL
    got = V.flash_backward(do, q, k, v, o_ref, lse_ref, launch, scale)
    want = V.reference_backward(do, q, k, v, o_ref, lse_ref, launch, scale)
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        err = ((a.float() - b.float()).norm() / b.float().norm()).item()
        assert err < TOL, f"({left}, {right}) {name} relative error {err:.3g}"


@pytest.fixture(scope="module")
def attention_results():
    return torch_cases.spawn_ok("attention_cuda", world=1)[0]


@pytest.mark.parametrize("case", torch_cases.CUDA_ATTENTION_CASES, ids=lambda c: "-".join(map(str, c)))
def test_attention_on_cuda_matches_float64(attention_results, case):
    res = attention_results[case]
    for layout in ("dataloader", "plan"):
        for name, err in res[layout].items():
            assert err < TOL, f"{case} {layout}: {name} relative error {err:.3g} >= {TOL}"
    assert res["layouts_max_abs_diff"] < 1e-2


def test_float32_on_cuda_is_refused_with_a_clear_error():
    message = torch_cases.spawn_ok("float32_cuda", world=1, timeout_s=120)[0]
    assert "expected torch.bfloat16 or torch.float16 on cuda" in message


@pytest.fixture(scope="module")
def stack_results():
    return torch_cases.spawn_ok("single_rank_stack_cuda", world=1, timeout_s=300)[0]


@pytest.mark.parametrize("form", ["keyword", "with_block", "compiled"])
def test_checkpointed_backward_and_compiled_layers_on_cuda(stack_results, form):
    # transformers' checkpointing recomputes attention in backward on autograd's CUDA device
    # thread, after the with-block (form "with_block") has closed; "compiled": decoder layers
    # compiled with fullgraph=True (Inductor). bfloat16 against eager attention in bfloat16.
    res = stack_results[form]
    assert res["loss_rel_err"] < 2e-2 and res["worst_grad_rel_err"] < 5e-2, res
