"""examples/train_llama_fsdp.py under torchrun, 4 gloo ranks as 2 dp x 2 cp: FSDP2 over
the flattened mesh, activation checkpointing, compiled decoder layers, the plan layout;
--check compares step 1's loss and every gradient with one process (docs/torch.md
records the run's time). Skipped where torch or transformers is not installed."""

import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import REPO  # noqa: E402


def test_example_matches_one_process_under_torchrun():
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
                          str(REPO / "examples" / "train_llama_fsdp.py"), "--check", "--steps", "2"],
                         capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "check: loss" in out and ": passed" in out, out[-4000:]
    assert "step   2  loss" in out, out[-4000:]
    print(f"train_llama_fsdp.py --check --steps 2 under torchrun (4 ranks): {seconds:.1f} s")
