"""A full disk under the driver's archive on the Ray path (`controller loop --executor ray`, `harness submit --executor
ray`) ends as on the local path (tests/test_disk_full.py): one line that says the disk is full and where, exit 2,
no partial blob, nothing left RUNNING. Ray itself is stood in for by an in-process fake (a lane is the real
``Lane`` body, its calls run at once), so this runs where the `ray` extra is not installed, in seconds; the disk is
made full by the same monkeypatch of the archive's write path as the local tests."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import harness.archive.database as database
from harness.archive.database import Archive

from support import KV8_PS1, TORCH_CANDIDATE, solution_dict

WORKLOAD = "tiny_b2_t40"


class _Ref:
    """An object ref whose call has already run (its reply, or the error it raised, ``ray.get`` gives)."""

    def __init__(self, call):
        try:
            self.value, self.error = call(), None
        except Exception as err:
            self.value, self.error = None, err

    def get(self):
        if self.error is not None:
            raise self.error
        return self.value


class _Handle:
    """An actor handle whose method calls run at once, in this process."""

    def __init__(self, body):
        self._body = body

    def __getattr__(self, name):
        method = getattr(self._body, name)
        return types.SimpleNamespace(remote=lambda *args, **kwargs: _Ref(lambda: method(*args, **kwargs)))


def fake_ray() -> tuple[types.ModuleType, types.ModuleType]:
    exceptions = types.ModuleType("ray.exceptions")
    exceptions.RayError = type("RayError", (Exception,), {})
    for name in ("RayActorError", "WorkerCrashedError", "GetTimeoutError"):
        setattr(exceptions, name, type(name, (exceptions.RayError,), {}))
    ray = types.ModuleType("ray")
    ray.exceptions = exceptions
    ray.is_initialized = lambda: True
    ray.init = lambda **kwargs: None
    ray.shutdown = lambda: None
    ray.cluster_resources = lambda: {"CPU": 1.0}
    ray.get = lambda ref, timeout=None: ref.get()
    ray.wait = lambda refs, num_returns=1, timeout=None: (list(refs)[:num_returns], list(refs)[num_returns:])
    ray.kill = lambda handle: None
    ray.get_gpu_ids = lambda: []
    ray.get_runtime_context = lambda: types.SimpleNamespace(get_actor_id=lambda: "a" * 32,
                                                            get_node_id=lambda: "n" * 56)
    ray.remote = lambda **options: (lambda cls: types.SimpleNamespace(
        remote=lambda *args, **kwargs: _Handle(cls(*args, **kwargs))))
    return ray, exceptions


@pytest.fixture
def on_fake_ray(monkeypatch, tmp_path):
    """The Ray modules of the harness and the controller imported afresh against the fake (the real ones, if any,
    are put back after the test)."""
    ray, exceptions = fake_ray()
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.exceptions", exceptions)
    for name in ("harness.pipeline.ray_executor", "controller.ray_evaluator"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import harness.pipeline.ray_executor as ray_executor

    monkeypatch.setattr(ray_executor, "LANE_ROOT", tmp_path / "lanes")
    return ray_executor


def full_once_the_lane_has_evaluated(monkeypatch, ray_executor, driver: Path, after: int = 1) -> list[str]:
    """Every write under the driver's archive fails (half a file written first) once a lane has evaluated
    ``after`` submissions; the lanes' own archives are on another disk and still take theirs."""
    real_write, real_evaluate, refused = database._write_file, ray_executor.Lane.evaluate, []
    state = {"full": False, "evaluated": 0}

    def write(path, data):
        if state["full"] and Path(path).resolve().is_relative_to(driver.resolve()):
            refused.append(str(path))
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_write(path, data)

    def evaluate(self, *args, **kwargs):
        reply = real_evaluate(self, *args, **kwargs)
        state["evaluated"] += 1
        state["full"] = state["evaluated"] >= after
        return reply

    monkeypatch.setattr(database, "_write_file", write)
    monkeypatch.setattr(ray_executor.Lane, "evaluate", evaluate)
    return refused


