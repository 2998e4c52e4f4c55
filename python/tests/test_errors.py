"""Bad input raises a Python exception with the command line's message; it
never crashes the interpreter."""
import json

import numpy as np

import pytest

import fcp
from conftest import run_cli

LENGTHS = [4096, 1000, 3000]

# (keyword arguments of fcp.plan, the same as fcp plan flags, exception type)
PLAN_ERRORS = [
    ({"workers": 0}, ["--workers", 0], ValueError),
    ({"workers": 2, "coalesce": 0}, ["--workers", 2, "--coalesce", 0], ValueError),
    ({"workers": 2, "block_size": -1}, ["--workers", 2, "--block-size", -1], ValueError),
    ({"workers": 2, "mask": "diagonal"}, ["--workers", 2, "--mask", "diagonal"], ValueError),
    ({"workers": 2, "window": 5}, ["--workers", 2, "--window", 5], ValueError),
    ({"workers": 2, "heads_q": 3, "heads_kv": 2}, ["--workers", 2, "--heads-q", 3, "--heads-kv", 2],
     ValueError),
    ({"workers": 2, "dtype_bytes": 0}, ["--workers", 2, "--dtype-bytes", 0], ValueError),
    ({"workers": 2, "planner": "nope"}, ["--workers", 2, "--planner", "nope"], ValueError),
    ({"workers": 2, "token_cap": 10}, ["--workers", 2, "--token-cap", 10], fcp.InfeasibleError),
    ({"workers": 2, "token_cap": -1}, ["--workers", 2, "--token-cap", -1], ValueError),
    ({"workers": 2, "heavy_fraction": -1}, ["--workers", 2, "--heavy-fraction", -1], ValueError),
    ({"workers": 2, "max_split": 0}, ["--workers", 2, "--max-split", 0], ValueError),
    ({"workers": 2, "network_flops_per_byte": -1}, ["--workers", 2, "--network-flops-per-byte", -1],
     ValueError),
    ({"workers": 2, "local_search": -3}, ["--workers", 2, "--local-search", -3], ValueError),
    ({"workers": 2, "rescue_max_split": -1}, ["--workers", 2, "--rescue-max-split", -1], ValueError),
    ({"workers": 2, "max_imbalance": -1}, ["--workers", 2, "--max-imbalance", -1], ValueError),
]


def test_tune_errors():
    """tune= tunes only the fcp planner, on a profile that exists."""
    with pytest.raises(ValueError, match="tunes the fcp planner, not 'magi'"):
        fcp.plan(LENGTHS, workers=2, planner="magi", tune="gpu-x")
    with pytest.raises(OSError, match="gpu-z"):  # not a built-in name: read as a file
        fcp.plan(LENGTHS, workers=2, tune="gpu-z")


def test_profile_is_recorded():
    """profile= sets the costs FCP ranks for, recorded in the plan; a bad name fails."""
    options = json.loads(fcp.plan(LENGTHS, workers=2, profile="gpu-y").to_json())["planner_options"]
    assert options["step_costs.nic_bytes_per_us"] == 100e9 * 1e-6
    options = json.loads(fcp.plan(LENGTHS, workers=2).to_json())["planner_options"]
    assert options["step_costs.nic_bytes_per_us"] == 50e9 * 1e-6
    with pytest.raises(OSError, match="gpu-z"):
        fcp.plan(LENGTHS, workers=2, profile="gpu-z")


@pytest.mark.parametrize("kwargs,flags,error", PLAN_ERRORS)
def test_plan_errors(kwargs, flags, error):
    with pytest.raises(error):
        fcp.plan(LENGTHS, **kwargs)


def assert_same_error(result, info, flags):
    """One exit-code rule (README): a bad flag value is a usage error (exit
    2); a value the command line takes but the batch cannot meet (an
    infeasible token cap) exits 1. The CLI rejects a name outside a fixed set
    (--mask, --dist) while parsing, naming the flag; every other message is
    the library's, printed as is."""
    assert result.stderr.count("\n") == 1
    assert result.returncode == (1 if isinstance(info.value, fcp.InfeasibleError) else 2)
    if result.stderr != f"fcp: {info.value}\n":
        flag = next(f for f in flags if f in ("--mask", "--dist"))
        bad = str(flags[flags.index(flag) + 1])
        assert bad in result.stderr and bad in str(info.value)


@pytest.mark.parametrize("kwargs,flags,error", PLAN_ERRORS)
def test_plan_error_messages_match_the_cli(kwargs, flags, error, cli, tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(map(str, LENGTHS)) + "\n")
    result = run_cli(cli, "plan", "--lengths", lengths, "--out", tmp_path / "p.json", *flags)
    with pytest.raises(error) as info:
        fcp.plan(LENGTHS, **kwargs)
    assert_same_error(result, info, flags)


