"""Giving a run more (`controller loop --resume RUN_ID --budget-wall-s S`, controller/extend.py): the limits are raised
in the archive, the wall budget's deferrals in the last round are taken back (and kept in the run's record), and the
resumed run measures and decides them before anything new."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.extend import extend_run
from controller.loop import LoopConfig, run_loop
from controller.providers.scripted import ScriptedProvider
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset

from loop_support import WORKLOAD, FakeEvaluator, config

REPLY = {"files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # fast\n"}],
         "entry_point": "kernel.py::run", "notes": ""}


def judged(step_s):
    """Every step takes ``step_s``; the naive kernel 1.0 ms, anything else 0.5 ms (the fake's submissions name no
    card, so no decisive shortcut: a paired measurement is due)."""
    def judge(solution):
        if solution is None:  # asked whether it times
            return "PASSED", 1.0
        time.sleep(step_s)
        return "PASSED", (1.0 if solution.name.startswith("naive") else 0.5)
    return judge


def test_a_finalist_the_budget_left_unmeasured_is_measured_and_decided_when_the_run_is_given_more(
        tiny_dataset_root, tmp_path):
    """Run 16's kv4 page 64 loop: round 2's finalist was not measured (the paired measurement would not fit in the
    budget left) and the run stopped. Given more wall time, the same run takes that deferral back, measures the
    finalist and decides it, without evaluating anything again; the round's wall is what it had plus the new."""
    folder = tmp_path / "a"
    archive, dataset = Archive(folder), Dataset(tiny_dataset_root)
    first = FakeEvaluator(archive, dataset, [WORKLOAD], judged(0.3))
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=1, budget_wall_s=1.6), folder,
                      provider=ScriptedProvider([REPLY]), evaluator=first)
    store = Store(archive)
    (decided,) = [d for d in store.decisions(report["run_id"]) if d["round"] == 1]
    assert decided["rule"] == "budget" and first.paired == []
    wall_before = store.round(report["run_id"], 1)["wall_s"]

    record = extend_run(folder, report["run_id"], {"budget_wall_s": 30.0, "rounds": None})
    assert record["changed"] == {"budget_wall_s": [1.6, 30.0]}
    assert record["was"]["status"] == "DONE" and "would not fit" in record["was"]["stop_reason"]
    assert [d["rule"] for d in record["reopened"]["decisions"]] == ["budget"]
    run = store.run(report["run_id"])
    assert run["status"] == "INTERRUPTED" and "budget_wall_s 1.6 -> 30.0" in run["stop_reason"]
    assert LoopConfig.model_validate(run["config"]).extensions == [record]
    assert store.decisions(report["run_id"])[-1]["rule"] != "budget"  # taken back

    second = FakeEvaluator(archive, dataset, [WORKLOAD], judged(0.3))
    again = run_loop(None, folder, resume=report["run_id"], provider=ScriptedProvider([]), evaluator=second)
    assert again["status"] == "DONE" and again["stop_reason"] == "ran all 1 rounds"
    (decided,) = [d for d in again["decisions"] if d["round"] == 1]
    assert decided["verdict"] == "PROMOTED" and len(second.paired) == 1
    assert second.calls == [] and len(second.full_calls) == 1  # measured and confirmed, not evaluated again
    reopened = store.round(report["run_id"], 1)
    assert reopened["wall_s"] > wall_before + 0.3
    # the trajectory's figure is the round's whole wall, both sittings, as the budget counts it
    (summary,) = [r["summary"] for r in store.rounds(report["run_id"]) if r["round"] == 1]
    assert summary["wall_s"] == pytest.approx(reopened["wall_s"], abs=1e-3)
    assert [r["wall_s"] for r in again["rounds"] if r["round"] == 1] == [pytest.approx(reopened["wall_s"], abs=1e-3)]


def test_candidates_the_budget_never_evaluated_wait_again(tiny_dataset_root, tmp_path):
    """The budget ran out between two candidates of a round: the second ended NOT_EVALUATED, and the first, evaluated,
    was left unmeasured. Given more, the round is reopened: the first is measured and decided, the second evaluated
    and decided against what is then the incumbent."""
    folder = tmp_path / "a"
    archive, dataset = Archive(folder), Dataset(tiny_dataset_root)
    second_reply = {**REPLY, "files": [{"path": "kernel.py", "content": "def run(*a):\n    pass  # other\n"}]}
    first = FakeEvaluator(archive, dataset, [WORKLOAD], judged(1.0))
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=2, budget_wall_s=2.5), folder,
                      provider=ScriptedProvider([REPLY, second_reply]), evaluator=first)
    store = Store(archive)
    statuses = [c["status"] for c in store.candidates(report["run_id"], 1)]
    assert statuses == ["PASSED", "NOT_EVALUATED"], statuses

    record = extend_run(folder, report["run_id"], {"budget_wall_s": 60.0})
    assert [d["rule"] for d in record["reopened"]["decisions"]] == ["budget"]
    assert [c["reason"].startswith("budget") for c in record["reopened"]["not_evaluated"]] == [True]
    assert [c["status"] for c in store.candidates(report["run_id"], 1)] == ["PASSED", "PENDING"]

    second = FakeEvaluator(archive, dataset, [WORKLOAD], judged(0.05))
    again = run_loop(None, folder, resume=report["run_id"], provider=ScriptedProvider([]), evaluator=second)
    assert again["status"] == "DONE"
    assert [c["status"] for c in store.candidates(report["run_id"], 1)] == ["PASSED", "PASSED"]
    assert len(second.calls) == 1  # only the one that waited
    decisions = [d for d in store.decisions(report["run_id"]) if d["round"] == 1]
    assert [d["verdict"] for d in decisions] == ["PROMOTED", "REJECTED"]  # the second no faster than the first
    assert "budget" not in [d["rule"] for d in decisions]


