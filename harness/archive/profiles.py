"""The ``profiles`` table (``m004_profiles`` in harness/archive/migrations.py): its creation on an archive that
predates it, its rows' insertion and reading. What a row holds is harness/profiling/archive.py's decision."""

from __future__ import annotations

from typing import Any, Optional

from .migrations import m004_profiles, now


def ensure_profiles_table(db: Any) -> None:
    """Apply ``m004_profiles`` to a database that predates it (recorded in _migrations like any migration)."""
    if "profiles" in db.table_names():
        return
    with db.atomic():
        m004_profiles(db)
        if "_migrations" in db.table_names():
            db["_migrations"].insert({"name": m004_profiles.__name__, "applied_at": now()}, ignore=True)


def has_profiles_table(db: Any) -> bool:
    return "profiles" in db.table_names()


def insert_profile(db: Any, row: dict[str, Any]) -> int:
    """One profile row, in its own transaction; returns its id."""
    with db.atomic():
        return int(db["profiles"].insert(row).last_pk)


def profile_rows(db: Any, solution_hash: Optional[str] = None,
                 submission_id: Optional[int] = None) -> list[dict[str, Any]]:
    """Profile rows (all columns, the digest as JSON text), newest first; of a solution and/or a submission if
    given."""
    where, args = [], []
    if solution_hash:
        where.append("solution_hash = ?")
        args.append(solution_hash)
    if submission_id is not None:
        where.append("submission_id = ?")
        args.append(submission_id)
    return list(db["profiles"].rows_where(" and ".join(where) or None, args, order_by="id desc"))
