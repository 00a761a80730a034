"""Which regime a round attacks (controller/plan.py ``rank_regimes``, ``plan_round``; controller/search.py
``stalled_regimes``): table-driven, pure."""

from __future__ import annotations

import pytest

from controller.plan import plan_round, rank_regimes
from controller.promote import EvalRecord
from controller.search import SearchSettings, stalled_regimes
from harness.data.generation_request import HistoryItem

LAT, MEM, SKEW = "latency-bound", "memory-bound", "skewed"


def rec(regime, fraction=None, speedup=None, status="PASSED", n=0):
    return EvalRecord(workload=f"{regime}{n}", status=status, label=f"{regime}{n}", regime=regime,
                      fraction_of_floor=fraction, speedup_vs_fi=speedup)


# run 12's promoted kernel on kv8 ps1 (H200): batch 1 far from its roofline yet ahead of FlashInfer; large batches
# near the floor but barely ahead
RUN12 = [rec(LAT, 0.07, 1.58, n=0), rec(LAT, 0.35, 0.93, n=1), rec(MEM, 0.98, 1.00, n=0), rec(MEM, 0.86, 1.11, n=1),
         rec(SKEW, 0.89, 1.75, n=0), rec(SKEW, 0.68, 1.22, n=1)]


# run 15's incumbent on kv8 ps64 (H200), one workload per class: FlashInfer ahead on b16 x 8192 (latency-bound, 0.953x),
# while the memory-bound mean is the lowest. Rounds 2 and 3 attacked memory-bound (lowest mean) and gained nothing.
RUN15 = [rec(LAT, 0.06, 1.41, n=0), rec(LAT, 0.39, 1.01, n=1), rec(LAT, 0.86, 0.953, n=2),
         rec(MEM, 0.73, 1.16, n=0), rec(MEM, 0.94, 1.04, n=1), rec(MEM, 1.03, 0.999, n=2),
         rec(SKEW, 0.87, 1.58, n=0), rec(SKEW, 0.67, 1.27, n=1)]


@pytest.mark.parametrize("records, order, reason", [
    # FlashInfer ahead on some workload: those regimes first, the worst workload first (the goal is >= 1x on each)
    (RUN12, [LAT, MEM, SKEW], "FlashInfer ahead on 1 workload(s) (worst 0.93x; 1.26x mean speedup, 21% of the floor)"),
    (RUN15, [LAT, MEM, SKEW], "FlashInfer ahead on 1 workload(s) (worst 0.953x; 1.12x mean speedup, 44% of the floor)"),
    # ahead everywhere: the lowest mean speedup first (the score is their mean)
    ([rec(LAT, 0.3, 1.5), rec(MEM, 0.9, 1.02), rec(SKEW, 0.8, 1.2)], [MEM, SKEW, LAT],
     "furthest behind FlashInfer (1.02x mean speedup, 90% of the floor)"),
    # behind on two regimes: the worse workload decides, not the mean
    ([rec(LAT, 0.3, 0.97), rec(LAT, 0.3, 2.0, n=1), rec(MEM, 0.9, 0.99)], [LAT, MEM],
     "FlashInfer ahead on 1 workload(s) (worst 0.97x; 1.48x mean speedup, 30% of the floor)"),
    # no FlashInfer figure (a definition without a baseline here): furthest from the roofline
    ([rec(LAT, 0.3), rec(MEM, 0.9)], [LAT, MEM], "furthest from the roofline (30% of the floor)"),
    # one workload without its speedup: the roofline decides for all
    ([rec(LAT, 0.3, 1.5), rec(MEM, 0.9, None)], [LAT, MEM], "furthest from the roofline (30% of the floor)"),
    # speedups without floors (no roofline for the definition): speedups alone
    ([rec(LAT, None, 1.5), rec(MEM, None, 0.8)], [MEM, LAT],
     "FlashInfer ahead on 1 workload(s) (worst 0.8x; 0.8x mean speedup)"),
    # untimed: failures first
    ([rec(LAT), rec(MEM, status="RUNTIME_ERROR")], [MEM, LAT], "1 failing workload(s)"),
])
def test_rank_regimes(records, order, reason):
    ranked = rank_regimes(records)
    assert [g for g, _ in ranked] == order
    assert ranked[0][1] == reason