def test_deferrals_are_reopened_only_in_a_finished_run_and_a_round_the_limits_will_play(tiny_dataset_root, tmp_path):
    """A run still RUNNING (another process may be playing it) or cut short keeps its rounds as they are; fewer
    rounds than the deferral's round leave it closed: a reopened round nobody plays would stay half-open."""
    folder = tmp_path / "a"
    archive, dataset = Archive(folder), Dataset(tiny_dataset_root)
    report = run_loop(config(tiny_dataset_root, rounds=1, candidates=1, budget_wall_s=1.6), folder,
                      provider=ScriptedProvider([REPLY]), evaluator=FakeEvaluator(archive, dataset, [WORKLOAD],
                                                                                   judged(0.3)))
    store = Store(archive)
    run_id = report["run_id"]
    assert extend_run(folder, run_id, {"rounds": 0})["reopened"] is None  # round 1 is past the new limit
    store.set_run_status(run_id, "RUNNING")
    record = extend_run(folder, run_id, {"budget_wall_s": 30.0})
    assert record["reopened"] is None and store.run(run_id)["status"] == "RUNNING"
    assert [d["rule"] for d in store.decisions(run_id) if d["round"] == 1] == ["budget"]
    assert store.round(run_id, 1)["status"] == "DONE"


def test_an_extension_that_changes_nothing_is_not_recorded_and_bad_limits_are_refused(tiny_dataset_root, tmp_path):
    folder = tmp_path / "a"
    archive = Archive(folder)
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], judged(0.0))
    report = run_loop(config(tiny_dataset_root, rounds=1, budget_wall_s=100.0), folder,
                      provider=ScriptedProvider([REPLY]), evaluator=fake)
    assert extend_run(folder, report["run_id"], {"budget_wall_s": 100.0, "rounds": 1}) is None
    assert Store(archive).run(report["run_id"])["status"] == "DONE"
    with pytest.raises(ValueError, match="budget_wall_s"):
        extend_run(folder, report["run_id"], {"budget_wall_s": -5.0})
    with pytest.raises(ValueError, match="only a run's limits"):
        extend_run(folder, report["run_id"], {"provider": "anthropic"})
    with pytest.raises(ValueError, match="no run 'run-nope'"):
        extend_run(folder, "run-nope", {"rounds": 4})


def test_resume_with_limits_on_the_command_line(tmp_path, monkeypatch):
    """`--resume RUN_ID --rounds 6 --budget-wall-s 840`: each run given the limits (said on one line), then resumed;
    without a limit option nothing is changed (`--rounds` at its default is not a limit given)."""
    import controller.cli as cli

    folder = tmp_path / "a"
    store = Store(Archive(folder))
    cfg = LoopConfig(definition="d1", rounds=3, budget_wall_s=420.0).model_dump(mode="json")
    store.create_run("run-1", "d1", "offline", cfg)
    store.set_run_status("run-1", "DONE", "budget: 400 s wall time spent of 420 s")
    resumed = []
    monkeypatch.setattr(cli, "resume_loop", lambda rid, a, on_event=None, device_index=None:
                        resumed.append(rid) or {"run_id": rid, "status": "DONE"})
    monkeypatch.setattr(cli, "_gpus_for", lambda jobs, dataset, archive: 0)

    result = CliRunner().invoke(main, ["loop", "--resume", "run-1", "--archive", str(folder), "--json"])
    assert result.exit_code == 0 and store.run("run-1")["config"] == cfg

    result = CliRunner().invoke(main, ["loop", "--resume", "run-1", "--rounds", "6", "--budget-wall-s", "840",
                                       "--archive", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert "run-1: rounds 3 -> 6; budget_wall_s 420.0 -> 840.0" in result.stderr
    stored = LoopConfig.model_validate(store.run("run-1")["config"])
    assert (stored.rounds, stored.budget_wall_s, len(stored.extensions)) == (6, 840.0, 1)
    assert resumed == ["run-1", "run-1"] and json.loads(result.stdout)["run_id"] == "run-1"
