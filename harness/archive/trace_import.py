"""FlashInfer-Bench trace set -> archive (`harness import`); the other direction is harness/archive/export.py.

What is read is checked twice. A file that is no solution or trace (bad JSON, a field of the wrong type) stops the
import before anything is written: the trace set is broken and its author must say what was meant. A well-formed
item the archive cannot use is refused alone, with a notice naming its file (and line) and why, and the rest is
imported: a solution or trace of a definition the dataset does not have, a trace of a workload neither the
dataset nor the trace set's own workloads/ declares, or whose axes are not those of that workload, and a timing
that is no measurement (an infinite, zero or negative latency). Such rows made every later `harness export` of
the archive fail and `harness report` crash (red team round 12, V6). Nothing left to import after the refusals is
an error, never "imported 0".
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..data.dataset import Dataset
from ..data.schema import Definition, SchemaError, Solution, Trace, Workload, dump_json, load_jsonl, load_model, \
    read_text
from ..data.statuses import EvaluationStatus
from .database import Archive

IMPORTED_BLOCKER = ("imported from a trace set: judged elsewhere, never by this harness (no static gate, audits or "
                    "timing here); submit the solution to judge it")


@dataclass
class ImportReport:
    solutions: int = 0  # solutions new to the archive
    traces: int = 0  # traces new to the archive
    solutions_present: int = 0  # solutions of the trace set the archive already held
    traces_present: int = 0  # traces it already held (an earlier import of the same content), or repeated in it
    notices: list[str] = field(default_factory=list)  # one line per refused solution or trace: where, and why

    @property
    def nothing_new(self) -> bool:
        return not (self.solutions or self.traces)


def import_digest(solution_hash: str, trace: dict) -> str:
    """The identity of an imported trace: SHA-256 of the content hash of the solution it names (its code, not its
    name, which two trace sets may give to different code) and of the trace itself (definition, workload,
    evaluation: status, errors, latency, log, environment, timestamp) as canonical JSON. The same trace imported
    again, from the same folder or a copy, has the same digest and adds nothing; a re-run of the solution (another
    timestamp or figure) is a trace of its own."""
    canonical = json.dumps({"solution": solution_hash, "trace": trace}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _imported_digests(archive: Archive) -> set[str]:
    """The digests of the traces earlier imports put in the archive, computed from the rows themselves."""
    rows = archive.db.execute("select s.solution_hash, e.trace from evaluations e join submissions s "
                              "on s.id = e.submission_id where e.timing_note = 'imported' and e.trace is not null")
    return {import_digest(h, json.loads(t)) for h, t in rows.fetchall()}


def _numbered(path: Path) -> list[tuple[int, Trace]]:
    """The traces of a JSONL file with the line each is on, for notices that point at it."""
    traces = load_jsonl(Trace, path)  # every line checked (and the file bounded) as every JSON file is
    numbers = [n for n, line in enumerate(read_text(path).splitlines(), 1) if line.strip()]
    return list(zip(numbers, traces))


def _declared_workloads(root: Path) -> dict[tuple[str, str], Workload]:
    """(definition, uuid) -> workload, from the trace set's own workloads/ (an export of another archive writes its
    workloads there, the official trace sets too): a trace of such a workload knows where it comes from."""
    return {(t.definition, t.workload.uuid): t.workload
            for path in sorted((root / "workloads").rglob("*.jsonl")) for t in load_jsonl(Trace, path)}


def unknown_definition(name: str, dataset: Dataset) -> str:
    return f"definition {name!r} is not in the dataset {dataset.root} (export and report read definitions there)"


def workload_refusal(definition: Definition, workload: Workload, known: Optional[Workload]) -> Optional[str]:
    """Why a trace's workload is no workload of ``definition``, or None: an export draws its inputs from these axes
    ("var axes ... have no value" for every later export otherwise)."""
    if known is None:
        return (f"workload {workload.uuid} is not a workload of {definition.name} (neither the dataset nor the "
                "trace set's workloads/ has it)")
    missing = [a for a in definition.var_axes if a not in workload.axes]
    unknown = [a for a in workload.axes if a not in definition.axes]
    if missing or unknown:
        what = "; ".join(part for part in (f"no value for {missing}" if missing else "",
                                           f"axes {unknown} it does not have" if unknown else "") if part)
        return f"workload {workload.uuid}: its axes do not match {definition.name} ({what})"
    if workload.axes != known.axes:
        return f"workload {workload.uuid}: axes {workload.axes} are not the workload's own {known.axes}"
    return None


def timing_refusal(trace: Trace) -> Optional[str]:
    """Why a trace's timing is no measurement, or None: a latency must be a finite number of ms above zero (an
    infinite one is written as a token JSON has not got, and a report's log scale cannot place zero or less)."""
    perf = trace.evaluation.performance if trace.evaluation is not None else None
    if perf is None:
        return None
    if not (math.isfinite(perf.latency_ms) and perf.latency_ms > 0):
        return f"latency_ms {perf.latency_ms} is not a time (a finite number of ms above 0)"
    for name in ("reference_latency_ms", "speedup_factor"):
        if not math.isfinite(getattr(perf, name)):
            return f"{name} {getattr(perf, name)} is not a finite number"
    return None


