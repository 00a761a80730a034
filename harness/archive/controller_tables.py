"""The controller's tables (``m003_controller``, ``m009_agent_turns`` in harness/archive/migrations.py): runs,
rounds, requests, responses, agent_turns, candidates, decisions, and what the controller reads of the harness's
submissions. Only harness/archive/ speaks SQL: controller/store.py (the ``Store``) decides what a row holds and
when a transaction begins and ends; these functions read and write the rows.

Rows come back as dicts (column -> value) with JSON columns left as text; inserts return the new row's id.
"""

from __future__ import annotations

import json

from typing import Any, Optional

from ..data.statuses import RunStatus


def _first(rows: Any) -> Optional[dict[str, Any]]:
    rows = list(rows)
    return rows[0] if rows else None


# -- runs ------------------------------------------------------------------------------------------------------

def insert_run(db: Any, row: dict[str, Any]) -> None:
    db["runs"].insert(row)


def run_row(db: Any, run_id: str) -> Optional[dict[str, Any]]:
    return _first(db["runs"].rows_where("id = ?", [run_id]))


def run_rows(db: Any, definition: Optional[str] = None) -> list[dict[str, Any]]:
    """Every run (of ``definition``, if given), newest first."""
    where, args = ("definition = ?", [definition]) if definition else (None, [])
    return list(db["runs"].rows_where(where, args, order_by="created_at desc, id desc"))


def unfinished_run_ids(db: Any) -> list[str]:
    """The ids of the runs RUNNING or INTERRUPTED, oldest first."""
    return [r["id"] for r in db["runs"].rows_where("status in (?, ?)", [RunStatus.RUNNING, RunStatus.INTERRUPTED],
                                                   order_by="created_at, id")]


def update_run(db: Any, run_id: str, values: dict[str, Any]) -> None:
    db["runs"].update(run_id, values)


# -- rounds ----------------------------------------------------------------------------------------------------

def round_row(db: Any, run_id: str, number: int) -> Optional[dict[str, Any]]:
    return _first(db["rounds"].rows_where("run_id = ? and round = ?", [run_id, number]))


def round_rows(db: Any, run_id: str) -> list[dict[str, Any]]:
    """A run's rounds, by round number."""
    return list(db["rounds"].rows_where("run_id = ?", [run_id], order_by="round"))


def insert_round(db: Any, row: dict[str, Any]) -> None:
    db["rounds"].insert(row)


def update_round(db: Any, round_id: int, values: dict[str, Any]) -> None:
    db["rounds"].update(round_id, values)


def round_wall_total(db: Any, run_id: str) -> float:
    """The wall seconds of a run's rounds, summed (0 where none is recorded)."""
    return db.execute("select coalesce(sum(wall_s), 0) from rounds where run_id = ?", [run_id]).fetchone()[0]


# -- requests and responses ------------------------------------------------------------------------------------

def request_row(db: Any, run_id: str, key: str) -> Optional[dict[str, Any]]:
    return _first(db["requests"].rows_where("run_id = ? and key = ?", [run_id, key]))


def insert_request(db: Any, row: dict[str, Any]) -> int:
    return int(db["requests"].insert(row).last_pk)


def response_row(db: Any, request_id: int) -> Optional[dict[str, Any]]:
    return _first(db["responses"].rows_where("request_id = ?", [request_id]))


def insert_response(db: Any, row: dict[str, Any]) -> int:
    return int(db["responses"].insert(row).last_pk)


def response_rows_of_run(db: Any, run_id: str) -> list[dict[str, Any]]:
    """A run's responses (all columns) with their request's round, kind and key, in the order they came."""
    return [dict(r) for r in db.query(
        "select responses.*, requests.round as round, requests.kind as kind, requests.key as key "
        "from responses join requests on responses.request_id = requests.id "
        "where requests.run_id = ? order by responses.id", [run_id])]


def response_count(db: Any, run_id: str) -> int:
    return db.execute("select count(*) from responses join requests on responses.request_id = requests.id "
                      "where requests.run_id = ?", [run_id]).fetchone()[0]


def response_totals(db: Any, run_id: str) -> tuple[Any, Any, Any]:
    """(tokens in, tokens out, cost in USD) of a run's responses, summed (0 where none)."""
    return tuple(db.execute(
        "select coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0), coalesce(sum(cost_usd), 0) "
        "from responses join requests on responses.request_id = requests.id where requests.run_id = ?",
        [run_id]).fetchone())


# -- tool conversations (agent_turns) ----------------------------------------------------------------------------

def agent_turn_payloads(db: Any, run_id: str, request_key: str) -> list[str]:
    """The JSON payloads of one request's conversation turns, in turn order."""
    return [r["payload"] for r in db.query(
        "select payload from agent_turns where run_id = ? and request_key = ? order by turn", [run_id, request_key])]


def insert_agent_turn(db: Any, row: dict[str, Any]) -> None:
    db["agent_turns"].insert(row)


def agent_conversation_keys(db: Any, run_id: str) -> list[str]:
    """The request keys of a run that had a tool conversation, in the order they began."""
    return [r["request_key"] for r in db.query(
        "select request_key, min(id) as first from agent_turns where run_id = ? group by request_key "
        "order by first", [run_id])]


# -- candidates ------------------------------------------------------------------------------------------------

def insert_candidate(db: Any, row: dict[str, Any]) -> int:
    return int(db["candidates"].insert(row).last_pk)


def candidate_rows(db: Any, run_id: str, round_number: Optional[int] = None) -> list[dict[str, Any]]:
    """A run's candidates (of one round, if given), by id."""
    where, args = ("run_id = ?", [run_id]) if round_number is None else (
        "run_id = ? and round = ?", [run_id, round_number])
    return list(db["candidates"].rows_where(where, args, order_by="id"))


def candidate_row(db: Any, candidate_id: int) -> dict[str, Any]:
    """The candidate's row; sqlite_utils' NotFoundError where there is none."""
    return db["candidates"].get(candidate_id)


def update_candidate(db: Any, candidate_id: int, values: dict[str, Any]) -> None:
    db["candidates"].update(candidate_id, values)


# -- decisions -------------------------------------------------------------------------------------------------

def decision_row(db: Any, run_id: str, candidate_id: int) -> Optional[dict[str, Any]]:
    return _first(db["decisions"].rows_where("run_id = ? and candidate_id = ?", [run_id, candidate_id]))


def decision_rows(db: Any, run_id: str) -> list[dict[str, Any]]:
    """A run's decisions, by id."""
    return list(db["decisions"].rows_where("run_id = ?", [run_id], order_by="id"))


def insert_decision(db: Any, row: dict[str, Any]) -> int:
    return int(db["decisions"].insert(row).last_pk)


def delete_decision(db: Any, decision_id: int) -> None:
    """Only for a deferral taken back when a run is given more (the run's config keeps what it said)."""
    db["decisions"].delete(decision_id)


# -- the harness's rows, read only -------------------------------------------------------------------------------

def submission_row(db: Any, submission_id: int) -> Optional[dict[str, Any]]:
    return _first(db["submissions"].rows_where("id = ?", [submission_id]))


def submission_card(db: Any, submission_id: int) -> Optional[str]:
    """The GPU (its UUID) a submission's environment names; None where it has none (CPU) or is unknown."""
    row = _first(db.query("select e.data from submissions s join environments e on e.id = s.environment_id "
                          "where s.id = ?", [submission_id]))
    if row is None:
        return None
    try:
        return json.loads(row["data"]).get("uuid") or None
    except (TypeError, ValueError):
        return None


def submission_count(db: Any) -> int:
    return db["submissions"].count
