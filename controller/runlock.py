"""One process drives a run at a time: a lock per run, taken before a new run's row is written and before a
resumed run is touched (its limits extended, its status set), held until the command ends.

The lock is an ``flock`` on a file next to the archive (``ARCHIVE/locks/RUN_ID.lock``), not a lease row in the
archive, because the kernel releases an flock when its holder dies, however it dies (``kill -9``, a crash, the
end of a host whose lock server forgets it): a lock left behind can never block a later resume, and no heartbeat
or process-id test has to guess whether a holder still lives (a reused pid, a pid of another host that cannot be
tested from here). It needs no new table either, and nothing in a copy of the archive carries it elsewhere. The
file records its holder (pid, host, since) for the refusal's one line; a record found in a file nobody holds is
what a killed holder left, and taking it over is said in one line.

Within one process the lock is re-entrant (the command line takes it before the loop, which takes it again): two
lanes of one command never drive the same run (the command names each run once).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import stat
import threading
from pathlib import Path
from typing import Any, Optional

LOCKS = "locks"
_held: dict[str, tuple[Any, int]] = {}  # lock path -> (open file, depth) of the locks this process holds
_guard = threading.Lock()


class RunLocked(ValueError):
    """Another process drives the run (a ValueError: the command line says it on one line, exit 2)."""


def lock_path(archive_folder: Path | str, run_id: str) -> Path:
    """The run's lock file; a run id that is not a plain file name gets a digest of it instead."""
    plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", run_id)
    name = run_id if plain else "run-" + hashlib.sha256(run_id.encode()).hexdigest()[:24]
    return Path(archive_folder) / LOCKS / f"{name}.lock"


RECORD_LIMIT = 4096  # bytes of a lock file read: a record is ~100; a larger file is not one of ours


def _field(record: dict[str, Any], key: str) -> str:
    """A field of a record as the one line shows it: whatever a file left there stays one short line."""
    text = " ".join(str(record.get(key)).split())
    return text if len(text) <= 80 else text[:77] + "..."


def describe_holder(run_id: str, record: Optional[dict[str, Any]]) -> str:
    """The refusal's line: the run and who holds it."""
    if not record:
        return f"run {run_id} is being driven by another process (its holder is not recorded yet); try again later"
    return (f"run {run_id} is being driven by pid {_field(record, 'pid')} on {_field(record, 'host')} since "
            f"{_field(record, 'since')}; wait for it to end, or stop it, then resume")


def describe_takeover(run_id: str, record: dict[str, Any]) -> str:
    return (f"run {run_id}: taking over the lock left by pid {_field(record, 'pid')} on {_field(record, 'host')} "
            f"(since {_field(record, 'since')}; that process no longer holds it)")


def _read(f: Any) -> Optional[dict[str, Any]]:
    try:
        f.seek(0)
        data = json.loads(f.read(RECORD_LIMIT) or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _open(path: Path, run_id: str) -> Any:
    # Never through a link, never onto anything but a regular file: acquire() truncates what it opened, and a link
    # planted under locks/ would have it truncate the file the link points to.
    try:
        path.parent.mkdir(exist_ok=True)
        if path.parent.is_symlink():
            raise OSError(errno.ELOOP, "its folder is a link")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
        return os.fdopen(fd, "a+", encoding="utf-8")
    except OSError as err:
        why = "it is a link" if err.errno == errno.ELOOP and path.is_symlink() else (err.strerror or err)
        raise RunLocked(f"run {run_id}: cannot write its lock file {path}: {why}") from None


def holder(archive_folder: Path | str, run_id: str) -> Optional[dict[str, Any]]:
    """Who holds the run's lock now, if another process does ({} where it has not written its record yet);
    None where nobody (or this process) does."""
    path = lock_path(archive_folder, run_id)
    if str(path) in _held or not path.exists():
        return None
    try:  # never through a link, never waiting on a FIFO planted there (acquire refuses both, on one line)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(f) or {}
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def acquire(archive_folder: Path | str, run_id: str) -> Optional[dict[str, Any]]:
    """Take the run's lock (RunLocked where another process holds it). Returns the record of a holder that
    died without letting go (to say the takeover), else None."""
    path = lock_path(archive_folder, run_id)
    key = str(path)
    with _guard:
        if key in _held:
            f, depth = _held[key]
            _held[key] = (f, depth + 1)
            return None
        f = _open(path, run_id)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read(f)
            f.close()
            raise RunLocked(describe_holder(run_id, record)) from None
        left = _read(f)
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
                            "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}))
        f.flush()
        _held[key] = (f, 1)
    return left


def release(archive_folder: Path | str, run_id: str) -> None:
    """Let go of a lock this process holds (the last of its re-entrant holds): the record is cleared first, so
    a record in a free file always means a holder that died."""
    key = str(lock_path(archive_folder, run_id))
    with _guard:
        if key not in _held:
            return
        f, depth = _held[key]
        if depth > 1:
            _held[key] = (f, depth - 1)
            return
        del _held[key]
        try:
            f.seek(0)
            f.truncate()
            f.flush()
        except OSError:
            pass
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()


def discard(archive_folder: Path | str, run_id: str) -> None:
    """Let go of a lock taken for a run whose first row could not be written, and remove its file: nothing is left
    under locks/ for a run the archive does not hold (the file goes while still held, so nobody takes it between)."""
    path = lock_path(archive_folder, run_id)
    with _guard:
        held = _held.get(str(path))
        if held is not None and held[1] == 1:
            path.unlink(missing_ok=True)
    release(archive_folder, run_id)
