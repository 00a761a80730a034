"""Read-only queries the rest of the harness (the review, the report, the Ray executor, the controller's profile
command) asks of the archive. Only harness/archive/ speaks SQL: callers pass the archive's database (``archive.db``)
and get rows back as dicts (column -> value) in the order stated, or plain values.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..data.statuses import EvaluationStatus, SubmissionStatus


def _rows(db: Any, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    cur = db.execute(sql, list(params))
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


# -- the database itself ---------------------------------------------------------------------------------------

def database_file(db: Any) -> str:
    """The file of the main database, as SQLite names it (an absolute path)."""
    return db.conn.execute("PRAGMA database_list").fetchone()[2]


# -- submissions -------------------------------------------------------------------------------------------------

def last_submission_id(db: Any) -> int:
    """The highest submission id, 0 where there is none."""
    return int(db.conn.execute("select coalesce(max(id), 0) from submissions").fetchone()[0])


def readable_submission(row: dict[str, Any]) -> dict[str, Any]:
    """A submission row whose names, hash and status are text, as the harness wrote them, even where the row was
    changed outside it (NULL, a number; its seal says so): the readers print, sort and slice them."""
    for key in ("solution_name", "solution_hash", "definition", "author", "status", "created_at"):
        if key in row:
            row[key] = "?" if row[key] is None else str(row[key])
    return row


def submission_rows(db: Any, definition: Optional[str] = None) -> list[dict[str, Any]]:
    """Every submission (of ``definition``, if given), newest (highest id) first, all columns."""
    where, params = ("where definition = ?", [definition]) if definition else ("", [])
    return [readable_submission(r) for r in _rows(db, f"select * from submissions {where} order by id desc", params)]


def submission_row(db: Any, submission_id: int) -> Optional[dict[str, Any]]:
    """The submission's row (all columns), None where there is none."""
    rows = _rows(db, "select * from submissions where id = ?", [submission_id])
    return readable_submission(rows[0]) if rows else None


def submission_exists(db: Any, submission_id: int, definition: Optional[str] = None) -> bool:
    """Whether a submission has this id (and, if given, this definition)."""
    clause, extra = (" and definition = ?", [definition]) if definition else ("", [])
    return db.execute(f"select 1 from submissions where id = ?{clause}", [submission_id, *extra]).fetchone() is not None


def definition_submitted(db: Any, definition: str) -> bool:
    """Whether any submission is of this definition (by the name it was archived under)."""
    return db.execute("select 1 from submissions where definition = ? limit 1", [definition]).fetchone() is not None


def submitted_definitions(db: Any) -> list[str]:
    """The definitions the archive holds submissions of, sorted."""
    return [str(r[0]) for r in db.execute("select distinct definition from submissions order by 1").fetchall()]


def submissions_named(db: Any, solution_name: str,
                      definition: Optional[str] = None) -> list[tuple[int, str, str]]:
    """(id, definition, solution_hash) of the submissions of a solution name (and definition, if given), newest
    first."""
    clause, extra = (" and definition = ?", [definition]) if definition else ("", [])
    return db.execute(f"select id, definition, solution_hash from submissions where solution_name = ?{clause} "
                      "order by id desc", [solution_name, *extra]).fetchall()


def submissions_with_hash_prefix(db: Any, prefix: str,
                                 definition: Optional[str] = None) -> list[tuple[int, str, str]]:
    """(id, solution_hash, solution_name) of the submissions whose solution hash starts with ``prefix`` (a LIKE
    pattern's prefix, as given), and of ``definition`` if given, newest first."""
    clause, extra = (" and definition = ?", [definition]) if definition else ("", [])
    return db.execute(f"select id, solution_hash, solution_name from submissions where solution_hash like ?{clause} "
                      "order by id desc", [prefix + "%", *extra]).fetchall()


def latest_finished_submission_id(db: Any, solution_hash: str) -> Optional[int]:
    """The newest submission of a solution that is not RUNNING, None where there is none."""
    rows = list(db["submissions"].rows_where("solution_hash = ? and status != ?",
                                             [solution_hash, SubmissionStatus.RUNNING], order_by="id desc", limit=1))
    return int(rows[0]["id"]) if rows else None


def evaluation_rows(db: Any, submission_id: int) -> list[dict[str, Any]]:
    """A submission's evaluations (all columns), in the order they were written."""
    return _rows(db, "select * from evaluations where submission_id = ? order by id", [submission_id])


def passed_latency_means(db: Any) -> dict[int, tuple[float, int]]:
    """submission id -> (mean latency_ms, how many) over its PASSED evaluations that have a latency."""
    return {sid: (m, n) for sid, m, n in db.execute(
        "select submission_id, avg(latency_ms), count(*) from evaluations where status = ? "
        "and latency_ms is not null group by submission_id", [EvaluationStatus.PASSED.value]).fetchall()}


