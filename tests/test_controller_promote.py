"""Promotion and planning are pure functions over archived evaluations: table-driven tests.

Promotion is judged by the definition score's aggregate (the arithmetic mean of per-workload speedups,
incumbent latency / candidate latency), never by a mean of raw latencies."""

from __future__ import annotations

import pytest

from controller.plan import plan_round, request_budget, stop_reason
from controller.promote import (NO_TIMING, PROMOTED, REJECTED, EvalRecord, FullEvaluation, PairedMeasurement,
                                PairedSample, confirm, decide, decisive_speedups, futility_stop, gate_failure,
                                screen_failure)
from controller.skills import PromotionThresholds, load_skills, promotion_thresholds

from support import ROOT

TH = PromotionThresholds(require_all_workloads_passed=True, require_clean_audits=True, require_full_audit=True,
                         min_repeats=2, noise_floor_rel=0.02, paired_order="ABBA", max_regime_regression_rel=0.05,
                         max_workload_regression_rel=0.05, stop_no_improvement_rounds=3,
                         stop_at_fraction_of_floor=0.9)
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
    ("audit dirty",
     [rec("w1"), rec("w2", audits=({"name": "stream_audit", "passed": False, "detail": "side stream"},))],
     paired(A, {"w1": 0.5, "w2": 1.0}), REJECTED, "clean_audits", "audit stream_audit failed on w2: side stream"),
    ("no timing on CPU", PASSING, None, REJECTED, "timing", NO_TIMING),
    ("too few repeats", PASSING, paired(A, {"w1": 0.5, "w2": 1.0}, repeats=1), REJECTED, "repeats",
     "2 paired repeats needed, 1 measured"),
    ("wrong order", PASSING, paired(A, {"w1": 0.5, "w2": 1.0}, order="AABB"), REJECTED, "paired_order",
     "ran AABB, the rules want ABBA"),
    ("within noise", PASSING, paired(A, {"w1": 0.99, "w2": 1.98}), REJECTED, "noise_floor", "within the noise floor"),
    ("slower", PASSING, paired(A, {"w1": 1.2, "w2": 2.2}), REJECTED, "noise_floor", "slower than"),
    ("a latency of zero is no timing", PASSING, paired(A, {"w1": 0.0, "w2": 1.0}), REJECTED, "timing",
     "no paired latency for workload(s) w1"),
    # w1 1.0 -> 1.2 ms (0.833x), w2 2.0 -> 1.0 ms (2x): the mean speedup (1.417x) wins, the latency-bound regime loses
    ("regime regression", PASSING, paired(A, {"w1": 1.2, "w2": 1.0}), REJECTED, "regime_regression",
     "latency-bound 0.833x (-16.7%)"),
    ("clear win", PASSING, paired(A, {"w1": 0.9, "w2": 1.5}), PROMOTED, "promoted", "over 2 workload(s) and 2 ABBA"),
    ("a bound is on the allowed side", PASSING, paired(A, {"w1": 1.0 / 0.95, "w2": 1.0}), PROMOTED, "promoted",
     "slowest workload w1 0.950x"),
]


