"""Archive <-> FlashInfer-Bench trace set (the layout flashinfer-bench main writes and reads).

    <root>/definitions/<op_type>/<definition>.json
    <root>/workloads/<op_type>/<definition>.jsonl
    <root>/solutions/<author>/<op_type>/<definition>/<solution>.json
    <root>/traces/<author>/<op_type>/<definition>.jsonl
    <root>/blob/workloads/<op_type>/<definition>/<definition>_<uuid>.safetensors        (the dataset's, copied)
    <root>/blob/workloads/<op_type>/<definition>/<definition>_<uuid>.drawn.safetensors  (drawn here)

Index inputs that our workloads leave "random" (page indices, their split) are written out as safetensors
blobs, because the official generator would fill them with random integers that index nothing; only those are
drawn (a large batch's KV cache is never made to export its page table). Definitions
and unchanged workload lines are copied as they were read, so official files stay byte for byte official.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


from .database import Archive
from ..data.dataset import Dataset
from ..data.names import bounded
from ..data.inputs import absent_blob_inputs, generate_inputs
from ..data.schema import (Definition, RandomInput, SafetensorsInput, SchemaError, Solution, Trace, Workload, dump_json,
                     load_jsonl, load_model)
from ..data.statuses import EvaluationStatus

EXPORT_SEED = 0
# The random integer inputs Crucible gives structure (harness.data.inputs: page indices, their split, last-page
# lengths); the official generator would fill them with numbers that index nothing. Other random integers (an
# int8 view of a packed cache) are drawn by the official evaluator as well and stay "random".
_STRUCTURED_SUFFIXES = ("indices", "indptr", "last_page_len")


@dataclass
class ExportReport:
    definitions: int = 0
    workloads: int = 0
    solutions: int = 0
    traces: int = 0
    notices: list[str] = field(default_factory=list)


def _safe(name: str) -> str:
    """``name`` as one file-name component: other characters replaced, and past 200 characters the rest a digest of
    the whole (a file name holds at most 255 bytes; solutions named after their parameters run longer). A name that
    had to change gets a digest of the original, so two names never meet in one file ("same name", "same_name"),
    and nothing made only of dots ("..") names a folder above."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    if safe != name or not safe.strip("."):
        safe = f"{safe.strip('.') or 'unnamed'}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return bounded(safe, key=name)


IMPORTED_BLOCKER = ("imported from a trace set: judged elsewhere, never by this harness (no static gate, audits or "
                    "timing here); submit the solution to judge it")


def _materialised_workload(definition: Definition, workload: Workload, dataset: Dataset, out: Path,
                           absent: list[str]) -> Workload:
    """The workload as the export writes it: random integer inputs (page indices) get a blob of their own inside
    ``out``; blobs the dataset holds are copied under the same path; blobs it does not hold (the family draws
    stand-ins for them) stay referenced as they are, named in ``absent``, and are never written from a stand-in."""
    needs_blob = {n for n, s in definition.inputs.items()
                  if s.shape is not None and len(s.shape) == 1 and s.dtype.value.startswith("int")
                  and n.endswith(_STRUCTURED_SUFFIXES)
                  and isinstance(workload.inputs.get(n, RandomInput(type="random")), RandomInput)}
    missing = absent_blob_inputs(definition, workload, dataset.root)
    absent.extend(missing)
    for name, source in workload.inputs.items():
        if isinstance(source, SafetensorsInput) and name not in missing and not (out / source.path).exists():
            src, dst = (dataset.root / source.path).resolve(), (out / source.path).resolve()
            if not (src.is_relative_to((dataset.root / "blob").resolve()) and dst.is_relative_to(out.resolve())
                    and src.is_file()):  # the schema refuses such paths; a dataset edited by hand is said so too
                raise SchemaError(f"workload {workload.uuid}: input {name} reads {source.path}, which is not a file "
                                  "inside the dataset's blob/ folder")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    if not needs_blob:
        return workload
    values = generate_inputs(definition, workload, EXPORT_SEED, "cpu", dataset.root, names=needs_blob)
    # A file of its own: the official blob of this workload (its kv_indptr, say) has the plain name and is copied
    # byte for byte above; written over, it would lose the tensors it holds.
    rel = (Path("blob") / "workloads" / definition.op_type / definition.name
           / f"{definition.name}_{workload.uuid}.drawn.safetensors")
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    save_file({n: values[n].contiguous() for n in sorted(needs_blob)}, str(out / rel))
    inputs = dict(workload.inputs)
    for n in needs_blob:
        inputs[n] = SafetensorsInput(type="safetensors", path=str(rel), tensor_key=n)
    return workload.model_copy(update={"inputs": inputs})