def solution_rows(db: Any, content_hash: str) -> list[dict[str, Any]]:
    """The solution row (all columns) of a content hash: one row, or none."""
    return _rows(db, "select * from solutions where hash = ?", [content_hash])


def environment_rows(db: Any) -> list[dict[str, Any]]:
    """Every environment's id, hardware and data (JSON text)."""
    return _rows(db, "select id, hardware, data from environments")


def environment_hardware(db: Any, environment_id: str) -> Optional[str]:
    """An environment's hardware column; None where the environment is unknown."""
    rows = _rows(db, "select hardware from environments where id = ?", [environment_id])
    return rows[0]["hardware"] if rows else None


# -- what a reviewer reads beside the numbers ---------------------------------------------------------------------

def artifact_rows(db: Any, submission_id: int) -> list[dict[str, Any]]:
    """A submission's artifacts (kind, name, blob), in the order they were written (table from m005)."""
    return _rows(db, "select kind, name, blob from artifacts where submission_id = ? order by id", [submission_id])


def submission_profile_rows(db: Any, submission_id: int) -> list[dict[str, Any]]:
    """The profiles (all columns) recorded for a submission, oldest first (table from m004)."""
    return _rows(db, "select * from profiles where submission_id = ? order by id", [submission_id])


def unattached_profile_rows(db: Any, solution_hash: str) -> list[dict[str, Any]]:
    """The profiles of a solution recorded for no submission, oldest first."""
    return _rows(db, "select * from profiles where solution_hash = ? and submission_id is null order by id",
                 [solution_hash])


# -- the controller's tables, read by the review (m003_controller) ---------------------------------------------------

def candidate_rows_of_submission(db: Any, submission_id: int) -> list[dict[str, Any]]:
    """The controller's candidates (all columns) that became this submission, oldest first."""
    return _rows(db, "select * from candidates where submission_id = ? order by id", [submission_id])


def candidate_rows_of_solution(db: Any, solution_hash: str) -> list[dict[str, Any]]:
    """The controller's candidates (all columns) with this solution hash, oldest first."""
    return _rows(db, "select * from candidates where solution_hash = ? order by id", [solution_hash])


def request_rows(db: Any, request_id: int) -> list[dict[str, Any]]:
    """The controller's request (all columns) of this id: one row, or none."""
    return _rows(db, "select * from requests where id = ?", [request_id])


def response_rows_of_request(db: Any, request_id: int) -> list[dict[str, Any]]:
    """The responses (all columns) to a request."""
    return _rows(db, "select * from responses where request_id = ?", [request_id])


def run_summaries(db: Any) -> list[dict[str, Any]]:
    """Every controller run's id, definition, provider and config, oldest first."""
    return _rows(db, "select id, definition, provider, config from runs order by created_at, id")


def round_kinds(db: Any, run_id: str) -> list[dict[str, Any]]:
    """A run's rounds: round, kind and summary (JSON text)."""
    return _rows(db, "select round, kind, summary from rounds where run_id = ?", [run_id])


def candidate_rows_with_submission_status(db: Any, run_id: str) -> list[dict[str, Any]]:
    """A run's candidates (all columns) with their submission's status as ``submission_status`` (None where
    they have none), by round then id."""
    return _rows(db, "select c.*, s.status as submission_status from candidates c left join submissions s "
                     "on s.id = c.submission_id where c.run_id = ? order by c.round, c.id", [run_id])


def response_cost_by_round(db: Any, run_id: str) -> dict[Any, Any]:
    """round -> the providers' total cost (USD) of a run's responses in that round."""
    return dict(db.execute("select q.round, sum(p.cost_usd) from responses p join requests q "
                           "on q.id = p.request_id where q.run_id = ? group by q.round", [run_id]).fetchall())


def promotions_by_round(db: Any, run_id: str) -> dict[Any, int]:
    """round -> how many of a run's decisions in that round PROMOTED a candidate."""
    return dict(db.execute("select round, count(*) from decisions where run_id = ? and verdict = 'PROMOTED' "
                           "group by round", [run_id]).fetchall())



def latest_baseline_figures(db: Any, definition: str) -> list[dict[str, Any]]:
    """The latest PASSED figures of every baseline of a definition, one row per (baseline, workload): solution_name,
    workload_uuid, gpu_key, official_ms and kernel_ms (the newest run, whichever card it was timed on)."""
    return _rows(db, "select solution_name, workload_uuid, gpu_key, official_ms, kernel_ms from baseline_runs "
                     "where id in (select max(id) from baseline_runs where definition = ? and status = 'PASSED' "
                     "group by solution_name, workload_uuid) order by solution_name", [definition])
