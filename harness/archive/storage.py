"""Failures of the storage under the archive (a full disk, an exceeded quota, an I/O error), told apart from the
harness's own faults so that a submission cut short by one is recorded as such and the command ends with one line
that says what and where, never a traceback.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Optional

from .database import ArchiveError

# What each storage errno means, in the words a user acts on.
STORAGE_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                  errno.EIO: "the disk failed (an I/O error)", errno.EFBIG: "a file is over the file system's limit"}
SQLITE_FULL, SQLITE_IOERR = 13, 10  # SQLite's primary result codes (extended codes keep them in the low byte)
_SQLITE_WORDS = {"database or disk is full": SQLITE_FULL, "disk i/o error": SQLITE_IOERR}


class ArchiveStorageError(ArchiveError):
    """The archive could not be written because of its storage; the message says what, where and what became of
    the submission."""


def storage_failure(err: BaseException) -> Optional[str]:
    """Why ``err`` (or an error it was raised from) is a storage failure, in words ("the disk is full"), or None
    where it is something else (a harness bug, a permission, a missing file)."""
    seen: set[int] = set()
    current: Optional[BaseException] = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ArchiveStorageError):
            return str(current)
        if isinstance(current, OSError) and current.errno in STORAGE_ERRNOS:
            return STORAGE_ERRNOS[current.errno]
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            code = (code & 0xFF) if isinstance(code, int) else _SQLITE_WORDS.get(str(current).strip().lower())
            if code == SQLITE_FULL:
                return STORAGE_ERRNOS[errno.ENOSPC]
            if code == SQLITE_IOERR:
                return STORAGE_ERRNOS[errno.EIO]
        current = current.__cause__ or current.__context__
    return None


def storage_where(err: BaseException, folder: Path | str) -> str:
    """The file the failed write was for where the error names one, else the archive folder."""
    current: Optional[BaseException] = err
    while current is not None:
        if isinstance(current, OSError) and current.filename:
            return str(current.filename)
        current = current.__cause__ or current.__context__
    return f"the archive in {folder}"


def storage_message(err: BaseException, folder: Path | str) -> Optional[str]:
    """One line for a storage failure (None where ``err`` is not one): what failed and where."""
    if isinstance(err, ArchiveStorageError):
        return str(err)
    reason = storage_failure(err)
    return None if reason is None else f"{reason}: cannot write {storage_where(err, folder)}"


def database_refusal(err: BaseException) -> Optional[str]:
    """One line for a write the archive's database refused that is not a storage failure (a trigger or constraint
    of its own, a lock held past the busy timeout), or None where ``err`` is not the database's."""
    return f"the archive refused the write ({err})" if isinstance(err, sqlite3.Error) else None
