"""Two submissions compared, for ``harness diff``: their sources (unified diff) and per-workload latency."""

from __future__ import annotations

import difflib
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..archive import queries as q
from ..data.statuses import EvaluationStatus
from .candidates import load_candidate
from .model import Candidate


@dataclass
class FileDiff:
    path: str
    change: str  # added | removed | changed | unchanged
    lines: list[str]  # unified diff lines (no trailing newlines)

    @property
    def added(self) -> int:
        return sum(1 for l in self.lines if l.startswith("+") and not l.startswith("+++"))

    @property
    def removed(self) -> int:
        return sum(1 for l in self.lines if l.startswith("-") and not l.startswith("---"))


@dataclass
class WorkloadDelta:
    uuid: str
    label: str
    a_status: Optional[str]
    b_status: Optional[str]
    a_ms: Optional[float]
    b_ms: Optional[float]

    @property
    def speedup(self) -> Optional[float]:
        """A's latency / B's: above 1 means B is faster."""
        return self.a_ms / self.b_ms if self.a_ms and self.b_ms else None

    @property
    def change(self) -> Optional[float]:
        """B's latency relative to A's: -0.25 is 25% less time."""
        return self.b_ms / self.a_ms - 1 if self.a_ms and self.b_ms else None


@dataclass
class SubmissionDiff:
    a: Candidate
    b: Candidate
    files: list[FileDiff]
    workloads: list[WorkloadDelta]

    @property
    def same_source(self) -> bool:
        return all(f.change == "unchanged" for f in self.files)

    @property
    def geomean_speedup(self) -> Optional[float]:
        values = [w.speedup for w in self.workloads if w.speedup]
        return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None

    def to_json(self) -> dict[str, Any]:
        def side(c: Any) -> dict[str, Any]:
            return {"submission_id": c.submission_id, "solution": c.solution_name, "hash": c.solution_hash,
                    "definition": c.definition, "status": c.status, "scores": c.scores}

        return {"a": side(self.a), "b": side(self.b), "same_source": self.same_source,
                "geomean_speedup_b_over_a": self.geomean_speedup,
                "files": [{"path": f.path, "change": f.change, "added": f.added, "removed": f.removed,
                           "diff": "\n".join(f.lines)} for f in self.files],
                "workloads": [{"workload": w.label, "uuid": w.uuid, "a_status": w.a_status, "b_status": w.b_status,
                               "a_latency_ms": w.a_ms, "b_latency_ms": w.b_ms, "speedup_b_over_a": w.speedup,
                               "latency_change": w.change} for w in self.workloads]}


def resolve_submission(archive: Any, ref: str, definition: Optional[str] = None) -> int:
    """A submission id, a solution name (its latest submission) or a solution hash prefix (>= 6 chars)."""
    from ..archive.database import ArchiveError

    ref = str(ref).strip()
    db = archive.db
    if ref.isdigit():
        if q.submission_exists(db, int(ref), definition):
            return int(ref)
    rows = q.submissions_named(db, ref, definition)
    if rows:
        defs = {d for _, d in rows}
        if len(defs) > 1:
            raise ArchiveError(f"solution {ref!r} was submitted for {len(defs)} definitions "
                               f"({', '.join(sorted(defs))}): pass --definition or a submission id")
        return int(rows[0][0])
    if len(ref) >= 6 and re.fullmatch(r"[0-9a-fA-F]+", ref):
        rows = q.submissions_with_hash_prefix(db, ref.lower(), definition)
        hashes = {h for _, h in rows}
        if len(hashes) > 1:
            raise ArchiveError(f"hash prefix {ref!r} matches {len(hashes)} solutions: give more characters")
        if rows:
            return int(rows[0][0])
    raise ArchiveError(f"no submission, solution name or solution hash {ref!r} in {archive.folder}")


def source_diff(a_sources: list[dict[str, str]], b_sources: list[dict[str, str]], a_name: str = "a",
                b_name: str = "b", context: int = 3) -> list[FileDiff]:
    a = {s["path"]: s["content"] for s in a_sources}
    b = {s["path"]: s["content"] for s in b_sources}
    out = []
    for path in [*a, *(p for p in b if p not in a)]:
        old, new = a.get(path), b.get(path)
        change = "added" if old is None else "removed" if new is None else "unchanged" if old == new else "changed"
        lines = [] if change == "unchanged" else [
            l.rstrip("\n") for l in difflib.unified_diff((old or "").splitlines(True), (new or "").splitlines(True),
                                                         f"{a_name}/{path}", f"{b_name}/{path}", n=context)]
        out.append(FileDiff(path, change, lines))
    return out


def diff_submissions(archive: Any, a_ref: Union[str, int], b_ref: Union[str, int],
                     definition: Optional[str] = None, context: int = 3) -> SubmissionDiff:
    a = load_candidate(archive, resolve_submission(archive, str(a_ref), definition))
    b = load_candidate(archive, resolve_submission(archive, str(b_ref), definition))
    files = source_diff(a.sources, b.sources, f"{a.solution_name}#{a.submission_id}",
                        f"{b.solution_name}#{b.submission_id}", context)
    a_rows = {w.uuid: w for w in a.workloads}
    b_rows = {w.uuid: w for w in b.workloads}
    deltas = []
    for uuid in [*a_rows, *(u for u in b_rows if u not in a_rows)]:
        wa, wb = a_rows.get(uuid), b_rows.get(uuid)
        deltas.append(WorkloadDelta(uuid, (wa or wb).label, wa.status if wa else None, wb.status if wb else None,
                                    wa.latency_ms if wa and wa.status == EvaluationStatus.PASSED else None,
                                    wb.latency_ms if wb and wb.status == EvaluationStatus.PASSED else None))
    return SubmissionDiff(a, b, files, deltas)
