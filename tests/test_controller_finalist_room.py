"""Successive halving leaves room for its finalist's evaluation under a wall budget (controller/halving_rounds.py):
the decisions as table-driven pure functions, then a loop whose next rung would have left no time for the
evaluation (run 21: 8 -> 4 -> 2 -> 1 screened in 86 s, 27 s left for a 55 s evaluation, nothing promoted)."""

import time

import pytest

from controller.halving import Rung, budget_cut
from controller.loop import run_loop
from controller.plan import finalist_room_stop
from controller.providers.offline import OfflineProvider
from controller.skills import load_skills
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset

from loop_support import SKILLS_DIR, WORKLOAD, config
from test_controller_halving import ScreeningEvaluator, speed


@pytest.mark.parametrize("spent, budget, rung_s, evaluation_s, stop", [
    (10.0, None, 50.0, 60.0, False),  # no budget
    (10.0, 180.0, 50.0, 0.0, False),  # no evaluation measured yet: nothing to reserve
    (10.0, 180.0, 50.0, 60.0, False),  # both fit (120 s of 170 left)
    (70.0, 180.0, 50.0, 60.0, False),  # exactly fit
    (107.0, 180.0, 25.0, 67.0, True),  # run 21 after rung 0: 73 s left holds the evaluation, not the rung too
    (153.0, 180.0, 10.0, 67.0, False),  # not even the evaluation fits: the cut would save nothing
    (180.0, 180.0, 1.0, 1.0, False),  # spent: the hard stop's to say
])
def test_finalist_room_stop(spent, budget, rung_s, evaluation_s, stop):
    why = finalist_room_stop(spent, budget, rung_s, evaluation_s)
    assert (why is not None) == stop
    if stop:
        assert why.startswith("budget: ") and f"~{evaluation_s:.0f} s" in why and f"~{rung_s:.0f} s" in why


@pytest.mark.parametrize("kept, finalists, expected", [
    (("a", "b", "c", "d"), 1, ("a",)),  # survivors come fastest first
    (("a", "b", "c", "d"), 2, ("a", "b")),
    (("a", "b"), 0, ("a",)),  # at least one goes on
    (("a",), 1, ("a",)),
])
def test_budget_cut_sends_the_fastest_survivors_on(kept, finalists, expected):
    scores = {name: 1.0 + i for i, name in enumerate(kept)}
    before = Rung(0, 10, kept + ("x",), kept, {"x": "slower"}, {**scores, "x": 9.0}, depth=1)
    cut = budget_cut(before, finalists, 1, "budget: no room", depth=1)
    assert cut.kept == expected and cut.entered == kept and cut.rung == 1 and cut.iterations == 0
    assert set(cut.cut) == set(kept) - set(expected) and cut.depth == 1
    assert all(why == f"budget: no room; the fastest {len(expected)} of rung 0 go on" for why in cut.cut.values())
    assert cut.scores == scores  # the rung before's figures, for the trajectory


class ClockedEvaluator(ScreeningEvaluator):
    """Each evaluation moves the loop's clock by ``evaluate_s``, each screen by ``screen_s``; nothing else does
    (proposals, the archive, promotion's bookkeeping take no time), so the budget's arithmetic is exact."""

    def __init__(self, clock, evaluate_s, screen_s, *args, **kw):
        super().__init__(*args, **kw)
        self.clock, self.evaluate_s, self.screen_s = clock, evaluate_s, screen_s

    def evaluate(self, solution, on_start):
        self.clock[0] += self.evaluate_s
        return super().evaluate(solution, on_start)

    def screen(self, solution, workloads, iterations, trials):
        self.clock[0] += self.screen_s
        return super().screen(solution, workloads, iterations, trials)


def clocked_run(root, tmp_path, monkeypatch, budget_wall_s):
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    archive = Archive(tmp_path / "a")
    # cubed: the fastest proposals are decisively (>= 1.5x) faster than the naive kernel on one card, so promotion
    # needs no paired measurement (as on the GPU, where round 1's dispatch is 18x the naive kernel)
    fake = ClockedEvaluator(clock, 15.0, 1.5, archive, Dataset(root), [WORKLOAD],
                            lambda s: ("PASSED", speed(s) ** 3), card="GPU-fake")
    events = []
    report = run_loop(config(root, rounds=1, candidates=2, budget_wall_s=budget_wall_s), tmp_path / "a",
                      provider=OfflineProvider(load_skills(SKILLS_DIR)), evaluator=fake,
                      on_event=lambda kind, data: events.append((kind, data)))
    return report, fake, Store(archive), events


def test_a_rung_that_would_leave_no_room_is_not_run_and_the_finalist_is_evaluated(tiny_dataset_root, tmp_path,
                                                                                    monkeypatch):
    """Evaluations 15 s, screens 1.5 s: round 0's evaluation sets the estimate, rung 0 screens the 8 proposals
    (12 s). With 45 s of budget, 18 s are left then: rung 1 (4 x 1.5 s) and the evaluation after it would not both
    fit, the evaluation would. So the fastest of rung 0 goes straight to its evaluation and is promoted. Without the
    reserve the run screened on (rungs 1 and 2, 9 s) and had 9 s left for a 15 s evaluation: nothing promoted."""
    report, fake, store, events = clocked_run(tiny_dataset_root, tmp_path, monkeypatch, 45.0)
    r1 = report["rounds"][1]
    rungs = r1["screening"]
    assert [r["iterations"] for r in rungs] == [10, 0]  # rung 0, then the budget's record of the rung not run
    assert len(rungs[0]["entered"]) == 8 and rungs[1]["entered"] == rungs[0]["kept"]
    finalist = rungs[0]["kept"][0]  # the fastest of rung 0
    assert rungs[1]["kept"] == [finalist]
    assert {it for _, it, _, _ in fake.screens} == {10}  # no screen of rung 1 ran
    assert fake.calls == ["naive_per-kv-head_bn16_w1_s1_dot0_kv_load0_klmpps0", finalist]
    assert r1["decision"] == f"promoted {finalist}"
    budget_cuts = [d for d in report["decisions"] if d["rule"] == "halving" and "budget: " in d["reasons"][0]]
    assert len(budget_cuts) == len(rungs[0]["kept"]) - 1
    assert all("18 s left of 45 s holds the finalist's evaluation (~15 s) but not the next rung before it (~6 s)"
               in d["reasons"][0] for d in budget_cuts)
    assert "NOT_EVALUATED" not in {c["status"] for c in store.candidates(report["run_id"], 1)}
    assert [data.get("budget") is not None for kind, data in events if kind == "screen"] == [False, True]


def test_with_room_for_both_halving_runs_to_the_end(tiny_dataset_root, tmp_path, monkeypatch):
    """The same run with budget for every rung and the evaluation: no budget cut, 8 -> 4 -> 2 -> 1 as before."""
    report, fake, _, _ = clocked_run(tiny_dataset_root, tmp_path, monkeypatch, 60.0)
    rungs = report["rounds"][1]["screening"]
    assert [r["iterations"] for r in rungs] == [10, 20, 40] and len(fake.calls) == 2
    assert report["rounds"][1]["decision"].startswith("promoted ")
    assert not [d for d in report["decisions"] if "budget: " in d["reasons"][0]]
