"""The archive's profiles: one row per profile (``m004_profiles`` in harness/archive/migrations.py), the raw report
as a blob (the .ncu-rep, or the CSV where no report was written) and a JSON digest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..archive.migrations import m004_profiles, now
from .model import ProfileSummary


def ensure_profiles_table(archive: Any) -> None:
    """Apply ``m004_profiles`` to an archive that predates it (recorded in _migrations like any migration)."""
    db = archive.db
    if "profiles" in db.table_names():
        return
    with db.atomic():
        m004_profiles(db)
        if "_migrations" in db.table_names():
            db["_migrations"].insert({"name": m004_profiles.__name__, "applied_at": now()}, ignore=True)


def record_profile(archive: Any, summary: ProfileSummary, digest: dict[str, Any],
                   submission_id: Optional[int] = None) -> int:
    """Store the raw report (the .ncu-rep, else the CSV) as a blob and the digest as JSON; returns the row id."""
    ensure_profiles_table(archive)
    raw_blob = None
    csv_blob = archive.put_blob(summary.raw_csv, "ncu-csv") if summary.raw_csv else None
    if summary.report is not None:
        raw_blob = archive.put_blob(summary.report, "ncu-rep")
    elif summary.report_path and Path(summary.report_path).is_file():
        raw_blob = archive.put_blob(Path(summary.report_path).read_bytes(), "ncu-rep")
    raw_blob = raw_blob or csv_blob
    log_blob = archive.put_blob(summary.log, "profile-log") if summary.log else None
    record = {**summary.to_json(), "csv_blob": csv_blob, "log_blob": log_blob, **digest}
    with archive.db.atomic():
        table = archive.db["profiles"].insert({
            "submission_id": submission_id, "solution_hash": summary.solution_hash,
            "workload_uuid": summary.workload_uuid, "backend": summary.backend, "status": summary.status,
            "raw_blob": raw_blob, "digest": json.dumps(record, default=str),
            "created_at": now()})
    return int(table.last_pk)


def archived_profiles(archive: Any, solution_hash: Optional[str] = None,
                      submission_id: Optional[int] = None) -> list[dict[str, Any]]:
    """Profile rows, newest first, with the digest parsed."""
    if "profiles" not in archive.db.table_names():
        return []
    where, args = [], []
    if solution_hash:
        where.append("solution_hash = ?")
        args.append(solution_hash)
    if submission_id is not None:
        where.append("submission_id = ?")
        args.append(submission_id)
    rows = list(archive.db["profiles"].rows_where(" and ".join(where) or None, args, order_by="id desc"))
    for r in rows:
        r["digest"] = json.loads(r["digest"]) if r.get("digest") else {}
    return rows