def import_trace_set(archive: Archive, root: Path, dataset: Optional[Dataset] = None) -> ImportReport:
    """Read a FlashInfer-Bench trace set's solutions and traces into the archive: everything is read and checked
    first, then written in one transaction. A malformed file stops it with nothing written (SchemaError); a
    well-formed item the archive cannot use is left out with a line in ``ImportReport.notices`` (see the module's
    doc), and SchemaError where nothing else is left. ``dataset``: the definitions and workloads the items are
    checked against (the default dataset where None, as `harness export` and `report` read it).

    A solution is known by its content hash, a trace by ``import_digest``: what the archive already holds is
    counted, never added twice, so importing the same trace set again adds nothing (``ImportReport.nothing_new``)."""
    if not Path(root).is_dir():  # /dev/null, a FIFO: no trace set, never "nothing new"
        raise SchemaError(f"{root}: not a folder (a trace set is a folder of definitions, solutions and traces)")
    report = ImportReport()
    solution_files = sorted((root / "solutions").rglob("*.json"))
    trace_files = sorted((root / "traces").rglob("*.jsonl"))
    if not solution_files and not trace_files:
        return report
    dataset = dataset if dataset is not None else Dataset()
    # A trace names its solution by name within its definition: two definitions' solutions may share a name (the
    # export of an archive holds such pairs), and one name of one definition may be given to two files of other
    # code, which a trace then cannot tell apart. Every solution file is imported; a trace is read against its
    # own definition's solutions only, and one naming an ambiguous name is refused.
    solutions: dict[tuple[str, str], Solution] = {}
    every: dict[str, Solution] = {}  # content hash -> the first file of that code
    files: dict[tuple[str, str], dict[str, Path]] = {}  # (definition, name) -> content hash -> its first file
    for path in solution_files:
        sol = load_model(Solution, path)
        if sol.definition not in dataset.definitions:
            report.notices.append(f"{path}: solution {sol.name!r} left out: "
                                  f"{unknown_definition(sol.definition, dataset)}")
            continue
        key = (sol.definition, sol.name)
        solutions.setdefault(key, sol)
        files.setdefault(key, {}).setdefault(sol.content_hash, path)
        every.setdefault(sol.content_hash, sol)
    declared = _declared_workloads(root)
    known = {(name, w.uuid): w for name, ws in dataset.workloads.items() for w in ws}
    traces: list[tuple[Path, Trace, Solution]] = []
    for path in trace_files:
        for line, trace in _numbered(path):
            if trace.evaluation is None or trace.solution is None:
                continue
            definition = dataset.definitions.get(trace.definition)
            if definition is None:  # its solution was left out for the same reason
                report.notices.append(f"{path}:{line}: trace of {trace.solution!r} left out: "
                                      f"{unknown_definition(trace.definition, dataset)}")
                continue
            key = (trace.definition, trace.solution)
            if key not in solutions:
                raise SchemaError(f"{path}: trace names solution {trace.solution!r} of {trace.definition}, "
                                  f"which is not in {root / 'solutions'}")
            if len(files[key]) > 1:
                raise SchemaError(f"{path}: trace names solution {trace.solution!r} of {trace.definition}, which "
                                  f"{len(files[key])} files of different code are named "
                                  f"({', '.join(str(f.relative_to(root)) for f in files[key].values())}); "
                                  "rename one")
            wl_key = (definition.name, trace.workload.uuid)
            why = (workload_refusal(definition, trace.workload, known.get(wl_key) or declared.get(wl_key))
                   or timing_refusal(trace))
            if why:
                report.notices.append(f"{path}:{line}: trace of {trace.solution!r} left out: {why}")
                continue
            traces.append((path, trace, solutions[key]))
    if report.notices and not every and not traces:
        first, refused = report.notices[0], len(report.notices)
        raise SchemaError(f"{root}: nothing imported: " + (first if refused == 1 else
                          f"all {refused} solutions and traces were left out (the first: {first})"))
    with archive.db.atomic():  # one transaction: a failure while writing leaves the archive as it was
        _write_import(archive, root, list(every.values()), traces, report)
    return report