def export_trace_set(archive: Archive, dataset: Dataset, out: Path,
                     definitions: Optional[list[str]] = None) -> ExportReport:
    report = ExportReport()
    out.mkdir(parents=True, exist_ok=True)
    names = definitions or sorted(dataset.definitions)
    for name in names:
        d = dataset.definitions[name]
        path = out / "definitions" / d.op_type / f"{d.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        source = dataset.definition_files.get(d.name)
        if source is not None:  # the file itself: an official definition stays byte for byte the official one
            shutil.copyfile(source, path)
        else:
            path.write_text(json.dumps(dump_json(d), indent=2) + "\n")
        report.definitions += 1
        wl_path = out / "workloads" / d.op_type / f"{d.name}.jsonl"
        wl_path.parent.mkdir(parents=True, exist_ok=True)
        absent: list[str] = []
        with wl_path.open("w") as f:
            for w in dataset.workloads.get(d.name, []):
                written = _materialised_workload(d, w, dataset, out, absent)
                line = dataset.workload_lines.get((d.name, w.uuid)) if written is w else None
                f.write((line or json.dumps(dump_json(Trace(definition=d.name, workload=written)))) + "\n")
                report.workloads += 1
        if absent:
            report.notices.append(
                f"{d.name}: {len(absent)} blob input(s) ({', '.join(sorted(set(absent)))}) refer to official blobs "
                f"this dataset does not hold; Crucible drew stand-ins for them, which are not exported. Put the "
                f"official blob/ folder next to the export to run these workloads as the contest did")

    placeholders = ",".join("?" * len(names))
    written: set[Path] = set()
    # A trace names its solution by name within its definition: a name one definition gave to other code as well
    # is exported, for the later code, with its hash appended (in the file and in its traces), so that a reader
    # (harness import, TraceSet) can tell which code each trace is of.
    named: set[tuple[str, str]] = set()
    unreadable_solutions: list[str] = []
    renamed: dict[str, str] = {}  # content hash -> the name it is exported under
    for sol in archive.db.execute("select hash, name, definition, author from solutions "
                                  f"where definition in ({placeholders}) order by rowid", names).fetchall():
        content_hash, sol_name, def_name, author = sol
        d = dataset.definitions[def_name]
        try:
            data = archive.solution_json(content_hash)
        except (OSError, ValueError):  # its blob gone, or changed outside the harness: left out, said
            unreadable_solutions.append(content_hash[:12])
            continue
        if (def_name, sol_name) in named:
            renamed[content_hash] = data["name"] = sol_name = f"{sol_name}-{content_hash[:12]}"
        named.add((def_name, sol_name))
        path = out / "solutions" / _safe(author) / d.op_type / d.name / f"{_safe(sol_name)}.json"
        if path in written:  # one name, other code: each its own file
            path = path.with_name(f"{path.stem}-{content_hash[:12]}.json")
        written.add(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
        report.solutions += 1

    skipped_untimed = unreadable = 0
    traces: dict[Path, list[str]] = {}
    rows = archive.db.execute(
        "select e.trace, s.author, e.definition, e.status, s.solution_hash "
        "from evaluations e join submissions s on s.id = e.submission_id "
        f"where e.definition in ({placeholders}) order by e.id", names).fetchall()
    for trace_json, author, def_name, status, content_hash in rows:
        if not trace_json:
            skipped_untimed += status == EvaluationStatus.PASSED
            continue
        d = dataset.definitions[def_name]
        try:  # a row changed outside the harness (its seal says so) into something that is no trace: left out, said
            trace = json.loads(trace_json)
            workload = Workload.model_validate(trace["workload"])
        except (ValueError, TypeError, KeyError, RecursionError):
            unreadable += 1
            continue
        if content_hash in renamed:
            trace["solution"] = renamed[content_hash]
        trace["workload"] = dump_json(_materialised_workload(d, workload, dataset, out, []))
        path = out / "traces" / _safe(author) / d.op_type / f"{d.name}.jsonl"
        traces.setdefault(path, []).append(json.dumps(trace))
    for path, lines in traces.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        report.traces += len(lines)
    if unreadable_solutions:
        report.notices.append(f"{len(unreadable_solutions)} solutions' files cannot be read (gone, or changed outside "
                              f"the harness) and were left out: {', '.join(unreadable_solutions[:5])}")
    if unreadable:
        report.notices.append(f"{unreadable} evaluations' traces are not traces (changed outside the harness) and "
                              "were left out")
    if skipped_untimed:
        report.notices.append(f"{skipped_untimed} PASSED evaluations have no aligned timing (CPU or no CUPTI) and are "
                              "not official traces; they stay in the archive only")
    return report


@dataclass
class ImportReport:
    solutions: int = 0  # solutions new to the archive
    traces: int = 0  # traces new to the archive
    solutions_present: int = 0  # solutions of the trace set the archive already held
    traces_present: int = 0  # traces it already held (an earlier import of the same content), or repeated in it

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


def import_trace_set(archive: Archive, root: Path) -> ImportReport:
    """Read a FlashInfer-Bench trace set's solutions and traces into the archive, all or nothing: everything is
    read and checked first, then written in one transaction. A solution is known by its content hash, a trace by
    ``import_digest``: what the archive already holds is counted, never added twice, so importing the same trace
    set again adds nothing (``ImportReport.nothing_new``)."""
    if not Path(root).is_dir():  # /dev/null, a FIFO: no trace set, never "nothing new"
        raise SchemaError(f"{root}: not a folder (a trace set is a folder of definitions, solutions and traces)")
    report = ImportReport()
    # A trace names its solution by name within its definition: two definitions' solutions may share a name (the
    # export of an archive holds such pairs), and one name of one definition may be given to two files of other
    # code, which a trace then cannot tell apart. Every solution file is imported; a trace is read against its
    # own definition's solutions only, and one naming an ambiguous name is refused.
    solutions: dict[tuple[str, str], Solution] = {}
    every: dict[str, Solution] = {}  # content hash -> the first file of that code
    files: dict[tuple[str, str], dict[str, Path]] = {}  # (definition, name) -> content hash -> its first file
    for path in sorted((root / "solutions").rglob("*.json")):
        sol = load_model(Solution, path)
        key = (sol.definition, sol.name)
        solutions.setdefault(key, sol)
        files.setdefault(key, {}).setdefault(sol.content_hash, path)
        every.setdefault(sol.content_hash, sol)
    traces: list[tuple[Path, Trace, Solution]] = []
    for path in sorted((root / "traces").rglob("*.jsonl")):
        for trace in load_jsonl(Trace, path):
            if trace.evaluation is None or trace.solution is None:
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
            traces.append((path, trace, solutions[key]))
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
