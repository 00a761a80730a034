"""The archive: one SQLite file (WAL) via sqlite-utils, with content-addressed blobs beside it.

Rows are inserted as work finishes and never rewritten, except a submission's status transition
(RUNNING -> final). A harness killed mid-run therefore leaves a database that opens and lists every
finished evaluation; the unfinished submission stays RUNNING (``harness list`` shows it as such).
The final status is written with a seal (harness/archive/seal.py) over the submission's rows, so a row changed behind
the
harness's back reads as "archive modified outside the harness".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import sqlite3
import stat
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import sqlite_utils

from .migrations import (m001_core, m002_baselines_and_scores, m003_controller, m004_profiles, m006_seals,
                         m007_baseline_messages, m008_trusted_outputs, m009_agent_turns, m010_baseline_busy, now)
from ..data.statuses import EvaluationStatus, SubmissionStatus
from ..sandbox.stale import process_alive
from .queries import readable_submission
from .schema_guard import (foreign_schema, missing_columns, pending_migrations, read_only_connection, refusal,
                           shown_name)
from .seal import SEAL_KEY, SealCheck, classify, create_key, load_key, read_record, seal_value
from .views import m005_review_views

ARCHIVE_DB = "archive.db"
BLOBS = "blobs"


# The migrations themselves (small functions, applied once each, in order) are in harness/archive/migrations.py, the
# review views' in harness/archive/views.py; this list is the order they run in.

MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [m001_core, m002_baselines_and_scores, m003_controller,
                                                              m004_profiles, m005_review_views, m006_seals,
                                                              m007_baseline_messages, m008_trusted_outputs,
                                                              m009_agent_turns, m010_baseline_busy]


def migrate(db: sqlite_utils.Database) -> list[str]:
    if "_migrations" not in db.table_names():
        db["_migrations"].create({"name": str, "applied_at": str}, pk="name")
    done = {r["name"] for r in db["_migrations"].rows}
    applied = []
    for m in MIGRATIONS:
        if m.__name__ in done:
            continue
        with db.atomic():  # each migration is one transaction
            m(db)
            db["_migrations"].insert({"name": m.__name__, "applied_at": now()})
        applied.append(m.__name__)
    return applied


class ArchiveError(ValueError):
    pass


FIRST_MIGRATION = "m001_core"  # recorded in _migrations of every archive: what marks a database as ours
# The tables that migration makes: a _migrations table that names it in a database without them (a row forged in
# another program's file, or those names only as views) does not make that file an archive.
CORE_TABLES = frozenset({"blobs", "environments", "solutions", "submissions", "evaluations", "timing_samples"})


def database_kind(tables: set[str], migrations: Optional[set[str]], views: Iterable[str] = ()) -> str:
    """What an SQLite file given as an archive holds, from its tables (``tables``; ``views`` apart, where known) and
    the names in its ``_migrations`` table (None where it has none, or one of another shape): "new" (nothing yet, or
    only the migration table of a creation cut short), "crucible" (our first migration is recorded and its tables
    are there) or "foreign" (another program's database, which must never be migrated in place)."""
    views = set(views)
    if migrations is not None and FIRST_MIGRATION in migrations and CORE_TABLES <= tables - views:
        return "crucible"
    if not (tables | views) or (tables == {"_migrations"} and not views and not migrations):
        return "new"
    return "foreign"


class ArchiveMissing(ArchiveError):
    """No archive where one must already exist (a command that only reads it)."""


ARCHIVE_ENV = "CRUCIBLE_ARCHIVE"
DEFAULT_FOLDER = Path("artifacts")


def archive_location(given: str | Path | None = None) -> tuple[Path, str]:
    """The archive folder: ``--archive`` if given, else $CRUCIBLE_ARCHIVE, else ./artifacts; and which one
    said so: "option", "env" or "default"."""
    if given:
        return Path(given), "option"
    if os.environ.get(ARCHIVE_ENV):
        return Path(os.environ[ARCHIVE_ENV]), "env"
    return DEFAULT_FOLDER, "default"


class ArchiveDatabase(sqlite_utils.Database):
    """sqlite-utils' Database whose transactions take the write lock when they begin (BEGIN IMMEDIATE).

    A plain BEGIN reads first and asks for the write lock later; if another connection (a second GPU lane, a
    second harness process) wrote in between, SQLite cannot wait, since the transaction has already read a stale
    snapshot, and fails at once with 'database is locked'. Asking at BEGIN lets the busy timeout wait instead."""

    @contextlib.contextmanager
    def atomic(self) -> Iterator["ArchiveDatabase"]:
        if self.conn.in_transaction:  # nested: sqlite-utils' savepoints
            with super().atomic():
                yield self
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise


def _write_file(path: Path, data: bytes) -> None:
    """Every file the archive writes beside its database goes through here (tests make the disk full here)."""
    path.write_bytes(data)


@contextlib.contextmanager
def _schema_lock(db_path: Path) -> Iterator[None]:
    """One connection at a time sets up and migrates the database: two opening a new archive at once (the
    controller's lanes, two harness processes) would both find no tables and both create them. A file lock
    beside the database, so it holds across threads and processes; a read-only folder gets none (nothing
    can be migrated there anyway)."""
    try:  # never through a link, never waiting on a FIFO planted there (opening one for writing waits for a reader)
        fd = os.open(f"{db_path}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644)
    except OSError:
        yield
        return
    with os.fdopen(fd, "a") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _refuse_foreign(db_path: Path, conn: Optional[sqlite3.Connection]) -> bool:
    """Another program's SQLite file given as the archive is left exactly as it is (ArchiveError); True where the
    file was read. Read by a read-only connection of its own (``conn`` None), since one that may write checkpoints,
    on closing, a stray -wal left beside the file (another database's) into it and so rewrites it; False where that
    connection cannot open it (a hot journal it may not roll back): then ``conn``, the archive's own, is asked."""
    own = conn is None
    if own:
        try:
            conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        except sqlite3.OperationalError:
            return False
    try:
        rows = conn.execute("select name, type from sqlite_master where type in ('table', 'view') "
                            "and name not like 'sqlite_%'").fetchall()
        migrations: Optional[set[str]] = None
        if any(name == "_migrations" for name, _ in rows):
            try:
                migrations = {r[0] for r in conn.execute("select name from _migrations").fetchall()}
            except sqlite3.Error:  # a table of that name but another shape: not ours
                migrations = None
    except sqlite3.OperationalError:
        if own:
            return False
        raise
    finally:
        if own:
            conn.close()
    names = {name for name, _ in rows}
    if database_kind(names, migrations, {name for name, kind in rows if kind == "view"}) == "foreign":
        if not own:
            conn.close()
        shown = ", ".join(shown_name(n) for n in sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        wal = Path(f"{db_path}-wal")
        stray = f"; if it is an archive, the {wal.name} beside it may be another database's" if wal.exists() else ""
        raise ArchiveError(f"{db_path} is another program's SQLite database (tables: {shown}), not a Crucible "
                           f"archive; it was left as it is (give another --archive{stray})")
    return True


class Archive:
    def __init__(self, path: Path | str, create: bool = True, require_db: bool = False):
        """``create``: make the folder if missing. ``require_db``: the folder must already hold an archive."""
        path = Path(path)
        if path.suffix == ".db":
            folder, db_path = path.parent, path
        else:
            folder, db_path = path, path / ARCHIVE_DB
        if not folder.exists():
            if not create:
                raise ArchiveError(f"archive folder {folder} does not exist")
            folder.mkdir(parents=True)
        elif not folder.is_dir():
            raise ArchiveError(f"archive path {folder} is not a folder")
        if require_db and not db_path.exists():
            raise ArchiveError(f"{folder} holds no archive ({db_path.name} is missing)")
        if db_path.is_symlink() and not db_path.exists():  # SQLite would make the file it names, wherever that is
            raise ArchiveError(f"{db_path} is a link to nothing: no archive is made through it (give another archive)")
        if db_path.exists() and not db_path.is_file():  # a folder, a FIFO (opening one waits for a writer)
            raise ArchiveError(f"{db_path} is not a file, so not an archive (give another --archive)")
        if (folder / BLOBS).exists() and not (folder / BLOBS).is_dir():  # every blob write would fail in it
            raise ArchiveError(f"{folder / BLOBS} is not a folder, so {folder} is no archive (give another --archive)")
        self.folder = folder
        self.blob_dir = folder / BLOBS
        read_only = not os.access(folder, os.W_OK)  # a read-only mount: an archive there is read, never migrated
        if read_only and not require_db:  # a writer: said before anything runs, not after a whole evaluation
            raise ArchiveError(f"archive folder {folder} is not writable (a read-only mount, or another user's)")
        try:  # a file that is not an SQLite database, a malformed one, a locked or full disk: one ArchiveError
            checked = db_path.exists() and _refuse_foreign(db_path, None)  # read-only: before anything may write
            self.db = ArchiveDatabase(read_only_connection(db_path) if read_only else db_path)
            self.db.execute("PRAGMA busy_timeout = 30000")  # first: what follows waits for other connections
            if not checked:  # where the read-only connection could not open it: before anything writes (WAL mode
                _refuse_foreign(db_path, self.db.conn)  # changes the file's header)
            with _schema_lock(db_path):
                why = foreign_schema(self.db.conn, MIGRATIONS)  # a foreign trigger, a newer version: before any write
                if why:
                    self.db.conn.close()
                    raise ArchiveError(refusal(db_path, why))
                why = pending_migrations(self.db.conn, MIGRATIONS) if read_only else ""
                if not read_only:
                    self.db.enable_wal()
                    migrate(self.db)
                why = why or missing_columns(self.db.conn, MIGRATIONS)  # a table or column another program took away
                if why:
                    self.db.conn.close()
                    raise ArchiveError(refusal(db_path, why))
            self.db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as err:
            raise ArchiveError(f"cannot open the archive {db_path}: {err}") from err

    @classmethod
    def open_existing(cls, path: Path | str) -> Archive:
        """Open an archive that already exists; never creates a folder or a database (ArchiveMissing)."""
        path = Path(path)
        db_path = path if path.suffix == ".db" else path / ARCHIVE_DB
        if not db_path.is_file():
            raise ArchiveMissing(f"no archive at {db_path}")
        return cls(path, create=False, require_db=True)

    # -- blobs ------------------------------------------------------------------------------------------

    def put_blob(self, data: bytes | str, kind: str) -> str:
        raw = data.encode() if isinstance(data, str) else data
        digest = hashlib.sha256(raw).hexdigest()
        target = self.blob_dir / digest[:2] / digest[2:]
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".tmp{os.getpid()}")
            try:
                _write_file(tmp, raw)
                os.replace(tmp, target)  # atomic: a crash never leaves half a blob under its hash
            except BaseException:  # a full disk: the half-written file goes (giving its space back)
                tmp.unlink(missing_ok=True)
                raise
        self.db["blobs"].insert({"sha256": digest, "size": len(raw), "kind": kind, "created_at": now()},
                                ignore=True)
        return digest

    def get_blob(self, digest: str) -> bytes:
        """A blob's bytes; OSError where it is missing or no regular file (a FIFO put there would block a reader)."""
        path = self.blob_dir / digest[:2] / digest[2:]
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(path))
            return f.read()

    # -- writes -----------------------------------------------------------------------------------------

    def put_environment(self, env: dict[str, Any]) -> str:
        data = json.dumps(env, sort_keys=True, default=str)
        env_id = hashlib.sha256(data.encode()).hexdigest()[:16]
        self.db["environments"].insert({"id": env_id, "host": env.get("host", ""), "hardware": env.get("hardware", ""),
                                        "data": data, "created_at": now()}, ignore=True)
        return env_id

    def put_solution(self, solution_json: dict[str, Any], content_hash: str) -> str:
        blob = self.put_blob(json.dumps(solution_json, indent=2), "solution")
        spec = solution_json["spec"]
        self.db["solutions"].insert({"hash": content_hash, "name": solution_json["name"],
                                     "definition": solution_json["definition"], "author": solution_json["author"],
                                     "language": spec["language"], "entry_point": spec["entry_point"],
                                     "blob": blob, "created_at": now()}, ignore=True)
        return content_hash

    def start_submission(self, solution_hash: str, solution_name: str, definition: str, author: str,
                         options: dict[str, Any], environment_id: Optional[str]) -> int:
        # Which process runs it: a later session can tell a submission whose harness was killed (kill -9)
        # from one still running.
        options = {**options, "owner": {"host": socket.gethostname(), "pid": os.getpid()}}
        with self.db.atomic():
            table = self.db["submissions"].insert({
                "solution_hash": solution_hash, "solution_name": solution_name, "definition": definition,
                "author": author, "status": SubmissionStatus.RUNNING, "message": "",
                "options": json.dumps(options, default=str),
                "environment_id": environment_id, "created_at": now(), "finished_at": None})
        return int(table.last_pk)

    def finish_submission(self, submission_id: int, status: str, message: str = "",
                          scores: Optional[dict[str, Any]] = None) -> None:
        with self.sealed_write(submission_id, finishing=True):  # the verdict and its seal land together
            self.db["submissions"].update(submission_id, {"status": status, "message": message, "finished_at": now(),
                                                          "scores": json.dumps(scores or {})})

    def close_abandoned(self) -> list[int]:
        """Archive as INTERRUPTED every RUNNING submission whose harness process, on this host, is gone (killed
        before it could close the record). Those of other hosts, and of live processes, are left alone."""
        host, closed = socket.gethostname(), []
        for row in self.db.query("select id, options from submissions where status = ?", [SubmissionStatus.RUNNING]):
            owner = (json.loads(row["options"] or "{}") or {}).get("owner") or {}
            if owner.get("host") != host or not isinstance(owner.get("pid"), int) or process_alive(owner["pid"]):
                continue
            self.finish_submission(row["id"], SubmissionStatus.INTERRUPTED,
                                   f"its harness process (pid {owner['pid']} on {host}) ended without closing it "
                                   "(killed, or the archive was locked by another process when it tried); finished "
                                   "workloads are kept")
            closed.append(row["id"])
        return closed

    def baseline_run(self, gpu_key: str, toolchain: str, definition: str, workload_uuid: str,
                     solution_hash: str, gpu_model: Optional[str] = None,
                     other_cards: bool = False) -> Optional[dict[str, Any]]:
        """The latest PASSED run of a baseline on this card (``gpu_key``) or, with ``gpu_model``, on any card of
        that model (``other_cards``: any but this one). Failures are kept as history but never reused: they may be
        this session's (memory)."""
        where, args = ("gpu_model = ?", [gpu_model]) if gpu_model else ("gpu_key = ?", [gpu_key])
        if gpu_model and other_cards:
            where, args = where + " and gpu_key != ?", [*args, gpu_key]
        rows = list(self.db["baseline_runs"].rows_where(
            f"{where} and toolchain = ? and definition = ? and workload_uuid = ? and solution_hash = ? "
            "and status = ?", [*args, toolchain, definition, workload_uuid, solution_hash,
                               EvaluationStatus.PASSED.value], order_by="id desc", limit=1))
        if not rows:
            return None
        return {k: rows[0].get(k) for k in ("status", "official_ms", "kernel_ms", "busy_ms", "message", "log_blob")}

    def seed_secret(self) -> Optional[bytes]:
        """The archive's secret for input seeds (harness.pipeline.reference_cache), or None where it has no seal key and
        cannot make one (then every session draws its own seeds and nothing is reused)."""
        from ..pipeline.reference_cache import archive_seed_secret

        return archive_seed_secret(self._seal_key())

    def cached_trusted_outputs(self, key: str) -> Optional[tuple[str, bytes]]:
        """(header JSON, safetensors bytes) the reference worker produced for ``key``, if kept."""
        rows = list(self.db["trusted_outputs"].rows_where("key = ?", [key]))
        if not rows:
            return None
        try:
            return rows[0]["header"], self.get_blob(rows[0]["blob"])
        except OSError:  # its blob is gone: computed again
            return None

    def cache_trusted_outputs(self, key: str, header: str, blob: bytes) -> None:
        digest = self.put_blob(blob, "trusted_outputs")
        with self.db.atomic():
            self.db["trusted_outputs"].insert({"key": key, "header": header, "blob": digest, "created_at": now()},
                                              replace=True)

    def cached_reference_latency(self, key: str) -> Optional[float]:
        rows = list(self.db["reference_latency"].rows_where("key = ?", [key]))
        return rows[0]["latency_ms"] if rows else None

    def cache_reference_latency(self, key: str, latency_ms: float) -> None:
        with self.db.atomic():
            self.db["reference_latency"].insert({"key": key, "latency_ms": latency_ms, "created_at": now()},
                                                replace=True)

    def add_baseline_run(self, row: dict[str, Any]) -> None:
        with self.db.atomic():
            self.db["baseline_runs"].insert({**row, "created_at": now()})

    def add_evaluation(self, row: dict[str, Any], timing: Iterable[dict[str, Any]] = ()) -> int:
        row = {**row}
        for key in ("extra", "trace"):
            if row.get(key) is not None and not isinstance(row[key], str):
                row[key] = json.dumps(row[key], default=str)
        # The evaluation and its samples land together or not at all (re-sealed if the submission is finished).
        with self.sealed_write(int(row["submission_id"])):
            eval_id = int(self.db["evaluations"].insert(row).last_pk)
            for t in timing:
                self.db["timing_samples"].insert({"evaluation_id": eval_id, **t,
                                                  "samples": json.dumps(t.get("samples", []))})
        return eval_id

    # -- seals (harness/archive/seal.py) -------------------------------------------------------------------------

    def verify_seal(self, submission_id: int) -> SealCheck:
        """Whether the submission's rows are as the harness sealed them: sealed, modified, unsealed (still
        running; archived before seals existed) or unverifiable (the key is missing)."""
        got = read_record(self.db.conn, submission_id)
        if got is None:
            raise ArchiveError(f"no submission {submission_id} in {self.folder}")
        key, why = load_key(self.folder)
        return classify(got[0], got[1], key, why)

    @contextlib.contextmanager
    def sealed_write(self, submission_id: int, finishing: bool = False) -> Iterator[None]:
        """One transaction that changes a submission's rows and keeps its seal true: a sealed submission is
        sealed again over its new rows; ``finishing`` (the verdict) seals it. A submission that reads as
        modified is never re-sealed (that would bless the change), nor one archived before seals existed."""
        with self.db.atomic():
            row = self.db.conn.execute("select status, seal from submissions where id = ?", [submission_id]).fetchone()
            if row is None:
                yield
                return
            if row[0] == SubmissionStatus.RUNNING and row[1] is None:
                state = "unsealed"  # the common case, a workload of a running submission: no need to read it all
            else:
                state = self.verify_seal(submission_id).state
            yield
            if state == "sealed" or (finishing and state != "modified"):
                self._write_seal(submission_id)

    def _write_seal(self, submission_id: int) -> None:
        key, value = self._seal_key(), None
        if key is not None:
            got = read_record(self.db.conn, submission_id)  # what a reader will read back, floats included
            value = seal_value(key, got[0]) if got else None
        self.db.conn.execute("update submissions set seal = ? where id = ?", [value, submission_id])

    def _seal_key(self) -> Optional[bytes]:
        """The archive's seal key, created on the first seal. A lost key is not replaced while any submission is
        sealed: a new one would make every honest seal read as modified (they read as unverifiable instead)."""
        key, _ = load_key(self.folder)
        if key is not None or (self.folder / SEAL_KEY).exists():
            return key
        if self.db.conn.execute("select 1 from submissions where seal is not null limit 1").fetchone():
            return None
        return create_key(self.folder)

    # -- reads ------------------------------------------------------------------------------------------

    def submissions(self, limit: int = 50, definition: Optional[str] = None) -> list[dict[str, Any]]:
        where, args = ("definition = ?", [definition]) if definition else (None, [])
        rows = list(self.db["submissions"].rows_where(where, args, order_by="id desc", limit=limit))
        for r in rows:
            counts = self.db.execute(
                "select status, count(*) from evaluations where submission_id = ? group by status",
                [r["id"]]).fetchall()
            r["counts"] = dict(counts)
            readable_submission(r)
        return rows

    def submission(self, submission_id: int) -> dict[str, Any]:
        try:
            row = self.db["submissions"].get(submission_id)
        except (sqlite_utils.db.NotFoundError, OverflowError):  # OverflowError: past SQLite's integers
            raise ArchiveError(f"no submission {submission_id} in {self.folder}") from None
        row["evaluations"] = list(self.db["evaluations"].rows_where("submission_id = ?", [submission_id],
                                                                    order_by="id"))
        for e in row["evaluations"]:
            e["extra"] = _object(e.get("extra"))
        env = self.db["environments"].get(row["environment_id"]) if row.get("environment_id") else None
        row["environment"] = _object(env["data"]) if env else {}
        row["options"], row["scores"] = _object(row.get("options")), _object(row.get("scores"))
        return readable_submission(row)

    def solution_json(self, content_hash: str) -> dict[str, Any]:
        return json.loads(self.get_blob(self.db["solutions"].get(content_hash)["blob"]))


def _object(text: Any) -> dict[str, Any]:
    """A JSON column read as an object; {} where it is empty, or was changed outside the harness into something
    that is not one (the seal says so: the reader still shows the rest)."""
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
