"""Review views over the archive: SQL views for datasette and full-text search over sources and logs.

``m005_review_views`` is an archive migration (in ``harness.archive.database.MIGRATIONS``, after m003_controller and
m004_profiles). It adds

- ``artifacts(submission_id, kind, name, blob)``: links a submission to files a reviewer wants beside its
  results that no other table holds: ``build_log``, ``sass`` (SASS summary), and, for runs outside the
  controller, ``profile`` and ``transcript`` (``add_artifact`` inserts one).
- ``documents(kind, ref, ...)``: the text of every solution source file, evaluation log, controller
  response (``transcript``, from ``responses.raw_blob``), profile digest (``profiles.digest``) and
  artifact, copied out of the blobs so SQLite can index it; ``documents_fts`` (FTS5, porter stemming)
  is the index, kept in step with ``documents`` by triggers.
- the views in ``VIEWS`` (submissions, evaluations and audits spelled out) and, where the controller's
  tables exist, ``CONTROLLER_VIEWS`` (candidates with their statuses, rounds, transcripts).

Blobs written after the migration reach ``documents`` through ``sync_documents`` (idempotent; ``harness
browse`` calls it). Nothing here rewrites a row the harness or the controller wrote.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Optional, Union

import sqlite_utils

from ..data.statuses import EvaluationStatus, SubmissionStatus
from .migrations import now

ARTIFACT_KINDS = ("build_log", "sass", "profile", "transcript")
DOCUMENT_KINDS = ("source", "log", *ARTIFACT_KINDS)
CONTROLLER_TABLES = ("runs", "rounds", "requests", "responses", "candidates", "decisions")
# A log of tens of MB helps nobody in a search result and bloats the index: keep its head and tail.
MAX_DOCUMENT_CHARS = 2_000_000

# The statuses the views compare with, as SQL text literals.
_PASSED, _SKIPPED = f"'{EvaluationStatus.PASSED.value}'", f"'{SubmissionStatus.SKIPPED.value}'"


def _json(column: str) -> str:
    """A JSON column that may be NULL or not JSON (an old or imported row): '{}' then."""
    return f"(case when json_valid({column}) then {column} else '{{}}' end)"


def _x(column: str, path: str) -> str:
    return f"json_extract({_json(column)}, '$.{path}')"


VIEWS: dict[str, str] = {
    # One row per harness submission: what a reviewer ranks.
    "submission_overview": f"""
select s.id as submission_id, s.solution_name, s.definition, s.author, sol.language, s.status,
  (select count(*) from evaluations e where e.submission_id = s.id and e.status != {_SKIPPED}) as workloads,
  (select count(*) from evaluations e where e.submission_id = s.id and e.status = {_PASSED}) as passed,
  {_x('s.scores', 'vs_reference')} as score_vs_reference,
  {_x('s.scores', 'vs_flashinfer_official')} as score_vs_flashinfer_official,
  {_x('s.scores', 'vs_flashinfer_kernel')} as score_vs_flashinfer_kernel,
  (select avg({_x('e.extra', 'fraction_of_floor')}) from evaluations e
     where e.submission_id = s.id and e.status = {_PASSED}) as mean_fraction_of_floor,
  (select count(*) from evaluations e, json_each({_json('e.extra')}, '$.audits') a
     where e.submission_id = s.id and json_extract(a.value, '$.passed') = 0) as failed_audits,
  (select group_concat(kind, ', ') from artifacts r where r.submission_id = s.id) as artifacts,
  s.message, s.created_at, s.finished_at, s.solution_hash, s.environment_id
from submissions s left join solutions sol on sol.hash = s.solution_hash
order by s.id desc""",
    # Evaluations joined to their submission and workload, with the numbers kept in `extra` spelled out.
    "evaluation_details": f"""
