"""The audits' decisions, table-driven (the worker and reference worker only feed them numbers)."""

from __future__ import annotations

import random

import pytest

from harness.audits.attribution import OwnKernels
from harness.audits.model import Audit
from harness.audits.thresholds import policy_thresholds
from harness.audits.verdicts import (AuditConfig, attribution_verdict, clock_truth_verdict, is_fallback,
                                     confirmed_timing, known_input_verdict, needs_confirmation, plan_recheck,
                            precision_verdict, promotion_blockers, recheck_verdict, replay_verdict,
                            thread_verdict, timer_consistency_verdict)

CFG = AuditConfig()


def test_levels():
    assert AuditConfig.for_level("full").fresh_input_sets == 4
    assert AuditConfig.for_level("fast").fresh_input_sets == 2
    with pytest.raises(ValueError, match="audit level"):
        AuditConfig.for_level("paranoid")


def test_recheck_plan_is_secret_but_complete():
    seeds = [11, 22, 33, 44]
    orders = {tuple(s["seed"] for s in plan_recheck(seeds, 0, random.Random(i))) for i in range(20)}
    assert len(orders) > 1  # the order depends on the secret generator
    plan = plan_recheck(seeds, 2, random.Random(3))
    fresh = [s for s in plan if s["kind"] == "fresh"]
    reuse = [s for s in plan if s["kind"] == "reuse"]
    assert sorted(s["seed"] for s in fresh) == seeds and len(reuse) == 2
    for r in reuse:  # new content is always different from what the buffers held
        assert r["seed"] != fresh[r["buffers_of"]]["seed"]
    with pytest.raises(ValueError):
        plan_recheck([1], 1, random.Random(0))


@pytest.mark.parametrize("checks, passed, text", [
    ([], False, "no recheck calls"),
    ([({"kind": "fresh"}, True, ""), ({"kind": "reuse"}, True, "")], True, "all correct"),
    ([({"kind": "fresh"}, True, ""), ({"kind": "reuse"}, False, "stale")], False, "reused input buffers"),
    # a plan cached by `is` of an input (a contestant's GDN prefill) goes stale when the buffer gets new data
    ([({"kind": "fresh"}, True, ""), ({"kind": "reuse"}, False, "nan")], False, "keyed by a buffer's identity"),
    ([({"kind": "fresh"}, False, "nan")], False, "NaN-poisoned"),
])
def test_recheck_verdict(checks, passed, text):
    v = recheck_verdict(checks)
    assert v.passed is passed and text in v.detail


@pytest.mark.parametrize("same, fresh, passed", [
    ([0.31, 0.32], [0.31, 0.33], True),  # honest: a fresh call costs what a call on the timed inputs costs
    ([0.02, 0.02], [0.30, 0.29], False),  # replay: calls on the timed inputs are cache hits
    # a tiny kernel seen by the wall clock (H200, the example at b1 kv512): launch overhead on both sides
    ([0.165, 0.170, 0.168], [0.1815, 0.190], True),
    # one slow fresh call of two (a one-off on new buffers; H200 medians 4.62 vs 0.78 ms) is left out...
    ([0.78, 0.78], [8.46, 0.78], True),
    ([0.78, 0.78], [0.78, 8.46], True),
    # ...but replay shows in every pair: leaving out the slowest still leaves replayed pairs
    ([0.02, 0.02, 0.30, 0.02], [0.30, 0.30, 0.30, 0.31], False),
    ([0.02], [0.30], False),  # a single pair is judged as it is
    ([], [0.3], None),
    ([0.3], [], None),
])
def test_replay_verdict(same, fresh, passed):
    v = replay_verdict(same, fresh, CFG)
    assert (v is None) if passed is None else v.passed is passed