@pytest.mark.parametrize("lengths,message", [
    ([], "the batch has no sequences"),
    ([5, 0], "sequence 1 has length 0"),
    ([5, -3], "sequence 1 has length -3"),
    ([2**31 + 1], "longer than 2\\^31"),
    ([1.5, 2.0], r"lengths\[0\] must be an integer, got float"),
    ((4, "5"), r"lengths\[1\] must be an integer, got str"),
    ([True, False], r"lengths\[0\] must be an integer, got bool"),
    ([3, 2**70], r"lengths\[1\] does not fit a 64-bit integer"),
    ([[1, 2]], r"lengths\[0\] must be an integer, got list"),
    (np.array([1.5, 2.0]), "lengths must be integers, got dtype float64"),
    (np.array([True, False]), "lengths must be integers, got dtype bool"),
    (np.array([2**70, 1]), "lengths must be integers, got dtype object"),
    (np.array([2**64 - 1], dtype=np.uint64), "does not fit a 64-bit integer"),
    (np.array([[1, 2]]), "lengths must be one-dimensional"),
    (range(0), "the batch has no sequences"),
    ("abc", "lengths must be one-dimensional"),
    (None, "lengths must be one-dimensional"),
])
def test_bad_lengths(lengths, message):
    with pytest.raises(ValueError, match=message):
        fcp.plan(lengths, workers=2)


@pytest.mark.parametrize("kwargs,error,message", [
    ({"workers": 2.0}, TypeError, "workers must be an integer"),
    ({"workers": "2"}, TypeError, "workers must be an integer"),
    ({"workers": 2**40}, ValueError, "workers = 1099511627776 does not fit a 32-bit integer"),
    ({"workers": 2**70}, ValueError, "does not fit a 64-bit integer"),
    ({"workers": 2, "mask": 1}, TypeError, "mask must be a string"),
    ({"workers": 2, "reshuffle_locality": 1}, TypeError, "reshuffle_locality must be a bool"),
    ({"workers": 2, "traffic_leveling": "no"}, TypeError, "traffic_leveling must be a bool"),
    ({"workers": 2, "mask": "sliding_window"}, ValueError, "needs window=W"),
    ({"workers": 2, "mask": "sliding_window", "window": 0}, ValueError, "window >= 1, got 0"),
])
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        fcp.plan(LENGTHS, **kwargs)


@pytest.mark.parametrize("keyword,close", [
    ("heavy_fracton", "'heavy_fraction'"), ("blocksize", "'block_size'"), ("zzz", None),
    ("local_search_rounds", "'local_search'"), ("workerz", "'workers'"),
])
def test_an_unknown_keyword_is_named_with_the_closest_ones(keyword, close):
    with pytest.raises(TypeError, match=f"plan: unknown keyword '{keyword}'") as info:
        fcp.plan(LENGTHS, workers=2, **{keyword: 1})
    assert "keywords: block_size, check," in str(info.value)
    assert str(info.value).endswith(", window, workers)")
    if close:
        assert f"did you mean {close}" in str(info.value)
    else:
        assert "did you mean" not in str(info.value)


def test_settings_are_keyword_only():
    with pytest.raises(TypeError):
        fcp.plan(LENGTHS, 2, 1024)


def test_numpy_integer_arguments_are_accepted(fcp_planner):
    plan = fcp.plan(np.array([4096, 100], dtype=np.int32), workers=np.int64(2), block_size=np.int16(512))
    assert plan.workers == 2 and plan.block_size == 512
    # Every form of lengths gives the same plan: list, tuple, list of numpy
    # scalars, unsigned array.
    for lengths in ([4096, 100], (4096, 100), [np.int64(4096), np.uint16(100)],
                    np.array([4096, 100], dtype=np.uint32)):
        assert fcp.plan(lengths, workers=2, block_size=512) == plan


@pytest.mark.parametrize("text,error", [
    ("", fcp.ParseError), ("{", fcp.ParseError), ("[]", fcp.ParseError),
    ('{"format": "fcp-plan", "version": 2}', fcp.ParseError),
])
def test_malformed_json(text, error):
    with pytest.raises(error, match="^plan: "):
        fcp.Plan.from_json(text)


# ---- issue 19: hostile inputs --------------------------------------------------

def test_deeply_nested_json_raises_instead_of_crashing(hand_text):
    deep = "[" * 100000 + "]" * 100000
    with pytest.raises(fcp.ParseError, match="nest deeper than 64 levels"):
        fcp.Plan.from_json(hand_text.replace('"workers": ', '"workers": ' + deep + ", \"x\": ", 1))


def test_a_long_value_is_quoted_by_a_short_prefix(hand_text):
    long = hand_text.replace('"workers": ', '"workers": "' + "x" * 10**7 + '", "w": ', 1)
    with pytest.raises(fcp.ParseError, match="a string of 10000000 bytes") as info:
        fcp.Plan.from_json(long)
    assert len(str(info.value)) < 300


