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


@pytest.mark.parametrize("records, order, reason", [
    # every workload has a FlashInfer speedup: the lowest mean speedup first (the score is their mean)
    (RUN12, [MEM, LAT, SKEW], "furthest behind FlashInfer (1.06x mean speedup, 92% of the floor)"),
    # no FlashInfer figure (a definition without a baseline here): furthest from the roofline
    ([rec(LAT, 0.3), rec(MEM, 0.9)], [LAT, MEM], "furthest from the roofline (30% of the floor)"),
    # one workload without its speedup: the roofline decides for all
    ([rec(LAT, 0.3, 1.5), rec(MEM, 0.9, None)], [LAT, MEM], "furthest from the roofline (30% of the floor)"),
    # speedups without floors (no roofline for the definition): speedups alone
    ([rec(LAT, None, 1.5), rec(MEM, None, 0.8)], [MEM, LAT], "furthest behind FlashInfer (0.8x mean speedup)"),
    # untimed: failures first
    ([rec(LAT), rec(MEM, status="RUNTIME_ERROR")], [MEM, LAT], "1 failing workload(s)"),
])
def test_rank_regimes(records, order, reason):
    ranked = rank_regimes(records)
    assert [g for g, _ in ranked] == order
    assert ranked[0][1] == reason


@pytest.mark.parametrize("stalled, regime, says", [
    (frozenset(), MEM, None),
    (frozenset({MEM}), LAT, "memory-bound stalled, attacked after the others"),
    (frozenset({MEM, LAT}), SKEW, "latency-bound, memory-bound stalled"),
    (frozenset({MEM, LAT, SKEW}), MEM, None),  # all stalled: the ranking as it is
    (frozenset({"unknown"}), MEM, None),
])
def test_a_stalled_regime_is_attacked_after_the_others(stalled, regime, says):
    plan = plan_round(RUN12, stalled=stalled)
    assert plan.regime == regime
    assert (says in plan.reason) if says else ("stalled" not in plan.reason)


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
    """Wiring: the loop hands plan_round the regimes stalled by its own history, under the skill's settings."""
    import controller.loop as loop_module
    from controller.loop import run_loop
    from controller.providers.offline import OfflineProvider
    from controller.skills import load_skills
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset

    from loop_support import SKILLS_DIR, WORKLOAD, FakeEvaluator, config

    seen: list[frozenset[str]] = []
    real = loop_module.plan_round

    def recording(*args, **kwargs):
        seen.append(kwargs.get("stalled", args[3] if len(args) > 3 else frozenset()))
        return real(*args, **kwargs)

    monkeypatch.setattr(loop_module, "plan_round", recording)
    archive = Archive(tmp_path / "a")
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", 1.0))  # no gains
    run_loop(config(tiny_dataset_root, rounds=4), tmp_path / "a", provider=OfflineProvider(load_skills(SKILLS_DIR)),
             evaluator=fake)
    assert seen and seen[0] == frozenset()  # round 1: nothing tried yet
    assert len(seen[-1]) == 1  # the tiny workload's one regime, after rounds without a gain