@pytest.mark.parametrize("same, fresh, tunings, passed, explained", [
    # H100 (2026-12-06): a contestant's Triton MoE autotuned on key=["MAX_TK"], the largest count of tokens per
    # expert read by .item(): every new content tuned again (2421 ms), its repeat ran the GEMMs (8.9 ms)
    ([8.887], [2421.0], [2], False, True),
    ([8.887], [2421.0], [0], False, False),  # the same wall clock with no tuning seen: a run-time cache, unexplained
    ([8.887], [2421.0], None, False, False),  # an older worker's reply: no count
    ([8.887], [9.1], [1], True, False),  # a tuning that cost nothing worth failing: nothing to explain
])
def test_tuning_on_content_still_fails_the_replay_audit_and_says_why(same, fresh, tunings, passed, explained):
    """The count comes from the candidate's own process, so it explains and never excuses."""
    v = replay_verdict(same, fresh, CFG, tunings)
    assert v.passed is passed
    assert ("autotuner tuned" in v.detail) is explained, v.detail
    if explained:
        assert "key the tuning on shapes" in v.detail



@pytest.mark.parametrize("known, new, repeats, passed", [
    # H100 (2026-12-05, run 22): an honest dispatch on batch 1, 0.59 ms on the timed content, one never-seen call
    # caught a host stall (1.38 ms); its repeat on the same content did not (0.6 ms)
    (0.5891, [1.38], [0.60], True),
    (0.5891, [1.38], None, False),  # without the repeat, the stall alone is judged (the fast level's one sample)
    # a table learnt before the run: the timed content answered at once, anything new computed, its repeat too
    (0.01, [0.30], [0.30], False),
    (0.01, [0.30, 0.31], [0.29, 0.30], False),
    # a cache filled at run time: new content computed once, then served; the timed content served at once. The
    # cheaper of the pair is the cache hit, so this audit passes it; replay_verdict is the one that fails it
    (0.02, [0.30], [0.02], True),
    # honest, both sides alike
    (0.31, [0.32, 0.30], [0.31, 0.31], True),
    (0.31, [], [], None),  # no never-seen call was timed: no verdict
])
def test_known_input_verdict(known, new, repeats, passed):
    v = known_input_verdict(known, new, CFG, repeats)
    if passed is None:
        assert v is None
        return
    assert v.passed is passed, v.detail
    if not passed:
        assert "answered without the work" in v.detail


def test_a_run_time_cache_passes_the_known_content_audit_only_because_the_replay_audit_fails_it():
    """The pair (0.30 new, 0.02 repeat) is the replay audit's own signature."""
    assert replay_verdict([0.02], [0.30], CFG).passed is False
    assert known_input_verdict(0.02, [0.30], CFG, [0.02]).passed is True


@pytest.mark.parametrize("known, repeat, timer, passed", [
    (0.47, 0.46, [0.45, 0.46, 0.46], True),    # honest: one callable, one content, timed the same way twice
    (0.46, 0.46, [0.02, 0.02, 0.02], False),   # lazy under the timer (red team round 4: the caller's frames read)
    (1.38, 0.47, [0.46, 0.46, 0.47], True),    # a host stall on the recheck's call: its repeat is the cost
    (0.012, None, [0.010, 0.011, 0.030], True),  # a 10 us kernel's launch noise is inside the slack
    (0.30, 0.30, [0.10, 0.11, 0.10], False),   # a third of the work under the timer
])
def test_timer_consistency_compares_the_timed_content_checked_with_the_timers_own_calls(known, repeat, timer,
                                                                                      passed):
    verdict = timer_consistency_verdict(known, repeat, timer, CFG)
    assert verdict.name == "timer_consistency" and verdict.passed is passed, verdict.detail
    assert ("less work was done under the official timer" in verdict.detail) is not passed


def test_timer_consistency_needs_the_timers_walls():
    assert timer_consistency_verdict(0.4, 0.4, [], CFG) is None


def audit(name, passed, detail=""):
    return Audit(name=name, passed=passed, detail=detail or name)


RIGHT = audit("fresh_input_recheck", True)
FAST = audit("fresh_input_timing", True)
SLOW_KNOWN = audit("known_input_timing", False, "never-seen 1.44 ms vs 0.46 ms")


@pytest.mark.parametrize("audits, needed", [
    ([RIGHT, FAST, SLOW_KNOWN], True),                        # every call right, one wall-clock audit failed
    ([RIGHT, audit("fresh_input_timing", False), audit("known_input_timing", True)], True),
    ([RIGHT, FAST, audit("known_input_timing", True)], False),  # nothing failed
    ([audit("fresh_input_recheck", False), FAST, SLOW_KNOWN], False),  # a wrong answer is never re-asked
    ([RIGHT, audit("thread_creation", False), SLOW_KNOWN], False),
    ([RIGHT], False),                                         # no GPU: no wall-clock audit
])
def test_needs_confirmation(audits, needed):
    assert needs_confirmation(audits) is needed