@pytest.mark.parametrize("records, measurement, verdict, rule, phrase", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_decide(records, measurement, verdict, rule, phrase):
    decision = decide(records, measurement, TH, {"w1": "latency-bound", "w2": "memory-bound"})
    assert (decision.verdict, decision.rule) == (verdict, rule), decision
    assert any(phrase in r for r in decision.reasons), decision.reasons


def timed(latencies: dict, status: str = "PASSED") -> list[EvalRecord]:
    return [EvalRecord(workload=w, status=status, audits=CLEAN, label=w, regime=REGIMES.get(w, ""), latency_ms=ms)
            for w, ms in latencies.items()]


DECISIVE = TH.model_copy(update={"decisive_speedup": 1.5})
INCUMBENT = timed({"w1": 3.0, "w2": 6.0})


@pytest.mark.parametrize("thresholds, candidate, same_card, expected", [
    (DECISIVE, {"w1": 1.0, "w2": 2.0}, True, {"w1": 3.0, "w2": 3.0}),     # 3x on both: no pairing needed
    (DECISIVE, {"w1": 2.0, "w2": 4.0}, True, {"w1": 1.5, "w2": 1.5}),     # exactly at the margin counts
    (DECISIVE, {"w1": 0.5, "w2": 4.1}, True, None),                       # 6x and 1.46x: one workload is not decisive
    (DECISIVE, {"w1": 1.0, "w2": 2.0}, False, None),                      # another card: its numbers are not comparable
    (TH, {"w1": 1.0, "w2": 2.0}, True, None),                             # the rules pair every promotion
    (DECISIVE, {"w1": 1.0}, True, {"w1": 3.0}),                           # the candidate's workloads are compared
])
def test_a_decisive_win_is_every_workload_by_the_margin_on_the_same_card(thresholds, candidate, same_card, expected):
    assert decisive_speedups(timed(candidate), INCUMBENT, thresholds, same_card) == expected


def test_a_failed_or_untimed_candidate_is_never_decisive():
    assert decisive_speedups(timed({"w1": 1.0, "w2": 2.0}, "INCORRECT_NUMERICAL"), INCUMBENT, DECISIVE, True) is None
    assert decisive_speedups(timed({"w1": 1.0, "w2": None}), INCUMBENT, DECISIVE, True) is None


def test_a_decisive_win_is_promoted_without_a_paired_measurement_and_says_so():
    candidate = timed({"w1": 1.0, "w2": 2.0})
    speedups = decisive_speedups(candidate, INCUMBENT, DECISIVE, True)
    decision = decide(candidate, None, DECISIVE, REGIMES, speedups)
    assert (decision.verdict, decision.rule) == (PROMOTED, "promoted")
    assert "decisive: every workload at least 1.5x" in decision.reasons[0] and "no paired measurement" in \
        decision.reasons[0]
    assert decision.details["decisive"] is True and decision.details["mean_speedup"] == pytest.approx(3.0)
    # the gates still come first, and without a decisive win there is no timing to decide on
    assert decide(timed({"w1": 1.0, "w2": 2.0}, "RUNTIME_ERROR"), None, DECISIVE, REGIMES, speedups).verdict == REJECTED
    assert decide(candidate, None, DECISIVE, REGIMES, None).rule == "timing"


@pytest.mark.parametrize("value", [1.0, 1.19, 0.5])
def test_a_decisive_margin_near_the_noise_is_refused(value):
    with pytest.raises(ValueError, match="at least 1.2"):
        PromotionThresholds.model_validate({**TH.model_dump(), "decisive_speedup": value})


def test_a_win_records_the_numbers_it_rests_on():
    decision = decide(PASSING, paired(A, {"w1": 0.9, "w2": 1.5}), TH, {"w1": "latency-bound", "w2": "memory-bound"})
    d = decision.details
    assert d["mean_speedup"] == pytest.approx((1 / 0.9 + 2 / 1.5) / 2)
    assert d["workload_speedups"] == pytest.approx({"w1": 1 / 0.9, "w2": 2 / 1.5})
    assert d["mean_incumbent_ms"] == pytest.approx(1.5) and d["mean_candidate_ms"] == pytest.approx(1.2)  # reported
    assert d["repeats"] == 2 and d["regime_speedups"] == pytest.approx({"latency-bound": 1 / 0.9,
                                                                        "memory-bound": 2 / 1.5})


def test_the_paired_means_average_every_run_of_a_role():
    # Drift inside a repeat (A 1.0 then 1.2) averages out; the candidate is 10% faster on the mean.
    samples = (PairedSample("A", 0, {"w1": 1.0}), PairedSample("B", 0, {"w1": 0.95}),
               PairedSample("B", 0, {"w1": 1.03}), PairedSample("A", 0, {"w1": 1.2}),
               PairedSample("A", 1, {"w1": 1.1}), PairedSample("B", 1, {"w1": 0.99}),
               PairedSample("B", 1, {"w1": 0.99}), PairedSample("A", 1, {"w1": 1.1}))
    decision = decide([rec("w1")], PairedMeasurement("ABBA", samples), TH)
    assert decision.promoted and decision.details["mean_speedup"] == pytest.approx(1.1 / 0.99)


# -- the score decides: mean of per-workload speedups, not mean latency -----------------------------------------

# One 2 ms workload and nine 20 us ones (labels "big", "s0".."s8"), all in one regime.
BIG_SMALL = ["big"] + [f"s{i}" for i in range(9)]
INC = {"big": 2.0, **{f"s{i}": 0.02 for i in range(9)}}


def scaled(big: float, small: float) -> dict:
    """Candidate latencies: the big workload's speedup ``big``, each small one's ``small``."""
    return {w: ms / (big if w == "big" else small) for w, ms in INC.items()}


SCORE_CASES = [
    # (id, candidate latencies, verdict, rule, phrase). Mean latency and mean speedup disagree in the first two.
    # big 1.25x (2 -> 1.6 ms), small 0.96x each: mean latency 9.8% lower ("better"), mean speedup 0.989x (worse)
    ("mean latency better, score worse", scaled(1.25, 0.96), REJECTED, "noise_floor", "mean speedup 0.989x"),
    # big 0.97x (2 -> 2.06 ms), small 1.5x each: mean latency 2.4% higher ("worse"), mean speedup 1.447x (better)
    ("mean latency worse, score better", scaled(0.97, 1.5), PROMOTED, "promoted", "mean speedup 1.447x"),
    # one small workload 0.90x, the rest 1.2x: the mean (1.17x) and the regime win, one workload regresses
    ("one workload regresses beyond the bound",
     {**scaled(1.2, 1.2), "s3": 0.02 / 0.9}, REJECTED, "workload_regression",
     "1 workload(s) regressing beyond the 5% bound: s3 0.900x (-10.0%)"),
    ("one workload within the bound", {**scaled(1.2, 1.2), "s3": 0.02 / 0.96}, PROMOTED, "promoted",
     "slowest workload s3 0.960x"),
]


@pytest.mark.parametrize("candidate, verdict, rule, phrase", [c[1:] for c in SCORE_CASES],
                         ids=[c[0] for c in SCORE_CASES])
def test_the_score_decides_not_mean_latency(candidate, verdict, rule, phrase):
    records = [rec(w) for w in BIG_SMALL]
    decision = decide(records, paired(INC, candidate), TH, {w: "all" for w in BIG_SMALL})
    assert (decision.verdict, decision.rule) == (verdict, rule), decision
    assert any(phrase in r for r in decision.reasons), decision.reasons
    # the mean latencies are recorded beside the score, and do not decide
    d = decision.details
    assert d["mean_speedup"] == pytest.approx(sum(INC[w] / candidate[w] for w in BIG_SMALL) / len(BIG_SMALL))
    assert d["mean_candidate_ms"] == pytest.approx(sum(candidate.values()) / len(BIG_SMALL))


def test_the_latency_mean_and_the_score_disagree_in_the_table():
    """The first two score cases are what they claim: mean latency points one way, mean speedup the other."""
    def mean(latencies: dict) -> float:
        return sum(latencies.values()) / len(latencies)

    better_by_latency = scaled(1.25, 0.96)
    assert mean(better_by_latency) < mean(INC) * 0.98
    worse_by_latency = scaled(0.97, 1.5)
    assert mean(worse_by_latency) > mean(INC)


def full(records, level="full", blockers=(), sid=7) -> FullEvaluation:
    return FullEvaluation(submission_id=sid, audit_level=level, records=tuple(records), blockers=tuple(blockers))


FALLBACK = ({"name": "kernel_attribution", "passed": False, "detail": "62% of GPU time in torch kernels"},)

CONFIRM_CASES = [
    # (id, full evaluation, verdict, rule, phrase)
    ("clean at full level", full(PASSING), PROMOTED, "promoted", "full-audit evaluation (submission 7) promotable"),
    ("failed audit at full level", full([rec("w1"), rec("w2", audits=FALLBACK)]), REJECTED, "full_audit",
     "full-audit evaluation (submission 7): audit kernel_attribution failed on w2: 62% of GPU time in torch"),
    ("a workload failed at full level", full([rec("w1"), rec("w2", "INCORRECT_NUMERICAL")]), REJECTED, "full_audit",
     "1 of 2 workloads not PASSED: w2 INCORRECT_NUMERICAL"),
    ("harness blocker", full(PASSING, blockers=["static gate: 1 error finding(s), first timer at k.py:3"]), REJECTED,
     "full_audit", "static gate: 1 error finding(s)"),
    ("not at the full level", full(PASSING, level="fast"), REJECTED, "full_audit", "ran at audit level 'fast'"),
    ("a workload missing", full([rec("w1")]), REJECTED, "full_audit", "did not evaluate workload(s) w2"),
    ("none made", None, REJECTED, "full_audit", "no full-audit evaluation was made"),
]


@pytest.mark.parametrize("evaluation, verdict, rule, phrase", [c[1:] for c in CONFIRM_CASES],
                         ids=[c[0] for c in CONFIRM_CASES])
def test_a_promotion_stands_only_on_a_promotable_full_audit_evaluation(evaluation, verdict, rule, phrase):
    won = decide(PASSING, paired(A, {"w1": 0.9, "w2": 1.5}), TH, REGIMES)
    assert won.promoted
    decision = confirm(won, evaluation, ["w1", "w2"], TH)
    assert (decision.verdict, decision.rule) == (verdict, rule), decision
    assert any(phrase in r for r in decision.reasons), decision.reasons
    assert decision.details["mean_speedup"] == won.details["mean_speedup"]  # the paired numbers are kept


def test_confirm_leaves_a_rejection_alone():
    lost = decide(PASSING, paired(A, {"w1": 1.2, "w2": 2.2}), TH, REGIMES)
    assert confirm(lost, None, ["w1", "w2"], TH) is lost


def test_gates_come_before_measurement():
    assert gate_failure(PASSING, TH) is None
    assert gate_failure([rec("w1", "TIMEOUT")], TH).rule == "all_workloads_passed"


def test_thresholds_come_from_the_promotion_skill():
    assert promotion_thresholds(load_skills(SKILLS_DIR)) == TH.model_copy(update={"screen_slack_rel": 0.01,
                                                                                   "decisive_speedup": 1.5,
                                                                                   "futility_below": 1.0,
                                                                                   "gap_gain_rel": 0.01,
                                                                                   "pair_changed_only": True})


# -- the futility stop of a paired measurement ----------------------------------------------------------------

def samples(a: dict, b: dict, runs: int, order: str = "ABBA") -> list[PairedSample]:
    """The first ``runs`` timing runs of repeats of ``order``."""
    return [PairedSample(role, i // len(order), a if role == "A" else b)
            for i, role in enumerate((order * 4)[:runs])]


@pytest.mark.parametrize("runs, candidate, repeats, stop_below, stops", [
    # run 15's finalist: no faster after one repeat (0.99x) -> stop, 4 of 8 timing runs spared
    (4, {"w1": 1.01, "w2": 2.02}, 2, 1.0, "stopped after 1 of 2 repeats: mean speedup 0.990x over 2 workload(s)"),
    # at exactly the bound: measured on
    (4, {"w1": 1.0, "w2": 2.0}, 2, 1.0, None),
    # faster: measured on
    (4, {"w1": 0.9, "w2": 1.9}, 2, 1.0, None),
    # mid-repeat: only complete repeats count
    (3, {"w1": 2.0, "w2": 4.0}, 2, 1.0, None),
    # the last repeat is done: the decision, not the stop, speaks
    (8, {"w1": 2.0, "w2": 4.0}, 2, 1.0, None),
    # off
    (4, {"w1": 2.0, "w2": 4.0}, 2, None, None),
    # a lower bound lets a small loss through: 0.98x measured on at 0.97
    (4, {"w1": 1.0 / 0.98, "w2": 2.0 / 0.98}, 3, 0.97, None),
    (8, {"w1": 1.0 / 0.96, "w2": 2.0 / 0.96}, 3, 0.97, "stopped after 2 of 3 repeats: mean speedup 0.960x"),
    (0, {"w1": 2.0, "w2": 4.0}, 2, 1.0, None),
])
def test_futility_stop(runs, candidate, repeats, stop_below, stops):
    reason = futility_stop(samples(A, candidate, runs), "ABBA", repeats, stop_below)
    assert (reason is None) if stops is None else (stops in reason and "futility_below" in reason), reason


def test_a_stopped_measurement_is_a_futility_rejection_never_a_promotion():
    stopped = PairedMeasurement("ABBA", tuple(samples(A, {"w1": 1.01, "w2": 2.02}, 4)), "paired measurement stopped")
    decision = decide(PASSING, stopped, TH, REGIMES)
    assert (decision.verdict, decision.rule) == (REJECTED, "futility")
    assert decision.reasons == ("paired measurement stopped",)
    assert stopped.to_json()["stopped"] == "paired measurement stopped"
    # a complete measurement that happens to carry a note is decided on its numbers (rule 6 onwards)
    complete = PairedMeasurement("ABBA", tuple(samples(A, {"w1": 0.5, "w2": 1.0}, 8)), "note")
    assert decide(PASSING, complete, TH, REGIMES).verdict == PROMOTED


def test_paired_runs_stop_early_and_say_why():
    from controller.evaluator import paired_runs

    roles: list[str] = []

    def timing_run(role):
        roles.append(role)
        return (A if role == "A" else {"w1": 1.05, "w2": 2.1}), len(roles)

    m = paired_runs(timing_run, 2, "ABBA", stop_below=1.0)
    assert "".join(roles) == "ABBA" and m.stopped.startswith("paired measurement stopped after 1 of 2 repeats")
    assert [s.submission_id for s in m.samples] == [1, 2, 3, 4]
    roles.clear()
    assert paired_runs(timing_run, 2, "ABBA").stopped == "" and "".join(roles) == "ABBAABBA"
    assert paired_runs(lambda role: None, 2, "ABBA", 1.0) is None  # a run that cannot be timed: no measurement


@pytest.mark.parametrize("value", [1.01, 0.4])
def test_a_futility_bound_that_could_refuse_a_faster_candidate_is_refused(value):
    with pytest.raises(ValueError, match=r"\[0.5, 1.0\]"):
        PromotionThresholds.model_validate({**TH.model_dump(), "futility_below": value})


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
    ({"w1": 1.05, "w2": 2.0}, {"w1": 1.0, "w2": 2.0}, True, "0.976x"),  # the mean speedup decides (-2.4%)
    ({"w1": 1.2, "w2": 2.2}, {"w1": 1.0, "w2": 2.0}, True, "0.871x"),  # clearly slower: no paired run
    # a big workload 1.25x faster, the small one 2x slower: mean latency 19% lower, mean speedup 0.875x: screened
    ({"w1": 0.02, "w2": 1.6}, {"w1": 0.01, "w2": 2.0}, True, "0.875x"),
    # a big workload 3% slower, the small one 2x faster: mean latency 2.7% higher, mean speedup 1.49x: measured
    ({"w1": 0.005, "w2": 2.06}, {"w1": 0.01, "w2": 2.0}, False, ""),
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
    from controller.evidence.latency import regime_of

    assert regime_of(axes, {"num_kv_heads": 8}, "H200", label, lengths) == regime


@pytest.mark.parametrize("official, kernel, figure, ranked", [
    (0.70, 0.15, "kernel", 0.15),     # a planned solution: its plan's host work stays out of the ranking
    (0.70, 0.15, "official", 0.70),   # the contest harness's own figure, when the rules ask for it
    (0.44, None, "kernel", 0.44),     # no setup: one figure
    (None, None, "kernel", None),     # not timed
])
def test_the_ranked_figure(official, kernel, figure, ranked):
    from controller.promote import ranked_latency

    assert ranked_latency(official, kernel, figure) == ranked


def test_records_and_paired_samples_carry_the_ranked_figure(tmp_path):
    """The archive keeps both figures; the controller reads back the one its promotion rules rank on."""
    from types import SimpleNamespace

    from controller.evaluator import HarnessEvaluator
    from controller.skills import load_skills, promotion_thresholds
    from controller.store import Store
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import SubmitOptions

    assert promotion_thresholds(load_skills(ROOT / "skills")).ranked_figure == "kernel"  # the shipped rule
    from harness.data.schema import Solution, dump_json

    from support import solution_dict

    archive = Archive(tmp_path / "a")
    solution = Solution.model_validate(solution_dict("def run(*a):\n    pass\n", name="planned"))
    archive.put_solution(dump_json(solution), solution.content_hash)
    sid = archive.start_submission(solution.content_hash, solution.name, solution.definition, "a", {}, None)
    archive.add_evaluation({"submission_id": sid, "definition": solution.definition, "workload_uuid": "w1",
                            "workload_label": "w1",
                            "status": "PASSED", "latency_ms": 0.70, "message": "", "log_blob": None,
                            "extra": {"kernel_latency_ms": 0.15}})
    archive.finish_submission(sid, "PASSED")
    store = Store(archive)
    assert [r.latency_ms for r in store.eval_records(sid, figure="kernel")] == [0.15]
    assert [r.latency_ms for r in store.eval_records(sid)] == [0.70]

    class GpuSession:
        has_gpu = True

        def submit(self, solution, audit_level=None):
            w = SimpleNamespace(workload="w1", evaluated=True, latency_ms=0.70, kernel_latency_ms=0.15)
            return SimpleNamespace(timing_unavailable_reason=None, all_passed=True, workloads=[w], submission_id=1)

    evaluator = HarnessEvaluator(Dataset(), archive, SubmitOptions())
    evaluator._session = GpuSession()
    paired = evaluator.measure_paired("inc", "cand", repeats=1, order="AB", figure="kernel")
    assert [s.latencies for s in paired.samples] == [{"w1": 0.15}, {"w1": 0.15}]
