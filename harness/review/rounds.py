"""Controller rounds for the trajectory: from the controller's archive tables, or from a JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Iterable, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..archive import queries as q
from ..data.schema import SchemaError
from ..data.statuses import EvaluationStatus
from .candidates import _num, _time_ms
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
                  best_latency_ms=_time_ms(item.get("best_latency_ms")), spend_usd=_num(item.get("spend_usd")),
                  cumulative_spend_usd=_num(item.get("cumulative_spend_usd")),
                  candidates=int(item["candidates"]) if item.get("candidates") is not None else None,
                  best_solution=str(item.get("best_solution") or ""), note=str(item.get("note") or ""),
                  metric=str(item.get("metric") or ""),
                  passed=int(item["passed"]) if item.get("passed") is not None else None,
                  promoted=int(item["promoted"]) if item.get("promoted") is not None else None,
                  incumbent=str(item.get("incumbent") or ""),
                  incumbent_latency_ms=_time_ms(item.get("incumbent_latency_ms")),
                  incumbent_fraction_of_floor=_num(item.get("incumbent_fraction_of_floor")),
                  incumbent_speedup_vs_fi=_num(item.get("incumbent_speedup_vs_fi")),
                  incumbent_regimes={str(k): _time_ms(v) for k, v in (item.get("incumbent_regimes") or {}).items()},
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


Count = Annotated[int, Field(ge=0)]
Ms = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # a time: finite, above zero
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class RoundsFileEntry(BaseModel):
    """One round of a ``harness report --rounds`` file: the fields ``rounds_from_archive`` gives for the
    controller's own runs. Numbers are JSON numbers (no "12" for 12, no true for 1), every field but ``round`` may
    be left out or null, and other keys (a `controller trajectory` round summary's kind, tokens or decision, say)
    are not read."""

    model_config = ConfigDict(strict=True, extra="ignore")

    round: Count  # the round's number within its run (0: the starting incumbent)
    run: Optional[Union[str, int]] = None  # the run it belongs to ("run" when neither this nor run_id is given)
    run_id: Optional[Union[str, int]] = None
    definition: Optional[str] = None  # else the report's --definition, or the archive's only one
    best_latency_ms: Optional[Ms] = None  # the round's best mean latency over the workloads
    best_solution: Optional[str] = None
    metric: Optional[str] = None  # what best_latency_ms is a mean of, e.g. "mean over 14 workloads"
    spend_usd: Optional[Amount] = None  # the providers' cost in this round
    cumulative_spend_usd: Optional[Amount] = None  # the run's cost to the end of this round (else summed)
    candidates: Optional[Count] = None  # made in this round
    passed: Optional[Count] = None
    promoted: Optional[Count] = None
    note: Optional[str] = None
    incumbent: Optional[Union[str, dict[str, Any]]] = None  # its name, or a round summary's incumbent block
    incumbent_latency_ms: Optional[Ms] = None
    incumbent_fraction_of_floor: Optional[Amount] = None
    incumbent_speedup_vs_fi: Optional[Amount] = None
    incumbent_regimes: Optional[dict[str, Optional[Ms]]] = None  # regime -> its mean latency
    mode: Optional[str] = None  # "assisted" or "full agent"
    provider: Optional[str] = None


_ENTRIES = TypeAdapter(list[RoundsFileEntry])


def _entry_dict(entry: RoundsFileEntry) -> dict[str, Any]:
    item = entry.model_dump(exclude_none=True)
    for key in ("run", "run_id"):
        if key in item:
            item[key] = str(item[key])
    if isinstance(item.get("incumbent"), dict):  # a `controller trajectory` summary: flattened as the archive's are
        item.update({k: v for k, v in _incumbent_standing({"incumbent": item["incumbent"]}).items()
                     if k not in item or k == "incumbent"})
    return item


def load_rounds_file(path: Union[str, Path]) -> list[dict[str, Any]]:
    """A JSON file of rounds: a list of objects, or {"rounds": [...]} (as `controller trajectory` writes), each a
    ``RoundsFileEntry``. Read as every JSON file is (a FIFO, a device or a file past the limit is refused unread).
    SchemaError (a ValueError) on one line naming the file, the round and the field otherwise: a round of the wrong
    shape is never left out unsaid, nor shown with a figure it does not have."""
    from ..data.schema import load_json

    data = load_json(path)
    where = ""
    if isinstance(data, dict):
        if not isinstance(data.get("rounds"), list):
            keys = ", ".join(sorted(map(str, data))[:8]) or "none"
            raise SchemaError(f"{path}: expected a list of round objects, or an object whose \"rounds\" is one "
                              f"(this object's keys: {keys})")
        data, where = data["rounds"], "rounds"
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise SchemaError(f"{path}: expected a list of round objects (or {{\"rounds\": [...]}})")
    try:
        entries = _ENTRIES.validate_python(data)
    except ValidationError as err:
        raise SchemaError(f"{path}: " + "; ".join(_field_error(where, e) for e in err.errors()[:3])) from None
    return [_entry_dict(e) for e in entries]


def _field_error(where: str, error: Any) -> str:
    index, *fields = error["loc"]
    got = "" if error["type"] == "missing" else f" (got {json.dumps(error['input'], default=str)[:40]})"
    return f"{where}[{index}].{'.'.join(map(str, fields))}: {error['msg']}{got}"