def import_finds_the_database_full(monkeypatch, ray_executor) -> list[int]:
    """The lane's submission is imported into the driver's archive, then the database cannot grow: SQLite's own
    error at the last write of the import's one transaction (its seal)."""
    real_import, real_seal, refused = ray_executor.import_submission, Archive._write_seal, []
    importing = {"now": False}

    def import_submission(*args, **kwargs):
        importing["now"] = True
        try:
            return real_import(*args, **kwargs)
        finally:
            importing["now"] = False

    def write_seal(self, submission_id):
        if importing["now"]:
            refused.append(submission_id)
            raise sqlite3.OperationalError("database or disk is full")
        return real_seal(self, submission_id)

    monkeypatch.setattr(ray_executor, "import_submission", import_submission)
    monkeypatch.setattr(Archive, "_write_seal", write_seal)
    return refused


def one_line(result) -> str:
    """The command's one error line (the loop's progress lines may come before it)."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error")]
    assert result.exit_code == 2 and errors == lines[-1:] and "Traceback" not in result.output, result.output
    return errors[0]


def nothing_half_written(folder: Path) -> None:
    assert not [p for p in (folder / "blobs").rglob("*.tmp*")]
    archive = Archive(folder)
    assert archive.db.execute("select count(*) from submissions where status = 'RUNNING'").fetchone()[0] == 0
    for digest, in archive.db.execute("select sha256 from blobs").fetchall():  # every blob row's file is whole
        assert (folder / "blobs" / digest[:2] / digest[2:]).is_file()


@pytest.mark.parametrize("where, said", [
    ("files", ""),  # the controller's own next write (its request's blob) finds the disk full
    ("database", "is archived as HARNESS_ERROR"),  # the lane's submission cannot be imported into the driver's archive
])
def test_controller_loop_on_ray_with_a_full_disk_is_one_line(on_fake_ray, tiny_dataset_root, tmp_path, monkeypatch,
                                                             where, said):
    """It was a traceback (OSError out of LaneClient.submit, or out of the controller's own archive writes)."""
    from controller.cli import main

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    folder = tmp_path / "archive"
    folder.mkdir()
    if where == "files":
        refused = full_once_the_lane_has_evaluated(monkeypatch, on_fake_ray, folder)
    else:
        refused = import_finds_the_database_full(monkeypatch, on_fake_ray)
    result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--rounds", "1", "--candidates", "1",
                                       "--archive", str(folder), "--dataset", str(tiny_dataset_root),
                                       "--workloads", WORKLOAD, "--timeout-s", "120", "--no-profile",
                                       "--executor", "ray"])
    line = one_line(result)
    assert refused and line.startswith("error: the disk is full: cannot write ") and str(folder) in line, line
    assert said in line, line
    nothing_half_written(folder)
    if where == "database":  # the import rolled back whole; the submission is said as HARNESS_ERROR, sealed
        archive = Archive(folder)
        rows = archive.db.execute("select id, status, message from submissions").fetchall()
        assert [status for _, status, _ in rows] == ["HARNESS_ERROR"], rows  # the first import (round 0)
        assert "the disk is full" in rows[-1][2] and archive.verify_seal(rows[-1][0]).state == "sealed"
        assert archive.db.execute("select count(*) from evaluations where submission_id = ?",
                                  [rows[-1][0]]).fetchone()[0] == 0


def test_harness_submit_on_ray_with_a_full_disk_is_one_line(on_fake_ray, tiny_dataset_root, tmp_path, monkeypatch):
    from harness.cli import main

    folder = tmp_path / "archive"
    folder.mkdir()
    solution = tmp_path / "solution.json"
    solution.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    refused = full_once_the_lane_has_evaluated(monkeypatch, on_fake_ray, folder)
    result = CliRunner().invoke(main, ["submit", str(solution), "--archive", str(folder), "--dataset",
                                       str(tiny_dataset_root), "-w", WORKLOAD, "--executor", "ray"])
    line = one_line(result)
    assert refused and line.startswith("error: the disk is full: cannot write ") and str(folder) in line, line
    assert "nothing of this submission was archived" in line, line  # its solution's blob could not be written
    nothing_half_written(folder)
