"""A finished submission moved whole from one archive to another: the Ray lanes' one-writer design.

Each Ray lane (harness/pipeline/ray_executor.py) evaluates into a private archive on its own node, so no lane ever
writes the driver's SQLite file (over a network file system, SQLite's locks cannot be trusted). When a
submission is finished, ``export_submission`` reads its rows and the blobs they name (solution JSON, logs,
artifacts; content-addressed, so a blob both archives hold is the same bytes) into a plain, picklable
``Bundle``; the driver's ``import_submission`` writes them into the real archive in one transaction, under a
new submission id. A driver killed mid-import therefore leaves the submission either whole or absent.

Seals: a lane seals with its own key (its private archive's ``seal.key``). On import the seal is checked
against the lane's record first, and a submission the lane had sealed is sealed again with the driver's key
over the rows as the driver holds them (new ids, the lane's record added to its options). One the lane could
not verify is imported without a seal, so it reads as "archive modified outside the harness" there too.

Like harness/archive/database.py, this is the archive layer: the only other module here that speaks SQL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from ..data.statuses import NO_VERDICT, SubmissionStatus
from .database import Archive


@dataclass
class Bundle:
    """One finished submission as plain data: its rows (as the lane's archive holds them) and their blobs."""

    submission: dict[str, Any]
    evaluations: list[dict[str, Any]]
    timing_samples: list[dict[str, Any]]
    artifacts: list[dict[str, Any]]
    environments: list[dict[str, Any]]
    solutions: list[dict[str, Any]]
    baseline_runs: list[dict[str, Any]]
    blobs: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # sha256 -> (kind, bytes)
    seal_state: str = "unsealed"  # what the lane's archive said of its own seal at export


def _rows(archive: Archive, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = archive.db.conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def export_submission(archive: Archive, submission_id: int, baseline_runs_after: int = 0) -> Bundle:
    """The submission's rows and blobs. ``baseline_runs_after``: baseline figures with a larger id are sent too
    (the lane measured them; the driver's report and later lanes can use them)."""
    subs = _rows(archive, "select * from submissions where id = ?", [submission_id])
    if not subs:
        raise ValueError(f"no submission {submission_id} in {archive.folder}")
    sub = subs[0]
    evaluations = _rows(archive, "select * from evaluations where submission_id = ? order by id", [submission_id])
    samples = _rows(archive, "select t.* from timing_samples t join evaluations e on e.id = t.evaluation_id "
                             "where e.submission_id = ? order by t.id", [submission_id])
    artifacts = _rows(archive, "select * from artifacts where submission_id = ? order by id", [submission_id])
    env_ids = {sub.get("environment_id")} | {e.get("environment_id") for e in evaluations}
    environments = [r for i in sorted(x for x in env_ids if x)
                    for r in _rows(archive, "select * from environments where id = ?", [i])]
    solutions = _rows(archive, "select * from solutions where hash = ?", [sub["solution_hash"]])
    baselines = _rows(archive, "select * from baseline_runs where id > ? order by id", [baseline_runs_after])
    wanted = {s["blob"] for s in solutions} | {e["log_blob"] for e in evaluations} | {a["blob"] for a in artifacts}
    wanted |= {b.get("log_blob") for b in baselines}
    blobs: dict[str, tuple[str, bytes]] = {}
    for digest in sorted(d for d in wanted if d):
        kind = archive.db.conn.execute("select kind from blobs where sha256 = ?", [digest]).fetchone()
        try:
            blobs[digest] = (kind[0] if kind else "blob", archive.get_blob(digest))
        except OSError:
            pass  # a blob already missing in the lane stays missing (its row still names it)
    state = archive.verify_seal(submission_id).state
    return Bundle(sub, evaluations, samples, artifacts, environments, solutions, baselines, blobs, state)


def import_submission(archive: Archive, bundle: Bundle,
                      lane: Optional[dict[str, Any]] = None) -> tuple[int, dict[int, int]]:
    """Write ``bundle`` into ``archive`` in one transaction; returns (new submission id, old -> new evaluation
    ids). ``lane`` (actor, node, host, attempt) is added to the submission's options, so `harness show` says where
    it ran; the seal (if the lane had one) is made again with this archive's key over the rows as written."""
    for digest, (kind, data) in bundle.blobs.items():  # files first: a row never names a blob that is not there
        if archive.put_blob(data, kind) != digest:
            raise ValueError(f"blob {digest[:12]} does not match its content")
    sub = {k: v for k, v in bundle.submission.items() if k not in ("id", "seal")}
    if sub.get("status") in (None, SubmissionStatus.RUNNING):
        raise ValueError("only a finished submission is imported (a RUNNING one would never be closed)")
    if lane:
        options = json.loads(sub.get("options") or "{}")
        sub["options"] = json.dumps({**options, "lane": lane}, default=str)
    evaluation_ids: dict[int, int] = {}
    with archive.db.atomic():
        for env in bundle.environments:
            archive.db["environments"].insert(env, ignore=True)
        for sol in bundle.solutions:
            archive.db["solutions"].insert(sol, ignore=True)
        new_id = int(archive.db["submissions"].insert(sub).last_pk)
        for ev in bundle.evaluations:
            row = {k: v for k, v in ev.items() if k != "id"}
            evaluation_ids[ev["id"]] = int(archive.db["evaluations"].insert({**row, "submission_id": new_id}).last_pk)
        for t in bundle.timing_samples:
            row = {k: v for k, v in t.items() if k != "id"}
            archive.db["timing_samples"].insert({**row, "evaluation_id": evaluation_ids[t["evaluation_id"]]})
        for a in bundle.artifacts:
            row = {k: v for k, v in a.items() if k != "id"}
            archive.db["artifacts"].insert({**row, "submission_id": new_id})
        for b in bundle.baseline_runs:
            archive.db["baseline_runs"].insert({k: v for k, v in b.items() if k != "id"})
        if bundle.seal_state == "sealed":
            archive._write_seal(new_id)  # same transaction: the rows and their seal land together
    return new_id, evaluation_ids


def record_failure(archive: Archive, solution_json: dict[str, Any], content_hash: str, message: str,
                   options: dict[str, Any]) -> int:
    """A submission no lane could finish (its lanes died twice): archived and sealed as HARNESS_ERROR with the
    reason, so the archive says what happened to it rather than nothing."""
    archive.put_solution(solution_json, content_hash)
    submission_id = archive.start_submission(content_hash, solution_json["name"], solution_json["definition"],
                                             solution_json["author"], options, None)
    archive.finish_submission(submission_id, SubmissionStatus.HARNESS_ERROR, message[:2000])
    return submission_id


def finished_keys(archive: Archive) -> set[tuple[str, str, tuple[str, ...], str]]:
    """(solution hash, definition, workload uuids, audit level) of every submission that holds a verdict: what a
    resumed `harness submit --resume` skips. INTERRUPTED and HARNESS_ERROR ones are evaluated again."""
    keys = set()
    marks = ",".join("?" for _ in NO_VERDICT)
    for row in _rows(archive, f"select solution_hash, definition, options from submissions where status not in "
                              f"({marks})", list(NO_VERDICT)):
        options = json.loads(row["options"] or "{}")
        keys.add((row["solution_hash"], row["definition"], tuple(options.get("workloads") or ()),
                  str(options.get("audit_level") or "fast")))
    return keys

