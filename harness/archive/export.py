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
import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


from .database import Archive
from ..data.dataset import Dataset
from ..data.names import bounded
from ..data.inputs import absent_blob_inputs, generate_inputs
from ..data.schema import Definition, RandomInput, SafetensorsInput, SchemaError, Trace, Workload, dump_json
from ..data.statuses import EvaluationStatus
# `harness import`, the other direction, lives in trace_import; its names stay importable from here
from .trace_import import IMPORTED_BLOCKER, ImportReport, import_digest, import_trace_set

__all__ = ["ExportReport", "IMPORTED_BLOCKER", "ImportReport", "export_trace_set", "import_digest",
           "import_trace_set"]

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
    unusable: list[str] = []  # "evaluation N (workload uuid): why", of traces an older import let in
    traces: dict[Path, list[str]] = {}
    rows = archive.db.execute(
        "select e.id, e.trace, s.author, e.definition, e.status, s.solution_hash "
        "from evaluations e join submissions s on s.id = e.submission_id "
        f"where e.definition in ({placeholders}) order by e.id", names).fetchall()
    for eval_id, trace_json, author, def_name, status, content_hash in rows:
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
        try:
            trace["workload"] = dump_json(_materialised_workload(d, workload, dataset, out, []))
            line = _trace_line(trace)
        except (SchemaError, TypeError, AttributeError) as e:
            # One such row made every export of the archive fail ("var axes ... have no value", red team round 12,
            # V6): the rest is exported, this one left in the archive and said.
            why = str(e) if str(e).startswith("workload ") else f"workload {workload.uuid}: {e}"
            unusable.append(f"evaluation {eval_id}: {why}")
            continue
        path = out / "traces" / _safe(author) / d.op_type / f"{d.name}.jsonl"
        traces.setdefault(path, []).append(line)
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
    if unusable:
        report.notices.append(f"{len(unusable)} evaluations' traces cannot be exported and were left out (they stay "
                              f"in the archive): {'; '.join(unusable[:3])}{'; ...' if len(unusable) > 3 else ''}")
    if skipped_untimed:
        report.notices.append(f"{skipped_untimed} PASSED evaluations have no aligned timing (CPU or no CUPTI) and are "
                              "not official traces; they stay in the archive only")
    if definitions is None:
        report.notices.extend(_other_definitions(archive, names))
    return report


def _trace_line(trace: dict) -> str:
    """A trace as one line of JSON, or SchemaError saying why it cannot be one: its latency must be a time (finite,
    above 0), and nothing in it may be a number JSON has not got. Non-finite errors are written as the official
    writer writes them ("inf", "nan"); any other Infinity or NaN would make the file no JSON for any reader."""
    perf = (trace.get("evaluation") or {}).get("performance")
    if perf is not None:
        latency = perf.get("latency_ms")
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not (
                math.isfinite(latency) and latency > 0):
            raise SchemaError(f"latency_ms {latency} is not a time (a finite number of ms above 0)")
    correctness = (trace.get("evaluation") or {}).get("correctness")
    if isinstance(correctness, dict):
        for key, value in correctness.items():
            if isinstance(value, float) and not math.isfinite(value):
                correctness[key] = str(value)
    try:
        return json.dumps(trace, allow_nan=False)
    except ValueError:
        raise SchemaError("it holds a number that is not finite, which JSON cannot write") from None


def _other_definitions(archive: Archive, names: list[str]) -> list[str]:
    """A notice naming the submissions an export of the whole archive leaves out because the dataset has not got
    their definition (imported by an older version, or made with another dataset), rather than dropping them
    unsaid."""
    rows = archive.db.execute("select definition, count(*) from submissions where definition not in "
                              f"({','.join('?' * len(names))}) group by definition order by definition",
                              names).fetchall()
    if not rows:
        return []
    listed = ", ".join(f"{name} ({n})" for name, n in rows[:5]) + (", ..." if len(rows) > 5 else "")
    return [f"{sum(n for _, n in rows)} submissions of definitions this dataset does not have were left out: {listed}"]
