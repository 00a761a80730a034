"""An archive damaged or changed outside the harness: every reading command ends with one line and exit 2 where the
archive cannot be used, or reads what is left (the seal says what was changed), never a traceback or a hang; and
nothing of the archive is changed by it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from harness.cli import main

from support import TORCH_CANDIDATE, solution_dict

WORKLOAD = "tiny_b2_t40"


@pytest.fixture(scope="module")
def archived(tmp_path_factory, tiny_dataset_root) -> Path:
    """An archive holding one PASSED submission, made by `harness submit`."""
    base = tmp_path_factory.mktemp("archived")
    solution = base / "solution.json"
    solution.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    (base / "a").mkdir()
    done = harness("submit", str(solution), "--archive", str(base / "a"), "--dataset", str(tiny_dataset_root),
                   "-w", WORKLOAD)
    assert done.returncode == 0, done.stderr
    return base / "a"


def harness(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args))
    return SimpleNamespace(returncode=result.exit_code, stderr=result.stderr + (
        "Traceback" if result.exception is not None and not isinstance(result.exception, SystemExit) else ""))


def sql(*statements: str):
    def damage(folder: Path) -> None:
        conn = sqlite3.connect(folder / "archive.db")
        for statement in statements:
            conn.execute(statement)
        conn.commit()
        conn.close()
    return damage


def seal_key_fifo(folder: Path) -> None:
    (folder / "seal.key").unlink()
    os.mkfifo(folder / "seal.key")  # opening it for reading waited for a writer for ever


def blobs_a_file(folder: Path) -> None:
    shutil.rmtree(folder / "blobs")
    (folder / "blobs").write_text("not a folder")


def blobs_fifos(folder: Path) -> None:
    for blob in [p for p in (folder / "blobs").rglob("*") if p.is_file()]:
        blob.unlink()
        os.mkfifo(blob)  # reading one waited for a writer for ever (diff, report, export hung)


def blobs_gone(folder: Path) -> None:
    shutil.rmtree(folder / "blobs")


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "not a file"
            for p in sorted(folder.rglob("*")) if not p.is_dir() and not p.name.endswith(("-wal", "-shm"))}


# (damage, what an unusable archive's one line says: None where the commands read what is left)
DAMAGES = {
    "seal.key a FIFO": (seal_key_fifo, None),
    "blobs a file": (blobs_a_file, "blobs is not a folder"),
    "blobs FIFOs": (blobs_fifos, None),
    "blobs gone": (blobs_gone, None),
    "a column renamed": (sql("alter table evaluations rename column log_blob to renamed"),
                         "lacks column(s) log_blob of its table evaluations"),
    "a table dropped": (sql("drop table agent_turns"), "lacks its table agent_turns"),
    "JSON columns not JSON": (sql("update submissions set options = '{bad', scores = '[1'",
                                  "update evaluations set extra = 'nan{', trace = '{'"), None),
    "names NULL or numbers": (sql("update submissions set solution_name = NULL, definition = NULL, author = 7, "
                                  "status = NULL, solution_hash = NULL"), None),
}
COMMANDS = [["list"], ["list", "--json"], ["show", "1"], ["show", "1", "--json"], ["diff", "1", "1"],
            ["report", "--out", "OUT"], ["export", "OUT"]]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_archive_is_one_line_or_read_as_it_is_by_every_reader(archived, tmp_path, damage):
    """Each was a traceback (KeyError, JSONDecodeError, TypeError, NotADirectoryError) or a hang (seal.key)."""
    folder = tmp_path / "a"
    shutil.copytree(archived, folder, symlinks=True)
    make, refused = DAMAGES[damage]
    make(folder)
    before = digest(folder)
    for command in COMMANDS:
        out = tmp_path / f"out-{command[0]}"
        done = harness(*[str(out) if a == "OUT" else a for a in command], "--archive", str(folder))
        assert "Traceback" not in done.stderr, (command, done.stderr)
        if refused is None:
            assert done.returncode == 0, (command, done.stderr)
        else:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            assert done.returncode == 2 and len(lines) == 1 and refused in lines[0], (command, done.stderr)
            assert not out.exists()
    assert digest(folder) == before


def test_an_archive_folder_whose_name_is_not_utf8_is_read_and_reported(archived, tmp_path):
    """`harness report` wrote the folder's name into its page and crashed on the undecodable bytes
    (UnicodeEncodeError); the name is now shown as its escapes."""
    folder = tmp_path / os.fsdecode(b"not-utf8-\xff\xfe")
    shutil.copytree(archived, folder)
    for command in (["list"], ["show", "1"], ["report", "--out", str(tmp_path / "report")],
                    ["export", str(tmp_path / "export")], ["copy-archive", str(tmp_path / "copy")]):
        done = harness(*command, "--archive", str(folder))
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr)
    assert "not-utf8-\\udcff\\udcfe" in (tmp_path / "report" / "index.html").read_text()


def read_only_as_seen(monkeypatch, folder: Path) -> None:
    """``folder`` as a read-only mount shows itself to this process (os.access says no), without needing one."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if Path(path) == folder and mode & os.W_OK
                        else real(path, mode, *a, **k))


