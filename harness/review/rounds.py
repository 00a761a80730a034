"""Controller rounds for the trajectory: from the controller's archive tables, or from a JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from ..archive import queries as q
from ..data.statuses import EvaluationStatus
from .candidates import _num
from .model import Round


def _rounds_from(items: Iterable[dict[str, Any]],
                 default_definition: Optional[str]) -> dict[str, dict[str, list[Round]]]:
    """definition -> run -> rounds (sorted), with cumulative spend filled in."""
    out: dict[str, dict[str, list[Round]]] = {}
    for item in items:
        definition = item.get("definition") or default_definition
        if not definition or item.get("round") is None:
            continue
        r = Round(run=str(item.get("run") or item.get("run_id") or "run"), round=int(item["round"]),
                  best_latency_ms=_num(item.get("best_latency_ms")), spend_usd=_num(item.get("spend_usd")),
                  cumulative_spend_usd=_num(item.get("cumulative_spend_usd")),
                  candidates=int(item["candidates"]) if item.get("candidates") is not None else None,
                  best_solution=str(item.get("best_solution") or ""), note=str(item.get("note") or ""),
                  metric=str(item.get("metric") or ""),
                  passed=int(item["passed"]) if item.get("passed") is not None else None,
                  promoted=int(item["promoted"]) if item.get("promoted") is not None else None,
                  incumbent=str(item.get("incumbent") or ""),
                  incumbent_latency_ms=_num(item.get("incumbent_latency_ms")),
                  incumbent_fraction_of_floor=_num(item.get("incumbent_fraction_of_floor")),
                  incumbent_speedup_vs_fi=_num(item.get("incumbent_speedup_vs_fi")),
                  incumbent_regimes={str(k): _num(v) for k, v in (item.get("incumbent_regimes") or {}).items()},
                  mode=str(item.get("mode") or ""), provider=str(item.get("provider") or ""))
        out.setdefault(definition, {}).setdefault(r.run, []).append(r)
    for runs in out.values():
        for rs in runs.values():
            rs.sort(key=lambda r: r.round)
            total = 0.0
            for r in rs:
                if r.cumulative_spend_usd is None:
                    total += r.spend_usd or 0.0
                    r.cumulative_spend_usd = total if any(x.spend_usd is not None for x in rs) else None
                else:
                    total = r.cumulative_spend_usd
    return out


CONTROLLER_TABLES = ("runs", "rounds", "requests", "responses", "candidates", "decisions")


def rounds_from_archive(db: Any) -> list[dict[str, Any]]:
    """The controller's trajectory from its tables (m003_controller): per run and round, the best mean
    latency of the round's PASSED candidates, how many it made, passed and promoted, and the providers'
    cost. [] where the archive has no controller tables."""
    if not set(CONTROLLER_TABLES) <= set(db.table_names()):
        return []
    means = q.passed_latency_means(db)
    out: list[dict[str, Any]] = []
    for run in q.run_summaries(db):
        mode = run_mode(run.get("config"))
        round_rows = q.round_kinds(db, run["id"])
        kinds = {r["round"]: r["kind"] for r in round_rows}
        standings = {r["round"]: _incumbent_standing(r.get("summary")) for r in round_rows}
        cands = q.candidate_rows_with_submission_status(db, run["id"])
        cost = q.response_cost_by_round(db, run["id"])
        promoted = q.promotions_by_round(db, run["id"])
        numbers = sorted({*kinds, *(c["round"] for c in cands if c["round"] is not None)})
        for n in numbers:
            mine = [c for c in cands if c["round"] == n]
            passed = [c for c in mine
                      if c["submission_status"] == EvaluationStatus.PASSED and c["submission_id"] in means]
            best = min(passed, key=lambda c: means[c["submission_id"]][0]) if passed else None
            workloads = means[best["submission_id"]][1] if best else None
            out.append({"definition": run["definition"], "run": run["id"], "round": n,
                        "best_latency_ms": means[best["submission_id"]][0] if best else None,
                        "best_solution": best["solution_name"] if best else "", "spend_usd": cost.get(n),
                        "candidates": len(mine), "passed": len(passed), "promoted": promoted.get(n, 0),
                        "note": "incumbent" if n == 0 else kinds.get(n, ""),
                        "metric": f"mean over {workloads} workloads" if workloads else "mean over workloads",
                        "mode": mode, "provider": run.get("provider") or "",
                        **standings.get(n, {})})
    return out


def run_mode(config: Any) -> str:
    """"assisted" when the run's stored config carries a person's hint (controller loop --hint), else "full agent"."""
    try:
        data = json.loads(config) if isinstance(config, str) else (config or {})
    except json.JSONDecodeError:
        return "full agent"
    return "assisted" if isinstance(data, dict) and str(data.get("hint") or "").strip() else "full agent"


def _incumbent_standing(summary: Any) -> dict[str, Any]:
    """The ``incumbent`` block of an archived round summary, flattened for ``Round``; {} where absent."""
    try:
        data = json.loads(summary) if isinstance(summary, str) else (summary or {})
    except json.JSONDecodeError:
        return {}
    inc = data.get("incumbent") if isinstance(data, dict) else None
    if not isinstance(inc, dict):
        return {}
    regimes = inc.get("regimes") if isinstance(inc.get("regimes"), dict) else {}
    return {"incumbent": str(inc.get("name") or ""), "incumbent_latency_ms": inc.get("latency_ms"),
            "incumbent_fraction_of_floor": inc.get("fraction_of_floor"),
            "incumbent_speedup_vs_fi": inc.get("speedup_vs_fi"),
            "incumbent_regimes": {k: (v or {}).get("latency_ms") for k, v in regimes.items()}}


def load_rounds_file(path: Union[str, Path]) -> list[dict[str, Any]]:
    """A JSON file of rounds: a list of objects, or {"rounds": [...]}. Read as every JSON file is (a FIFO, a device
    or a file past the limit is refused unread): SchemaError, a ValueError, on one line."""
    from ..data.schema import load_json

    data = load_json(path)
    if isinstance(data, dict):
        data = data.get("rounds", [])
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: expected a list of round objects (or {{\"rounds\": [...]}})")
    return data
