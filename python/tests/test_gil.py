"""Long native calls release the GIL: another Python thread keeps running."""
import json
import threading
import time

import fcp


def _other_thread_runs_during(call, attempts=3):
    """Runs `call` in a thread while this thread spins; True if this thread
    executed Python code in the middle half of the call (impossible if the
    call held the GIL throughout). On a loaded machine this thread may just
    not get a core in that window, so a few attempts are made: a call that
    holds the GIL fails every one of them."""
    for _ in range(attempts):
        seconds, ran = _one_attempt(call)
        if ran:
            break
    return seconds, ran


def _one_attempt(call):
    window = {}

    def worker():
        window["start"] = time.perf_counter()
        call()
        window["end"] = time.perf_counter()

    ticks = []
    thread = threading.Thread(target=worker)
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    start, end = window["start"], window["end"]
    quarter = (end - start) / 4
    return end - start, any(start + quarter <= t <= end - quarter for t in ticks)


def _big_plan_text(sequences):
    # Every sequence one block on worker s % 8: only local pairs, a valid plan.
    blocks = [{"worker": s % 8, "segments": [[s, 0, 1]]} for s in range(sequences)]
    pairs = [[s, s] for s in range(sequences)]
    return json.dumps({
        "format": "fcp-plan", "version": 1, "planner": "big", "workers": 8,
        "mask": {"kind": "causal"},
        "attention": {"heads_q": 8, "heads_kv": 8, "head_dim": 8, "dtype_bytes": 2},
        "block_size": 1, "coalesce": 1, "token_cap": (sequences + 7) // 8,
        "sequences": [1] * sequences, "blocks": blocks,
        "forward": [{"send": [], "compute": pairs}],
        "backward": [{"send_kv": [], "send_dkv": [], "compute": pairs}]})


def test_parsing_and_validation_release_the_gil():
    text = _big_plan_text(200_000)  # validation takes ~10 ms per 40K blocks
    plan = fcp.Plan.from_json(text)
    for call in [lambda: fcp.Plan.from_json(text), plan.validate]:
        seconds, ran = _other_thread_runs_during(call)
        assert seconds > 0.01, "the call is too short to tell"
        assert ran, f"no other Python thread ran during a {seconds:.3f} s native call"


def test_planning_releases_the_gil(fcp_planner):
    lengths = fcp.workload("lognormal", workers=256, tokens_per_worker=32768, max_len=524288, seed=1)
    seconds, ran = _other_thread_runs_during(lambda: fcp.plan(lengths, workers=256))
    assert seconds > 0.005, "planning is too fast to tell"
    assert ran, f"no other Python thread ran during {seconds:.3f} s of planning"


def test_threads_planning_concurrently_agree(fcp_planner):
    lengths = fcp.workload("lognormal", workers=16, tokens_per_worker=32768, seed=4)
    results = [None] * 4

    def work(i):
        results[i] = fcp.plan(lengths, workers=16).to_json()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1


def test_threads_sharing_a_plan_build_views_once(hand):
    views = []

    def work():
        views.append(hand.token_permutation().__array_interface__["data"][0])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(views)) == 1