def _write_import(archive: Archive, root: Path, solutions: list[Solution], traces: list[tuple[Path, Trace, Solution]],
                  report: ImportReport) -> None:
    for sol in solutions:
        if archive.db.execute("select 1 from solutions where hash = ?", [sol.content_hash]).fetchone():
            report.solutions_present += 1
            continue
        archive.put_solution(dump_json(sol), sol.content_hash)
        report.solutions += 1
    seen = _imported_digests(archive)
    new: list[tuple[Path, Trace, Solution, dict]] = []
    for path, trace, sol in traces:
        data = dump_json(trace)
        digest = import_digest(sol.content_hash, data)
        if digest in seen:
            report.traces_present += 1
            continue
        seen.add(digest)
        new.append((path, trace, sol, data))
    if not new:
        return
    env_id = archive.put_environment({"hardware": "imported", "source": str(root)})
    submissions: dict[tuple[str, str], int] = {}
    for path, trace, sol, data in new:
        key = (sol.content_hash, trace.definition)
        if key not in submissions:
            submissions[key] = archive.start_submission(sol.content_hash, sol.name, trace.definition, sol.author,
                                                        {"imported_from": str(root)}, env_id)
        ev = trace.evaluation
        c, p = ev.correctness, ev.performance
        archive.add_evaluation({
            "submission_id": submissions[key], "definition": trace.definition,
            "workload_uuid": trace.workload.uuid, "workload_label": trace.workload.uuid[:8],
            "status": ev.status.value, "max_absolute_error": c.max_absolute_error if c else None,
            "max_relative_error": c.max_relative_error if c else None,
            "matched_ratio": (c.extra or {}).get("matched_ratio") if c else None,
            "latency_ms": p.latency_ms if p else None,
            "reference_latency_ms": p.reference_latency_ms if p else None,
            "speedup_factor": p.speedup_factor if p else None, "aligned": 1 if p else None,
            "timing_note": "imported", "message": "",
            "log_blob": archive.put_blob(ev.log, "log") if ev.log else None,
            "trace": data, "extra": {"imported_from": str(path)}, "environment_id": env_id,
            "started_at": None, "finished_at": ev.timestamp})
        report.traces += 1
    for sub_id in submissions.values():
        statuses = {r[0] for r in archive.db.execute("select status from evaluations where submission_id = ?",
                                                      [sub_id])}
        passed = EvaluationStatus.PASSED.value
        # Another harness's verdict, carried in: never this one's. No static gate, audit or timing of this harness
        # ran on it, so it is listed and compared but never promoted or ranked among the promotable.
        archive.finish_submission(sub_id, passed if statuses == {passed} else sorted(statuses - {passed})[0],
                                  "imported", scores={"promotable": False, "promotion_blockers": [IMPORTED_BLOCKER]})
