"""Everything the report shows, read from the archive into a ``ReportData`` (nothing is written)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from ..archive.queries import environment_rows, submission_rows
from ..archive.seal import MODIFIED_WARNING
from ..data.statuses import EvaluationStatus
from .candidates import _candidate, _loads, leaderboard
from .costs import build_roofline, dataset_costs, load_ceilings
from .model import Candidate, DefinitionSection, ReportData
from .rounds import _rounds_from, rounds_from_archive


def gather_report(archive: Any, definition: Optional[str] = None, rounds: Optional[list[dict[str, Any]]] = None,
                  dataset: Any = None, ceilings: Optional[dict[str, Any]] = None) -> ReportData:
    """Everything the report shows, read from the archive (nothing is written).

    ``rounds``: controller rounds (dicts with run, round, best_latency_ms, spend_usd, candidates,
    definition...), added to those the controller's tables give (``rounds_from_archive``). ``dataset``: a
    ``harness.data.dataset.Dataset`` for the workloads' bytes and flops (the roofline's x axis); without it
    the roofline falls back to the floor-implied bandwidth. ``ceilings``: override ceilings.json.
    """
    db = archive.db
    envs = {r["id"]: r for r in environment_rows(db)}
    hardware_of = {k: v["hardware"] or "" for k, v in envs.items()}
    subs = submission_rows(db, definition)
    by_definition: dict[str, list[Candidate]] = {}
    for s in subs:
        by_definition.setdefault(s["definition"], []).append(_candidate(archive, s, hardware_of))
    names = sorted(by_definition, key=lambda n: (-len(by_definition[n]), n))  # the busiest definition first
    given_runs = {str(r.get("run") or r.get("run_id") or "run") for r in rounds or []}
    all_rounds = [*(r for r in rounds_from_archive(db) if r["run"] not in given_runs), *(rounds or [])]
    default_def = definition or (names[0] if len(names) == 1 else None)
    grouped_rounds = _rounds_from(all_rounds, default_def)
    notices: list[str] = []
    if not default_def and any(not r.get("definition") for r in all_rounds):
        notices.append("controller rounds without a definition were left out (the report covers several "
                       "definitions: give each round a 'definition')")
    modified = sorted(c.submission_id for cands in by_definition.values() for c in cands if c.modified)
    if modified:
        notices.append(f"{MODIFIED_WARNING}: submission{'s' if len(modified) > 1 else ''} "
                       f"{', '.join(map(str, modified))} (rows that no longer match the harness's seal; "
                       "never ranked as leaders)")
    reduced = sorted(c.submission_id for cands in by_definition.values() for c in cands
                     if c.sandbox.startswith("reduced"))
    if reduced:
        notices.append(f"sandbox: reduced for submission{'s' if len(reduced) > 1 else ''} "
                       f"{', '.join(map(str, reduced))} (the candidate ran without the full sandbox)")
    if definition and not by_definition:
        notices.append(f"the archive has no submissions for definition {definition}")
    sections = []
    for name in names:
        cands = by_definition[name]
        board = leaderboard(cands)
        section = DefinitionSection(name=name, leaderboard=board, submissions=cands, workloads=[],
                                    roofline=None, runs=grouped_rounds.get(name, {}))
        best = section.best
        order: dict[str, str] = {}
        for c in sorted(cands, key=lambda c: (c is not (best or board[0]), c.submission_id)):
            for w in c.workloads:
                order.setdefault(w.uuid, w.label)
        section.workloads = list(order.items())
        if best is None:
            section.notices.append(f"no promotable solution ({len(board)} not promotable, reasons in their table): "
                                   "no per-workload table, FlashInfer rows or plots")
        if best is not None and any(w.status == EvaluationStatus.PASSED and w.timed_ms for w in best.workloads):
            env = {}
            sub_env = next((s.get("environment_id") for s in subs if s["id"] == best.submission_id), None)
            if sub_env and sub_env in envs:
                env = _loads(envs[sub_env]["data"])
            ceil = ceilings or load_ceilings(archive.folder, str(env.get("device_name", "")), str(env.get("uuid", "")))
            costs = dataset_costs(dataset, name) if dataset is not None else {}
            section.roofline = build_roofline(best, costs, ceil)
        elif not any(w.latency_ms for c in cands for w in c.workloads):
            section.notices.append("no timed results: evaluated without a GPU (correctness only)")
        elif best is not None:
            section.notices.append("the leading solution has no timed workload")
        if best is not None and any(w.status == EvaluationStatus.PASSED for w in best.workloads) and not any(
                w.fi_official_ms for w in best.workloads):
            section.notices.append("no FlashInfer baselines recorded for the leading solution")
        sections.append(section)
    hardware = sorted({h for c in (c for s in sections for c in s.submissions) for h in [c.hardware] if h})
    generated = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return ReportData(archive=str(archive.folder), generated_at=generated, sections=sections, hardware=hardware,
                      notices=notices)
