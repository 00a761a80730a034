"""Seals: the archive trusts only the harness.

When the harness writes a submission's verdict it also writes ``submissions.seal``: an HMAC-SHA256, under a
per-archive secret (``seal.key`` beside ``archive.db``), of the canonical JSON of everything that verdict rests
on: the submission's verdict-bearing columns, all its ``evaluations`` rows, their ``timing_samples`` and its
``artifacts``. A row changed, added or deleted behind the harness's back (``sqlite3 archive.db "update ..."``)
no longer matches, and ``harness show/list/report`` say "archive modified outside the harness".

The pure part (``canonical``, ``seal_value``, ``classify``) is apart from the reads (``read_record``) and the
key file (``load_key``, ``create_key``). Limits: whoever can read ``seal.key`` can forge a seal, and a whole
submission deleted leaves no trace (there is no chain between submissions).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from ..data.statuses import SubmissionStatus

SEAL_KEY = "seal.key"
KEY_BYTES = 32
VERSION = "v1"
STATES = ("sealed", "modified", "unsealed", "unverifiable")
MODIFIED_WARNING = "archive modified outside the harness"

# The submission's verdict-bearing columns (not ``seal`` itself). Rows of the other tables are sealed whole.
SUBMISSION_COLUMNS = ("id", "solution_hash", "solution_name", "definition", "author", "status", "message", "options",
                      "scores", "environment_id", "created_at", "finished_at")


@dataclass(frozen=True)
class SealCheck:
    state: str  # one of STATES
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @property
    def modified(self) -> bool:
        return self.state == "modified"


# -- pure ---------------------------------------------------------------------------------------------------


def _present(row: dict[str, Any]) -> dict[str, Any]:
    # NULL columns are left out, so a column a later migration adds (NULL in old rows) leaves old seals valid;
    # a value changed to or from NULL still changes the text.
    return {k: v for k, v in row.items() if v is not None}


def canonical(record: dict[str, Any]) -> bytes:
    """The bytes a seal covers. ``record``: {"submission", "evaluations", "timing_samples", "artifacts",
    "first_sealed_id"} as ``read_record`` returns it."""
    sub = record.get("submission") or {}
    body = {
        "version": VERSION,
        "submission": _present({k: sub.get(k) for k in SUBMISSION_COLUMNS}),
        "evaluations": [_present(r) for r in sorted(record.get("evaluations") or [], key=lambda r: r["id"])],
        "timing_samples": [_present(r) for r in sorted(record.get("timing_samples") or [], key=lambda r: r["id"])],
        "artifacts": [_present(r) for r in sorted(record.get("artifacts") or [], key=lambda r: r["id"])],
        # Every seal covers where sealing began, so moving that boundary (to pass an unsealed row off as one
        # archived before seals existed) breaks every seal.
        "first_sealed_id": record.get("first_sealed_id"),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()


def seal_value(key: bytes, record: dict[str, Any]) -> str:
    return f"{VERSION}:" + hmac.new(key, canonical(record), hashlib.sha256).hexdigest()


def classify(record: dict[str, Any], seal: Optional[str], key: Optional[bytes], key_problem: str = "") -> SealCheck:
    """What a reader may believe about one submission: its rows as read, its stored seal, the archive's key
    (None when it cannot be read; ``key_problem`` says why)."""
    sub = record["submission"]
    first = record.get("first_sealed_id")
    if seal is None:
        if sub.get("status") == SubmissionStatus.RUNNING:
            return SealCheck("unsealed", "still running: the harness seals it when it finishes")
        if isinstance(first, int) and sub["id"] < first:
            return SealCheck("unsealed", "archived before seals existed (migration m006_seals)")
        if key is None:
            return SealCheck("unverifiable", f"cannot verify: {key_problem or 'no seal key'}")
        if first is None:
            return SealCheck("modified", "the record of where sealing began (seal_epoch) is missing")
        return SealCheck("modified", f"finished ({sub.get('status')}) but carries no seal: its seal was removed")
    if key is None:
        return SealCheck("unverifiable", f"cannot verify: {key_problem or 'no seal key'}")
    if hmac.compare_digest(seal.encode(), seal_value(key, record).encode()):
        return SealCheck("sealed", f"status {sub.get('status')} and its {len(record.get('evaluations') or [])} "
                                   "evaluations are as the harness sealed them")
    return SealCheck("modified", f"its submission, evaluation, timing or artifact rows (status now "
                                 f"{sub.get('status')}, {len(record.get('evaluations') or [])} evaluations) differ "
                                 "from what the harness sealed")


# -- reads and the key file -----------------------------------------------------------------------------------


def _dicts(conn: sqlite3.Connection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}


def read_record(conn: sqlite3.Connection, submission_id: int) -> Optional[tuple[dict[str, Any], Optional[str]]]:
    """(record, stored seal) of a submission as the database holds it now; None when there is no such row.
    Values are hashed as read back from SQLite, so a writer and a later reader hash the same floats."""
    subs = _dicts(conn, "select * from submissions where id = ?", [submission_id])
    if not subs:
        return None
    sub = subs[0]
    tables = _tables(conn)
    evaluations = _dicts(conn, "select * from evaluations where submission_id = ? order by id", [submission_id])
    samples = _dicts(conn, "select t.* from timing_samples t join evaluations e on e.id = t.evaluation_id "
                           "where e.submission_id = ? order by t.id", [submission_id])
    artifacts = (_dicts(conn, "select * from artifacts where submission_id = ? order by id", [submission_id])
                 if "artifacts" in tables else [])
    first = None
    if "seal_epoch" in tables:
        row = conn.execute("select first_sealed_id from seal_epoch where id = 1").fetchone()
        first = row[0] if row else None
    record = {"submission": sub, "evaluations": evaluations, "timing_samples": samples, "artifacts": artifacts,
              "first_sealed_id": first}
    return record, sub.get("seal")


def load_key(folder: Path) -> tuple[Optional[bytes], str]:
    """(key, why not): the archive's seal key, or None and the reason."""
    path = Path(folder) / SEAL_KEY
    try:  # a FIFO planted there would wait for a writer, a device never end: only a regular file, 1 byte past a key
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, f"{SEAL_KEY} missing"
    except OSError as e:
        return None, f"{SEAL_KEY} unreadable ({e.strerror or e})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, f"{SEAL_KEY} is not a regular file"
        key = os.read(fd, KEY_BYTES + 1)
    except OSError as e:
        return None, f"{SEAL_KEY} unreadable ({e.strerror or e})"
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        return None, f"{SEAL_KEY} is {len(key)} bytes, not {KEY_BYTES}"
    return key, ""


def create_key(folder: Path) -> Optional[bytes]:
    """A new random key in ``folder/seal.key`` (mode 0600), or the one another process created first. The
    bytes are written to a private temporary file that is then hard-linked into place: the name appears with
    all 32 bytes or not at all, and never replaces an existing key. None where the folder is read-only."""
    folder = Path(folder)
    target = folder / SEAL_KEY
    tmp = folder / f".{SEAL_KEY}.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            pass  # another process won: use its key
        except OSError:
            return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return load_key(folder)[0]

