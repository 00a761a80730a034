"""Giving an archived run more: `controller loop --resume RUN_ID --budget-wall-s S` (or `--rounds N`,
`--budget-tokens`, `--budget-cost`) raises the run's stored limits, then the resume plays on.

A run is one run however many sittings it takes: its spend (round walls, tokens, cost) counts from its start, so the
limits given are totals (a run stopped at 350 s of a 420 s budget and given `--budget-wall-s 840` has 490 s more).

The wall budget may have stopped a run inside its last round: the finalist decided without its paired measurement
(rule `budget`: "not promoted unmeasured"), or a candidate screened in and never evaluated (NOT_EVALUATED). Those are
deferrals, not verdicts, so an extension reopens that round: the deferred decisions are taken back, the unevaluated
candidates wait again, and the continued run measures and decides them before it plans a new round. What was taken
back is kept, with what it said, in the run's config (`extensions`), next to the limits before and after.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Optional

from harness.archive.database import Archive
from harness.data.statuses import RunStatus

from .loop import LoopConfig
from .screening import BUDGET_RULE
from .store import NOT_EVALUATED, Store

LIMITS = ("rounds", "budget_wall_s", "budget_tokens", "budget_cost_usd")


def extend_run(archive_path: Path | str, run_id: str, limits: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Set ``limits`` (a subset of LIMITS; None values are left alone) on the archived run and reopen its
    deferrals; returns the extension's record, or None where nothing changed (the same limits, nothing deferred).
    The run is then resumable (`--resume RUN_ID`); a finished run is marked INTERRUPTED until it is."""
    updates = {k: v for k, v in limits.items() if v is not None}
    unknown = sorted(set(updates) - set(LIMITS))
    if unknown:
        raise ValueError(f"only a run's limits can be changed on resume ({', '.join(LIMITS)}), not {unknown}")
    store = Store(Archive(archive_path))
    row = store.run(run_id)
    if row is None:
        raise ValueError(f"no run {run_id!r} in {store.archive.folder}")
    config = LoopConfig.model_validate(row["config"])
    changed = {k: [getattr(config, k), v] for k, v in updates.items() if getattr(config, k) != v}
    extended = LoopConfig.model_validate({**config.model_dump(mode="json"), **updates})  # the limits' own bounds
    # Only a finished run's last round is final enough to reopen (a run cut short resumes inside its round anyway),
    # and only one the new limits will play.
    reopened = reopen_deferred(store, run_id, extended.rounds) if row["status"] == RunStatus.DONE else None
    if not changed and reopened is None:
        return None
    record = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "changed": changed,
              "was": {"status": row["status"], "stop_reason": row["stop_reason"]}, "reopened": reopened}
    extended = extended.model_copy(update={"extensions": [*config.extensions, record]})
    store.set_run_config(run_id, extended.model_dump(mode="json"))
    if row["status"] == RunStatus.DONE:
        store.set_run_status(run_id, RunStatus.INTERRUPTED, f"extended ({describe(record)}): continue with --resume")
    return record


def reopen_deferred(store: Store, run_id: str, rounds_limit: int) -> Optional[dict[str, Any]]:
    """Take back the budget's deferrals in the run's last round and reopen it, where that round is within
    ``rounds_limit``; what they were, or None."""
    rounds = store.rounds(run_id)
    if not rounds:
        return None
    last = max(r["round"] for r in rounds)
    if last > rounds_limit:
        return None
    deferred = [d for d in store.decisions(run_id) if d["round"] == last and d["rule"] == BUDGET_RULE]
    waiting = [c for c in store.candidates(run_id, last) if c["status"] == NOT_EVALUATED]
    if not deferred and not waiting:
        return None
    for d in deferred:
        store.take_back_decision(d["id"])
    for c in waiting:
        store.reopen_candidate(c["id"])
    store.reopen_round(run_id, last)
    return {"round": last,
            "decisions": [{"candidate_id": d["candidate_id"], "verdict": d["verdict"], "rule": d["rule"],
                           "reasons": d["reasons"], "created_at": d["created_at"]} for d in deferred],
            "not_evaluated": [{"candidate_id": c["id"], "name": c["solution_name"], "reason": c["reason"]}
                              for c in waiting]}


def describe(record: dict[str, Any]) -> str:
    """One line: the limits changed and what was reopened."""
    parts = [f"{k} {before} -> {after}" for k, (before, after) in record["changed"].items()]
    reopened = record.get("reopened")
    if reopened:
        parts.append(f"round {reopened['round']} reopened: {len(reopened['decisions'])} deferred decision(s), "
                     f"{len(reopened['not_evaluated'])} unevaluated candidate(s)")
    return "; ".join(parts) or "no change"
