"""An archive.db that carries a trigger of another's (harness/archive/schema_guard.py), or was written by a newer
version, is refused on one line by every command, before anything is written, and left byte for byte as it was.
Tables and views of another program's beside the archive's are left alone and change nothing the harness records."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.archive.database import ARCHIVE_DB, Archive, MIGRATIONS
from harness.archive.schema_guard import foreign_schema
from harness.cli import main

from support import TORCH_CANDIDATE, solution_dict

WORKLOAD = "tiny_b2_t40"
WRONG = TORCH_CANDIDATE + "\n\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n" \
                          "    output.zero_()\n    lse.zero_()\n"


def archive_with(folder: Path, *statements: str) -> Path:
    """An archive (made by the harness) to which another program then added ``statements``."""
    Archive(folder).db.conn.close()
    conn = sqlite3.connect(folder / ARCHIVE_DB)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()
    return folder


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


FORGE = "create trigger forge after insert on evaluations begin update evaluations set status = 'PASSED', " \
        "message = '' where id = new.id; end"
REDIRECT = "create trigger redirect after update of status on submissions begin update submissions set " \
           "definition = 'elsewhere' where id = new.id; end"
ABORT = "create trigger frozen before insert on blobs begin select raise(abort, 'frozen'); end"
OWN_NAME = ("drop trigger documents_ai", "create trigger documents_ai after insert on documents begin "
            "delete from evaluations; end")
ON_A_VIEW = ("create view mine as select id from submissions", "create trigger on_view instead of insert on "
             "mine begin delete from submissions; end")
ON_ITS_OWN_TABLE = ("create table notes (x)", "create trigger noted after insert on notes begin select 1; end")
NEWLINE_NAME = 'create trigger "two\nlines" after insert on evaluations begin select 1; end'
NEWER = "insert into _migrations (name, applied_at) values ('m999_from_a_newer_version', '2030-01-01')"


@pytest.mark.parametrize("statements, said", [
    ((FORGE,), "forge on evaluations"),
    ((FORGE, REDIRECT), "2 trigger(s)"),
    ((ABORT,), "frozen on blobs"),
    (OWN_NAME, "documents_ai on documents"),  # one of the archive's own names with another body
    (ON_A_VIEW, "on_view on mine"),
    (ON_ITS_OWN_TABLE, "noted on notes"),
    ((NEWLINE_NAME,), "two lines on evaluations"),
    ((NEWER,), "newer version of Crucible (migration(s) m999_from_a_newer_version"),
])
@pytest.mark.parametrize("command", [
    ["submit", "SOLUTION", "--dataset", "DATASET", "-w", WORKLOAD],
    ["list"], ["show", "1"], ["report", "--out", "OUT"], ["export", "OUT"], ["copy-archive", "OUT"],
])
def test_an_archive_with_a_foreign_trigger_or_a_newer_schema_is_refused_and_left_as_it_is(
        tmp_path, tiny_dataset_root, statements, said, command):
    """A trigger added to archive.db ran inside `harness submit`: an INCORRECT_NUMERICAL workload was recorded
    (and sealed) as PASSED."""
    folder = archive_with(tmp_path / "a", *statements)
    before = digest(folder)
    solution = tmp_path / "wrong.json"
    solution.write_text(json.dumps(solution_dict(WRONG, name="wrong")))
    swap = {"SOLUTION": str(solution), "DATASET": str(tiny_dataset_root), "OUT": str(tmp_path / "out")}
    line = one_line(CliRunner().invoke(main, [swap.get(a, a) for a in command] + ["--archive", str(folder)]))
    assert line.startswith(f"error: {folder / ARCHIVE_DB} ") and said in line and "left as it is" in line, line
    assert digest(folder) == before and not (tmp_path / "out").exists()


def test_the_controller_refuses_it_too(tmp_path):
    from controller.cli import main as controller

    folder = archive_with(tmp_path / "a", FORGE)
    before = digest(folder)
    for args in (["runs"], ["trajectory", "--all"], ["loop", "--resume", "unfinished"]):
        line = one_line(CliRunner().invoke(controller, args + ["--archive", str(folder)]))
        assert "forge on evaluations" in line, line
    assert digest(folder) == before


def test_the_archives_own_triggers_are_not_foreign(tmp_path):
    folder_db = sqlite3.connect(":memory:")
    assert foreign_schema(folder_db, MIGRATIONS) == ""  # an empty database: nothing to refuse
    # the full-text index's triggers as another sqlite-utils wrote them ([brackets], other spacing) are its own
    folder = archive_with(tmp_path / "a")
    conn = sqlite3.connect(folder / ARCHIVE_DB)
    for name, sql in conn.execute("select name, sql from sqlite_master where type = 'trigger'").fetchall():
        conn.execute(f'drop trigger "{name}"')
        conn.execute(re.sub(r'"([^"]*)"', r"[\1]", sql).replace("  ", "    "))
    conn.commit()
    assert conn.execute("select count(*) from sqlite_master where type = 'trigger' and sql like '%[documents_fts]%'"
                        ).fetchone()[0] == 3
    assert foreign_schema(conn, MIGRATIONS) == ""
    conn.execute("drop trigger documents_ai")  # one of its names with another body still is foreign
    conn.execute("create trigger documents_ai after insert on [documents] begin delete from [evaluations]; end")
    assert "documents_ai on documents" in foreign_schema(conn, MIGRATIONS)


def test_tables_and_views_of_another_program_change_nothing_the_harness_records(tmp_path, tiny_dataset_root):
    folder = archive_with(tmp_path / "a", "create table notes (id integer primary key, text)",
                          "insert into notes (text) values ('a person''s note')",
                          "create view passed_only as select id from evaluations where status = 'PASSED'")
    solution = tmp_path / "wrong.json"
    solution.write_text(json.dumps(solution_dict(WRONG, name="wrong")))
    result = CliRunner().invoke(main, ["submit", str(solution), "--archive", str(folder), "--dataset",
                                       str(tiny_dataset_root), "-w", WORKLOAD, "--json"])
    assert result.exit_code == 1, result.output  # the candidate is wrong, and recorded as wrong
    archive = Archive(folder)
    assert archive.submission(1)["status"] == "INCORRECT_NUMERICAL"
    assert archive.verify_seal(1).state == "sealed"
    assert archive.db.execute("select text from notes").fetchall() == [("a person's note",)]


def test_another_programs_database_whose_table_names_hold_newlines_is_still_one_line(tmp_path):
    """Its table names were put into the refusal as they were: a name with a newline split the line."""
    folder = tmp_path / "a"
    folder.mkdir()
    conn = sqlite3.connect(folder / ARCHIVE_DB)
    conn.execute('create table "first\nsecond" (x)')
    conn.execute(f'create table "{"y" * 500}" (x)')
    conn.commit()
    conn.close()
    before = digest(folder)
    line = one_line(CliRunner().invoke(main, ["list", "--archive", str(folder)]))
    assert "another program's SQLite database" in line and "first second" in line and len(line) < 400, line
    assert digest(folder) == before
