"""Promotion and planning are pure functions over archived evaluations: table-driven tests."""

from __future__ import annotations

import pytest

from controller.plan import plan_round, request_budget, stop_reason
from controller.promote import (NO_TIMING, PROMOTED, REJECTED, EvalRecord, PairedMeasurement, PairedSample, decide,
                                gate_failure, screen_failure)
from controller.skills import PromotionThresholds, load_skills, promotion_thresholds

from support import ROOT

TH = PromotionThresholds(require_all_workloads_passed=True, require_clean_audits=True, min_repeats=2,
                         noise_floor_rel=0.02, paired_order="ABBA", max_regime_regression_rel=0.05,
                         stop_no_improvement_rounds=3, stop_at_fraction_of_floor=0.9)
CLEAN = ({"name": "input_mutation", "passed": True, "detail": "inputs unchanged"},)
REGIMES = {"w1": "latency-bound", "w2": "memory-bound"}
SKILLS_DIR = ROOT / "skills"


def rec(workload: str, status: str = "PASSED", audits=CLEAN, fraction=None) -> EvalRecord:
    return EvalRecord(workload=workload, status=status, audits=audits, label=workload,
                      regime=REGIMES.get(workload, ""), fraction_of_floor=fraction)


def paired(a: dict, b: dict, repeats: int = 2, order: str = "ABBA") -> PairedMeasurement:
    samples = []
    for r in range(repeats):
        for role in order:
            samples.append(PairedSample(role, r, a if role == "A" else b, submission_id=None))
    return PairedMeasurement(order, tuple(samples))


PASSING = [rec("w1"), rec("w2")]
A = {"w1": 1.0, "w2": 2.0}

CASES = [
    # (id, records, measurement, verdict, rule, phrase in the reason)
    ("nothing evaluated", [], paired(A, A), REJECTED, "all_workloads_passed", "no workload"),
    ("one workload failed", [rec("w1"), rec("w2", "INCORRECT_NUMERICAL")], paired(A, {"w1": 0.5, "w2": 1.0}),
     REJECTED, "all_workloads_passed", "1 of 2 workloads not PASSED: w2 INCORRECT_NUMERICAL"),
    ("skipped is not passed", [rec("w1"), rec("w2", "SKIPPED")], None, REJECTED, "all_workloads_passed", "SKIPPED"),
    ("audit dirty", [rec("w1"), rec("w2", audits=({"name": "stream_audit", "passed": False, "detail": "side stream"},))],
     paired(A, {"w1": 0.5, "w2": 1.0}), REJECTED, "clean_audits", "audit stream_audit failed on w2: side stream"),
    ("no timing on CPU", PASSING, None, REJECTED, "timing", NO_TIMING),
    ("too few repeats", PASSING, paired(A, {"w1": 0.5, "w2": 1.0}, repeats=1), REJECTED, "repeats",
     "2 paired repeats needed, 1 measured"),
    ("wrong order", PASSING, paired(A, {"w1": 0.5, "w2": 1.0}, order="AABB"), REJECTED, "paired_order",
     "ran AABB, the rules want ABBA"),
    ("within noise", PASSING, paired(A, {"w1": 0.99, "w2": 1.98}), REJECTED, "noise_floor", "within the noise floor"),
    ("slower", PASSING, paired(A, {"w1": 1.2, "w2": 2.2}), REJECTED, "noise_floor", "slower than"),
    ("regime regression", PASSING, paired(A, {"w1": 1.2, "w2": 1.0}), REJECTED, "regime_regression",
     "latency-bound +20.0%"),
    ("clear win", PASSING, paired(A, {"w1": 0.9, "w2": 1.5}), PROMOTED, "promoted", "over 2 ABBA repeats"),
]