@pytest.mark.parametrize("second, passed, words", [
    # the second recheck passes: a host stall on one sample, withdrawn with both on record
    ([RIGHT, FAST, audit("known_input_timing", True, "never-seen 0.47 ms vs 0.46 ms")], True,
     "not confirmed: a second recheck on other never-seen content passed (never-seen 0.47 ms vs 0.46 ms); "
     "the first: never-seen 1.44 ms vs 0.46 ms"),
    # the second fails it too: replay or a table shows on every recheck
    ([RIGHT, FAST, audit("known_input_timing", False, "never-seen 1.5 ms vs 0.45 ms")], False,
     "confirmed by a second recheck on other never-seen content (never-seen 1.5 ms vs 0.45 ms)"),
    # the second was cut short (a crash, a protocol break): the first stands
    ([], False, "a second recheck gave no verdict"),
])
def test_confirmed_timing(second, passed, words):
    judged = confirmed_timing([RIGHT, FAST, SLOW_KNOWN], second)
    assert [a.name for a in judged] == ["fresh_input_recheck", "fresh_input_timing", "known_input_timing"]
    assert judged[:2] == [RIGHT, FAST]
    assert judged[2].passed is passed and words in judged[2].detail, judged[2].detail


def test_a_wrong_answer_on_the_second_recheck_is_kept():
    wrong = audit("fresh_input_recheck", False, "1 of 4 recheck calls wrong")
    judged = confirmed_timing([RIGHT, FAST, SLOW_KNOWN], [wrong, FAST, audit("known_input_timing", True)])
    assert [(a.name, a.passed) for a in judged] == [("fresh_input_recheck", False), ("fresh_input_timing", True),
                                                    ("known_input_timing", True)]
    assert judged[0] is wrong
    # and one only the second has
    threads = audit("thread_creation", False, "2 threads left running")
    judged = confirmed_timing([RIGHT, FAST, SLOW_KNOWN], [RIGHT, FAST, audit("known_input_timing", True), threads])
    assert judged[-1] is threads and [a.passed for a in judged] == [True, True, True, False]

@pytest.mark.parametrize("wall, span, launches, passed, text", [
    ([0.32, 0.33], [0.30], 1, True, "limit"),
    ([2.5, 2.4], [0.30], 1, False, "host threads"),  # work the CUPTI span cannot see
    ([0.10], [0.30], 1, False, "tampered"),  # wall shorter than the GPU span: impossible
    ([3.058], [3.131], 1, True, "vs CUPTI span"),  # H200, honest skill kernel: clocks differ a little between calls
    ([2.5], [3.131], 1, False, "tampered"),
    # measured on the H200: Triton launch + synchronisation around tiny kernels, one and two launches
    ([0.0627, 0.0697], [0.0039], 1, True, "limit"),
    ([0.1492], [0.0489], 2, True, "limit"),
    ([0.45], [0.0489], 1, False, "host threads"),  # 0.3 ms more than one launch explains
    # H200 (run 14), honest: a dispatching solution's one Triton launch of 40 arguments on a slower host
    ([0.1152, 0.125, 0.121], [0.0076], 1, True, "limit"),
    # one stray slow call among nine (another process on the device) is not host work; work in every call is
    ([0.065, 0.31, 0.066, 0.29, 0.064, 0.07, 0.33, 0.068, 0.3], [0.017], 1, True, "fastest of 9"),
    ([0.41, 0.43, 0.39, 0.40, 0.42], [0.017], 1, False, "host threads"),
])
def test_clock_truth(wall, span, launches, passed, text):
    v = clock_truth_verdict(wall, span, CFG, launches)
    assert v.passed is passed and text in v.detail


