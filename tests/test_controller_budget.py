"""The loop's budgets: tokens and wall time stop the run and say why, inside a round before each step, and before a
paired measurement that would not fit (estimated from the archived evaluations); the wall a measurement's timing
runs took. Split from test_controller_loop.py."""

from __future__ import annotations

import pytest

from controller.loop import run_loop
from controller.promote import NO_TIMING
from controller.providers.scripted import ScriptedProvider
from controller.skills import load_skills
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution

from loop_support import SKILLS_DIR, WORKLOAD, FakeEvaluator, config
from support import KV8_PS1


def test_the_token_budget_stops_the_run_and_says_why(tiny_dataset_root, tmp_path):
    archive = Archive(tmp_path / "a")
    dataset = Dataset(tiny_dataset_root)
    reply = {"files": [{"path": "kernel.py", "content": "def run(*a):\n    pass\n"}], "entry_point": "kernel.py::run",
             "notes": ""}
    provider = ScriptedProvider([reply] * 10, tokens=(900, 300), cost_usd=0.01)
    fake = FakeEvaluator(archive, dataset, [WORKLOAD], lambda s: ("PASSED", None))
    report = run_loop(config(tiny_dataset_root, rounds=5, budget_tokens=2000), tmp_path / "a", provider=provider,
                      evaluator=fake)
    assert report["stop_reason"] == "budget: 2400 tokens spent of 2000"
    assert len(report["rounds"]) == 3 and report["totals"]["tokens"] == 2400  # rounds 0, 1, 2, then stop
    assert report["totals"]["cost_usd"] == pytest.approx(0.02)
    assert provider.seen[1].budget.max_total_tokens == 800  # the second request got only what was left


def test_the_wall_budget_is_checked_inside_a_round_and_the_round_decides_on_what_it_measured(tiny_dataset_root,
                                                                                            tmp_path):
    """A round's evaluations can take longer than the whole budget (a GPU host: tens of seconds each): once it is
    spent, the round's candidates not evaluated yet end NOT_EVALUATED with the reason, the round still decides on
    the ones it measured, and the run stops there instead of playing the round to its end."""
    import time

    from controller.store import NOT_EVALUATED

    archive = Archive(tmp_path / "a")
    dataset = Dataset(tiny_dataset_root)
    replies = [{"files": [{"path": "kernel.py", "content": f"def run(*a):\n    pass  # {i}\n"}],
                "entry_point": "kernel.py::run", "notes": ""} for i in range(3)]

    def judge(solution):
        if solution is not None and not solution.name.startswith("naive"):  # not the starting incumbent
            time.sleep(0.6)  # one evaluation outlasts the budget
        return "PASSED", 0.5

    fake = FakeEvaluator(archive, dataset, [WORKLOAD], judge)
    report = run_loop(config(tiny_dataset_root, rounds=3, candidates=3, budget_wall_s=0.5), tmp_path / "a",
                      provider=ScriptedProvider(replies), evaluator=fake)
    assert report["status"] == "DONE" and report["stop_reason"].startswith("budget: ")
    assert report["stop_reason"].endswith("wall time spent of 0 s, in round 1")
    assert [r["round"] for r in report["rounds"]] == [0, 1]  # rounds 2 and 3 never started
    assert len(fake.calls) == 2  # the incumbent, then the first candidate of round 1 only
    statuses = {c["solution_name"]: c["status"] for c in Store(archive).candidates(report["run_id"], 1)}
    assert sorted(statuses.values()) == [NOT_EVALUATED, NOT_EVALUATED, "PASSED"]
    decided = [d for d in report["decisions"] if d["round"] == 1]
    assert len(decided) == 1  # the measured candidate got its decision; the others none
    # ...without its paired measurement: the budget was spent, and a candidate is never promoted unmeasured
    assert decided[0]["verdict"] == "REJECTED" and decided[0]["rule"] == "budget" and fake.paired == []
    assert decided[0]["reasons"][0].endswith("wall time spent of 0 s: not promoted unmeasured")


def test_a_paired_measurement_that_would_overrun_the_wall_budget_is_not_started(tiny_dataset_root, tmp_path):
    """Run 15: eight timing runs of a dispatching candidate took 150 s, past the budget into the outer timeout, and the
    run lost its report. Each step takes 0.3 s here: with 1 s left after the evaluation, the measurement's eight timing
    runs and the full-audit evaluation (~2.7 s) do not fit, so the candidate is decided without them and the run
    stops with its report; with room for them, the same candidate is measured and promoted."""
    import time

    reply = {"files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # fast\n"}],
             "entry_point": "kernel.py::run", "notes": ""}

    def judge(solution):
        if solution is None:  # asked whether it times
            return "PASSED", 1.0
        time.sleep(0.3)
        return "PASSED", (1.0 if solution.name.startswith("naive") else 0.5)

    for budget, promoted in ((1.6, False), (30.0, True)):
        folder = tmp_path / f"budget{budget}"
        fake = FakeEvaluator(Archive(folder), Dataset(tiny_dataset_root), [WORKLOAD], judge)
        report = run_loop(config(tiny_dataset_root, rounds=1, candidates=1, budget_wall_s=budget), folder,
                          provider=ScriptedProvider([reply]), evaluator=fake)
        decided = [d for d in report["decisions"] if d["round"] == 1]
        assert report["status"] == "DONE" and len(decided) == 1
        if promoted:
            assert decided[0]["verdict"] == "PROMOTED" and len(fake.paired) == 1
        else:
            assert decided[0]["rule"] == "budget" and fake.paired == []
            assert "the paired measurement (8 timing runs) and the full-audit evaluation would not fit" \
                in report["stop_reason"]


