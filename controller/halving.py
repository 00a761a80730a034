"""Successive halving of a round's candidates on short timing runs: the decisions, as pure functions.

A round may propose more candidates than it evaluates in full (``HalvingSettings.proposals``). Rung 0 screens
every candidate with a cheap run on the round's planned regime (one correctness trial, a short timing run, audits
off); the best ``ceil(n / eta)`` by screened latency survive and are timed again with a run ``eta`` times longer,
and so on until ``finalists`` remain. Only finalists get the full evaluation and the promotion decision (whose
full audits are unchanged). A candidate that fails its screen never survives, whatever the count.

Here: given one rung's screened results, which survive and why each other was cut (``decide_rung``), and the
line the trajectory shows (``screening_line``: "screened 6 -> 3 -> 1"). The runs themselves are
controller/screening.py's; the settings controller/search.py's ``HalvingSettings``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from harness.data.statuses import EvaluationStatus

PASSED = EvaluationStatus.PASSED.value
HALVING_RULE = "halving"  # the rule of a screened-out candidate's archived decision
SCREENED_OUT = "SCREENED_OUT"  # its verdict (and its status where it passed but was slower)


@dataclass(frozen=True)
class Screened:
    """One candidate's screening run: the harness's status and its latency per workload (the planned regime's)."""

    name: str
    status: str
    latency_ms: dict[str, Optional[float]] = field(default_factory=dict)
    message: str = ""
    submission_id: Optional[int] = None

    @property
    def score(self) -> Optional[float]:
        """Geometric mean latency over the screened workloads; None unless it passed and every workload was timed."""
        values = list(self.latency_ms.values())
        if self.status != PASSED or not values or any(v is None or v <= 0 for v in values):
            return None
        return math.exp(sum(math.log(v) for v in values) / len(values))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Rung:
    """One rung's decision: who entered, who survived (fastest first), and why each other one was cut."""

    rung: int
    iterations: int
    entered: tuple[str, ...]
    kept: tuple[str, ...]
    cut: dict[str, str]  # name -> why it was cut
    scores: dict[str, Optional[float]]  # name -> screened latency (ms), None where it failed or was untimed
    depth: int = 0  # the batch it halves: 0 the explore request's candidates, d > 0 the repairs of depth d

    def to_json(self) -> dict[str, Any]:
        return {"rung": self.rung, "depth": self.depth, "iterations": self.iterations, "entered": list(self.entered),
                "kept": list(self.kept), "cut": dict(self.cut), "scores": dict(self.scores)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Rung":
        return cls(int(data["rung"]), int(data.get("iterations") or 0), tuple(data.get("entered") or ()),
                   tuple(data.get("kept") or ()), dict(data.get("cut") or {}), dict(data.get("scores") or {}),
                   int(data.get("depth") or 0))


def keep_count(n: int, eta: int, finalists: int) -> int:
    """How many of ``n`` candidates a rung keeps: ``ceil(n / eta)``, never fewer than ``finalists`` nor more
    than ``n``."""
    return max(0, min(n, max(finalists, math.ceil(n / eta))))


def needs_screening(n: int, finalists: int) -> bool:
    """Whether ``n`` candidates are more than the full evaluation takes (one candidate never is screened)."""
    return n > max(finalists, 1)


def failure_reason(result: Screened) -> str:
    if result.status != PASSED:
        why = " ".join(result.message.split())[:160]
        return f"failed the screen: {result.status}" + (f" ({why})" if why else "")
    return "passed the screen but was not timed on every workload"


def decide_rung(results: Sequence[Screened], eta: int, finalists: int, rung: int = 0,
                iterations: int = 0, depth: int = 0) -> Rung:
    """Keep the fastest ``keep_count(len(results), eta, finalists)`` that passed; ties keep the earlier proposal
    (the order of ``results``). A failed or untimed candidate is cut whatever the count, so fewer than the count
    may survive, none where all failed."""
    timed = [r for r in results if r.score is not None]
    ranked = sorted(timed, key=lambda r: r.score)  # type: ignore[arg-type,return-value]  # stable: ties in order
    kept = ranked[:keep_count(len(results), eta, finalists)]
    kept_names = {r.name for r in kept}
    best = ranked[0].score if ranked else None
    last = kept[-1].score if kept else None
    cut: dict[str, str] = {}
    for r in results:
        if r.name in kept_names:
            continue
        if r.score is None:
            cut[r.name] = failure_reason(r)
        elif r.score == last:
            cut[r.name] = f"tied with the last survivor ({r.score:.4g} ms); the earlier proposal kept"
        else:
            cut[r.name] = (f"{100 * (r.score / best - 1):.1f}% slower than the best "  # type: ignore[operator]
                           f"({r.score:.4g} ms vs {best:.4g} ms); kept {len(kept)} of {len(results)}")
    return Rung(rung, iterations, tuple(r.name for r in results), tuple(r.name for r in kept), cut,
                {r.name: r.score for r in results}, depth)


def budget_cut(before: Rung, finalists: int, rung: int, why: str, depth: int = 0) -> Rung:
    """Halving stopped by the wall budget before rung ``rung``: the fastest ``finalists`` of the rung ``before``
    (its survivors, fastest first) go on to the full evaluation, each other survivor is cut with ``why``. The
    record has no iterations: no screen ran in it."""
    kept = before.kept[:max(finalists, 1)]
    cut = {name: f"{why}; the fastest {len(kept)} of rung {before.rung} go on"
           for name in before.kept if name not in kept}
    return Rung(rung, 0, before.kept, kept, cut, {name: before.scores.get(name) for name in before.kept}, depth)


def rungs_of(records: Sequence[dict[str, Any]]) -> list[Rung]:
    """The distinct rungs in archived rung records (each cut candidate's decision carries its rung's record),
    ordered by depth, then rung."""
    found: dict[tuple[int, int], Rung] = {}
    for record in records:
        rung = Rung.from_json(record)
        found.setdefault((rung.depth, rung.rung), rung)
    return [found[k] for k in sorted(found)]


def screening_line(rungs: Sequence[Rung]) -> str:
    """``screened 6 -> 3 -> 1``: how many entered each rung, then how many were left for the full evaluation;
    a repair depth's rungs follow as ``repairs (depth 1) screened 3 -> 1``."""
    parts = []
    for depth in sorted({r.depth for r in rungs}):
        ordered = sorted((r for r in rungs if r.depth == depth), key=lambda r: r.rung)
        counts = [len(r.entered) for r in ordered] + [len(ordered[-1].kept)]
        parts.append(("screened " if depth == 0 else f"repairs (depth {depth}) screened ")
                     + " -> ".join(str(c) for c in counts))
    return "; ".join(parts)