def test_oversize_batches_are_refused_from_their_sizes():
    import time
    start = time.monotonic()
    with pytest.raises(ValueError, match="more than 2\\^27"):
        fcp.plan([2**31], workers=4, block_size=64)
    assert time.monotonic() - start < 5


def test_from_json_needs_text():
    with pytest.raises(TypeError):
        fcp.Plan.from_json(b"{}")
    with pytest.raises(TypeError):
        fcp.Plan(None)


# Well-formed JSON whose ids point outside the plan: everything that indexes
# through them must raise InvalidPlanError instead of reading out of bounds.
@pytest.mark.parametrize("old,new", [
    ('[[0, 0, 2]]', '[[9, 0, 2]]'),                   # segment of a sequence that does not exist
    ('{"worker": 1, "segments"', '{"worker": 7, "segments"'),  # owner beyond the workers
    ('[[0, 0, 2]]', '[[0, 0, 200]]'),                 # segment past the end of its sequence
    ('"send": [[0, 1, 0]', '"send": [[40, 1, 0]'),    # transfer of a block that does not exist
    ('"compute": [[1, 0], [3, 2]]', '"compute": [[1, 0], [3, -2]]'),
    ('"workers": 2', '"workers": 0'),
])
def test_out_of_range_ids_raise(hand_text, old, new):
    assert old in hand_text
    plan = fcp.Plan.from_json(hand_text.replace(old, new, 1))
    for use in [plan.validate, plan.metrics, plan.worker_metrics, plan.summary,
                plan.token_permutation, plan.inverse_token_permutation, plan.token_placement,
                lambda: plan.token_permutation(0)]:
        with pytest.raises((fcp.InvalidPlanError, ValueError)):
            use()
    # Arrays that only copy values out of the plan stay available for inspection.
    assert plan.segments.shape == (6, 4)


@pytest.mark.parametrize("kwargs,flags", [
    ({"dist": "zipf"}, ["--dist", "zipf"]),
    ({"workers": 0}, ["--workers", 0]),
    ({"tokens_per_worker": 0}, ["--tokens-per-worker", 0]),
    ({"max_len": 10, "min_len": 20}, ["--max-len", 10, "--min-len", 20]),
])
def test_workload_errors_match_the_cli(kwargs, flags, cli):
    result = run_cli(cli, "workload", *flags)
    with pytest.raises(ValueError) as info:
        fcp.workload(**kwargs)
    assert_same_error(result, info, flags)


# ---- from an adversarial sweep of the API ------------------------------------

def test_index_that_mutates_the_lengths_list_does_not_crash():
    lengths = [1] * 1000

    class Shrinks:
        def __index__(self):
            lengths.clear()  # would free the items the reader walks
            return 1

    lengths[0] = Shrinks()
    assert fcp.plan(lengths, 4).num_sequences == 1000  # the list as it was when passed


def test_index_errors_propagate():
    class Boom:
        def __index__(self):
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fcp.plan([5, Boom()], 2)


def test_coalesce_near_int32_max_plans():
    fcp.plan([3000], 2, block_size=256, coalesce=2**31 - 1).validate()


def test_parsed_invalid_plan_is_checked_before_derived_layouts(hand_text):
    wide = fcp.Plan.from_json(hand_text.replace('"workers": 2', '"workers": 2147483647', 1))
    with pytest.raises(fcp.InvalidPlanError):
        wide.dataloader_offsets
    huge = fcp.Plan.from_json(hand_text.replace('"sequences": [', '"sequences": [9223372036854775807, ', 1))
    with pytest.raises((fcp.InvalidPlanError, ValueError)):
        huge.total_tokens


@pytest.mark.parametrize("call,error", [
    (lambda: fcp.plan([5, 6], 2, check="false"), TypeError),
    (lambda: fcp.plan([5, 6], 2).validate("no"), TypeError),
    (lambda: fcp.plan([5, 6], 2, heavy_fraction="0.5"), TypeError),
    (lambda: fcp.workload(workers=2, sigma=True), TypeError),
    (lambda: fcp.plan([5, 6], 2, token_cap=0), ValueError),
    (lambda: fcp.plan([5, 6], 2).simulate(trace="/tmp/x\0.json"), ValueError),
])
def test_loose_types_and_values_are_refused(call, error):
    with pytest.raises(error):
        call()


def test_lengths_from_a_generator():
    assert fcp.plan((n for n in [5, 6, 7]), 2) == fcp.plan([5, 6, 7], 2)


def test_extension_refuses_a_float_lengths_array_instead_of_truncating_it():
    # fcp.plan converts numpy input to int64 itself; the extension underneath
    # must not convert (and truncate) whatever else reaches it.
    from fcp import _fcp
    with pytest.raises(TypeError, match="int64 array"):
        _fcp.plan(np.array([4096.7, 1000.2]), "causal", 0, "fcp", False, {"workers": 2}, "", "")