@pytest.mark.parametrize("stalled, regime, says", [
    (frozenset(), LAT, None),
    (frozenset({LAT}), MEM, "latency-bound stalled, attacked after the others"),
    (frozenset({MEM, LAT}), SKEW, "latency-bound, memory-bound stalled"),
    (frozenset({MEM, LAT, SKEW}), LAT, None),  # all stalled: the ranking as it is
    (frozenset({"unknown"}), LAT, None),
])
def test_a_stalled_regime_is_attacked_after_the_others(stalled, regime, says):
    plan = plan_round(RUN12, stalled=stalled)
    assert plan.regime == regime
    assert (says in plan.reason) if says else ("stalled" not in plan.reason)


@pytest.mark.parametrize("tried, stalled, regime, says", [
    (frozenset(), frozenset(), LAT, None),
    # round 2 attacked latency-bound and promoted nothing: round 3 goes to the next regime, not the same one again
    (frozenset({LAT}), frozenset(), MEM, "latency-bound tried since the incumbent last changed"),
    (frozenset({LAT, MEM}), frozenset(), SKEW, "latency-bound, memory-bound tried since the incumbent last changed"),
    # every regime tried once: the ranking again, as it is
    (frozenset({LAT, MEM, SKEW}), frozenset(), LAT, None),
    # a stalled regime stays behind one only tried: stalled is the stronger evidence
    (frozenset({MEM}), frozenset({LAT}), SKEW, "memory-bound tried"),
    (frozenset({SKEW}), frozenset({LAT}), MEM, "latency-bound stalled"),
])
def test_a_regime_tried_without_a_promotion_waits_for_the_others(tried, stalled, regime, says):
    plan = plan_round(RUN15, stalled=stalled, tried=tried)
    assert plan.regime == regime
    assert (says in plan.reason) if says else ("tried" not in plan.reason and "stalled" not in plan.reason)


def item(round_number, regime, ms):
    return HistoryItem(round=round_number, name=f"c{round_number}{regime}", status="PASSED",
                       origin={"template": "t", "params": {"BLOCK_N": round_number}},
                       regime_latency_ms={regime: ms})


def test_stalled_regimes_are_the_ones_whose_best_stopped_improving():
    history = [item(0, MEM, 1.0), item(0, LAT, 1.0),
               item(1, MEM, 0.995), item(1, LAT, 0.5),
               item(2, MEM, 0.999), item(2, LAT, 0.4)]
    settings = SearchSettings(patience=2, min_gain=0.02)
    assert stalled_regimes(history, [MEM, LAT, SKEW], settings) == frozenset({MEM})
    assert stalled_regimes(history, [LAT], settings) == frozenset()


def test_the_loop_plans_with_the_regimes_its_history_shows_stalled(tiny_dataset_root, tmp_path, monkeypatch):
    """Wiring: the loop hands plan_round the regimes stalled by its own history, under the skill's settings, and
    those its rounds attacked since the last promotion."""
    import controller.loop as loop_module
    from controller.loop import run_loop
    from controller.providers.offline import OfflineProvider
    from controller.skills import load_skills
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset

    from loop_support import SKILLS_DIR, WORKLOAD, FakeEvaluator, config

    seen: list[frozenset[str]] = []
    tried: list[frozenset[str]] = []
    real = loop_module.plan_round

    def recording(*args, **kwargs):
        seen.append(kwargs.get("stalled", args[3] if len(args) > 3 else frozenset()))
        tried.append(kwargs.get("tried", args[4] if len(args) > 4 else frozenset()))
        return real(*args, **kwargs)

    monkeypatch.setattr(loop_module, "plan_round", recording)
    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", 1.0))  # no gains
    run_loop(config(tiny_dataset_root, rounds=4), tmp_path / "a", provider=OfflineProvider(load_skills(SKILLS_DIR)),
             evaluator=fake)
    assert seen and seen[0] == frozenset()  # round 1: nothing tried yet
    assert len(seen[-1]) == 1  # the tiny workload's one regime, after rounds without a gain
    # no candidate is ever faster, so nothing is promoted: from round 2 on, round 1's regime counts as tried
    assert tried[0] == frozenset() and tried[-1] == seen[-1]