@pytest.mark.parametrize("records, measurement, verdict, rule, phrase", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_decide(records, measurement, verdict, rule, phrase):
    decision = decide(records, measurement, TH, {"w1": "latency-bound", "w2": "memory-bound"})
    assert (decision.verdict, decision.rule) == (verdict, rule), decision
    assert any(phrase in r for r in decision.reasons), decision.reasons


def test_a_win_records_the_numbers_it_rests_on():
    decision = decide(PASSING, paired(A, {"w1": 0.9, "w2": 1.5}), TH, {"w1": "latency-bound", "w2": "memory-bound"})
    d = decision.details
    assert d["mean_incumbent_ms"] == pytest.approx(1.5) and d["mean_candidate_ms"] == pytest.approx(1.2)
    assert d["repeats"] == 2 and d["regime_ratios"] == pytest.approx({"latency-bound": 0.9, "memory-bound": 0.75})


def test_the_paired_means_average_every_run_of_a_role():
    # Drift inside a repeat (A 1.0 then 1.2) averages out; the candidate is 10% faster on the mean.
    samples = (PairedSample("A", 0, {"w1": 1.0}), PairedSample("B", 0, {"w1": 0.95}), PairedSample("B", 0, {"w1": 1.03}),
               PairedSample("A", 0, {"w1": 1.2}), PairedSample("A", 1, {"w1": 1.1}), PairedSample("B", 1, {"w1": 0.99}),
               PairedSample("B", 1, {"w1": 0.99}), PairedSample("A", 1, {"w1": 1.1}))
    decision = decide([rec("w1")], PairedMeasurement("ABBA", samples), TH)
    assert decision.promoted and decision.details["change_rel"] == pytest.approx(0.99 / 1.1 - 1)


def test_gates_come_before_measurement():
    assert gate_failure(PASSING, TH) is None
    assert gate_failure([rec("w1", "TIMEOUT")], TH).rule == "all_workloads_passed"


def test_thresholds_come_from_the_promotion_skill():
    assert promotion_thresholds(load_skills(SKILLS_DIR)) == TH


# -- planning and stopping ----------------------------------------------------------------------------------

SPENT0 = {"tokens": 0, "cost_usd": 0.0, "wall_s": 0.0}


@pytest.mark.parametrize("spent, budgets, idle_rounds, incumbent, expected", [
    (SPENT0, (None, None, None), 0, PASSING, None),
    ({**SPENT0, "tokens": 1000}, (1000, None, None), 0, PASSING, "budget: 1000 tokens spent of 1000"),
    ({**SPENT0, "cost_usd": 0.5}, (None, 0.25, None), 0, PASSING, "budget: $0.5000 spent of $0.2500"),
    ({**SPENT0, "wall_s": 61.0}, (None, None, 60.0), 0, PASSING, "budget: 61 s wall time spent of 60 s"),
    (SPENT0, (None, None, None), 3, PASSING, "no improvement for 3 rounds"),
    (SPENT0, (None, None, None), 2, [rec("w1", fraction=0.95), rec("w2", fraction=0.91)], "at the roofline"),
    (SPENT0, (None, None, None), 2, [rec("w1", fraction=0.95), rec("w2", fraction=0.5)], None),
])
def test_stop_reason(spent, budgets, idle_rounds, incumbent, expected):
    reason = stop_reason(spent, *budgets, idle_rounds, incumbent, TH)
    assert reason == expected or (expected and reason and reason.startswith(expected)), reason


def test_plan_picks_the_regime_furthest_from_its_roofline_or_with_failures():
    timed = [rec("w1", fraction=0.3), rec("w2", fraction=0.8)]
    assert plan_round(timed).regime == "latency-bound"
    failing = [rec("w1"), rec("w2", "RUNTIME_ERROR")]
    assert plan_round(failing).regime == "memory-bound" and "1 failing" in plan_round(failing).reason
    assert plan_round([]).regime == "all"


def test_request_budget_is_cut_to_what_the_loop_has_left():
    b = request_budget(8192, 2, 600, {"tokens": 900, "cost_usd": 0.75, "wall_s": 550}, 1000, 1.0, 580)
    assert (b.max_total_tokens, b.max_cost_usd, b.wall_s, b.max_candidates) == (100, 0.25, 30, 2)
    unbounded = request_budget(8192, 1, 600, SPENT0, None, None, None)
    assert unbounded.max_total_tokens is None and unbounded.max_cost_usd is None and unbounded.wall_s == 600


def timed(latencies: dict, status: str = "PASSED") -> list[EvalRecord]:
    return [EvalRecord(workload=w, status=status, latency_ms=ms, audits=CLEAN, label=w) for w, ms in latencies.items()]


@pytest.mark.parametrize("candidate, incumbent, screened, phrase", [
    ({"w1": 1.0, "w2": 2.0}, {"w1": 1.0, "w2": 2.0}, False, ""),  # a tie goes on to the paired measurement
    ({"w1": 1.01, "w2": 2.02}, {"w1": 1.0, "w2": 2.0}, False, ""),  # +1.0%: within the slack
    ({"w1": 1.05, "w2": 2.0}, {"w1": 1.0, "w2": 2.0}, True, "+1.7%"),  # the mean over workloads decides
    ({"w1": 1.2, "w2": 2.2}, {"w1": 1.0, "w2": 2.0}, True, "+13.3%"),  # clearly slower: no paired run
    ({"w1": 0.5, "w2": 1.0}, {"w1": 1.0, "w2": 2.0}, False, ""),  # faster: measured properly
    ({"w1": None, "w2": 2.5}, {"w1": 1.0, "w2": 2.0}, False, ""),  # no latency (no GPU): nothing screened
    ({"w1": 1.2, "w2": 2.5}, {"w1": 1.0}, False, ""),  # incumbent never ran w2: nothing screened
])
def test_screen(candidate, incumbent, screened, phrase):
    decision = screen_failure(timed(candidate), timed(incumbent), TH)
    assert (decision is not None) is screened
    if screened:
        assert decision.verdict == REJECTED and decision.rule == "screen" and phrase in decision.reasons[0]


@pytest.mark.parametrize("axes, label, lengths, regime", [
    ({"batch_size": 1}, "uniform_b1_kv8192", [8192], "latency-bound"),  # 8 programs for 132 SMs
    ({"batch_size": 16}, "uniform_b16_kv512", [512] * 16, "latency-bound"),  # 16 x 8 = 128 programs < 132 SMs
    ({"batch_size": 64}, "uniform_b64_kv2048", [2048] * 64, "memory-bound"),
    # one long request among short ones: lengths decide, whatever the label says
    ({"batch_size": 32}, "mixed_b32", [32768] + [256] * 31, "skewed"),
    ({"batch_size": 64}, "skewed_b64", None, "skewed"),  # lengths unknown: the label decides
    ({"batch_size": 64}, "uniform_b64", [2000, 2100] * 32, "memory-bound"),  # near-uniform lengths
])
def test_regime_of(axes, label, lengths, regime):
    from controller.latency_evidence import regime_of

    assert regime_of(axes, {"num_kv_heads": 8}, "H200", label, lengths) == regime