select e.id as evaluation_id, e.submission_id, s.solution_name, e.definition, e.workload_label, e.workload_uuid,
  e.status, e.latency_ms, {_x('e.extra', 'kernel_latency_ms')} as kernel_latency_ms,
  e.reference_latency_ms, e.speedup_factor as speedup_vs_reference,
  {_x('e.extra', 'flashinfer_official_ms')} as flashinfer_official_ms,
  {_x('e.extra', 'flashinfer_kernel_ms')} as flashinfer_kernel_ms,
  {_x('e.extra', 'speedup_vs_flashinfer_official')} as speedup_vs_flashinfer_official,
  {_x('e.extra', 'speedup_vs_flashinfer_kernel')} as speedup_vs_flashinfer_kernel,
  {_x('e.extra', 'floor_ms')} as floor_ms, {_x('e.extra', 'fraction_of_floor')} as fraction_of_floor,
  {_x('e.extra', 'throttled')} as throttled, e.aligned, e.max_absolute_error, e.max_relative_error,
  e.matched_ratio, e.timing_note, e.message, e.log_blob, e.environment_id, e.finished_at
from evaluations e join submissions s on s.id = e.submission_id
order by e.submission_id desc, e.id""",
    # One row per audit of an evaluation (input mutation, output aliasing, roofline plausibility...).
    "audits": f"""
select e.id as evaluation_id, e.submission_id, s.solution_name, e.definition, e.workload_label,
  json_extract(a.value, '$.name') as audit, json_extract(a.value, '$.passed') as passed,
  json_extract(a.value, '$.detail') as detail
from evaluations e join submissions s on s.id = e.submission_id, json_each({_json('e.extra')}, '$.audits') a
order by e.submission_id desc, e.id""",
    # The fastest passing latency per definition and workload, and who got it.
    "best_per_workload": f"""
select e.definition, e.workload_label, e.workload_uuid, min(e.latency_ms) as best_latency_ms,
  s.solution_name, e.submission_id, count(*) as passed_evaluations
from evaluations e join submissions s on s.id = e.submission_id
where e.status = {_PASSED} and e.latency_ms is not null
group by e.definition, e.workload_uuid
order by e.definition, e.workload_label""",
    # Every artifact with the submission it belongs to.
    "artifact_index": """
select r.id as artifact_id, r.submission_id, s.solution_name, s.definition, r.kind, r.name, r.blob,
  length(d.text) as chars, r.created_at
from artifacts r left join submissions s on s.id = r.submission_id
  left join documents d on d.kind = r.kind and d.ref = 'artifact:' || r.id
order by r.submission_id desc, r.kind""",
}

# Views over the controller's tables (m003_controller); created only where those tables exist.
CONTROLLER_VIEWS: dict[str, str] = {
    # Every candidate the controller made, with its own status and the harness's verdict on it.
    "candidate_overview": f"""
with means as (select submission_id, avg(latency_ms) as mean_latency_ms, count(*) as workloads
               from evaluations where status = {_PASSED} group by submission_id)
select c.id as candidate_id, c.run_id, c.round, c.seq, c.solution_name, c.status as candidate_status, c.reason,
  c.submission_id, s.status as submission_status, m.mean_latency_ms, m.workloads as passed_workloads,
  {_x('s.scores', 'vs_reference')} as score_vs_reference,
  {_x('s.scores', 'vs_flashinfer_official')} as score_vs_flashinfer_official,
  (select d.verdict from decisions d where d.candidate_id = c.id order by d.id desc limit 1) as verdict,
  (select d.rule from decisions d where d.candidate_id = c.id order by d.id desc limit 1) as rule,
  c.parent_id, c.depth, c.origin, c.solution_hash, c.created_at, c.finished_at
from candidates c left join submissions s on s.id = c.submission_id left join means m on m.submission_id = s.id
order by c.run_id, c.round, c.seq""",
    # One row per round of a run: what it made, what passed, its best mean latency and what it cost.
    "round_overview": f"""
with means as (select submission_id, avg(latency_ms) as mean_latency_ms
               from evaluations where status = {_PASSED} group by submission_id)
select r.run_id, runs.definition, r.round, r.kind, r.status,
  (select count(*) from candidates c where c.run_id = r.run_id and c.round = r.round) as candidates,
  (select count(*) from candidates c join submissions s on s.id = c.submission_id
     where c.run_id = r.run_id and c.round = r.round and s.status = {_PASSED}) as passed,
  (select min(m.mean_latency_ms) from candidates c join submissions s on s.id = c.submission_id
     join means m on m.submission_id = s.id
     where c.run_id = r.run_id and c.round = r.round and s.status = {_PASSED}) as best_mean_latency_ms,
  (select count(*) from decisions d where d.run_id = r.run_id and d.round = r.round and d.verdict = 'PROMOTED')
     as promoted,
  (select coalesce(sum(p.cost_usd), 0) from responses p join requests q on q.id = p.request_id
     where q.run_id = r.run_id and q.round = r.round) as cost_usd,
  (select coalesce(sum(p.tokens_in + p.tokens_out), 0) from responses p join requests q on q.id = p.request_id
     where q.run_id = r.run_id and q.round = r.round) as tokens,
  r.wall_s, r.created_at, r.finished_at
