"""A full disk (ENOSPC; EDQUOT and EIO alike) under the archive: the submission ends with a recorded status where
the archive can still be written, else one line that says the disk is full and where; partial files are removed
and nothing is left RUNNING or looking like an archive. The disk is made full by monkeypatching the write path."""

from __future__ import annotations

import errno
import json
import os
import sqlite3

import pytest
from click.testing import CliRunner

import harness.archive.database as database
import harness.archive.travel as travel
from harness.archive.database import ARCHIVE_DB, Archive
from harness.archive.storage import ArchiveStorageError, storage_failure, storage_message
from harness.cli import main
from harness.pipeline.submission_summary import cut_short, storage_outcome

from support import TORCH_CANDIDATE, solution_dict


def full(path=None) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), *([str(path)] if path else []))


def chained() -> RuntimeError:
    try:
        raise full()
    except OSError as e:
        try:
            raise RuntimeError("while archiving") from e
        except RuntimeError as outer:
            return outer


@pytest.mark.parametrize("err, reason", [
    (full(), "the disk is full"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "the disk quota is exceeded"),
    (OSError(errno.EIO, "Input/output error"), "the disk failed (an I/O error)"),
    (sqlite3.OperationalError("database or disk is full"), "the disk is full"),
    (sqlite3.OperationalError("disk I/O error"), "the disk failed (an I/O error)"),
    (chained(), "the disk is full"),  # raised from one
    (ArchiveStorageError("the disk is full: cannot write x"), "the disk is full: cannot write x"),
    (OSError(errno.EACCES, "Permission denied"), None),  # not the disk's state
    (FileNotFoundError(errno.ENOENT, "No such file"), None),
    (sqlite3.OperationalError("no such table: x"), None),
    (RuntimeError("a harness bug"), None),
    (KeyboardInterrupt(), None),
])
def test_which_failures_are_the_storages(err, reason):
    assert storage_failure(err) == reason


@pytest.mark.parametrize("err, folder, line", [
    (full("/d/blobs/ab/cd.tmp1"), "/d", "the disk is full: cannot write /d/blobs/ab/cd.tmp1"),
    (sqlite3.OperationalError("database or disk is full"), "/d", "the disk is full: cannot write the archive in /d"),
    (RuntimeError("bug"), "/d", None),
])
def test_the_line_a_storage_failure_is_said_in(err, folder, line):
    assert storage_message(err, folder) == line


@pytest.mark.parametrize("submission_id, closed, words", [
    (None, False, "nothing of this submission was archived"),
    (3, True, "submission 3 is archived as HARNESS_ERROR with its finished workloads (free space, then submit again)"),
    (3, False, "submission 3 could not be closed either: the next harness run on this archive records it as "
               "INTERRUPTED"),
])
def test_what_a_full_disk_made_of_the_submission(submission_id, closed, words):
    line = storage_outcome("the disk is full", "/d/archive.db", submission_id, closed)
    assert line.startswith("the disk is full: cannot write /d/archive.db; ") and line.endswith(words)


def test_a_full_disk_is_recorded_as_such_not_as_a_harness_bug():
    status, message = cut_short(full("/d/x"))
    assert status == "HARNESS_ERROR" and message.startswith("the archive could not be written: the disk is full")


def half_then_full(path, data):
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    raise full(path)


def test_a_blob_the_disk_could_not_hold_leaves_no_partial_file(tmp_path, monkeypatch):
    archive = Archive(tmp_path / "a")
    monkeypatch.setattr(database, "_write_file", half_then_full)
    with pytest.raises(OSError) as got:
        archive.put_blob(b"x" * 4096, "log")
    assert got.value.errno == errno.ENOSPC
    assert [p for p in (tmp_path / "a" / "blobs").rglob("*") if p.is_file()] == []
    assert archive.db.execute("select count(*) from blobs").fetchone()[0] == 0


@pytest.fixture
def submit_args(tmp_path, tiny_dataset_root):
    sol = tmp_path / "solution.json"
    sol.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    (tmp_path / "a").mkdir()
    return ["submit", str(sol), "--archive", str(tmp_path / "a"), "--dataset", str(tiny_dataset_root),
            "-w", "tiny_b2_t40"]


def full_after_the_solution(monkeypatch):
    """The disk fills once the submission has begun: the solution's blob is written, every later file is not."""
    real, calls = database._write_file, []

    def write(path, data):
        calls.append(path)
        if len(calls) == 1:
            return real(path, data)
        half_then_full(path, data)

    monkeypatch.setattr(database, "_write_file", write)
    return calls


def one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_submit_on_a_full_disk_records_the_submission_and_says_so_in_one_line(tmp_path, submit_args, monkeypatch):
    """It was a traceback, the submission left RUNNING and a .tmp blob behind."""
    calls = full_after_the_solution(monkeypatch)
    line = one_line(CliRunner().invoke(main, submit_args))
    assert len(calls) > 1 and line.startswith("error: the disk is full: cannot write ")
    assert "submission 1 is archived as HARNESS_ERROR" in line
    row = Archive(tmp_path / "a").submission(1)
    assert row["status"] == "HARNESS_ERROR" and "the disk is full" in row["message"]
    assert not [p for p in (tmp_path / "a" / "blobs").rglob("*.tmp*")]


def test_submit_when_the_archive_itself_cannot_be_written_is_one_line(tmp_path, submit_args, monkeypatch):
    full_after_the_solution(monkeypatch)

    def cannot(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Archive, "finish_submission", cannot)
    line = one_line(CliRunner().invoke(main, submit_args))
    assert line.startswith("error: the disk is full: cannot write ") and "could not be closed either" in line
    assert not [p for p in (tmp_path / "a" / "blobs").rglob("*.tmp*")]


@pytest.mark.parametrize("dest_exists", [False, True])
def test_copy_archive_onto_a_full_disk_leaves_nothing_that_looks_like_an_archive(tmp_path, monkeypatch, dest_exists):
    """It was a traceback, and a half-written archive.db was left in the destination."""
    source = Archive(tmp_path / "a")
    source.put_blob(b"a solution", "solution")
    dest = tmp_path / "copy"
    if dest_exists:
        dest.mkdir()

    def copy2(src, dst, **kwargs):
        raise full(dst)

    monkeypatch.setattr(travel.shutil, "copy2", copy2)  # the database is written, the first blob is not
    line = one_line(CliRunner().invoke(main, ["copy-archive", str(dest), "--archive", str(source.folder)]))
    assert line.startswith("error: cannot copy the archive: the disk is full (writing ") and str(dest) in line
    assert (list(dest.iterdir()) == []) if dest_exists else not dest.exists()
    assert not (dest / ARCHIVE_DB).exists()
