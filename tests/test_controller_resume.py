"""Resume: `controller loop --resume RUN_ID` after a kill -9 mid-evaluation continues from the archive, repeating
no finished evaluation, losing none, and redoing the one that was cut off."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.loop import run_loop
from controller.providers.offline import OfflineProvider
from controller.skills import load_skills
from controller.store import Store
from harness.archive.database import Archive
from harness.data.dataset import Dataset

from support import KV8_PS1, ROOT
from loop_support import WORKLOAD, FakeEvaluator, config

SKILLS_DIR = ROOT / "skills"


def query(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    except sqlite3.OperationalError:  # not created yet
        return []
    try:
        return con.execute(sql).fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        con.close()


def test_kill_9_mid_evaluation_then_resume(tiny_dataset_root, tmp_path):
    folder = tmp_path / "archive"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "loop", "--definition", KV8_PS1, "--provider",
                             "offline", "--rounds", "2", "--candidates", "2", "--archive", str(folder), "--dataset",
                             str(tiny_dataset_root), "--workloads", WORKLOAD, "--timeout-s", "120"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = folder / "archive.db"
    deadline = time.monotonic() + 180
    try:
        # Wait until round 1 has one finished candidate and the next one is inside a harness evaluation.
        while True:
            rows = query(db, "select status, submission_id from candidates where round = 1 order by id")
            if len(rows) == 2 and rows[0][0] == "PASSED" and rows[1][0] == "EVALUATING" and rows[1][1]:
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, f"never reached mid-evaluation: {rows}"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()

    store = Store(Archive(folder))
    (run,) = store.runs()
    assert run["status"] == "RUNNING"  # a kill -9 leaves no chance to write anything else
    before = {c["id"]: (c["status"], c["submission_id"]) for c in store.candidates(run["id"])}
    interrupted = next(cid for cid, (status, _) in before.items() if status == "EVALUATING")
    cut_off_submission = before[interrupted][1]
    assert store.submission_status(cut_off_submission) == "RUNNING"
    submissions_before = store.submission_count()

    result = CliRunner().invoke(main, ["loop", "--resume", run["id"], "--archive", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)

    store = Store(Archive(folder))
    after = {c["id"]: (c["status"], c["submission_id"]) for c in store.candidates(run["id"])}
    assert report["status"] == "DONE" and [r["round"] for r in report["rounds"]] == [0, 1, 2]
    # Nothing lost, nothing made twice: 1 incumbent + 2 + 2 candidates, 2 requests, 2 responses.
    assert len(after) == 5 and set(before) <= set(after)
    assert query(db, "select key from requests order by id") == [("r1/explore",), ("r2/explore",)]
    assert len(store.responses_of_run(run["id"])) == 2
    # Finished evaluations kept their harness submissions; the interrupted one was redone.
    for cid, (status, sid) in before.items():
        if status == "PASSED":
            assert after[cid] == (status, sid)
    assert after[interrupted][0] == "PASSED" and after[interrupted][1] != cut_off_submission
    # The harness's record of the cut-off evaluation says what happened to it, and points to the redo.
    cut_off = store.archive.submission(cut_off_submission)
    assert cut_off["status"] == "INTERRUPTED" and f"submission {after[interrupted][1]}" in cut_off["message"]
    # Exactly the unfinished work was submitted: the interrupted candidate and round 2's two.
    assert store.submission_count() - submissions_before == 3
    assert all(status == "PASSED" for status, _ in after.values())


class Killed(BaseException):
    """Stands for the process dying (not an Exception: nothing may catch it on the way out)."""


def test_an_evaluation_the_harness_finished_before_the_kill_is_adopted_not_repeated(tiny_dataset_root, tmp_path):
    folder = tmp_path / "a"
    archive = Archive(folder)
    dataset = Dataset(tiny_dataset_root)
    skills = load_skills(SKILLS_DIR)

    class DiesAfterTheHarness(FakeEvaluator):
        def evaluate(self, solution, on_start):
            sid = super().evaluate(solution, on_start)
            if len(self.calls) == 2:
                raise Killed()  # the harness finished and archived; the controller died before noting it
            return sid

    first = DiesAfterTheHarness(archive, dataset, [WORKLOAD], lambda s: ("PASSED", None))
    with pytest.raises(Killed):
        run_loop(config(tiny_dataset_root, rounds=1, candidates=2), folder, provider=OfflineProvider(skills),
                 evaluator=first)
    store = Store(archive)
    (run,) = store.runs()
    assert run["status"] == "INTERRUPTED"
    statuses = [c["status"] for c in store.candidates(run["id"])]
    assert statuses == ["PASSED", "EVALUATING", "PENDING"]

    second = FakeEvaluator(archive, dataset, [WORKLOAD], lambda s: ("PASSED", None))
    report = run_loop(None, folder, resume=run["id"], provider=OfflineProvider(skills), evaluator=second)
    assert report["status"] == "DONE"
    assert len(second.calls) == 1  # only the candidate that never reached the harness
    candidates = store.candidates(run["id"])
    assert [c["status"] for c in candidates] == ["PASSED"] * 3
    assert candidates[1]["reason"] == "adopted the finished harness evaluation"
    assert store.submission_count() == 3


def test_resuming_a_finished_run_changes_nothing(tiny_dataset_root, tmp_path):
    folder = tmp_path / "a"
    archive = Archive(folder)
    fake = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], lambda s: ("PASSED", None))
    done = run_loop(config(tiny_dataset_root, rounds=1), folder, provider=OfflineProvider(load_skills(SKILLS_DIR)),
                    evaluator=fake)
    again = run_loop(None, folder, resume=done["run_id"], provider=OfflineProvider(load_skills(SKILLS_DIR)),
                     evaluator=fake)
    assert again["rounds"] == done["rounds"] and len(fake.calls) == 2
    with pytest.raises(ValueError, match="no run 'run-nope'"):
        run_loop(None, folder, resume="run-nope")


def test_resume_unfinished_continues_every_run_cut_short_and_leaves_the_rest(tiny_dataset_root, tmp_path,
                                                                               monkeypatch):
    """`controller loop --resume unfinished`: after a multi-definition loop is killed, one command continues
    each of its runs (side by side where there are GPUs); finished and failed runs are not touched."""
    import controller.cli as cli

    folder = tmp_path / "a"
    archive = Archive(folder)
    store = Store(archive)
    for run_id, status in (("run-1", "DONE"), ("run-2", "INTERRUPTED"), ("run-3", "FAILED"), ("run-4", "RUNNING")):
        store.create_run(run_id, "d1", "offline", {})
        store.set_run_status(run_id, status)
    assert store.unfinished_runs() == ["run-2", "run-4"]

    resumed = []
    monkeypatch.setattr(cli, "resume_loop", lambda rid, a, on_event=None, device_index=None:
                        resumed.append(rid) or {"run_id": rid, "status": "DONE"})
    monkeypatch.setattr(cli, "_gpus_for", lambda jobs, dataset, archive: 0)
    result = CliRunner().invoke(main, ["loop", "--resume", "unfinished", "--resume", "run-3",
                                       "--archive", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert resumed == ["run-2", "run-4", "run-3"]
    assert [r["run_id"] for r in json.loads(result.stdout)] == resumed

    for run_id in ("run-2", "run-4"):
        store.set_run_status(run_id, "DONE")
    result = CliRunner().invoke(main, ["loop", "--resume", "unfinished", "--archive", str(folder)])
    assert result.exit_code == 2 and "every run in" in result.output and "has finished" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["loop", "--resume", "unfinished", "--archive", str(empty)])
    assert result.exit_code == 2 and "no archive at" in result.output
