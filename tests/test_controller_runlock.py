"""One process drives a run at a time (controller/runlock.py): a second `controller loop --resume RUN` is refused
on one line naming the run and its holder while the first runs; a lock left by a process killed with -9 is taken
over (said on one line); a new run is locked from its first row on."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller import runlock
from controller.cli import main
from controller.store import Store
from harness.archive.database import Archive

from support import ROOT

HOLD = ("import sys; from controller import runlock; runlock.acquire(sys.argv[1], sys.argv[2]); print('held', "
        "flush=True); sys.stdin.read()")
PROBE = "import sys, json; from controller import runlock; print(json.dumps(runlock.holder(sys.argv[1], sys.argv[2])))"


def hold(folder: Path, run_id: str) -> subprocess.Popen:
    """Another process that takes the run's lock and keeps it until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), run_id], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def probe(folder: Path, run_id: str):
    """The run's holder as another process sees it."""
    return json.loads(subprocess.run([sys.executable, "-c", PROBE, str(folder), run_id], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout)


def archive_with(tmp_path: Path, *runs: tuple[str, str]) -> tuple[Path, Store]:
    folder = tmp_path / "a"
    store = Store(Archive(folder))
    for run_id, status in runs:
        store.create_run(run_id, "d1", "offline", {"rounds": 3})
        store.set_run_status(run_id, status)
    return folder, store


def stub_resume(monkeypatch) -> list[str]:
    import controller.cli as cli

    resumed: list[str] = []
    monkeypatch.setattr(cli, "resume_loop", lambda rid, a, on_event=None, device_index=None:
                        resumed.append(rid) or {"run_id": rid, "status": "DONE"})
    monkeypatch.setattr(cli, "_gpus_for", lambda jobs, dataset, archive: 0)
    return resumed


def test_a_second_resume_is_refused_while_the_first_holds_the_run_and_a_killed_holder_is_taken_over(
        tmp_path, monkeypatch):
    folder, store = archive_with(tmp_path, ("run-1", "RUNNING"))
    resumed = stub_resume(monkeypatch)
    proc = hold(folder, "run-1")
    try:
        result = CliRunner().invoke(main, ["loop", "--resume", "run-1", "--rounds", "9", "--archive", str(folder),
                                           "--json"])
        assert result.exit_code == 2, result.output
        line = result.stderr.strip()
        assert "\n" not in line and "Traceback" not in result.output
        assert "run run-1" in line and f"pid {proc.pid} on {socket.gethostname()}" in line, line
        assert resumed == [] and store.run("run-1")["config"] == {"rounds": 3}  # not extended either
    finally:
        proc.kill()  # kill -9: the process never lets go of its lock, the kernel does
        proc.wait()
    result = CliRunner().invoke(main, ["loop", "--resume", "run-1", "--archive", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert resumed == ["run-1"]
    assert f"run run-1: taking over the lock left by pid {proc.pid}" in result.stderr
    assert probe(folder, "run-1") is None  # released when the command ended
    result = CliRunner().invoke(main, ["loop", "--resume", "run-1", "--archive", str(folder), "--json"])
    assert result.exit_code == 0 and "taking over" not in result.stderr  # a clean end leaves no record


def test_resume_unfinished_leaves_out_a_run_another_process_drives(tmp_path, monkeypatch):
    folder, _ = archive_with(tmp_path, ("run-1", "RUNNING"), ("run-2", "INTERRUPTED"))
    resumed = stub_resume(monkeypatch)
    proc = hold(folder, "run-1")
    try:
        result = CliRunner().invoke(main, ["loop", "--resume", "unfinished", "--archive", str(folder), "--json"])
        assert result.exit_code == 0, result.output
        assert resumed == ["run-2"]
        assert f"left out: run run-1 is being driven by pid {proc.pid}" in result.stderr
        resumed.clear()
        proc2 = hold(folder, "run-2")
        try:
            result = CliRunner().invoke(main, ["loop", "--resume", "unfinished", "--archive", str(folder)])
            assert result.exit_code == 2 and resumed == []
            assert "every unfinished run in" in result.stderr.strip().splitlines()[-1]
        finally:
            proc2.kill()
            proc2.wait()
    finally:
        proc.kill()
        proc.wait()


def test_a_new_run_is_locked_from_its_first_row_until_it_ends(tiny_dataset_root, tmp_path, monkeypatch):
    import controller.loop as loop_mod
    from harness.data.dataset import Dataset
    from loop_support import WORKLOAD, FakeEvaluator, config

    folder = tmp_path / "a"
    archive = Archive(folder)
    seen = {}

    def run(self):
        seen["run_id"], seen["holder"] = self.run_id, probe(folder, self.run_id)
        return {"run_id": self.run_id}

    monkeypatch.setattr(loop_mod.Loop, "run", run)
    evaluator = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], judge=lambda s: ("PASSED", None))
    loop_mod.run_loop(config(tiny_dataset_root), folder, evaluator=evaluator)
    assert Store(archive).run(seen["run_id"]) is not None
    assert seen["holder"]["pid"] > 0 and seen["holder"]["host"] == socket.gethostname()  # another process sees it
    assert probe(folder, seen["run_id"]) is None
    assert runlock.lock_path(folder, seen["run_id"]).read_text() == ""


def test_lock_file_names_stay_inside_the_locks_folder(tmp_path):
    for run_id, plain in (("run-20261205-041437-0929a0", True), ("../../etc/passwd", False), ("a/b", False),
                          (".hidden", False), ("x" * 300, False)):
        path = runlock.lock_path(tmp_path, run_id)
        assert path.parent == tmp_path / runlock.LOCKS
        assert (path.name == f"{run_id}.lock") is plain


def test_a_link_planted_as_the_lock_file_is_refused_and_its_target_left_whole(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("a person's notes")
    path = runlock.lock_path(tmp_path / "archive", "run-1")
    path.parent.mkdir(parents=True)
    path.symlink_to(victim)
    try:
        runlock.acquire(tmp_path / "archive", "run-1")
    except runlock.RunLocked as err:
        assert "it is a link" in str(err)
    else:
        raise AssertionError("a lock taken through a link")
    assert victim.read_text() == "a person's notes"


def test_a_fifo_planted_as_the_lock_file_never_hangs_a_reader(tmp_path):
    """holder() (what --resume unfinished asks of every unfinished run) opened the file to read it: on a FIFO that
    waits for a writer forever."""
    import os

    path = runlock.lock_path(tmp_path, "run-1")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path), "run-1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout) is None, proc.stderr
    try:
        runlock.acquire(tmp_path, "run-1")
    except runlock.RunLocked as err:
        assert "not a regular file" in str(err)
    else:
        raise AssertionError("a lock taken on a FIFO")


def test_a_huge_lock_file_is_read_no_further_than_a_record(tmp_path):
    """The record was read whole: a lock file of gigabytes (sparse, no disk) took that much memory."""
    path = runlock.lock_path(tmp_path, "run-1")
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        f.truncate(4 << 30)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from controller import runlock; print(runlock.acquire(sys.argv[1], 'run-1'))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "None", proc.stderr[-2000:]


def test_a_record_left_in_a_lock_file_is_said_on_one_short_line(tmp_path):
    path = runlock.lock_path(tmp_path, "run-1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": "1\nerror: forged second line", "host": "h" * 1000, "since": ["x"]}))
    left = runlock.acquire(tmp_path, "run-1")
    try:
        for line in (runlock.describe_takeover("run-1", left), runlock.describe_holder("run-1", left)):
            assert "\n" not in line and len(line) < 400 and "forged" in line
    finally:
        runlock.release(tmp_path, "run-1")