from rounds r left join runs on runs.id = r.run_id
order by r.run_id, r.round""",
    # Generation transcripts (the providers' raw replies), searchable through documents_fts.
    "transcripts": """
select d.id as document_id, q.run_id, q.round, q.kind as request_kind, q.key as request_key, p.provider, p.model,
  p.tokens_in, p.tokens_out, p.cost_usd, p.error,
  (select group_concat(c.solution_name, ', ') from candidates c where c.request_id = q.id) as candidates,
  d.submission_id, d.title, length(d.text) as chars, d.text
from documents d left join responses p on d.ref = 'response:' || p.id left join requests q on q.id = p.request_id
where d.kind = 'transcript'
order by d.id desc""",
}

SEARCH_SQL = """
select d.id as document_id, d.kind, d.title, d.submission_id, d.solution_hash, d.definition,
  snippet(documents_fts, 1, '[', ']', ' ... ', 16) as snippet
from documents_fts join documents d on d.id = documents_fts.rowid
where documents_fts match :q {kind_filter}
order by rank
limit :limit"""


def create_views(db: sqlite_utils.Database) -> None:
    """(Re)create the review views; a later migration that changes one calls this again."""
    for name, sql in VIEWS.items():
        db.create_view(name, sql.strip(), replace=True)
    if has_controller_tables(db):
        for name, sql in CONTROLLER_VIEWS.items():
            db.create_view(name, sql.strip(), replace=True)


def has_controller_tables(db: sqlite_utils.Database) -> bool:
    return set(CONTROLLER_TABLES) <= set(db.table_names())


def db_folder(db: sqlite_utils.Database) -> Optional[Path]:
    """The folder of the database file (where ``blobs/`` lives); None for an in-memory database."""
    for _, name, file in db.execute("PRAGMA database_list").fetchall():
        if name == "main" and file:
            return Path(file).parent
    return None


def m005_review_views(db: sqlite_utils.Database) -> None:
    db["artifacts"].create({"id": int, "submission_id": int, "kind": str, "name": str, "blob": str,
                            "created_at": str}, pk="id", foreign_keys=[("submission_id", "submissions", "id")])
    db["artifacts"].create_index(["submission_id", "kind"])
    db["documents"].create({"id": int, "kind": str, "ref": str, "submission_id": int, "solution_hash": str,
                            "definition": str, "title": str, "blob": str, "text": str}, pk="id")
    db["documents"].create_index(["kind", "ref"], unique=True)
    db["documents"].create_index(["submission_id"])
    db["documents"].enable_fts(["title", "text"], create_triggers=True, tokenize="porter")
    create_views(db)
    folder = db_folder(db)
    if folder is not None:
        sync_documents(db, folder / "blobs")


# -- documents -------------------------------------------------------------------------------------------


def has_review_tables(db: sqlite_utils.Database) -> bool:
    names = set(db.table_names())
    return {"documents", "artifacts", "documents_fts"} <= names


def _blob_text(blob_dir: Path, digest: str) -> Optional[str]:
    path = blob_dir / digest[:2] / digest[2:]
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    text = raw.decode("utf-8", errors="replace").replace("\x00", "")
    if len(text) > MAX_DOCUMENT_CHARS:
        half = MAX_DOCUMENT_CHARS // 2
        text = text[:half] + f"\n... [{len(text) - 2 * half} characters left out] ...\n" + text[-half:]
    return text


def sync_documents(db: sqlite_utils.Database, blob_dir: Union[Path, str]) -> int:
    """Copy the text of sources, evaluation logs and artifacts not yet indexed into ``documents``.

    Idempotent: a (kind, ref) already present is not read again. Returns the number of rows added.
    A blob missing from disk is skipped (and retried on the next call).
    """
    if not has_review_tables(db):
        raise RuntimeError("the archive has no review tables: the m005_review_views migration has not run")
    blob_dir = Path(blob_dir)
    have = {(k, r) for k, r in db.execute("select kind, ref from documents").fetchall()}
    indexed_solutions = {h for (h,) in db.execute("select distinct solution_hash from documents "
                                                  "where kind = 'source'").fetchall()}
    rows: list[dict[str, Any]] = []

    for sol_hash, name, definition, blob in db.execute("select hash, name, definition, blob from solutions").fetchall():
        # A solution's files are indexed together, when it is first seen.
        if blob is None or sol_hash in indexed_solutions:
            continue
        text = _blob_text(blob_dir, blob)
        if text is None:
            continue
        try:
            sources = json.loads(text).get("sources", [])
        except (json.JSONDecodeError, AttributeError):
            continue
        for src in sources:
            path = str(src.get("path", ""))
            rows.append({"kind": "source", "ref": f"{sol_hash}:{path}", "submission_id": None,
                         "solution_hash": sol_hash, "definition": definition, "title": f"{name} / {path}",
                         "blob": blob, "text": str(src.get("content", ""))})

    for ev_id, sub_id, sol_hash, definition, name, label, blob in db.execute(
            "select e.id, e.submission_id, s.solution_hash, e.definition, s.solution_name, e.workload_label, "
            "e.log_blob from evaluations e join submissions s on s.id = e.submission_id "
            "where e.log_blob is not null").fetchall():
        if ("log", str(ev_id)) in have:
            continue
        text = _blob_text(blob_dir, blob)
        if text is None:
            continue
        rows.append({"kind": "log", "ref": str(ev_id), "submission_id": sub_id, "solution_hash": sol_hash,
                     "definition": definition, "title": f"{name} / {label} log", "blob": blob, "text": text})

    if has_controller_tables(db):
        for resp_id, blob, provider, model, run_id, rnd, key, definition in db.execute(
                "select p.id, p.raw_blob, p.provider, p.model, q.run_id, q.round, q.key, runs.definition "
                "from responses p join requests q on q.id = p.request_id left join runs on runs.id = q.run_id "
                "where p.raw_blob is not null").fetchall():
            if ("transcript", f"response:{resp_id}") in have:
                continue
            text = _blob_text(blob_dir, blob)
            if text is None:
                continue
            rows.append({"kind": "transcript", "ref": f"response:{resp_id}", "submission_id": None,
                         "solution_hash": None, "definition": definition,
                         "title": f"{run_id} round {rnd} {key} ({provider} {model or ''})".strip(), "blob": blob,
                         "text": text})

    if "profiles" in db.table_names():
        for prof_id, sub_id, sol_hash, workload, status, digest in db.execute(
                "select id, submission_id, solution_hash, workload_uuid, status, digest from profiles").fetchall():
            if ("profile", f"profile:{prof_id}") in have:
                continue
            rows.append({"kind": "profile", "ref": f"profile:{prof_id}", "submission_id": sub_id,
                         "solution_hash": sol_hash, "definition": None,
                         "title": f"profile of {(sol_hash or '')[:12]} on {workload} ({status})", "blob": None,
                         "text": digest or ""})

    for art_id, sub_id, kind, art_name, blob, sol_hash, definition, name in db.execute(
            "select r.id, r.submission_id, r.kind, r.name, r.blob, s.solution_hash, s.definition, s.solution_name "
            "from artifacts r left join submissions s on s.id = r.submission_id").fetchall():
        ref = f"artifact:{art_id}"
        if (kind, ref) in have:
            continue
        text = _blob_text(blob_dir, blob)
        if text is None:
            continue
        rows.append({"kind": kind, "ref": ref, "submission_id": sub_id, "solution_hash": sol_hash,
                     "definition": definition, "title": f"{name} / {art_name or kind}", "blob": blob, "text": text})

    if rows:
        with db.atomic():
            db["documents"].insert_all(rows, ignore=True)
    return len(rows)


def add_artifact(archive: Any, submission_id: int, kind: str, data: Union[bytes, str], name: str = "") -> int:
    """Store ``data`` as a blob and link it to a submission (for the controller: SASS, profile, ...)."""
    if kind not in ARTIFACT_KINDS:
        raise ValueError(f"artifact kind must be one of {', '.join(ARTIFACT_KINDS)}, got {kind!r}")
    blob = archive.put_blob(data, kind)
    with archive.sealed_write(submission_id):  # an artifact added after the verdict is sealed with it
        table = archive.db["artifacts"].insert({"submission_id": submission_id, "kind": kind, "name": name or kind,
                                                "blob": blob, "created_at": now()})
    return int(table.last_pk)


def fts_query(text: str) -> str:
    """A user's words as an FTS5 query: each word quoted (so '-', ':', '.' are not operators), all required.

    A word ending in '*' stays a prefix search.
    """
    terms = []
    for word in text.split():
        prefix = word.endswith("*")
        word = word.rstrip("*").replace('"', '""')
        if word:
            terms.append(f'"{word}"' + ("*" if prefix else ""))
    return " ".join(terms)


def search_documents(db: Union[sqlite_utils.Database, sqlite3.Connection], text: str,
                     kinds: Optional[Iterable[str]] = None, limit: int = 20) -> list[dict[str, Any]]:
    """Full-text search over sources, logs and artifacts; best matches first."""
    conn = db.conn if isinstance(db, sqlite_utils.Database) else db
    kinds = list(kinds or [])
    params: dict[str, Any] = {"q": fts_query(text), "limit": limit}
    kind_filter = ""
    if kinds:
        kind_filter = "and d.kind in (" + ", ".join(f":k{i}" for i in range(len(kinds))) + ")"
        params.update({f"k{i}": k for i, k in enumerate(kinds)})
    if not params["q"]:
        return []
    cur = conn.execute(SEARCH_SQL.format(kind_filter=kind_filter), params)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


# -- datasette ----------------------------------------------------------------------------------------------


def datasette_metadata(db_name: str = "archive") -> dict[str, Any]:
    """Titles, descriptions and canned queries that make the archive readable in datasette."""
    search_sql = SEARCH_SQL.format(kind_filter="and (:kind = '' or d.kind = :kind)").replace(":limit", "100")
    return {
        "title": "Crucible archive",
        "description": "Submissions, evaluations, audits, the controller's candidates and rounds, and the text of "
                       "sources, logs, profile digests and transcripts. Start with submission_overview (or "
                       "candidate_overview for a controller run); search with the search query below or the "
                       "documents table's search box.",
        "databases": {db_name: {
            "tables": {
                "submission_overview": {"description": "One row per submission: status, scores (mean speedups; 0 "
                                                       "if any workload failed), mean fraction of the roofline "
                                                       "floor, failed audits, linked artifacts."},
                "evaluation_details": {"description": "Each workload of each submission, with latencies in ms, "
                                                      "FlashInfer baselines, the floor and speedups."},
                "audits": {"description": "Every audit of every evaluation; filter passed = 0 for the failures."},
                "best_per_workload": {"description": "Fastest passing latency per workload and who got it."},
                "candidate_overview": {"description": "Every controller candidate: its status, the harness's "
                                                      "verdict, mean latency over passed workloads (ms), promotion."},
                "round_overview": {"description": "Per run and round: candidates, passed, best mean latency (ms), "
                                                  "promotions, provider cost (USD) and tokens."},
                "transcripts": {"description": "The providers' raw replies to the controller's requests."},
                "artifact_index": {"description": "Build logs, SASS summaries and other files linked to "
                                                  "submissions."},
                "documents": {"description": "Text of sources, logs, profile digests, transcripts and artifacts "
                                             "(full-text searchable).", "searchmode": "raw"},
                "_migrations": {"hidden": True},
                "blobs": {"description": "Content-addressed files beside the database (blobs/ab/cdef...)."},
            },
            "queries": {
                "search": {"title": "Search sources, logs and transcripts",
                           "description": "Words are matched with stemming; kind: source, log, build_log, sass, "
                                          "profile, transcript or empty for all.",
                           "sql": search_sql},
            },
        }},
    }


def datasette_command(db_path: Union[str, Path], metadata_path: Union[str, Path], host: str = "127.0.0.1",
                      port: int = 8001, open_browser: bool = True, python: Optional[str] = None) -> list[str]:
    import sys

    cmd = [python or sys.executable, "-m", "datasette", "serve", str(db_path), "--metadata", str(metadata_path),
           "--host", host, "--port", str(port), "--setting", "sql_time_limit_ms", "5000"]
    if open_browser:
        cmd.append("--open")
    return cmd
