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
    def unreadable_sources(self) -> list[str]:
        """Why a side's sources could not be read ("A (submission 1): solution blob ...: No such file ..."); empty
        when both were. Then nothing is said about how the sources compare."""
        return [f"{side} (submission {c.submission_id}): {c.sources_unreadable}"
                for side, c in (("A", self.a), ("B", self.b)) if c.sources_unreadable]

    @property
    def same_source(self) -> Optional[bool]:
        """Whether the sources are the same; None where either side's cannot be read (unknown, not identical)."""
        if self.unreadable_sources:
            return None
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
                "unreadable_sources": self.unreadable_sources,
                "geomean_speedup_b_over_a": self.geomean_speedup,
                "files": [{"path": f.path, "change": f.change, "added": f.added, "removed": f.removed,
                           "diff": "\n".join(f.lines)} for f in self.files],
                "workloads": [{"workload": w.label, "uuid": w.uuid, "a_status": w.a_status, "b_status": w.b_status,
                               "a_latency_ms": w.a_ms, "b_latency_ms": w.b_ms, "speedup_b_over_a": w.speedup,
                               "latency_change": w.change} for w in self.workloads]}


HASH_PREFIX_MIN = 6  # hex characters a solution hash prefix needs to be looked up as one


def resolve_submission(archive: Any, ref: str, definition: Optional[str] = None) -> int:
    """The submission ``ref`` names: a submission id, a whole solution hash, a solution name (its latest
    submission) or a solution hash prefix (>= 6 hex characters); see ``pick_submission`` for which wins."""
    ref = str(ref).strip()
    db = archive.db
    # An id: ASCII digits within SQLite's integers ("²" passes str.isdigit and fails int(); a longer run of
    # digits, a hash prefix of only decimal digits among them, overflowed the query).
    as_id = re.fullmatch(r"[0-9]{1,18}", ref) is not None
    by_id = int(ref) if as_id and q.submission_exists(db, int(ref), definition) else None
    named = q.submissions_named(db, ref, definition)
    prefixed = (q.submissions_with_hash_prefix(db, ref.lower(), definition)
                if len(ref) >= HASH_PREFIX_MIN and re.fullmatch(r"[0-9a-fA-F]+", ref) else [])
    if definition and by_id is None and not named and not prefixed:
        _refuse_definition(archive, ref, definition)
    return pick_submission(ref, by_id, named, prefixed, str(archive.folder))


def _refuse_definition(archive: Any, ref: str, definition: str) -> None:
    """Where ``ref`` names nothing of ``definition``, an error that says whether the definition is the cause (the
    archive holds none of it, or ``ref`` names a submission of another one) rather than blame ``ref``. Returns
    where ``ref`` names nothing in any definition: the caller's "no submission" error is then the right one."""
    from ..archive.database import ArchiveError

    db = archive.db
    if not q.definition_submitted(db, definition):
        held = q.submitted_definitions(db)
        raise ArchiveError(f"no submission of definition {definition!r} in {archive.folder} (it holds "
                           + (", ".join(held) if held else "no submissions") + ")")
    if re.fullmatch(r"[0-9]{1,18}", ref) and q.submission_exists(db, int(ref)):
        row = q.submission_row(db, int(ref)) or {}
        raise ArchiveError(f"submission {ref} is of definition {row.get('definition', '?')}, not {definition}")
    named = q.submissions_named(db, ref)
    prefixed = (q.submissions_with_hash_prefix(db, ref.lower())
                if len(ref) >= HASH_PREFIX_MIN and re.fullmatch(r"[0-9a-fA-F]+", ref) else [])
    found = {str((q.submission_row(db, int(sub_id)) or {}).get("definition", "?"))
             for sub_id in [r[0] for r in named] + [r[0] for r in prefixed]}
    if found:
        raise ArchiveError(f"{ref!r} names no submission of definition {definition}, only of "
                           f"{', '.join(sorted(found))}")


def pick_submission(ref: str, by_id: Optional[int], named: list[tuple[int, str, str]],
                    prefixed: list[tuple[int, str, str]], where: str = "the archive") -> int:
    """Which submission ``ref`` means, from what it matched: ``by_id`` (a submission of that id), ``named``
    ((id, definition, solution hash) of the submissions of a solution so named) and ``prefixed`` ((id, solution
    hash, solution name) of those whose solution hash starts with it), each newest first.

    An exact identifier wins: a submission id, then a whole solution hash (its latest submission). A name and a
    hash prefix are both partial: where they point to different solutions, ``ref`` is ambiguous and an error
    lists the candidates (a solution named like another one's hash prefix never takes the lookup silently)."""
    from ..archive.database import ArchiveError

    if by_id is not None:
        return by_id
    exact = [row for row in prefixed if row[1] == ref.lower()]
    if exact:
        return int(exact[0][0])
    name_hashes = {h for _, _, h in named}
    others: dict[str, tuple[int, str]] = {}  # solution hash -> (newest submission, name), for the prefix
    for sub_id, h, name in prefixed:
        others.setdefault(h, (int(sub_id), name))
    if named and set(others) - name_hashes:
        candidates = [f"solution named {ref!r} (submission {named[0][0]}, hash {named[0][2][:12]})"]
        candidates += [f"hash prefix of {name!r} (submission {sub_id}, hash {h[:12]})"
                       for h, (sub_id, name) in others.items() if h not in name_hashes]
        raise ArchiveError(f"{ref!r} is ambiguous: {'; '.join(candidates)}; give a submission id or a longer hash")
    if named:
        defs = {d for _, d, _ in named}
        if len(defs) > 1:
            raise ArchiveError(f"solution {ref!r} was submitted for {len(defs)} definitions "
                               f"({', '.join(sorted(defs))}): pass --definition or a submission id")
        return int(named[0][0])
    if len(others) > 1:
        listed = "; ".join(f"{name!r} (submission {sub_id}, hash {h[:12]})" for h, (sub_id, name) in others.items())
        raise ArchiveError(f"hash prefix {ref!r} matches {len(others)} solutions: {listed}; give more characters")
    if others:
        return next(iter(others.values()))[0]
    raise ArchiveError(f"no submission, solution name or solution hash {ref!r} in {where}")


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
    files = [] if a.sources_unreadable or b.sources_unreadable else source_diff(  # no diff against nothing
        a.sources, b.sources, f"{a.solution_name}#{a.submission_id}", f"{b.solution_name}#{b.submission_id}", context)
    a_rows = {w.uuid: w for w in a.workloads}
    b_rows = {w.uuid: w for w in b.workloads}
    deltas = []
    for uuid in [*a_rows, *(u for u in b_rows if u not in a_rows)]:
        wa, wb = a_rows.get(uuid), b_rows.get(uuid)
        deltas.append(WorkloadDelta(uuid, (wa or wb).label, wa.status if wa else None, wb.status if wb else None,
                                    wa.latency_ms if wa and wa.status == EvaluationStatus.PASSED else None,
                                    wb.latency_ms if wb and wb.status == EvaluationStatus.PASSED else None))
    return SubmissionDiff(a, b, files, deltas)