@pytest.mark.parametrize("archive_state, run_id", [
    ("no archive.db", "run-9"),
    ("other runs", "run-9"),
    ("other runs", "../../escape"),
    ("other runs", "x" * 5000),
    ("other runs", "bad\udcffname"),  # a non-UTF-8 argument as Python passes it on
    ("other runs", "[bold]run-1"),
])
def test_resuming_a_run_that_does_not_exist_is_one_line_and_makes_no_lock_file(tmp_path, monkeypatch,
                                                                               archive_state, run_id):
    """It made ARCHIVE/locks/RUN.lock (and the locks folder) for a run id the archive had never held."""
    if archive_state == "no archive.db":
        folder = tmp_path / "a"
        folder.mkdir()
    else:
        folder, _ = archive_with(tmp_path, ("run-1", "INTERRUPTED"))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    resumed = stub_resume(monkeypatch)
    result = CliRunner().invoke(main, ["loop", "--resume", run_id, "--archive", str(folder)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert ("no archive at" if archive_state == "no archive.db" else "no run") in lines[0]
    assert resumed == [] and not (folder / runlock.LOCKS).exists()
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before


def test_a_new_run_whose_first_row_cannot_be_written_leaves_no_lock_file(tiny_dataset_root, tmp_path, monkeypatch):
    import controller.loop as loop_mod
    from harness.data.dataset import Dataset
    from loop_support import WORKLOAD, FakeEvaluator, config

    folder = tmp_path / "a"
    archive = Archive(folder)

    def refused(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "create_run", refused)
    evaluator = FakeEvaluator(archive, Dataset(tiny_dataset_root), [WORKLOAD], judge=lambda s: ("PASSED", None))
    with pytest.raises(sqlite3.OperationalError):
        loop_mod.run_loop(config(tiny_dataset_root), folder, evaluator=evaluator)
    assert list((folder / runlock.LOCKS).glob("*")) == []