def test_where_nothing_can_be_timed_the_budget_does_not_stand_in_for_the_missing_measurement(tiny_dataset_root,
                                                                                             tmp_path):
    """On a host without a GPU no paired measurement is ever made: a small budget must not turn the decision into
    `budget` ("would not fit"), which would hide that the candidate could not be timed at all."""
    import time

    reply = {"files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # fast\n"}],
             "entry_point": "kernel.py::run", "notes": ""}

    def judge(solution):
        if solution is not None:
            time.sleep(0.3)
        return "PASSED", None

    fake = FakeEvaluator(Archive(tmp_path / "a"), Dataset(tiny_dataset_root), [WORKLOAD], judge)
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=1, budget_wall_s=1.6), tmp_path / "a",
                      provider=ScriptedProvider([reply]), evaluator=fake)
    (decided,) = [d for d in report["decisions"] if d["round"] == 1]
    assert decided["rule"] != "budget" and NO_TIMING in decided["reasons"][0], decided
    assert report["status"] == "DONE" and "would not fit" not in report["stop_reason"]


@pytest.mark.parametrize("stop_below, runs", [(1.0, 4), (None, 8)])
def test_a_timing_runs_wall_is_the_measurements_wall_over_the_runs_it_made(tiny_dataset_root, tmp_path, stop_below,
                                                                             runs):
    """The wall budget's estimate of the next paired measurement: per timing run, over the runs actually made (a
    futility stop makes 4 of 8; dividing by 8 would halve the estimate)."""
    import time

    from controller.screening import RUN_START_IN_WORKLOADS, RoundEvaluation
    from controller.skills import promotion_thresholds

    fake = FakeEvaluator(Archive(tmp_path / "a"), Dataset(tiny_dataset_root), [WORKLOAD],
                         lambda s: ("PASSED", 1.0 / 0.9 if s is not None and s.name == "cand" else 1.0))
    real = fake.measure_paired

    def slow(*args, **kwargs):  # 0.05 s per timing run the measurement makes
        before = fake.timing_runs
        measurement = real(*args, **kwargs)
        time.sleep(0.05 * (fake.timing_runs - before))
        return measurement

    fake.measure_paired = slow
    solutions = {name: Solution.model_validate({"name": name, "definition": KV8_PS1, "author": "t",
                                                "spec": {"language": "python", "target_hardware": ["H200"],
                                                         "entry_point": "k.py::run"},
                                                "sources": [{"path": "k.py", "content": "def run(): pass\n"}]})
                 for name in ("inc", "cand")}

    class Probe(RoundEvaluation):
        def __init__(self):
            self.evaluator, self.step_walls = fake, None
            self.thresholds = promotion_thresholds(load_skills(SKILLS_DIR)).model_copy(
                update={"futility_below": stop_below})
            self.store = type("S", (), {"solution": staticmethod(lambda c: solutions[c["name"]])})()
            self.workloads = fake.workloads

    probe = Probe()
    measurement = probe.measure_paired({"name": "cand"}, {"name": "inc"})
    assert len(measurement.samples) == runs == fake.timing_runs
    ((kind, per_unit),) = probe.step_walls.items()  # per run, per workload-equivalent: a start and one workload
    per_run = per_unit * (RUN_START_IN_WORKLOADS + 1)
    assert kind[0] == "timing run" and 0.045 <= per_run <= 0.045 + 0.5 / runs


@pytest.mark.parametrize("per_unit, timed, expected", [
    (1.0, 14, 8 * 19 + 30),  # run 17: 19 s per timing run of 14 workloads, then a 30 s full-audit evaluation
    (1.0, 6, 8 * 11 + 30),   # a splice changing one regime: 6 workloads timed, the start paid all the same
    (0.5, 14, 8 * 9.5 + 30),  # a faster host: the start scales with the rest
])
def test_a_paired_measurement_is_estimated_from_the_workloads_it_will_time(per_unit, timed, expected):
    from controller.screening import paired_estimate_s

    assert paired_estimate_s(per_unit, 8, timed, 30.0) == pytest.approx(expected)


@pytest.mark.parametrize("walls, expected", [
    ({1: 25.0, 2: 30.0}, 30.0),  # both evaluations archived: the longer of the two
    ({1: 25.0}, 42.0),  # the incumbent's unknown (still running, or none): the longest evaluation of the run
    ({}, 42.0),
])
def test_a_first_paired_measurement_is_estimated_from_the_two_solutions_own_evaluations(walls, expected):
    """Run 16: the first paired measurement's timing runs were estimated at the longest evaluation of the run, the
    naive kernel's 45 s, where the two dispatches being measured had taken 25-30 s each."""
    from controller.screening import RoundEvaluation

    class Probe(RoundEvaluation):
        def __init__(self):
            self.store = type("S", (), {"submission_wall": staticmethod(lambda sid: walls.get(sid))})()

    assert Probe().first_timing_run({"submission_id": 1}, {"submission_id": 2}, 42.0) == expected


def test_a_submissions_wall_is_read_from_the_archive(tmp_path):
    """What the estimate reads, so a resumed run (no walls in memory) estimates from the same evaluations."""
    import time

    from controller.store import Store

    archive = Archive(tmp_path / "a")
    archive.put_solution({"name": "s", "definition": KV8_PS1, "author": "t",
                          "spec": {"language": "python", "entry_point": "k.py::run"}}, "h")
    sid = archive.start_submission("h", "s", KV8_PS1, "t", {}, None)
    store = Store(archive)
    assert store.submission_wall(sid) is None and store.submission_wall(None) is None  # unfinished, none
    time.sleep(0.05)
    archive.finish_submission(sid, "PASSED")
    assert 0.04 <= store.submission_wall(sid) < 5