@pytest.mark.parametrize("wall, traced, span, passed, text", [
    # H200, a PyTorch attention of many small launches: untraced wall 1.116 ms under its span 1.264 ms, because
    # CUPTI tracing slowed its launches while the span was taken; under tracing the wall is 1.31 ms. Honest clock.
    ([1.116], [1.31], [1.264], True, "vs CUPTI span"),
    ([1.116], None, [1.264], False, "tampered"),  # the false reading that untraced walls alone give
    ([0.50], [0.52], [1.264], False, "tampered"),  # both walls far under the span: the clock lies
    # tracing's own cost does not count as host work: the upper bound reads the untraced wall
    ([0.0627], [0.1369], [0.0171], True, "limit"),
])
def test_clock_truth_under_tracing(wall, traced, span, passed, text):
    v = clock_truth_verdict(wall, span, CFG, 1, traced)
    assert v.passed is passed and text in v.detail, v


def test_threads():
    assert thread_verdict(5, 5).passed and not thread_verdict(5, 7).passed


@pytest.mark.parametrize("errors, passed", [
    ({"output": (1.1e-4, 0.8e-4), "lse": (2e-7, 3e-7)}, True),
    ({"output": (1.1e-4, 0.8e-4), "lse": (2.5e-3, 3e-7)}, False),  # fp16 statistics
    ({"output": (1e-9, 0.0)}, True),  # exact reference, negligible error: under the floor
    ({"output": (1e-3, 0.0)}, False),
    # H200, FlashInfer tensor cores on uniform_b1_kv8192: fast exp2/log2 in fp32, 129x an exact reference's
    # lse error but 4e-6 of lse's magnitude: fp32-class arithmetic, not a downcast.
    ({"lse": (5.64e-5, 4.37e-7, 13.7)}, True),
    ({"lse": (1.6e-3, 4.37e-7, 13.7)}, False),  # the same lse rounded to fp16 (mean 2^-13 relative)
    ({"lse": (5.64e-5, 4.37e-7, 0.5)}, False),  # the same error on a small-magnitude output is real
])
def test_precision(errors, passed):
    assert precision_verdict(errors, CFG).passed is passed


@pytest.mark.parametrize("kernels, mine, passed, fallback", [
    ({"_gqa_decode_kernel": 9.8e4, "[memset bytes=4 value=0]": 1e3}, {"_gqa_decode_kernel"}, True, False),
    ({"_gqa_decode_kernel": 1e4, "nvjet_sm90_tst_64x16": 9e4}, {"_gqa_decode_kernel"}, False, True),  # cuBLAS
    ({"_ZN2at6native18elementwise_kernelILi128ELi4EEEviT1_": 1e5}, {"elementwise_kernel"}, False, True),  # aten's
    ({"_ZN10flashinfer33BatchDecodeWithPagedKVCacheKernelEv": 1e5}, {"_gqa_decode_kernel"}, False, True),
    ({}, {"k"}, False, False),  # nothing measured: a failed audit, but not evidence of a library doing the work
])
def test_attribution(kernels, mine, passed, fallback):
    own = OwnKernels(frozenset(mine), frozenset())
    verdict = attribution_verdict(kernels, own, CFG, calls=1)
    assert verdict.passed is passed
    assert is_fallback([verdict]) is fallback
    if kernels:  # the dataset's own library baseline: every kernel it launches is its own
        assert attribution_verdict(kernels, OwnKernels(frozenset(), frozenset()), CFG, library_is_own=True).passed
    assert not is_fallback([Audit(name="precision", passed=False, detail="fallback: not attribution")])


def test_promotion_blockers():
    clean = [{"label": "a", "status": "PASSED", "audits": [{"name": "precision", "passed": True, "detail": ""}]}]
    assert promotion_blockers(clean, []) == []
    assert promotion_blockers(clean, [], audit_level="off") == ["audits were switched off"]
    dirty = [{"label": "a", "status": "PASSED", "audits": [{"name": "precision", "passed": False, "detail": "d"}]}]
    assert "audit precision failed" in promotion_blockers(dirty, [])[0]
    failed = [{"label": "a", "status": "TIMEOUT", "audits": []}]
    assert promotion_blockers(failed, []) == ["a: TIMEOUT"]
    static = [{"severity": "error", "rule": "timer_tampering", "path": "k.py", "line": 3}]
    assert "timer_tampering at k.py:3" in promotion_blockers(clean, static)[0]
    assert promotion_blockers([{"label": "a", "status": "SKIPPED"}], []) == ["no workload was evaluated"]