def test_a_read_only_archive_is_read_by_every_reader_and_refused_by_writers(archived, tmp_path, monkeypatch):
    """Every reader failed on a read-only archive folder ("unable to open database file": it was opened to be
    migrated, with its WAL's files made beside it); `controller loop` said the same instead of "not writable"."""
    from controller.cli import main as controller

    folder = tmp_path / "a"
    shutil.copytree(archived, folder)
    conn = sqlite3.connect(folder / "archive.db")  # a whole file, as a carried copy is
    conn.execute("pragma wal_checkpoint(truncate)")
    conn.close()
    read_only_as_seen(monkeypatch, folder)
    before = digest(folder)
    for command in COMMANDS:
        out = tmp_path / f"out-{command[0]}"
        done = harness(*[str(out) if a == "OUT" else a for a in command], "--archive", str(folder))
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr)
    result = CliRunner().invoke(controller, ["runs", "--archive", str(folder)])
    assert result.exit_code == 0, result.output
    for runner, args in ((main, ["import", str(tmp_path / "out-export")]),
                         (controller, ["loop", "-p", "offline", "-d", "gqa_paged_decode_h32_kv8_d128_ps1"])):
        result = CliRunner().invoke(runner, [*args, "--archive", str(folder)])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and "is not writable" in lines[0], result.output
    assert digest(folder) == before


def test_a_read_only_archive_that_needs_a_migration_is_one_line(archived, tmp_path, monkeypatch):
    folder = tmp_path / "a"
    shutil.copytree(archived, folder)
    sql("delete from _migrations where name = 'm010_baseline_busy'")(folder)  # as an older version left it
    read_only_as_seen(monkeypatch, folder)
    before = digest(folder)
    done = harness("list", "--archive", str(folder))
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "needs migrating to this version (m010_baseline_busy)" in \
        lines[0], done.stderr
    assert digest(folder) == before


def test_the_writes_in_a_wal_that_a_read_only_folder_cannot_show_are_never_read_around(tmp_path, monkeypatch):
    """Where SQLite cannot open an archive read-only (no WAL index beside it, none can be made), it was read as
    immutable, leaving out what its -wal held: a stale archive shown as the archive."""
    from harness.archive.schema_guard import read_only_connection

    folder = tmp_path / "a"
    folder.mkdir()
    conn = sqlite3.connect(folder / "archive.db")
    conn.execute("create table t (x)")
    conn.commit()
    conn.close()
    (folder / "archive.db-wal").write_bytes(b"\0" * 4096)  # writes not yet in the database file
    real = sqlite3.connect

    def connect(database, *args, **kwargs):
        if "mode=ro" in str(database):  # as in a read-only folder without the WAL's index
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    with pytest.raises(sqlite3.OperationalError, match="archive.db-wal beside it holds writes"):
        read_only_connection(folder / "archive.db")
    (folder / "archive.db-wal").unlink()
    assert read_only_connection(folder / "archive.db").execute("select count(*) from t").fetchone() == (0,)


def test_an_archive_db_that_is_a_link_to_nothing_is_refused_and_nothing_is_made_through_it(tmp_path):
    """SQLite followed the link and made a new database wherever it pointed (a file outside the archive folder)."""
    from controller.cli import main as controller

    folder, elsewhere = tmp_path / "a", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "archive.db").symlink_to(elsewhere / "made.db")
    solution = tmp_path / "solution.json"
    solution.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    for runner, args in ((main, ["submit", str(solution)]), (main, ["import", str(tmp_path)]),
                         (controller, ["loop", "-p", "offline", "-d", "gqa_paged_decode_h32_kv8_d128_ps1"])):
        result = CliRunner().invoke(runner, [*args, "--archive", str(folder)])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and "is a link to nothing" in lines[0], result.output
    assert list(elsewhere.iterdir()) == []
