"""The archive's profiles: one row per profile (``m004_profiles`` in harness/archive/migrations.py), the raw report
as a blob (the .ncu-rep, or the CSV where no report was written) and a JSON digest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..archive import profiles as table
from ..archive.migrations import now
from .model import ProfileSummary


def ensure_profiles_table(archive: Any) -> None:
    """Apply ``m004_profiles`` to an archive that predates it (recorded in _migrations like any migration)."""
    table.ensure_profiles_table(archive.db)


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
    return table.insert_profile(archive.db, {
        "submission_id": submission_id, "solution_hash": summary.solution_hash,
        "workload_uuid": summary.workload_uuid, "backend": summary.backend, "status": summary.status,
        "raw_blob": raw_blob, "digest": json.dumps(record, default=str),
        "created_at": now()})


def archived_profiles(archive: Any, solution_hash: Optional[str] = None,
                      submission_id: Optional[int] = None) -> list[dict[str, Any]]:
    """Profile rows, newest first, with the digest parsed."""
    if not table.has_profiles_table(archive.db):
        return []
    rows = table.profile_rows(archive.db, solution_hash, submission_id)
    for r in rows:
        r["digest"] = json.loads(r["digest"]) if r.get("digest") else {}
    return rows