@pytest.mark.parametrize("data, expected", [
    (None, {}),
    ({"default": {"thresholds": {"speedup_bound": 8}}}, {"speedup_bound": 8.0}),
    # a later layer wins per key, other keys stay
    ({"default": {"thresholds": {"speedup_bound": 8, "replay_ratio": 3}},
      "op_type": {"gqa_paged": {"thresholds": {"speedup_bound": 4}}},
      "definition": {"d1": {"thresholds": {"precision_error_multiple": 2}}}},
     {"speedup_bound": 4.0, "replay_ratio": 3.0, "precision_error_multiple": 2.0}),
    ({"definition": {"other": {"thresholds": {"speedup_bound": 2}}}}, {}),  # another definition's layer
])
def test_policy_thresholds_layering(data, expected):
    assert policy_thresholds(data, "d1", "gqa_paged") == expected


@pytest.mark.parametrize("thresholds, words", [
    ({"speed_bound": 3}, "unknown threshold 'speed_bound'"),
    ({"speedup_bound": 0}, "positive number"),
    ({"speedup_bound": "5"}, "positive number"),
    ({"clock_ratio": True}, "positive number"),
    ({"attribution_min_share": 95}, "at most 1"),
    ({"attribution_aten_glue_share": 1.5}, "at most 1"),
    ({"roofline_margin": 1}, "at most 0.99"),
])
def test_policy_thresholds_say_what_is_wrong(thresholds, words):
    with pytest.raises(ValueError, match="definition.d1.thresholds") as err:
        policy_thresholds({"definition": {"d1": {"thresholds": thresholds}}}, "d1", None)
    assert words in str(err.value)
    # the static gate's policy loader refuses the same file
    from harness.audits.static_gate import PolicyError, policy_from_mapping

    with pytest.raises(PolicyError, match=words.split("'")[0]):
        policy_from_mapping({"version": 1, "definition": {"d1": {"thresholds": thresholds}}}, definition="d1")


def test_the_shipped_policy_sets_no_threshold_the_defaults_do():
    import yaml

    from harness.audits.static_gate import DEFAULT_POLICY_PATH

    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    assert policy_thresholds(data, "gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged") == {}


class _OracleStub:
    """What SessionAudits._precision_audit reads of a Session: the oracle and the thresholds."""

    def __init__(self, oracle):
        self.oracle, self.audit_config = oracle, AuditConfig()

    def oracle_outputs(self, definition, workload, seed):
        if isinstance(self.oracle, Exception):
            raise self.oracle
        return self.oracle


def _precision(oracle, got, ref):
    import torch  # noqa: F401

    from harness.audits.session_audits import SessionAudits

    from types import SimpleNamespace

    definition = type("D", (), {"outputs": {n: SimpleNamespace(dtype=str(t.dtype)) for n, t in ref.items()}})()
    return SessionAudits._precision_audit(_OracleStub(oracle), definition, None, 0, got, ref)


def test_precision_audit_without_an_oracle_is_not_judged_and_indices_are_left_to_correctness():
    import torch

    ref = {"scores": torch.tensor([1.0, 2.0]), "indices": torch.tensor([3, 1], dtype=torch.int32)}
    broken = _precision(RuntimeError("the oracle failed on workload w: view size is not compatible\n..."), ref, ref)
    assert broken.passed and broken.detail.startswith("not judged: the float64 oracle failed")
    oracle = {"scores": torch.tensor([1.0, 2.0], dtype=torch.float64), "indices": torch.tensor([0, 0])}
    # integer outputs that differ from the oracle's are not a precision matter; a float output far off is
    assert _precision(oracle, ref, ref).passed
    worse = {"scores": torch.tensor([1.5, 2.5]), "indices": ref["indices"]}
    assert not _precision(oracle, worse, {**ref, "scores": torch.tensor([1.0001, 2.0])}).passed


def test_integer_outputs_alone_are_not_run_in_float64():
    import torch

    ref = {"topk_indices": torch.tensor([[3, 1, -1]], dtype=torch.int32)}
    # the DSA indexer's reference reinterprets bytes as float32, which has no float64 form: never asked
    audit = _precision(AssertionError("the oracle must not be asked"), ref, ref)
    assert audit.passed and audit.detail == "not judged: integer outputs, judged exactly"
