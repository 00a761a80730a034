"""The archive: migrations once, WAL, foreign keys, content-addressed blobs, submissions and evaluations
that land whole, and a database that survives a writer dying mid-transaction."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import harness.archive.database as archive_mod
from harness.archive.database import ARCHIVE_DB, Archive, ArchiveError

from support import ROOT

SOLUTION = {"name": "cand", "definition": "defn", "author": "tests",
            "spec": {"language": "python", "entry_point": "kernel.py::run"},
            "sources": [{"path": "kernel.py", "content": "def run(): pass\n"}]}


def sample(trial: int, role: str = "candidate") -> dict:
    return {"role": role, "trial": trial, "backend": "cuda_event", "aligned": 1, "median_ms": 0.5 + trial,
            "samples": [0.5, 0.6, 0.7]}


@pytest.fixture
def submission(archive):
    archive.put_solution(SOLUTION, "hash-1")
    env = archive.put_environment({"host": "box", "hardware": "cpu", "torch": "2.x"})
    return archive.start_submission("hash-1", "cand", "defn", "tests", {"workloads": ["a"]}, env)


def count(archive: Archive, table: str) -> int:
    return archive.db.execute(f"select count(*) from {table}").fetchone()[0]


# -- opening --------------------------------------------------------------------------------------------


def test_migrations_are_applied_once(tmp_path):
    Archive(tmp_path / "a")
    rows = list(sqlite3.connect(tmp_path / "a" / ARCHIVE_DB).execute("select name, applied_at from _migrations"))
    assert [r[0] for r in rows] == [m.__name__ for m in archive_mod.MIGRATIONS]
    assert rows[0][0] == "m001_core"
    again = Archive(tmp_path / "a")
    assert archive_mod.migrate(again.db) == []
    rows2 = list(again.db.execute("select name, applied_at from _migrations"))
    assert rows2 == rows  # nothing re-applied, the timestamps unchanged


def at_once(n: int, work) -> list[Exception]:
    """``work()`` on ``n`` threads released together; the exceptions they raised (a thread's would not fail
    the test by itself)."""
    import threading

    start, failures = threading.Barrier(n, timeout=10), []

    def run():
        start.wait()
        try:
            work()
        except Exception as err:
            failures.append(err)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def test_connections_opening_a_new_archive_at_once_all_succeed_and_migrate_once(tmp_path):
    """The controller's lanes (one per GPU) open the same new archive together: each must get a working
    archive, with every migration applied exactly once (they raced to 'database is locked' before)."""
    folder = tmp_path / "new"
    folder.mkdir()
    opened = []
    failures = at_once(8, lambda: opened.append(Archive(folder).submissions()))  # usable: the schema is there
    assert failures == [] and len(opened) == 8
    names = [r["name"] for r in Archive(folder).db["_migrations"].rows]
    assert names == [m.__name__ for m in archive_mod.MIGRATIONS]


def test_transactions_that_read_then_write_wait_for_each_other_instead_of_failing(tmp_path):
    """Lanes write the same archive at once, each transaction reading before it writes (as sqlite-utils' insert
    does). A deferred BEGIN fails such a transaction at once with 'database is locked'; every write must land."""
    Archive(tmp_path / "a").db["counter"].insert({"id": 1, "n": 0}, pk="id")

    def bump():
        archive = Archive(tmp_path / "a")
        for _ in range(40):
            with archive.db.atomic():
                (n,) = archive.db.execute("select n from counter where id = 1").fetchone()
                archive.db.execute("update counter set n = ? where id = 1", [n + 1])

    assert at_once(4, bump) == []
    assert Archive(tmp_path / "a").db.execute("select n from counter").fetchone() == (160,)  # no lost update


def test_a_new_migration_is_applied_on_the_next_open(tmp_path, monkeypatch):
    Archive(tmp_path / "a")

    def m999_notes(db):
        db["notes"].create({"id": int, "text": str}, pk="id")

    before = [m.__name__ for m in archive_mod.MIGRATIONS]
    monkeypatch.setattr(archive_mod, "MIGRATIONS", [*archive_mod.MIGRATIONS, m999_notes])
    a = Archive(tmp_path / "a")
    assert [r["name"] for r in a.db["_migrations"].rows] == before + ["m999_notes"]
    assert "notes" in a.db.table_names()
    assert archive_mod.migrate(a.db) == []


def test_a_failing_migration_leaves_nothing_behind(tmp_path, monkeypatch):
    Archive(tmp_path / "a")

    def m002_broken(db):
        db["half"].create({"id": int}, pk="id")
        raise RuntimeError("migration failed half way")

    monkeypatch.setattr(archive_mod, "MIGRATIONS", [*archive_mod.MIGRATIONS, m002_broken])
    with pytest.raises(RuntimeError):
        Archive(tmp_path / "a")
    db = sqlite3.connect(tmp_path / "a" / ARCHIVE_DB)
    assert "half" not in {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}


@pytest.mark.parametrize("tables, migrations, kind", [
    (set(), None, "new"),  # an empty file, or a path with nothing yet
    ({"_migrations"}, set(), "new"),  # a creation cut short before its first migration
    ({"_migrations", *archive_mod.CORE_TABLES}, {"m001_core"}, "crucible"),
    ({"_migrations", *archive_mod.CORE_TABLES, "runs"}, {"m001_core", "m002_baselines_and_scores"}, "crucible"),
    ({"_migrations", "users"}, {"m001_core"}, "foreign"),  # our first migration's row, forged: not its tables
    ({"notes"}, None, "foreign"),  # another program's tables
    ({"_migrations"}, {"0001_initial"}, "foreign"),  # another tool's migration table
    ({"_migrations", "users"}, None, "foreign"),  # one of another shape (no name column)
    ({"blobs", "submissions"}, None, "foreign"),  # our table names, without our marker
])
def test_what_an_sqlite_file_given_as_the_archive_holds(tables, migrations, kind):
    assert archive_mod.database_kind(tables, migrations) == kind


@pytest.mark.parametrize("as_path", ["folder", "db"])
def test_another_programs_sqlite_file_is_refused_and_left_byte_for_byte(tmp_path, as_path):
    """It was migrated in place (our tables added to a stranger's database); now one line, exit 2, untouched."""
    db_file = tmp_path / "theirs" / ARCHIVE_DB
    db_file.parent.mkdir()
    conn = sqlite3.connect(db_file)
    conn.execute("create table notes (id integer primary key, body text)")
    conn.execute("insert into notes (body) values ('mine')")
    conn.commit()
    conn.close()
    before = db_file.read_bytes()
    with pytest.raises(ArchiveError, match="another program's SQLite database"):
        Archive(db_file.parent if as_path == "folder" else db_file)
    given = str(db_file.parent if as_path == "folder" else db_file)
    for args in (["submit", str(ROOT / "examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json"),
                  "--archive", given], ["list", "--archive", given]):
        proc = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and "not a Crucible archive" in lines[0], proc.stderr
    assert db_file.read_bytes() == before
    assert sorted(p.name for p in db_file.parent.iterdir()) == [ARCHIVE_DB]


def _foreign_db(path, *statements) -> bytes:
    path.parent.mkdir(exist_ok=True)
    conn = sqlite3.connect(path)
    for sql in ("create table users (id integer primary key, pw text)", "insert into users (pw) values ('mine')",
                *statements):
        conn.execute(sql)
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("forged", [
    ["create table _migrations (name text primary key, applied_at text)",
     "insert into _migrations values ('m001_core', 'x')"],
    ["create table _migrations (name text primary key, applied_at text)", "insert into _migrations values "
     "('m001_core', 'x')", *(f"create view {t} as select 1 as id" for t in archive_mod.CORE_TABLES)],
])
def test_a_forged_first_migration_row_does_not_make_another_programs_file_an_archive(tmp_path, forged):
    """A _migrations row naming m001_core in another program's database passed as ours: migrated in place (WAL
    header written, a traceback at the first missing table). Our tables must be there too."""
    db_file = tmp_path / "theirs" / ARCHIVE_DB
    before = _foreign_db(db_file, *forged)
    with pytest.raises(ArchiveError, match="another program's SQLite database"):
        Archive(db_file.parent)
    assert db_file.read_bytes() == before


def test_a_stray_wal_of_another_database_is_not_checkpointed_into_the_archive(tmp_path):
    """An archive.db-wal left beside the archive by another database: SQLite reads it as the archive's, and the
    connection that refused the file checkpointed it on closing, replacing the archive by the stranger's pages."""
    first = Archive(tmp_path / "a")
    first.put_solution(SOLUTION, "h1")
    first.db.conn.close()  # the last connection: the archive is whole in archive.db, no -wal beside it
    db_file = tmp_path / "a" / ARCHIVE_DB
    before = db_file.read_bytes()
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("pragma journal_mode = wal")
    other.execute("create table x (a)")
    other.commit()
    for suffix in ("-wal", "-shm"):
        (tmp_path / "a" / f"{ARCHIVE_DB}{suffix}").write_bytes((tmp_path / f"other.db{suffix}").read_bytes())
    other.close()
    with pytest.raises(ArchiveError, match="archive.db-wal beside it may be another database's"):
        Archive(tmp_path / "a")
    assert db_file.read_bytes() == before
    for suffix in ("-wal", "-shm"):
        (tmp_path / "a" / f"{ARCHIVE_DB}{suffix}").unlink()
    assert Archive(tmp_path / "a").db.execute("select name from solutions").fetchall() == [("cand",)]


@pytest.mark.parametrize("kind", ["garbage", "truncated", "fifo", "folder"])
def test_a_file_that_is_not_a_database_is_an_archive_error(tmp_path, kind):
    """A sqlite3 error at opening (not a database, malformed) reached the controller loop as a traceback; a FIFO
    as archive.db hung a reader."""
    good = Archive(tmp_path / "good")
    good.put_solution(SOLUTION, "h1")
    good.db.conn.close()
    db_file = tmp_path / "bad" / ARCHIVE_DB
    db_file.parent.mkdir()
    if kind == "garbage":
        db_file.write_bytes(os.urandom(8192))
    elif kind == "truncated":
        db_file.write_bytes((tmp_path / "good" / ARCHIVE_DB).read_bytes()[:5000])
    elif kind == "fifo":
        os.mkfifo(db_file)
    else:
        db_file.mkdir()
    with pytest.raises(ArchiveError, match=str(db_file)):
        Archive(tmp_path / "bad")


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_a_fifo_or_link_planted_as_the_schema_lock_neither_hangs_nor_is_followed(tmp_path, planted):
    """archive.db.lock was opened for appending: a FIFO there hung every command that opens the archive, and a link
    to nothing made the file it names."""
    Archive(tmp_path / "a").db.conn.close()
    lock = tmp_path / "a" / f"{ARCHIVE_DB}.lock"
    lock.unlink()
    if planted == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to(tmp_path / "made-through-the-link")
    code = "import sys; from harness.archive.database import Archive; print(len(Archive(sys.argv[1]).submissions()))"
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr[-2000:]
    assert not (tmp_path / "made-through-the-link").exists()


def test_an_empty_file_becomes_an_archive_and_an_older_archive_still_migrates(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ARCHIVE_DB).write_bytes(b"")
    assert "submissions" in Archive(tmp_path / "empty").db.table_names()
    every = list(archive_mod.MIGRATIONS)
    monkeypatch.setattr(archive_mod, "MIGRATIONS", every[:3])
    Archive(tmp_path / "old").db.conn.close()
    monkeypatch.setattr(archive_mod, "MIGRATIONS", every)
    assert [r["name"] for r in Archive(tmp_path / "old").db["_migrations"].rows] == [m.__name__ for m in every]


def test_wal_mode_and_foreign_keys(archive):
    assert archive.db.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert archive.db.execute("pragma foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        archive.add_evaluation({"submission_id": 12345, "definition": "d", "status": "PASSED"})
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        archive.start_submission("no-such-solution", "x", "d", "a", {}, None)
    assert count(archive, "evaluations") == 0 and count(archive, "submissions") == 0


def test_wal_mode_persists_in_the_file(tmp_path):
    Archive(tmp_path / "a")
    assert sqlite3.connect(tmp_path / "a" / ARCHIVE_DB).execute("pragma journal_mode").fetchone()[0] == "wal"


def test_a_db_path_is_accepted(tmp_path):
    a = Archive(tmp_path / "custom.db")
    assert a.folder == tmp_path and (tmp_path / "custom.db").exists()


@pytest.mark.parametrize("make_path", [
    lambda p: p / "missing",
    lambda p: p / "missing" / "deeper",
    lambda p: p / "missing" / "archive.db",
])
def test_a_missing_folder_with_create_false_is_an_error(tmp_path, make_path):
    path = make_path(tmp_path)
    with pytest.raises(ArchiveError) as err:
        Archive(path, create=False)
    assert str(path if path.suffix != ".db" else path.parent) in str(err.value)
    assert not (tmp_path / "missing").exists()


def test_a_file_is_not_an_archive_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ArchiveError, match=f"archive path {tmp_path / 'f'} is not a folder"):
        Archive(tmp_path / "f")


def test_require_db_does_not_create_a_database_in_an_existing_folder(tmp_path):
    (tmp_path / "not_an_archive").mkdir()
    with pytest.raises(ArchiveError, match="holds no archive"):
        Archive(tmp_path / "not_an_archive", create=False, require_db=True)
    assert not (tmp_path / "not_an_archive" / ARCHIVE_DB).exists()


def test_create_false_opens_an_existing_archive(tmp_path, submission):
    a = Archive(tmp_path / "archive", create=False)
    assert a.submission(submission)["solution_name"] == "cand"


# -- blobs ----------------------------------------------------------------------------------------------


def test_blobs_are_content_addressed(archive):
    data = b"some log\n" * 100
    digest = archive.put_blob(data, "log")
    assert digest == hashlib.sha256(data).hexdigest()
    path = archive.blob_dir / digest[:2] / digest[2:]
    assert path.read_bytes() == data
    assert archive.get_blob(digest) == data
    assert archive.put_blob(data, "other-kind") == digest  # same content: stored once
    assert archive.put_blob(data.decode(), "log") == digest  # str and bytes alike
    assert count(archive, "blobs") == 1
    assert archive.db["blobs"].get(digest)["size"] == len(data)
    assert [p.name for p in path.parent.iterdir()] == [digest[2:]]  # no temporary file left behind
    other = archive.put_blob(b"other", "log")
    assert other != digest and count(archive, "blobs") == 2


def test_an_existing_blob_file_is_not_rewritten(archive):
    digest = archive.put_blob(b"abc", "log")
    path = archive.blob_dir / digest[:2] / digest[2:]
    mtime = path.stat().st_mtime_ns
    archive.put_blob(b"abc", "log")
    assert path.stat().st_mtime_ns == mtime


def test_solutions_and_environments_are_deduplicated(archive):
    archive.put_solution(SOLUTION, "hash-1")
    archive.put_solution(SOLUTION, "hash-1")
    assert count(archive, "solutions") == 1
    assert archive.solution_json("hash-1") == SOLUTION
    e1 = archive.put_environment({"host": "a", "hardware": "x"})
    e2 = archive.put_environment({"hardware": "x", "host": "a"})
    e3 = archive.put_environment({"host": "b", "hardware": "x"})
    assert e1 == e2 != e3 and count(archive, "environments") == 2


# -- submissions and evaluations -------------------------------------------------------------------


def test_submission_status_transition(archive, submission):
    row = archive.submission(submission)
    assert row["status"] == "RUNNING" and row["finished_at"] is None
    assert row["options"] == {"workloads": ["a"], "owner": {"host": os.uname().nodename, "pid": os.getpid()}}
    assert row["environment"] == {"host": "box", "hardware": "cpu", "torch": "2.x"}
    archive.finish_submission(submission, "PASSED", "all good")
    row = archive.submission(submission)
    assert (row["status"], row["message"]) == ("PASSED", "all good")
    assert row["finished_at"] is not None and row["finished_at"] >= row["created_at"]


def test_add_evaluation_with_timing_samples(archive, submission):
    eval_id = archive.add_evaluation(
        {"submission_id": submission, "definition": "defn", "workload_uuid": "u1", "status": "PASSED",
         "latency_ms": 0.5, "extra": {"matched_ratio": 1.0}, "trace": {"definition": "defn"}},
        [sample(0), sample(1), sample(0, role="reference")])
    rows = list(archive.db["timing_samples"].rows_where("evaluation_id = ?", [eval_id], order_by="id"))
    assert [(r["role"], r["trial"]) for r in rows] == [("candidate", 0), ("candidate", 1), ("reference", 0)]
    assert json.loads(rows[1]["samples"]) == [0.5, 0.6, 0.7]
    ev = archive.submission(submission)["evaluations"]
    assert len(ev) == 1 and ev[0]["id"] == eval_id
    assert ev[0]["extra"] == {"matched_ratio": 1.0}
    assert json.loads(ev[0]["trace"]) == {"definition": "defn"}


@pytest.mark.parametrize("failure", ["bad_column", "iterator_raises"])
def test_an_evaluation_and_its_samples_land_together_or_not_at_all(archive, submission, failure):
    def samples():
        yield sample(0)
        if failure == "iterator_raises":
            raise RuntimeError("timing crashed")
        yield {"role": "candidate", "no_such_column": 1}

    with pytest.raises((RuntimeError, sqlite3.OperationalError)):
        archive.add_evaluation({"submission_id": submission, "definition": "defn", "status": "PASSED"}, samples())
    assert (count(archive, "evaluations"), count(archive, "timing_samples")) == (0, 0)


def test_submissions_count_evaluations_per_status(archive, submission):
    for status in ["PASSED", "PASSED", "INCORRECT_NUMERICAL", "TIMEOUT", "PASSED"]:
        archive.add_evaluation({"submission_id": submission, "definition": "defn", "status": status})
    other = archive.start_submission("hash-1", "cand", "other_defn", "tests", {}, None)
    archive.add_evaluation({"submission_id": other, "definition": "other_defn", "status": "COMPILE_ERROR"})
    rows = archive.submissions()
    assert [r["id"] for r in rows] == [other, submission]  # newest first
    assert rows[1]["counts"] == {"PASSED": 3, "INCORRECT_NUMERICAL": 1, "TIMEOUT": 1}
    assert rows[0]["counts"] == {"COMPILE_ERROR": 1}
    only = archive.submissions(definition="defn")
    assert [r["id"] for r in only] == [submission]
    assert len(archive.submissions(limit=1)) == 1
    empty = archive.start_submission("hash-1", "cand", "defn", "tests", {}, None)
    assert archive.submissions(limit=1)[0]["id"] == empty and archive.submissions(limit=1)[0]["counts"] == {}


@pytest.mark.parametrize("missing", [0, 999, -1])
def test_a_missing_submission_is_an_archive_error(archive, submission, missing):
    with pytest.raises(ArchiveError, match=f"no submission {missing} in {archive.folder}"):
        archive.submission(missing)


# -- crashes --------------------------------------------------------------------------------------------


def _seed_rows(archive, submission, n=3):
    for i in range(n):
        archive.add_evaluation({"submission_id": submission, "definition": "defn", "workload_uuid": f"u{i}",
                                "status": "PASSED"}, [sample(0)])


def test_an_uncommitted_transaction_of_another_connection_is_not_seen(tmp_path, archive, submission):
    _seed_rows(archive, submission)
    other = sqlite3.connect(archive.folder / ARCHIVE_DB, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("insert into evaluations (submission_id, definition, status) values (?, 'defn', 'PASSED')",
                  [submission])
    other.execute("update submissions set status = 'PASSED' where id = ?", [submission])
    other.close()  # closed without COMMIT
    reopened = Archive(archive.folder, create=False)
    row = reopened.submission(submission)
    assert row["status"] == "RUNNING"
    assert [e["workload_uuid"] for e in row["evaluations"]] == ["u0", "u1", "u2"]


def test_a_writer_killed_mid_transaction_leaves_previous_rows_readable(tmp_path, archive, submission):
    _seed_rows(archive, submission)
    archive.db.close()
    # A separate process begins a large write and dies without committing or rolling back.
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from harness.archive.database import Archive
        a = Archive({str(archive.folder)!r}, create=False)
        a.db.conn.execute("BEGIN IMMEDIATE")
        for i in range(2000):
            a.db.conn.execute("insert into evaluations (submission_id, definition, status, message) "
                              "values (?, 'defn', 'PASSED', ?)", [{submission}, "x" * 2000])
        a.db.conn.execute("update submissions set status = 'PASSED' where id = ?", [{submission}])
        os._exit(9)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    reopened = Archive(archive.folder, create=False)
    assert reopened.db.execute("pragma integrity_check").fetchone()[0] == "ok"
    row = reopened.submission(submission)
    assert row["status"] == "RUNNING"
    assert [e["workload_uuid"] for e in row["evaluations"]] == ["u0", "u1", "u2"]
    # and the archive is writable again
    reopened.finish_submission(submission, "PASSED")
    assert reopened.submission(submission)["status"] == "PASSED"


def test_only_submissions_of_a_dead_process_on_this_host_are_closed(tmp_path):
    """kill -9 leaves a submission RUNNING; the next session closes it, and nothing that may still be running."""
    import sys

    archive = Archive(tmp_path / "a")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    archive.put_solution(SOLUTION, "h")
    ids = [archive.start_submission("h", "s", "d", "me", {}, None) for _ in range(3)]
    owners = [{"host": os.uname().nodename, "pid": dead_pid}, {"host": "another-host", "pid": dead_pid}, None]
    for sid, owner in zip(ids, owners):
        if owner is not None:
            archive.db["submissions"].update(sid, {"options": json.dumps({"owner": owner})})
    # ids[2] keeps the owner start_submission wrote: this live process
    assert archive.close_abandoned() == [ids[0]]
    assert [archive.submission(i)["status"] for i in ids] == ["INTERRUPTED", "RUNNING", "RUNNING"]
    assert archive.close_abandoned() == []
