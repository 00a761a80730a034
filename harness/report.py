"""The archive as a report a person reads: data gathering, charts (inline SVG) and HTML.

Three layers, each usable alone:

- data: ``gather_report`` reads the archive into plain dataclasses (leaderboards per definition: the
  promotable solutions ranked by score, the others apart with their reasons, decided by
  ``harness.leaderboard``; per-workload results, roofline points, controller rounds); ``diff_submissions`` compares two
  solutions (sources and per-workload latency).
- charts: a ``Chart`` spec rendered to SVG by matplotlib (svg backend) when it is importable, or by a
  small built-in renderer otherwise; both give the same charts with labelled axes and units.
- HTML: ``write_report`` writes ``index.html`` plus one page per candidate and the linked files
  (sources, build logs, SASS summaries, profile digests, transcripts, workload logs) into a folder;
  everything is local (no scripts, fonts or styles from the network), so the folder can be opened
  from disk or attached to a review.

Numbers follow the harness's meaning: latencies in ms (the official latency: mean over trials of each
trial's median); speedup = baseline / candidate (above 1 is faster); ``fraction_of_floor`` = roofline
floor / latency (1.0 is the hardware limit); scores are mean speedups over workloads, 0 if any failed.
"""

from __future__ import annotations

import datetime as dt
import difflib
import html
import io
import json
import math
import re
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from . import leaderboard as lb
from .archive import INTERRUPTED, NO_VERDICT
from .seal import MODIFIED_WARNING

PASSED = "PASSED"
ARTIFACT_KINDS = ("build_log", "sass", "profile", "transcript")
ARTIFACT_TITLES = {"source": "source", "build_log": "build log", "sass": "SASS summary", "profile": "profile digest",
                   "transcript": "transcript"}
SCORE_KEYS = ("vs_reference", "vs_flashinfer_official", "vs_flashinfer_kernel")


# =====================================================================================================
# Data
# =====================================================================================================


@dataclass
class WorkloadRow:
    evaluation_id: int
    uuid: str
    label: str
    status: str
    latency_ms: Optional[float] = None
    kernel_latency_ms: Optional[float] = None
    reference_latency_ms: Optional[float] = None
    speedup_vs_reference: Optional[float] = None
    fi_official_ms: Optional[float] = None
    fi_kernel_ms: Optional[float] = None
    speedup_vs_fi_official: Optional[float] = None
    speedup_vs_fi_kernel: Optional[float] = None
    floor_ms: Optional[float] = None
    fraction_of_floor: Optional[float] = None
    throttled: Optional[bool] = None
    aligned: Optional[bool] = None
    max_absolute_error: Optional[float] = None
    audits: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    timing_note: str = ""
    log_blob: Optional[str] = None
    bytes_moved: Optional[float] = None  # when the harness records the workload's cost in extra
    flops: Optional[float] = None

    @property
    def evaluated(self) -> bool:
        return self.status != "SKIPPED"

    @property
    def failed_audits(self) -> list[dict[str, Any]]:
        return [a for a in self.audits if not a.get("passed")]

    @property
    def timed_ms(self) -> Optional[float]:
        """The time the roofline judges: the kernel's (setup outside the timed call) when recorded."""
        return self.kernel_latency_ms or self.latency_ms


@dataclass
class Artifact:
    kind: str  # build_log | sass | profile | transcript
    title: str
    blob: Optional[str] = None  # the content is this blob's...
    text: Optional[str] = None  # ...or this text (profile digests, transcripts put together from tables)
    href: Optional[str] = None  # set when the report is written


@dataclass
class Candidate:
    submission_id: int
    solution_hash: str
    solution_name: str
    definition: str
    author: str
    language: str
    status: str
    created_at: str
    finished_at: Optional[str]
    message: str
    scores: dict[str, Optional[float]]
    workloads: list[WorkloadRow]
    sources: list[dict[str, str]] = field(default_factory=list)  # {"path", "content"}
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    hardware: str = ""
    runs: int = 1  # submissions of this solution for this definition
    rank: Optional[int] = None
    seal_state: str = ""  # harness.seal: sealed | modified | unsealed | unverifiable ("" when not checked)
    seal_detail: str = ""
    sandbox: str = ""  # harness.sandbox: "full", "reduced (why)", "" for archives from before the sandbox
    static_findings: list[dict[str, Any]] = field(default_factory=list)  # the static gate's, from the options
    audit_level: str = ""  # "" for archives from before audit levels
    submission_audits: list[dict[str, Any]] = field(default_factory=list)  # of the whole submission
    recorded_blockers: list[str] = field(default_factory=list)  # harness.audits.promotion_blockers, as archived
    recorded_promotable: bool | None = None  # None where the archive predates the verdict
    scores_partial: dict[str, list[str]] = field(default_factory=dict)  # score key -> workloads left out

    @property
    def modified(self) -> bool:
        """Its rows were changed outside the harness (the seal does not match): never a leader."""
        return self.seal_state == "modified"

    @property
    def blockers(self) -> list[str]:
        """Why it cannot lead (harness.leaderboard.promotion_reasons); empty: promotable."""
        return lb.promotion_reasons(self.status, [{"label": w.label, "status": w.status, "audits": w.audits}
                                                  for w in self.workloads], self.static_findings, self.audit_level,
                                    self.submission_audits, self.recorded_blockers, self.recorded_promotable,
                                    self.modified)

    @property
    def promotable(self) -> bool:
        return not self.blockers

    @property
    def audit_summary(self) -> lb.AuditSummary:
        return lb.audit_summary(self.static_findings, [(w.label, w.audits) for w in self.workloads],
                                self.submission_audits)

    def score(self, key: str = "vs_reference") -> Optional[float]:
        v = self.scores.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def evaluated(self) -> list[WorkloadRow]:
        return [w for w in self.workloads if w.evaluated]

    @property
    def passed(self) -> int:
        return sum(w.status == PASSED for w in self.workloads)

    @property
    def mean_fraction_of_floor(self) -> Optional[float]:
        values = [w.fraction_of_floor for w in self.workloads if w.status == PASSED and w.fraction_of_floor is not None
                  and math.isfinite(w.fraction_of_floor)]
        return statistics.fmean(values) if values else None

    @property
    def failed_audits(self) -> list[tuple[str, str]]:
        return [(w.label, a.get("name", "?")) for w in self.workloads for a in w.failed_audits]

    @property
    def audited(self) -> bool:
        return any(w.audits for w in self.workloads)

    @property
    def page(self) -> str:
        return f"candidates/sub-{self.submission_id}.html"


@dataclass
class Round:
    run: str
    round: int
    best_latency_ms: Optional[float] = None
    spend_usd: Optional[float] = None  # spent in this round
    cumulative_spend_usd: Optional[float] = None
    candidates: Optional[int] = None
    best_solution: str = ""
    note: str = ""
    metric: str = ""  # what best_latency_ms measures, e.g. "mean over workloads"
    passed: Optional[int] = None
    promoted: Optional[int] = None
    # where the incumbent stood after the round (the loop's round summary, controller/trajectory.py)
    incumbent: str = ""
    incumbent_latency_ms: Optional[float] = None
    incumbent_fraction_of_floor: Optional[float] = None
    incumbent_speedup_vs_fi: Optional[float] = None
    incumbent_regimes: dict[str, Optional[float]] = field(default_factory=dict)  # regime -> mean ms


@dataclass
class RooflinePoint:
    label: str
    who: str  # "candidate" or "FlashInfer"
    bytes_moved: float
    flops: float
    latency_ms: float

    @property
    def intensity(self) -> Optional[float]:
        return self.flops / self.bytes_moved if self.bytes_moved and self.flops else None

    @property
    def flops_per_s(self) -> float:
        return self.flops / (self.latency_ms * 1e-3)

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / (self.latency_ms * 1e-3)


@dataclass
class Roofline:
    points: list[RooflinePoint]
    memory_bytes_per_s: Optional[float]
    flops_per_s: Optional[float]
    ceilings_note: str
    cost_note: str
    fractions: list[tuple[str, Optional[float]]]  # (workload, fraction of floor): always available

    @property
    def has_flops(self) -> bool:
        return any(p.flops for p in self.points)


@dataclass
class BaselineRow:
    """FlashInfer as a leaderboard row, over the leading solution's workloads (the figures every candidate row is
    compared with): the same score, speedups and % of floor, computed from the archived baseline timings."""

    name: str
    timing: str  # what was timed: "plan() inside the call" (the contest's way) or "plan() in setup"
    workloads: int
    vs_reference: Optional[float]
    vs_fi_official: Optional[float]
    vs_fi_kernel: Optional[float]
    fraction_of_floor: Optional[float]


def baseline_rows(leader: Optional[Candidate]) -> list[BaselineRow]:
    """One row per FlashInfer timing recorded on ``leader``'s PASSED workloads; none without baseline figures."""
    out = []
    for timing, attr in (("plan() inside the call", "fi_official_ms"), ("plan() in setup", "fi_kernel_ms")):
        rows = [w for w in (leader.workloads if leader else []) if w.status == PASSED and getattr(w, attr)]
        if not rows:
            continue

        def mean_ratio(numerator: str, rows=rows, attr=attr) -> Optional[float]:
            values = [getattr(w, numerator) / getattr(w, attr) for w in rows if getattr(w, numerator)]
            return statistics.fmean(values) if values else None

        out.append(BaselineRow("FlashInfer (official)" if attr == "fi_official_ms" else "FlashInfer (kernel)", timing,
                               len(rows), mean_ratio("reference_latency_ms"), mean_ratio("fi_official_ms"),
                               mean_ratio("fi_kernel_ms"), mean_ratio("floor_ms")))
    return out


@dataclass
class DefinitionSection:
    name: str
    leaderboard: list[Candidate]  # one row per solution (its latest finished submission), ranked
    submissions: list[Candidate]  # every submission, newest first
    workloads: list[tuple[str, str]]  # (uuid, label) in evaluation order
    roofline: Optional[Roofline]
    runs: dict[str, list[Round]]
    notices: list[str] = field(default_factory=list)

    @property
    def promotable(self) -> list[Candidate]:
        """The ranked rows."""
        return [c for c in self.leaderboard if c.promotable]

    @property
    def not_promotable(self) -> list[Candidate]:
        return [c for c in self.leaderboard if not c.promotable]

    @property
    def best(self) -> Optional[Candidate]:
        """The top promotable solution: the only one the per-workload table and the plots show."""
        return next(iter(self.promotable), None)

    @property
    def baselines(self) -> list[BaselineRow]:
        return baseline_rows(self.best)


@dataclass
class ReportData:
    archive: str
    generated_at: str
    sections: list[DefinitionSection]
    hardware: list[str]
    notices: list[str] = field(default_factory=list)


# -- reading the archive ------------------------------------------------------------------------------------


def _loads(text: Optional[str]) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):  # the schema writes inf as a string
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _workload_row(e: dict[str, Any]) -> WorkloadRow:
    x = _loads(e.get("extra"))
    throttled = x.get("throttled")
    return WorkloadRow(
        evaluation_id=e["id"], uuid=e["workload_uuid"], label=e["workload_label"] or e["workload_uuid"][:8],
        status=e["status"], latency_ms=_num(e["latency_ms"]), kernel_latency_ms=_num(x.get("kernel_latency_ms")),
        reference_latency_ms=_num(e["reference_latency_ms"]), speedup_vs_reference=_num(e["speedup_factor"]),
        fi_official_ms=_num(x.get("flashinfer_official_ms")), fi_kernel_ms=_num(x.get("flashinfer_kernel_ms")),
        speedup_vs_fi_official=_num(x.get("speedup_vs_flashinfer_official")),
        speedup_vs_fi_kernel=_num(x.get("speedup_vs_flashinfer_kernel")), floor_ms=_num(x.get("floor_ms")),
        fraction_of_floor=_num(x.get("fraction_of_floor")), throttled=None if throttled is None else bool(throttled),
        aligned=None if e["aligned"] is None else bool(e["aligned"]), max_absolute_error=_num(e["max_absolute_error"]),
        audits=[a for a in x.get("audits") or [] if isinstance(a, dict)], message=e["message"] or "",
        timing_note=e["timing_note"] or "", log_blob=e["log_blob"], bytes_moved=_num(x.get("bytes_moved")),
        flops=_num(x.get("flops")))


def _rows(db: Any, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    cur = db.execute(sql, list(params))
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _artifacts(archive: Any, sub: dict[str, Any], workloads: list[WorkloadRow]) -> dict[str, Artifact]:
    """Files a reviewer wants beside the numbers: build log, SASS summary, profile digest, transcript.

    Sources, in order: the ``artifacts`` table (m005), the submission's ``options["artifacts"]``, the
    ``profiles`` table (m004) for the profile digest, the controller's request and response for the
    transcript (m003), and a failed build's log as the build log.
    """
    db = archive.db
    tables = set(db.table_names())
    found: dict[str, Artifact] = {}
    if "artifacts" in tables:
        for r in _rows(db, "select kind, name, blob from artifacts where submission_id = ? order by id", [sub["id"]]):
            if r["kind"] in ARTIFACT_KINDS:
                title = r["name"] if r["name"] and r["name"] != r["kind"] else ARTIFACT_TITLES[r["kind"]]
                found[r["kind"]] = Artifact(r["kind"], title, r["blob"])
    for kind, blob in (_loads(sub.get("options")).get("artifacts") or {}).items():
        if kind in ARTIFACT_KINDS and isinstance(blob, str) and kind not in found:
            found[kind] = Artifact(kind, ARTIFACT_TITLES[kind], blob)
    labels = {w.uuid: w.label for w in workloads}
    if "profile" not in found and "profiles" in tables:
        rows = _rows(db, "select * from profiles where submission_id = ? order by id", [sub["id"]]) or _rows(
            db, "select * from profiles where solution_hash = ? and submission_id is null order by id",
            [sub["solution_hash"]])
        if rows:
            found["profile"] = Artifact("profile", f"profile digest ({len(rows)} workload{'s' * (len(rows) != 1)})",
                                        text=format_profiles(rows, labels))
    if "transcript" not in found and {"candidates", "requests", "responses"} <= tables:
        text = controller_transcript(archive, sub["id"], sub["solution_hash"])
        if text:
            found["transcript"] = Artifact("transcript", "generation transcript", text=text)
    if "build_log" not in found:
        # A failed build is recorded as each workload's log: that log is the build log.
        failed_build = next((w for w in workloads if w.status == "COMPILE_ERROR" and w.log_blob), None)
        if failed_build is not None:
            found["build_log"] = Artifact("build_log", "build log (failed build)", failed_build.log_blob)
    return found


PROFILE_KEYS_SHOWN = {"kernels", "reason", "missing_metrics", "status", "backend", "tool_version", "arch", "command",
                      "requested_metrics", "workload_uuid", "solution_hash", "seed", "report_path", "csv_blob",
                      "log_blob", "wall_s"}


def format_profiles(rows: list[dict[str, Any]], labels: Optional[dict[str, str]] = None) -> str:
    """Profile rows (harness.profile.record_profile) as text: status, tool, and each kernel's metrics."""
    labels = labels or {}
    out = []
    for r in rows:
        d = _loads(r.get("digest"))
        wl = labels.get(r.get("workload_uuid") or "", r.get("workload_uuid") or "?")
        head = f"== profile {r['id']}: {wl} - {r.get('status') or d.get('status', '?')}"
        tool = " ".join(str(x) for x in (r.get("backend") or d.get("backend"), d.get("tool_version"), d.get("arch"))
                        if x)
        out.append(head + (f" ({tool})" if tool else ""))
        if d.get("reason"):
            out.append(f"reason: {d['reason']}")
        if d.get("missing_metrics"):
            out.append("missing metrics: " + ", ".join(map(str, d["missing_metrics"])))
        for k in d.get("kernels") or []:
            out.append(f"kernel {k.get('name', '?')}  grid {k.get('grid_size', '?')}  block {k.get('block_size', '?')}")
            metrics = k.get("metrics") or {}
            width = max((len(m) for m in metrics), default=0)
            for m, vu in sorted(metrics.items()):
                v, u = (list(vu) + [None, ""])[:2] if isinstance(vu, (list, tuple)) else (vu, "")
                value = "-" if v is None else (f"{v:.6g}" if isinstance(v, (int, float)) else str(v))
                out.append(f"  {m:<{width}}  {value:>14} {u or ''}".rstrip())
        rest = {k: v for k, v in d.items() if k not in PROFILE_KEYS_SHOWN}
        if rest:
            out.append("digest: " + json.dumps(rest, indent=2, sort_keys=True, default=str))
        out.append("")
    return "\n".join(out)


def controller_transcript(archive: Any, submission_id: int, solution_hash: str) -> str:
    """The controller's request (as the provider saw it) and the raw reply that produced this solution."""
    db = archive.db
    cands = _rows(db, "select * from candidates where submission_id = ? order by id", [submission_id]) or _rows(
        db, "select * from candidates where solution_hash = ? order by id", [solution_hash])
    cand = next((c for c in cands if c.get("request_id")), None)
    if cand is None:
        return ""
    req = _rows(db, "select * from requests where id = ?", [cand["request_id"]])
    resp = _rows(db, "select * from responses where request_id = ?", [cand["request_id"]])
    parts = [f"# Candidate {cand['solution_name']}: run {cand['run_id']}, round {cand['round']}"
             + (f", request {req[0]['key']}" if req else "")]
    if req:
        try:
            from .generation_request import GenerationRequest, render_prompt

            prompt = render_prompt(GenerationRequest.model_validate_json(req[0]["request"]))
        except Exception:
            prompt = json.dumps(_loads(req[0]["request"]), indent=2, sort_keys=True)
        parts.append("## Request (the prompt the provider was sent)\n\n" + prompt)
    if resp:
        r = resp[0]
        raw = ""
        if r.get("raw_blob"):
            try:
                raw = archive.get_blob(r["raw_blob"]).decode("utf-8", errors="replace")
            except OSError:
                raw = "(raw reply blob missing)"
        cost = f", ${r['cost_usd']:.4f}" if r.get("cost_usd") is not None else ""
        parts.append(f"## Response: {r.get('provider')} {r.get('model') or ''}, {r.get('tokens_in')} tokens in, "
                     f"{r.get('tokens_out')} out{cost}, {r.get('wall_s') or 0:.1f} s"
                     + (f"; stopped: {r['stopped']}" if r.get("stopped") else "")
                     + (f"; error: {r['error']}" if r.get("error") else "") + "\n\n" + raw)
    return "\n\n".join(parts) + "\n"


def load_candidate(archive: Any, submission_id: int, environments: Optional[dict[str, str]] = None) -> Candidate:
    subs = _rows(archive.db, "select * from submissions where id = ?", [submission_id])
    if not subs:
        from .archive import ArchiveError

        raise ArchiveError(f"no submission {submission_id} in {archive.folder}")
    return _candidate(archive, subs[0], environments)


def _candidate(archive: Any, sub: dict[str, Any], environments: Optional[dict[str, str]] = None) -> Candidate:
    evals = _rows(archive.db, "select * from evaluations where submission_id = ? order by id", [sub["id"]])
    workloads = [_workload_row(e) for e in evals]
    sol = _rows(archive.db, "select * from solutions where hash = ?", [sub["solution_hash"]])
    sources: list[dict[str, str]] = []
    language = ""
    if sol:
        language = sol[0]["language"] or ""
        try:
            sources = [{"path": str(s.get("path", "")), "content": str(s.get("content", ""))}
                       for s in json.loads(archive.get_blob(sol[0]["blob"])).get("sources", [])]
        except (OSError, json.JSONDecodeError, AttributeError):
            sources = []
    hardware = ""
    if sub.get("environment_id"):
        if environments is not None and sub["environment_id"] in environments:
            hardware = environments[sub["environment_id"]]
        else:
            env = _rows(archive.db, "select hardware from environments where id = ?", [sub["environment_id"]])
            hardware = env[0]["hardware"] if env else ""
    raw_scores = _loads(sub.get("scores"))
    scores = {k: _num(v) for k, v in raw_scores.items() if not isinstance(v, (bool, list, dict))}
    options = _loads(sub.get("options"))
    static_gate = options.get("static_gate") if isinstance(options.get("static_gate"), dict) else {}
    recorded = raw_scores.get("promotion_blockers")
    seal = archive.verify_seal(sub["id"]) if hasattr(archive, "verify_seal") else None
    return Candidate(
        submission_id=sub["id"], solution_hash=sub["solution_hash"], solution_name=sub["solution_name"],
        definition=sub["definition"], author=sub["author"] or "", language=language, status=sub["status"],
        created_at=sub["created_at"] or "", finished_at=sub["finished_at"], message=sub["message"] or "",
        scores=scores, workloads=workloads, sources=sources, artifacts=_artifacts(archive, sub, workloads),
        hardware=hardware or "", seal_state=seal.state if seal else "", seal_detail=seal.detail if seal else "",
        sandbox=str(options.get("sandbox") or ""),
        static_findings=[f for f in static_gate.get("findings") or [] if isinstance(f, dict)],
        audit_level=str(options.get("audit_level") or ""),
        submission_audits=[a for a in raw_scores.get("audits") or [] if isinstance(a, dict)],
        recorded_blockers=[str(b) for b in recorded] if isinstance(recorded, list) else [],
        recorded_promotable=raw_scores["promotable"] if isinstance(raw_scores.get("promotable"), bool) else None,
        scores_partial=lb.partial_scores(raw_scores.get("scores_partial")))


def rank_key(c: Candidate) -> tuple:
    """Rows modified outside the harness last; then PASSED first, then the official score (mean speedup vs the
    reference), then vs FlashInfer, newest. Applied within the promotable rows and within the others."""
    s = c.score("vs_reference")
    f = c.score("vs_flashinfer_official")
    return (c.modified, c.status != PASSED, -(s if s is not None else -math.inf), -(f if f is not None else -math.inf),
            -c.submission_id)


def leaderboard(submissions: list[Candidate]) -> list[Candidate]:
    """One row per solution: its latest finished submission (re-runs are re-measurements). The promotable ones
    first, ranked 1, 2, ... by score; then the others, unranked (``rank`` None), whatever they scored."""
    by_solution: dict[str, list[Candidate]] = {}
    for c in submissions:
        by_solution.setdefault(c.solution_hash, []).append(c)
    rows = []
    for runs in by_solution.values():
        finished = [c for c in runs if c.status not in NO_VERDICT] or runs
        latest = max(finished, key=lambda c: c.submission_id)
        latest.runs = len(runs)
        # Same code, same build: a re-measurement (the controller's paired timing) links the SASS and logs
        # its solution's other submissions recorded, saying where they come from.
        for other in sorted(runs, key=lambda c: -c.submission_id):
            for kind, art in other.artifacts.items():
                if kind not in latest.artifacts:
                    latest.artifacts[kind] = replace(art, title=f"{art.title} (submission {other.submission_id})")
        rows.append(latest)
    ranked, others = lb.split_ranked(rows, lambda c: c.promotable, rank_key)
    for i, c in enumerate(ranked, 1):
        c.rank = i
    for c in others:
        c.rank = None
    return ranked + others


# -- costs, ceilings and the roofline -----------------------------------------------------------------------


def load_ceilings(folder: Path, device_name: str = "", uuid: str = "") -> Optional[dict[str, Any]]:
    """The GPU's measured ceilings from the archive's ``ceilings.json`` (harness.roofline.CeilingsCache)."""
    path = Path(folder) / "ceilings.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not data:
        return None
    entry = data.get(f"{device_name}|{uuid}")
    if entry is None:
        named = [v for k, v in data.items() if k.split("|")[0] == device_name]
        entry = named[0] if len(named) == 1 else (next(iter(data.values())) if len(data) == 1 else None)
    if not isinstance(entry, dict):
        return None
    try:
        memory = max(float(entry["copy_bytes_per_s"]), float(entry["read_bytes_per_s"]))
        return {"gpu_name": entry.get("gpu_name", device_name), "memory_bytes_per_s": memory,
                "flops_per_s": float(entry["bf16_flops_per_s"]), "measured_at": entry.get("measured_at", "")}
    except (KeyError, TypeError, ValueError):
        return None


def dataset_costs(dataset: Any, definition: str) -> dict[str, tuple[float, float]]:
    """Bytes and flops per workload uuid by the definition's operator family (``workload_cost``: exact counts
    where the workload's index blobs allow), or {} when the dataset lacks the definition."""
    try:
        from .families import family_for

        d = dataset.definition(definition)
        workloads = dataset.workloads_for(definition)
    except Exception:
        return {}
    family = family_for(d.op_type)
    out: dict[str, tuple[float, float]] = {}
    for w in workloads:
        for root in (dataset.root, None):  # an unreadable blob: the count without it
            try:
                cost = family.workload_cost(d, w, root=root)
            except Exception:
                continue
            out[w.uuid] = (float(cost.bytes_moved), float(cost.flops))
            break
    return out


def build_roofline(best: Candidate, costs: dict[str, tuple[float, float]],
                   ceilings: Optional[dict[str, Any]]) -> Roofline:
    passed = [w for w in best.workloads if w.status == PASSED and w.timed_ms]
    fractions = [(w.label, w.fraction_of_floor) for w in best.workloads if w.evaluated]
    points: list[RooflinePoint] = []
    cost_note = ""
    for w in passed:
        cost = (w.bytes_moved, w.flops) if w.bytes_moved else costs.get(w.uuid)
        if cost:
            cost_note = ("bytes and flops recorded by the harness" if w.bytes_moved
                         else "bytes and flops from the dataset (the operator family's workload_cost)")
        elif ceilings and w.floor_ms:
            # Memory-bound floor: the bytes the floor implies at the measured bandwidth.
            cost = (w.floor_ms * 1e-3 * ceilings["memory_bytes_per_s"], 0.0)
            cost_note = "bytes implied by the floor at the measured bandwidth (memory-bound); flops unknown"
        if not cost:
            continue
        points.append(RooflinePoint(w.label, "candidate", cost[0], cost[1], w.timed_ms or 0.0))
        fi_ms = w.fi_kernel_ms or w.fi_official_ms
        if fi_ms:
            points.append(RooflinePoint(w.label, "FlashInfer", cost[0], cost[1], fi_ms))
    memory = ceilings["memory_bytes_per_s"] if ceilings else None
    flops = ceilings["flops_per_s"] if ceilings else None
    if ceilings:
        when = f", measured {ceilings['measured_at'][:10]}" if ceilings.get("measured_at") else ""
        ceilings_note = f"ceilings of {ceilings['gpu_name']} from the archive's ceilings.json{when}"
    else:
        # A memory-bound floor is bytes / bandwidth: the largest bytes/floor is the bandwidth the harness used.
        implied = [costs_b / (w.floor_ms * 1e-3) for w in passed if w.floor_ms
                   for costs_b in [(w.bytes_moved or (costs.get(w.uuid) or (0.0, 0.0))[0])] if costs_b]
        memory = max(implied) if implied else None
        ceilings_note = ("memory ceiling implied by the floors (no ceilings.json in the archive); compute ceiling "
                         "unknown" if memory else "no ceilings recorded")
    return Roofline(points, memory, flops, ceilings_note, cost_note, fractions)


# -- controller rounds --------------------------------------------------------------------------------------


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
                  incumbent_regimes={str(k): _num(v) for k, v in (item.get("incumbent_regimes") or {}).items()})
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
    means = {sid: (m, n) for sid, m, n in db.execute(
        "select submission_id, avg(latency_ms), count(*) from evaluations where status = 'PASSED' "
        "and latency_ms is not null group by submission_id").fetchall()}
    out: list[dict[str, Any]] = []
    for run in _rows(db, "select id, definition from runs order by created_at, id"):
        round_rows = _rows(db, "select round, kind, summary from rounds where run_id = ?", [run["id"]])
        kinds = {r["round"]: r["kind"] for r in round_rows}
        standings = {r["round"]: _incumbent_standing(r.get("summary")) for r in round_rows}
        cands = _rows(db, "select c.*, s.status as submission_status from candidates c left join submissions s "
                          "on s.id = c.submission_id where c.run_id = ? order by c.round, c.id", [run["id"]])
        cost = dict(db.execute("select q.round, sum(p.cost_usd) from responses p join requests q "
                               "on q.id = p.request_id where q.run_id = ? group by q.round", [run["id"]]).fetchall())
        promoted = dict(db.execute("select round, count(*) from decisions where run_id = ? and verdict = 'PROMOTED' "
                                   "group by round", [run["id"]]).fetchall())
        numbers = sorted({*kinds, *(c["round"] for c in cands if c["round"] is not None)})
        for n in numbers:
            mine = [c for c in cands if c["round"] == n]
            passed = [c for c in mine if c["submission_status"] == PASSED and c["submission_id"] in means]
            best = min(passed, key=lambda c: means[c["submission_id"]][0]) if passed else None
            workloads = means[best["submission_id"]][1] if best else None
            out.append({"definition": run["definition"], "run": run["id"], "round": n,
                        "best_latency_ms": means[best["submission_id"]][0] if best else None,
                        "best_solution": best["solution_name"] if best else "", "spend_usd": cost.get(n),
                        "candidates": len(mine), "passed": len(passed), "promoted": promoted.get(n, 0),
                        "note": "incumbent" if n == 0 else kinds.get(n, ""),
                        "metric": f"mean over {workloads} workloads" if workloads else "mean over workloads",
                        **standings.get(n, {})})
    return out


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
    """A JSON file of rounds: a list of objects, or {"rounds": [...]}."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        data = data.get("rounds", [])
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: expected a list of round objects (or {{\"rounds\": [...]}})")
    return data


# -- the whole report ---------------------------------------------------------------------------------------


def gather_report(archive: Any, definition: Optional[str] = None, rounds: Optional[list[dict[str, Any]]] = None,
                  dataset: Any = None, ceilings: Optional[dict[str, Any]] = None) -> ReportData:
    """Everything the report shows, read from the archive (nothing is written).

    ``rounds``: controller rounds (dicts with run, round, best_latency_ms, spend_usd, candidates,
    definition...), added to those the controller's tables give (``rounds_from_archive``). ``dataset``: a
    ``harness.dataset.Dataset`` for the workloads' bytes and flops (the roofline's x axis); without it
    the roofline falls back to the floor-implied bandwidth. ``ceilings``: override ceilings.json.
    """
    db = archive.db
    envs = {r["id"]: r for r in _rows(db, "select id, hardware, data from environments")}
    hardware_of = {k: v["hardware"] or "" for k, v in envs.items()}
    where, params = ("where definition = ?", [definition]) if definition else ("", [])
    subs = _rows(db, f"select * from submissions {where} order by id desc", params)
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
        if best is not None and any(w.status == PASSED and w.timed_ms for w in best.workloads):
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
        if best is not None and any(w.status == PASSED for w in best.workloads) and not any(
                w.fi_official_ms for w in best.workloads):
            section.notices.append("no FlashInfer baselines recorded for the leading solution")
        sections.append(section)
    hardware = sorted({h for c in (c for s in sections for c in s.submissions) for h in [c.hardware] if h})
    generated = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return ReportData(archive=str(archive.folder), generated_at=generated, sections=sections, hardware=hardware,
                      notices=notices)


# -- diff -----------------------------------------------------------------------------------------------------


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
    from .archive import ArchiveError

    ref = str(ref).strip()
    db = archive.db
    clause, extra = (" and definition = ?", [definition]) if definition else ("", [])
    if ref.isdigit():
        if db.execute(f"select 1 from submissions where id = ?{clause}", [int(ref), *extra]).fetchone():
            return int(ref)
    rows = db.execute(f"select id, definition from submissions where solution_name = ?{clause} order by id desc",
                      [ref, *extra]).fetchall()
    if rows:
        defs = {d for _, d in rows}
        if len(defs) > 1:
            raise ArchiveError(f"solution {ref!r} was submitted for {len(defs)} definitions "
                               f"({', '.join(sorted(defs))}): pass --definition or a submission id")
        return int(rows[0][0])
    if len(ref) >= 6 and re.fullmatch(r"[0-9a-fA-F]+", ref):
        rows = db.execute(f"select id, solution_hash from submissions where solution_hash like ?{clause} "
                          "order by id desc", [ref.lower() + "%", *extra]).fetchall()
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
                                    wa.latency_ms if wa and wa.status == PASSED else None,
                                    wb.latency_ms if wb and wb.status == PASSED else None))
    return SubmissionDiff(a, b, files, deltas)


# =====================================================================================================
# Charts
# =====================================================================================================

PALETTE = {"candidate": "#0072B2", "fi_official": "#E69F00", "fi_kernel": "#CC79A7", "floor": "#7f7f7f",
           "roof": "#222222", "accent": "#009E73", "spend": "#D55E00"}


@dataclass
class Series:
    name: str
    x: list[Any]
    y: list[Optional[float]]
    style: str = "bar"  # bar | line | step | points | hollow | roof
    color: str = PALETTE["candidate"]
    tips: Optional[list[str]] = None  # hover text per point


@dataclass
class Chart:
    key: str  # a stable id: latency, roofline, bandwidth, fraction, trajectory-latency, ...
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    categories: Optional[list[str]] = None  # bar charts: x is categorical
    logx: bool = False
    logy: bool = False
    hlines: list[tuple[float, str, str]] = field(default_factory=list)  # (y, label, color)
    # (x, y, text, placement "above" | "below") in data units: the text starts at x, above or below y
    annotations: list[tuple[float, float, str, str]] = field(default_factory=list)
    width: int = 1100
    height: int = 420
    integer_x: bool = False
    y_from_zero: bool = False  # a quantity that is never negative (spend): the axis starts at 0


def _finite(vs: Iterable[Optional[float]], positive: bool = False) -> list[float]:
    return [float(v) for v in vs if v is not None and math.isfinite(v) and (v > 0 or not positive)]


def _tick_label(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{m}e{int(e)}"
    return f"{v:g}"


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


class _Axis:
    def __init__(self, values: list[float], log: bool, px0: float, px1: float, include_zero: bool = False,
                 integer: bool = False):
        self.log, self.px0, self.px1 = log, px0, px1
        if log:
            vals = [v for v in values if v > 0] or [1.0]
            lo, hi = min(vals), max(vals)
            self.lo = 10 ** math.floor(math.log10(lo) + 1e-9)
            self.hi = 10 ** math.ceil(math.log10(hi) - 1e-9)
            if self.hi <= self.lo:
                self.hi = self.lo * 10
        else:
            vals = values or [0.0, 1.0]
            lo, hi = min(vals), max(vals)
            if include_zero:
                lo, hi = min(lo, 0.0), max(hi, 0.0)
            if hi == lo:
                hi = lo + (abs(lo) or 1.0)
            step = _nice_step(hi - lo)
            if integer:
                step = max(1.0, round(step))
            self.step = step
            self.lo = math.floor(lo / step) * step
            self.hi = math.ceil(hi / step) * step

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo * 1e-3)
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.px0 + t * (self.px1 - self.px0)

    def ticks(self) -> list[tuple[float, str, bool]]:
        """(value, label, major)."""
        if self.log:
            e0, e1 = round(math.log10(self.lo)), round(math.log10(self.hi))
            out = []
            for e in range(e0, e1 + 1):
                out.append((10.0 ** e, _tick_label(10.0 ** e), True))
                if e < e1:
                    for m in ((2, 5) if e1 - e0 <= 3 else ()):
                        out.append((m * 10.0 ** e, _tick_label(m * 10.0 ** e), False))
                    for m in range(2, 10):
                        if e1 - e0 > 3 or m not in (2, 5):
                            out.append((m * 10.0 ** e, "", False))
            return out
        n = int(round((self.hi - self.lo) / self.step))
        return [(self.lo + i * self.step, _tick_label(round(self.lo + i * self.step, 10)), True) for i in range(n + 1)]


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _text_width(s: str, size: float = 11) -> float:
    return len(s) * size * 0.56


def _chart_width(chart: Chart) -> int:
    """The chart's width, widened to fit its title and its legend on one line each."""
    legend = sum(_text_width(s.name, 11.5) + 30 for s in chart.series)
    return int(max(chart.width, _text_width(chart.title, 14) * 1.08 + 94, legend + 110))


def render_builtin(chart: Chart) -> str:
    """The chart as an SVG element, drawn without any plotting library."""
    left = 78
    W, H = _chart_width(chart), chart.height
    font = 'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"'
    right = 24
    # legend entries, wrapped into rows under the title
    legend: list[tuple[float, int, Series]] = []
    lx, row = float(left), 0
    for s in chart.series:
        w = _text_width(s.name, 11.5) + 30
        if lx + w > W - right and lx > left:
            lx, row = float(left), row + 1
        legend.append((lx, row, s))
        lx += w
    top = 44 + 16 * row
    cats = chart.categories or []
    if cats:
        longest = max((_text_width(c, 11) for c in cats), default=0)
        bottom = int(min(longest * 0.62 + 48, 190))
    else:
        bottom = 58
    x0, x1, y0, y1 = left, W - right, H - bottom, top
    parts: list[str] = []
    add = parts.append

    yvals = _finite((v for s in chart.series for v in s.y), positive=chart.logy)
    yvals += [h for h, _, _ in chart.hlines if h is not None and (h > 0 or not chart.logy)]
    yvals += [a[1] for a in chart.annotations if not chart.logy or a[1] > 0]
    bar_like = any(s.style == "bar" for s in chart.series)
    yaxis = _Axis(yvals, chart.logy, y0, y1, include_zero=(bar_like or chart.y_from_zero) and not chart.logy)
    if cats:
        band = (x1 - x0) / max(len(cats), 1)
        xpos = lambda i: x0 + band * (i + 0.5)  # noqa: E731
        xaxis = None
    else:
        xvals = _finite((v for s in chart.series for v in s.x), positive=chart.logx)
        xvals += [a[0] for a in chart.annotations if not chart.logx or a[0] > 0]
        xaxis = _Axis(xvals, chart.logx, x0, x1, integer=chart.integer_x)
        if chart.integer_x and not chart.logx and xaxis.lo == xaxis.hi:
            xaxis.hi = xaxis.lo + 1

    add(f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        f'role="img" aria-label="{_esc(chart.title)}" {font} font-size="12" '
        f'style="max-width:100%;height:auto;background:#fff">')
    add(f"<title>{_esc(chart.title)}</title>")
    # plot area, grid and ticks
    add(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#fbfbfd" stroke="none"/>')
    for v, label, major in yaxis.ticks():
        if not (min(yaxis.lo, yaxis.hi) - 1e-12 <= v <= max(yaxis.lo, yaxis.hi) * (1 + 1e-9)):
            continue
        py = yaxis(v)
        add(f'<line x1="{x0}" x2="{x1}" y1="{py:.1f}" y2="{py:.1f}" stroke="{"#dcdce4" if major else "#eeeef3"}" '
            f'stroke-width="1"/>')
        if label:
            add(f'<text x="{x0 - 6}" y="{py + 4:.1f}" text-anchor="end" fill="#333" '
                f'font-size="{11 if major else 10}">{_esc(label)}</text>')
    if xaxis is not None:
        for v, label, major in xaxis.ticks():
            if not (xaxis.lo - 1e-12 <= v <= xaxis.hi * (1 + 1e-9)):
                continue
            px = xaxis(v)
            add(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{y1}" y2="{y0}" stroke="{"#dcdce4" if major else "#eeeef3"}"/>')
            if label:
                add(f'<text x="{px:.1f}" y="{y0 + 16}" text-anchor="middle" fill="#333" '
                    f'font-size="{11 if major else 10}">{_esc(label)}</text>')
    else:
        for i, c in enumerate(cats):
            px = xpos(i)
            add(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{y0}" y2="{y0 + 4}" stroke="#555"/>')
            add(f'<text x="{px + 3:.1f}" y="{y0 + 12}" text-anchor="end" fill="#333" font-size="11" '
                f'transform="rotate(-35 {px + 3:.1f} {y0 + 12})">{_esc(c)}</text>')
    add(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#888"/>')

    # data
    bars = [s for s in chart.series if s.style == "bar"]
    if cats and bars:
        band = (x1 - x0) / max(len(cats), 1)
        inner = band * 0.8
        bw = inner / len(bars)
        base = y0 if chart.logy else yaxis(0.0)
        for j, s in enumerate(bars):
            for i, v in enumerate(s.y):
                if v is None or not math.isfinite(v) or (chart.logy and v <= 0):
                    continue
                bx = x0 + band * i + (band - inner) / 2 + j * bw
                py = yaxis(v)
                top_y, h = (py, base - py) if py <= base else (base, py - base)
                tip = s.tips[i] if s.tips else f"{s.name}, {cats[i]}: {_tick_label(v) if v >= 1e5 else f'{v:.4g}'}"
                add(f'<rect x="{bx:.1f}" y="{top_y:.1f}" width="{max(bw - 1, 1):.1f}" height="{max(h, 0.5):.1f}" '
                    f'fill="{s.color}"><title>{_esc(tip)}</title></rect>')
    for s in chart.series:
        if s.style == "bar":
            continue
        pts = []
        for i, (xv, yv) in enumerate(zip(s.x, s.y)):
            if yv is None or not math.isfinite(yv) or (chart.logy and yv <= 0):
                continue
            if cats:
                px = xpos(int(xv)) if isinstance(xv, (int, float)) else xpos(cats.index(xv))
            else:
                if xv is None or (chart.logx and xv <= 0):
                    continue
                px = xaxis(xv)  # type: ignore[misc]
            pts.append((px, yaxis(yv), i))
        if s.style in ("line", "roof", "step") and len(pts) > 1:
            if s.style == "step":
                path = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
                for (pxa, pya, _), (pxb, pyb, _) in zip(pts, pts[1:]):
                    path.append(f"H{pxb:.1f}V{pyb:.1f}")
                add(f'<path d="{" ".join(path)}" fill="none" stroke="{s.color}" stroke-width="2"/>')
            else:
                width = 2.5 if s.style == "roof" else 2
                add(f'<polyline points="{" ".join(f"{px:.1f},{py:.1f}" for px, py, _ in pts)}" fill="none" '
                    f'stroke="{s.color}" stroke-width="{width}"/>')
        if s.style in ("line", "points", "hollow"):
            for px, py, i in pts:
                tip = s.tips[i] if s.tips else f"{s.name}: {s.y[i]:.4g}"
                fill = "#fff" if s.style == "hollow" else s.color
                add(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{4.5 if s.style != "line" else 3.5}" fill="{fill}" '
                    f'stroke="{s.color}" stroke-width="1.8"><title>{_esc(tip)}</title></circle>')
    for hv, label, color in chart.hlines:
        if hv is None or (chart.logy and hv <= 0):
            continue
        py = yaxis(hv)
        add(f'<line x1="{x0}" x2="{x1}" y1="{py:.1f}" y2="{py:.1f}" stroke="{color}" stroke-width="1.6" '
            f'stroke-dasharray="6 4"/>')
        add(f'<text x="{x1 - 6}" y="{py - 5:.1f}" text-anchor="end" fill="{color}" font-size="11">{_esc(label)}</text>')
    for ax_, ay, text, place in chart.annotations:
        if xaxis is None:
            continue
        dy = 16 if place == "below" else -6
        add(f'<text x="{xaxis(ax_) + 4:.1f}" y="{yaxis(ay) + dy:.1f}" fill="#222" font-size="11">{_esc(text)}</text>')

    # axis labels, title, legend
    add(f'<text x="{(x0 + x1) / 2:.1f}" y="{H - 8}" text-anchor="middle" fill="#111" font-size="12.5">'
        f'{_esc(chart.xlabel)}</text>')
    add(f'<text x="16" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" fill="#111" font-size="12.5" '
        f'transform="rotate(-90 16 {(y0 + y1) / 2:.1f})">{_esc(chart.ylabel)}</text>')
    add(f'<text x="{x0}" y="18" fill="#111" font-size="14" font-weight="600">{_esc(chart.title)}</text>')
    for lx, row, s in legend:
        cy = 32 + 16 * row
        if s.style == "bar":
            add(f'<rect x="{lx:.1f}" y="{cy - 5}" width="12" height="10" fill="{s.color}"/>')
        elif s.style in ("points", "hollow"):
            add(f'<circle cx="{lx + 6:.1f}" cy="{cy}" r="4.5" fill="{"#fff" if s.style == "hollow" else s.color}" '
                f'stroke="{s.color}" stroke-width="1.8"/>')
        else:
            add(f'<line x1="{lx:.1f}" x2="{lx + 14:.1f}" y1="{cy}" y2="{cy}" stroke="{s.color}" stroke-width="2.5"/>')
        add(f'<text x="{lx + 18:.1f}" y="{cy + 4}" fill="#222" font-size="11.5">{_esc(s.name)}</text>')
    add("</svg>")
    return "\n".join(parts)


def _matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: F401
    except Exception:
        return False
    return True


def render_matplotlib(chart: Chart) -> str:
    """The chart through matplotlib's SVG backend (text kept as text), as an SVG element."""
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    rc = {"svg.fonttype": "none", "font.size": 10, "axes.titlesize": 12, "axes.labelsize": 11,
          "svg.hashsalt": f"crucible-{chart.key}"}
    with matplotlib.rc_context(rc):
        fig = Figure(figsize=(_chart_width(chart) / 100, chart.height / 100), dpi=100)
        FigureCanvasSVG(fig)
        ax = fig.add_subplot(1, 1, 1)
        ax.set_facecolor("#fbfbfd")
        cats = chart.categories or []
        bars = [s for s in chart.series if s.style == "bar"]
        if cats:
            n = max(len(bars), 1)
            inner = 0.8
            for j, s in enumerate(bars):
                xs = [i - inner / 2 + (j + 0.5) * inner / n for i in range(len(cats))]
                ys = [v if v is not None and math.isfinite(v) and (v > 0 or not chart.logy) else float("nan")
                      for v in s.y]
                ax.bar(xs, ys, width=inner / n * 0.95, color=s.color, label=s.name)
            ax.set_xticks(range(len(cats)))
            ax.set_xticklabels(cats, rotation=35, ha="right")
            ax.set_xlim(-0.6, len(cats) - 0.4)
        for s in chart.series:
            if s.style == "bar":
                continue
            xs = [cats.index(x) if cats and not isinstance(x, (int, float)) else x for x in s.x]
            ys = [v if v is not None and math.isfinite(v) else float("nan") for v in s.y]
            if s.style == "roof":
                ax.plot(xs, ys, color=s.color, lw=2.2, label=s.name)
            elif s.style == "line":
                ax.plot(xs, ys, color=s.color, lw=2, marker="o", ms=5, label=s.name)
            elif s.style == "step":
                ax.step(xs, ys, where="post", color=s.color, lw=2, label=s.name)
            elif s.style == "hollow":
                ax.scatter(xs, ys, s=40, facecolors="white", edgecolors=s.color, linewidths=1.8, label=s.name, zorder=3)
            else:
                ax.scatter(xs, ys, s=40, color=s.color, label=s.name, zorder=3)
        for hv, label, color in chart.hlines:
            if hv is None or (chart.logy and hv <= 0):
                continue
            ax.axhline(hv, color=color, ls="--", lw=1.5)
            ax.annotate(label, xy=(1, hv), xycoords=("axes fraction", "data"), xytext=(-4, 4),
                        textcoords="offset points", ha="right", color=color, fontsize=9)
        for xv, yv, text, place in chart.annotations:
            ax.annotate(text, xy=(xv, yv), xytext=(4, -6 if place == "below" else 5), textcoords="offset points",
                        fontsize=9, va="top" if place == "below" else "bottom")
        for log, axis, setter in ((chart.logy, ax.yaxis, ax.set_yscale), (chart.logx, ax.xaxis, ax.set_xscale)):
            if not log:
                continue
            setter("log")
            lo, hi = (ax.get_ylim() if axis is ax.yaxis else ax.get_xlim())
            if lo > 0 and math.log10(hi / lo) <= 2.5:  # a short range: label 1, 2 and 5 of each decade
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: _tick_label(v)))
            axis.set_minor_formatter(NullFormatter())
        if chart.integer_x:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if chart.y_from_zero and not chart.logy:
            ax.set_ylim(0, max(ax.get_ylim()[1], 0.01))  # all-zero spend (offline) still gets a visible scale
        ax.set_title(chart.title, loc="left", fontweight="bold", pad=26 if chart.series else 8)
        ax.set_xlabel(chart.xlabel)
        ax.set_ylabel(chart.ylabel)
        ax.grid(True, which="major", color="#dcdce4", lw=0.8)
        ax.set_axisbelow(True)
        if chart.series:
            ax.legend(frameon=False, fontsize=9, ncol=len(chart.series), loc="lower left",
                      bbox_to_anchor=(0, 1.0), borderaxespad=0.2, handlelength=1.6, columnspacing=1.2)
        # Room above the highest line or label (a ceiling drawn at the top edge would hide its label).
        tops = [h for h, _, _ in chart.hlines if h] + [y for _, y, _, _ in chart.annotations]
        if tops:
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, max(hi, max(tops) * (2.0 if chart.logy else 1.12)))
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.08)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r'<svg([^>]*?)\swidth="([\d.]+)pt"\s+height="([\d.]+)pt"',
                 lambda m: f'<svg{m.group(1)} class="plot" role="img" aria-label="{_esc(chart.title)}" '
                           f'width="{float(m.group(2)) * 4 / 3:.0f}" height="{float(m.group(3)) * 4 / 3:.0f}" '
                           f'style="max-width:100%;height:auto"', svg, count=1)
    return svg


def render_chart(chart: Chart, backend: str = "auto") -> str:
    """``backend``: auto (matplotlib when importable, else built-in), matplotlib, builtin."""
    if backend == "matplotlib" or (backend == "auto" and _matplotlib_available()):
        return render_matplotlib(chart)
    return render_builtin(chart)


def chart_backend(backend: str = "auto") -> str:
    return "matplotlib" if backend == "matplotlib" or (backend == "auto" and _matplotlib_available()) else "builtin"


# -- the charts of a section ------------------------------------------------------------------------------


def _bar_width(categories: int, series: int) -> int:
    """Wide enough for the bars, no wider: a chart of two workloads need not span the page."""
    return int(max(560, min(1100, 150 + categories * (22 * series + 26))))


def latency_chart(c: Candidate, key: str = "latency") -> Optional[Chart]:
    rows = [w for w in c.workloads if w.evaluated]
    if not any(w.latency_ms for w in rows):
        return None
    cats = [w.label for w in rows]
    series = [Series(f"{c.solution_name} (latency)", cats, [w.latency_ms if w.status == PASSED else None for w in rows],
                     color=PALETTE["candidate"])]
    if any(w.fi_official_ms for w in rows):
        series.append(Series("FlashInfer (official, plan inside)", cats, [w.fi_official_ms for w in rows],
                             color=PALETTE["fi_official"]))
    if any(w.fi_kernel_ms for w in rows):
        series.append(Series("FlashInfer (kernel, plan in setup)", cats, [w.fi_kernel_ms for w in rows],
                             color=PALETTE["fi_kernel"]))
    if any(w.floor_ms for w in rows):
        series.append(Series("roofline floor", cats, [w.floor_ms for w in rows], color=PALETTE["floor"]))
    return Chart(key, f"Latency per workload: {c.solution_name} against FlashInfer and the floor", "workload",
                 "latency (ms, log scale)", series, categories=cats, logy=True,
                 width=_bar_width(len(cats), len(series)))


def roofline_charts(r: Roofline, solution: str) -> list[Chart]:
    charts: list[Chart] = []
    cand = [p for p in r.points if p.who == "candidate"]
    fi = [p for p in r.points if p.who == "FlashInfer"]
    if r.has_flops and cand:
        series: list[Series] = []
        intens = _finite(p.intensity for p in r.points)
        if r.memory_bytes_per_s:
            ridge = (r.flops_per_s / r.memory_bytes_per_s) if r.flops_per_s else max(intens) * 8
            lo_x = 10 ** math.floor(math.log10(min(intens) / 2))
            hi_x = 10 ** math.ceil(math.log10(max(max(intens), ridge) * 2))
            xs = [lo_x, ridge, hi_x] if r.flops_per_s else [lo_x, hi_x]
            ys = [min(x * r.memory_bytes_per_s, r.flops_per_s or math.inf) / 1e12 for x in xs]
            series.append(Series("roofline (measured ceilings)" if r.flops_per_s else "memory roof", xs, ys,
                                 style="roof", color=PALETTE["roof"]))
        series.append(Series(f"{solution}", [p.intensity for p in cand], [p.flops_per_s / 1e12 for p in cand],
                             style="points", color=PALETTE["candidate"],
                             tips=[f"{p.label}: {p.flops_per_s / 1e12:.3g} TFLOP/s, {p.bytes_per_s / 1e9:.0f} GB/s, "
                                   f"{p.latency_ms:.4g} ms" for p in cand]))
        if fi:
            series.append(Series("FlashInfer (kernel)", [p.intensity for p in fi], [p.flops_per_s / 1e12 for p in fi],
                                 style="hollow", color=PALETTE["fi_official"],
                                 tips=[f"FlashInfer {p.label}: {p.flops_per_s / 1e12:.3g} TFLOP/s, "
                                       f"{p.latency_ms:.4g} ms" for p in fi]))
        ann = []
        if r.memory_bytes_per_s:
            # Right of the points (which sit at the workloads' intensity), under the slanted roof.
            at = max(intens) * 3
            ann.append((at, at * r.memory_bytes_per_s / 1e12, f"memory {r.memory_bytes_per_s / 1e9:,.0f} GB/s",
                        "below"))
        if r.flops_per_s and r.memory_bytes_per_s:
            ann.append((ridge * 1.2, r.flops_per_s / 1e12, f"bf16 {r.flops_per_s / 1e12:,.0f} TFLOP/s", "below"))
        charts.append(Chart("roofline", "Roofline: attained throughput per workload against the ceilings",
                            "arithmetic intensity (FLOP/byte, log scale)", "attained throughput (TFLOP/s, log scale)",
                            series, logx=True, logy=True, annotations=ann, width=760, height=440))
    if cand:
        cats = [p.label for p in cand]
        fi_by = {p.label: p for p in fi}
        series = [Series(solution, cats, [p.bytes_per_s / 1e9 for p in cand], color=PALETTE["candidate"])]
        if fi:
            series.append(Series("FlashInfer (kernel)", cats,
                                 [fi_by[l].bytes_per_s / 1e9 if l in fi_by else None for l in cats],
                                 color=PALETTE["fi_official"]))
        hl = [(r.memory_bytes_per_s / 1e9, f"memory ceiling {r.memory_bytes_per_s / 1e9:,.0f} GB/s", PALETTE["spend"])] \
            if r.memory_bytes_per_s else []
        charts.append(Chart("bandwidth", "Achieved memory bandwidth per workload against the ceiling", "workload",
                            "achieved bandwidth (GB/s)", series, categories=cats, hlines=hl,
                            width=_bar_width(len(cats), len(series))))
    elif any(f is not None for _, f in r.fractions):
        cats = [l for l, _ in r.fractions]
        charts.append(Chart("fraction", "Share of the roofline reached per workload (floor / latency)", "workload",
                            "fraction of floor (%)", [Series(solution, cats, [None if f is None else 100 * f
                                                                              for _, f in r.fractions])],
                            categories=cats, hlines=[(100.0, "roofline (100%)", PALETTE["spend"])],
                            width=_bar_width(len(cats), 1)))
    return charts


def trajectory_charts(run: str, rounds: list[Round]) -> list[Chart]:
    charts = []
    xs = [r.round for r in rounds]
    if any(r.best_latency_ms for r in rounds):
        best_so_far: list[Optional[float]] = []
        cur: Optional[float] = None
        for r in rounds:
            if r.best_latency_ms is not None:
                cur = r.best_latency_ms if cur is None else min(cur, r.best_latency_ms)
            best_so_far.append(cur)
        metric = next((r.metric for r in rounds if r.metric), "")
        ylabel = "best latency (ms)"
        vals = _finite(r.best_latency_ms for r in rounds)
        logy = bool(vals) and max(vals) / max(min(vals), 1e-12) > 20
        charts.append(Chart(f"trajectory-latency-{run}", "Best latency per round" + (f" ({metric})" if metric else ""),
                            "round", ylabel,
                            [Series("best this round", xs, [r.best_latency_ms for r in rounds], style="line",
                                    color=PALETTE["candidate"],
                                    tips=[f"round {r.round}: {r.best_latency_ms} ms ({r.best_solution})"
                                          for r in rounds]),
                             Series("best so far", xs, best_so_far, style="step", color=PALETTE["accent"]),
                             *([Series("incumbent", xs, [r.incumbent_latency_ms for r in rounds], style="step",
                                       color=PALETTE["roof"],
                                       tips=[f"round {r.round}: {r.incumbent} {r.incumbent_latency_ms} ms"
                                             for r in rounds])]
                               if any(r.incumbent_latency_ms is not None for r in rounds) else [])],
                            logy=logy, width=540, height=320, integer_x=True))
    regimes = sorted({k for r in rounds for k, v in r.incumbent_regimes.items() if v is not None})
    if regimes:
        colors = list(PALETTE.values())
        charts.append(Chart(f"trajectory-regimes-{run}", "Incumbent per regime (mean ms)", "round", "latency (ms)",
                            [Series(g, xs, [r.incumbent_regimes.get(g) for r in rounds], style="line",
                                    color=colors[i % len(colors)],
                                    tips=[f"round {r.round}: {g} {r.incumbent_regimes.get(g)} ms" for r in rounds])
                             for i, g in enumerate(regimes)], logy=True, width=540, height=320, integer_x=True))
    if any(r.cumulative_spend_usd is not None for r in rounds):
        charts.append(Chart(f"trajectory-spend-{run}", "Provider spend, cumulative", "round", "spend (USD)",
                            [Series("spend", xs, [r.cumulative_spend_usd for r in rounds], style="line",
                                    color=PALETTE["spend"],
                                    tips=[f"round {r.round}: ${r.cumulative_spend_usd:.2f}" if r.cumulative_spend_usd
                                          is not None else "" for r in rounds])],
                            width=540, height=320, integer_x=True, y_from_zero=True))
    return charts


# =====================================================================================================
# HTML
# =====================================================================================================

CSS = """
:root { --fg:#1b1b1f; --muted:#5f6270; --line:#e2e3ea; --bg:#ffffff; --head:#f4f5f9; --ok:#0a7d3b; --bad:#b42318;
        --warn:#9a6700; --link:#0b5cad; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
header.top { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: #fafbfd; }
header.top h1 { margin: 0 0 4px; font-size: 22px; }
main { padding: 8px 28px 40px; max-width: 1500px; }
h2 { font-size: 19px; margin: 34px 0 6px; padding-top: 8px; border-top: 2px solid var(--line); }
h3 { font-size: 15.5px; margin: 22px 0 8px; }
.meta, .muted { color: var(--muted); }
.meta span { margin-right: 16px; }
a { color: var(--link); text-decoration: none; } a:hover { text-decoration: underline; }
nav.toc { margin: 10px 0 0; } nav.toc a { margin-right: 14px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 9px; text-align: left; vertical-align: top; }
th { background: var(--head); font-weight: 600; position: sticky; top: 0; white-space: nowrap; }
th[title] { text-decoration: underline dotted #999; cursor: help; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafafc; } tbody tr:hover { background: #f0f4fb; }
tr.lead td { font-weight: 600; }
.status { font-weight: 600; font-size: 12px; padding: 1px 6px; border-radius: 4px; white-space: nowrap; }
.status.baseline { color: #555; background: #ececf2; } tr.baseline td { background: #f4f4f8; font-style: italic; }
.status.PASSED { color: var(--ok); background: #e7f6ec; } .status.RUNNING, .status.INTERRUPTED { color: var(--warn); background: #fff6dd; }
.status.SKIPPED { color: var(--muted); background: #f0f0f3; }
.status.fail { color: var(--bad); background: #fdecea; }
.good { color: var(--ok); } .bad { color: var(--bad); } .warn { color: var(--warn); }
.links a, .links span { margin-right: 8px; white-space: nowrap; display: inline-block; }
.links span.none { color: #b0b3bd; } td.links-cell { min-width: 250px; max-width: 320px; }
td.text { min-width: 14em; max-width: 26em; } td.reasons { min-width: 18em; max-width: 30em; }
.clamp { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; line-clamp: 2; overflow: hidden;
         overflow-wrap: anywhere; }
.line { display: block; max-width: 18em; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.clamp[title], .line[title] { cursor: help; } .reason { color: var(--bad); } .reason + .reason { margin-top: 3px; }
.partial { font-size: 11px; color: var(--warn); border: 1px solid #e3b341; border-radius: 3px; padding: 0 3px;
           margin-left: 4px; cursor: help; }
td.detail { min-width: 20em; overflow-wrap: anywhere; }
table.workloads th { white-space: normal; vertical-align: bottom; } table.workloads td:first-child { white-space: nowrap; }
table.not-promotable tbody tr { background: #fdf7f6; } table.not-promotable tbody tr:hover { background: #f7ecea; }
table.not-promotable td.links-cell { min-width: 190px; }
.scroll { overflow-x: auto; max-width: 100%; } .sub { display: block; color: var(--muted); font-size: 12px; }
figure.chart { margin: 10px 0 18px; padding: 8px; border: 1px solid var(--line); border-radius: 6px; background: #fff;
               display: inline-block; max-width: 100%; vertical-align: top; }
figure.chart figcaption { color: var(--muted); font-size: 12.5px; margin: 4px 4px 0; max-width: 1050px; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
.notice { background: #fff8e6; border-left: 3px solid #e3b341; padding: 6px 10px; margin: 8px 0; }
.notice.tampered { background: #fdecea; border-left-color: var(--bad); }
.empty { color: var(--muted); font-style: italic; }
pre { background: #f6f8fa; border: 1px solid var(--line); padding: 10px; overflow: auto; font-size: 12.5px;
      line-height: 1.4; max-height: 640px; }
details > summary { cursor: pointer; color: var(--link); margin: 6px 0; }
.legend-note { font-size: 12.5px; color: var(--muted); }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; } dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; }
"""


def fmt_ms(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.4g}"


def fmt_x(x: Optional[float]) -> str:
    if x is None:
        return "–"
    return f"{x:.3g}×"


def fmt_pct(x: Optional[float]) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def _status(s: str) -> str:
    cls = s if s in (PASSED, "RUNNING", "SKIPPED", INTERRUPTED) else "fail"
    return f'<span class="status {cls}">{_esc(s)}</span>'


def _speed(x: Optional[float], muted: bool = False) -> str:
    """A speedup, green from 1x up, red under; grey (``muted``) where it ranks nothing."""
    if x is None:
        return "–"
    cls = "muted" if muted else "good" if x >= 1 else "bad"
    return f'<span class="{cls}">{fmt_x(x)}</span>'


SCORE_NAMES = {"vs_reference": "score vs reference", "vs_flashinfer_official": "vs FlashInfer official",
               "vs_flashinfer_kernel": "vs FlashInfer kernel"}


def _score(c: Candidate, key: str, muted: bool = False) -> str:
    """The score, marked "partial" where its baseline left workloads out (named in the tooltip)."""
    out = _speed(c.score(key), muted)
    missing = c.scores_partial.get(key)
    if missing:
        tip = (f"partial: {SCORE_NAMES.get(key, key)} leaves out {len(missing)} workload"
               f"{'s' * (len(missing) != 1)} its baseline did not cover: {', '.join(missing)}")
        out += f'<span class="partial" title="{_esc(tip)}">partial</span>'
    return out


def _partial_notice(rows: list[Candidate]) -> str:
    lines = [f"{c.solution_name}: {SCORE_NAMES.get(k, k)} over {len(c.evaluated) - len(m)} of {len(c.evaluated)} "
             f"workloads (no baseline for {lb.clip(', '.join(m), 200)})"
             for c in rows for k, m in c.scores_partial.items()]
    if not lines:
        return ""
    return ('<div class="notice partial-scores">Partial scores, each a mean over the workloads its baseline covered: '
            + "; ".join(_esc(x) for x in lines) + "</div>")


def _clamp(text: str, full: str = "", cls: str = "", one_line: bool = False) -> str:
    """Text cut to two lines (or one, ending in an ellipsis) in its cell; the whole of it (``full``) in the tooltip.
    A cell never grows taller than that, whatever it holds (long messages, kernel names without a space)."""
    title = f' title="{_esc(full)}"' if full and full != text else ""
    return f'<span class="{"line" if one_line else "clamp"} {cls}"{title}>{_esc(text)}</span>'


def _th(label: str, tip: str = "", num: bool = False) -> str:
    cls = ' class="num"' if num else ""
    title = f' title="{_esc(tip)}"' if tip else ""
    return f"<th{cls}{title}>{_esc(label)}</th>"


def _td(content: str, num: bool = False) -> str:
    return f'<td class="num">{content}</td>' if num else f"<td>{content}</td>"


def _audit_cell(summary: lb.AuditSummary, static_findings: Sequence[dict[str, Any]] = (),
                one_line: bool = False) -> str:
    """Static-gate errors and failed runtime audits, counted ("clean" only with neither); each one in the tooltip."""
    if summary.static_errors or summary.failed:
        lines = [f"static gate error {f.get('rule', '?')} at {f.get('path', '?')}:{f.get('line', '?')}: "
                 f"{f.get('message', '')}" for f in lb.static_errors(static_findings)]
        lines += [f"{where}: {name} failed: {detail}" for where, name, detail in summary.failed[:20]]
        if len(summary.failed) > 20:
            lines.append(f"... {len(summary.failed) - 20} more")
        return _clamp(summary.text(), "\n".join(lb.clip(x, 300) for x in lines), "bad", one_line)
    if summary.clean:
        warn = f" ({summary.static_warnings} static warning{'s' * (summary.static_warnings != 1)})" \
            if summary.static_warnings else ""
        return f'<span class="good">clean</span><span class="muted">{warn}</span>'
    return '<span class="muted">–</span>'


def _reasons_cell(c: Candidate, shown: int = 2) -> str:
    """The first reasons a solution is not promotable, each cut to two lines; all of them in the tooltip."""
    reasons = c.blockers
    full = "\n".join(lb.clip(r, 300) for r in reasons)
    out = "".join(_clamp(lb.clip(r), full, "reason") for r in reasons[:shown])
    if len(reasons) > shown:
        out += f'<span class="muted" title="{_esc(full)}">+{len(reasons) - shown} more</span>'
    return out


def _promotable_mark(c: Candidate) -> str:
    reasons = c.blockers
    if not reasons:
        return '<span class="good">yes</span>'
    return f'<span class="bad" title="{_esc(chr(10).join(lb.clip(r, 300) for r in reasons))}">no</span>'


def _seal_warning(c: Candidate) -> str:
    """The row's trust markers: modified outside the harness, or judged without the full sandbox."""
    out = ""
    if c.sandbox.startswith("reduced"):
        out += f'<span class="status warn" title="{_esc(c.sandbox)}">sandbox: reduced</span>'
    if c.modified:
        out += f'<span class="status fail tampered" title="{_esc(c.seal_detail)}">{_esc(MODIFIED_WARNING)}</span>'
    return out


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_") or "x"


def _figure(chart: Chart, backend: str, caption: str = "") -> str:
    svg = render_chart(chart, backend)
    cap = f"<figcaption>{caption}</figcaption>" if caption else ""
    return f'<figure class="chart" data-chart="{_esc(chart.key)}">{svg}{cap}</figure>'


class _Writer:
    """Writes linked files under the output folder and returns their relative hrefs."""

    def __init__(self, archive: Any, out: Path):
        self.archive, self.out = archive, out

    def blob_text(self, blob: str) -> Optional[str]:
        try:
            return self.archive.get_blob(blob).decode("utf-8", errors="replace")
        except OSError:
            return None

    def write(self, rel: str, text: str) -> str:
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return rel


def _page(title: str, body: str, css_href: str = "") -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n")


def _links(c: Candidate, prefix: str = "") -> str:
    items = [f'<a href="{prefix}{c.page}#source">source</a>']
    for kind in ARTIFACT_KINDS:
        a = c.artifacts.get(kind)
        if a is not None and a.href:
            items.append(f'<a href="{prefix}{a.href}">{_esc(ARTIFACT_TITLES[kind])}</a>')
        else:
            items.append(f'<span class="none" title="not recorded">{_esc(ARTIFACT_TITLES[kind])}</span>')
    return '<span class="links">' + "".join(items) + "</span>"


SCORE_TIP = "mean of per-workload speedups; 0 if any workload failed"
LEADERBOARD_COLS = [
    ("#", "", True), ("solution", "language, author", False), ("status", "", False),
    ("workloads", "passed / evaluated", True),
    ("score", "official score: mean speedup vs the Python reference; " + SCORE_TIP, True),
    ("vs FI official", "mean speedup vs FlashInfer timed as the contest does (plan() inside the timed call)", True),
    ("vs FI kernel", "mean speedup vs FlashInfer's kernels alone (plan() in setup)", True),
    ("% of floor", "mean over passed workloads of roofline floor / latency (100% = hardware limit)", True),
    ("audits", "static-gate error findings and failed runtime audits (clean: neither)", False),
    ("runs", "submissions of this solution (the latest is shown)", True), ("submission", "", True),
    ("links", "", False),
]


def _baseline_row(b: BaselineRow, leader: Candidate) -> str:
    cells = [_td("–", True),
             _td(f'{_esc(b.name)}<span class="sub">baseline, {_esc(b.timing)}; on the {b.workloads} PASSED workloads '
                 f'of #{leader.rank}</span>'),
             _td('<span class="status baseline">baseline</span>'), _td(str(b.workloads), True),
             _td(_speed(b.vs_reference), True), _td(_speed(b.vs_fi_official), True), _td(_speed(b.vs_fi_kernel), True),
             _td(fmt_pct(b.fraction_of_floor), True), _td('<span class="muted">–</span>'), _td("–", True), _td("–", True),
             _td('<span class="muted">archived baseline timings</span>')]
    return f'<tr class="baseline">{"".join(cells)}</tr>'


def _solution_cell(c: Candidate) -> str:
    return _td(f'<a href="{c.page}">{_esc(c.solution_name)}</a>'
               f'<span class="sub">{_esc(", ".join(x for x in (c.language, c.author) if x))}</span>')


def _leaderboard_table(section: DefinitionSection) -> str:
    """The promotable solutions, ranked by score, with FlashInfer's rows where its score would rank it."""
    head = "".join(_th(n, t, num) for n, t, num in LEADERBOARD_COLS)
    rows = []
    leader = section.best
    # FlashInfer's rows go where its score would rank it, so a reader sees which candidates beat it.
    pending = sorted(section.baselines, key=lambda b: -(b.vs_reference or 0.0))
    for c in section.promotable:
        while pending and (c.score("vs_reference") or 0.0) < (pending[0].vs_reference or 0.0):
            rows.append(_baseline_row(pending.pop(0), leader))
        cells = [
            _td(str(c.rank), True), _solution_cell(c), _td(_status(c.status) + _seal_warning(c)),
            _td(f"{c.passed}/{len(c.evaluated)}", True),
            *(_td(_score(c, k), True) for k in SCORE_KEYS), _td(fmt_pct(c.mean_fraction_of_floor), True),
            f'<td class="text">{_audit_cell(c.audit_summary, c.static_findings)}</td>', _td(str(c.runs), True),
            _td(f'<a href="{c.page}">{c.submission_id}</a>', True), f'<td class="links-cell">{_links(c)}</td>',
        ]
        rows.append(f'<tr class="{"lead" if c.rank == 1 else ""}">{"".join(cells)}</tr>')
    rows.extend(_baseline_row(b, leader) for b in pending)
    return (f'<div class="scroll"><table class="leaderboard"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


NOT_PROMOTABLE_COLS = [
    ("solution", "language, author", False), ("status", "", False), ("workloads", "passed / evaluated", True),
    ("score", "mean speedup vs the Python reference, as measured; it ranks nothing here", True),
    ("vs FI official", "", True), ("audits", "static-gate error findings and failed runtime audits", False),
    ("why not promotable", "the first reasons; every one in the tooltip and on the solution's page", False),
    ("submission", "", True), ("links", "", False),
]


def _not_promotable_table(section: DefinitionSection) -> str:
    """Solutions that may not lead, whatever they scored, each with the first reasons why (scores in grey)."""
    head = "".join(_th(n, t, num) for n, t, num in NOT_PROMOTABLE_COLS)
    rows = []
    for c in section.not_promotable:
        cells = [
            _solution_cell(c), _td(_status(c.status) + _seal_warning(c)), _td(f"{c.passed}/{len(c.evaluated)}", True),
            *(_td(_score(c, k, muted=True), True) for k in ("vs_reference", "vs_flashinfer_official")),
            f'<td class="text">{_audit_cell(c.audit_summary, c.static_findings)}</td>',
            f'<td class="reasons">{_reasons_cell(c)}</td>',
            _td(f'<a href="{c.page}">{c.submission_id}</a>', True), f'<td class="links-cell">{_links(c)}</td>',
        ]
        rows.append(f'<tr class="{"modified" if c.modified else ""}">{"".join(cells)}</tr>')
    return (f'<div class="scroll"><table class="not-promotable"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


WORKLOAD_COLS = [
    ("workload", "", False), ("status", "", False),
    ("latency ms", "official latency: mean over trials of the median", True),
    ("kernel ms", "setup outside the timed call", True),
    ("FI official ms", "FlashInfer, plan() inside the timed call", True),
    ("FI kernel ms", "FlashInfer, plan() in setup", True),
    ("floor ms", "roofline floor: max(bytes / bandwidth, flops / rate)", True),
    ("vs ref", "reference latency / latency", True), ("vs FI official", "", True), ("vs FI kernel", "", True),
    ("% of floor", "floor / latency", True), ("max abs err", "", True), ("audits", "", False), ("note", "", False),
]


def _workload_table(c: Candidate, log_hrefs: Optional[dict[int, str]] = None) -> str:
    head = "".join(_th(n, t, num) for n, t, num in WORKLOAD_COLS)
    rows = []
    for w in c.workloads:
        full_note = (w.message or w.timing_note).strip()
        if w.throttled:
            full_note = full_note or "GPU throttled"
        note = lb.clip(full_note.split("\n")[0])
        label = _esc(w.label)
        if log_hrefs and w.evaluation_id in log_hrefs:
            label += f' <a class="muted" href="{log_hrefs[w.evaluation_id]}">log</a>'
        kernel = fmt_ms(w.kernel_latency_ms) if w.kernel_latency_ms not in (None, w.latency_ms) else ""
        cells = [_td(label), _td(_status(w.status)), _td(fmt_ms(w.latency_ms), True), _td(kernel, True),
                 _td(fmt_ms(w.fi_official_ms), True), _td(fmt_ms(w.fi_kernel_ms), True), _td(fmt_ms(w.floor_ms), True),
                 _td(_speed(w.speedup_vs_reference), True), _td(_speed(w.speedup_vs_fi_official), True),
                 _td(_speed(w.speedup_vs_fi_kernel), True), _td(fmt_pct(w.fraction_of_floor), True),
                 _td("–" if w.max_absolute_error is None else f"{w.max_absolute_error:.3g}", True),
                 _td(_audit_cell(lb.audit_summary([], [(w.label, w.audits)]), one_line=True)),
                 _td(_clamp(note, full_note, "warn" if w.throttled else "muted", one_line=True))]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<div class="scroll"><table class="workloads"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _rounds_table(rounds: list[Round]) -> str:
    head = "".join(_th(n, "", num) for n, num in (("round", True), ("best latency ms", True), ("candidates", True),
                                                    ("passed", True), ("promoted", True), ("spend USD", True),
                                                    ("cumulative USD", True), ("best solution", False),
                                                    ("incumbent after", False), ("incumbent ms", True),
                                                    ("vs FI", True), ("% of floor", True), ("note", False)))
    dash = lambda v: "–" if v is None else str(v)  # noqa: E731
    rows = "".join(
        "<tr>" + _td(str(r.round), True) + _td(fmt_ms(r.best_latency_ms), True)
        + _td(dash(r.candidates), True) + _td(dash(r.passed), True) + _td(dash(r.promoted), True)
        + _td("–" if r.spend_usd is None else f"{r.spend_usd:.2f}", True)
        + _td("–" if r.cumulative_spend_usd is None else f"{r.cumulative_spend_usd:.2f}", True)
        + _td(_esc(r.best_solution)) + _td(_esc(r.incumbent)) + _td(fmt_ms(r.incumbent_latency_ms), True)
        + _td("–" if r.incumbent_speedup_vs_fi is None else f"{r.incumbent_speedup_vs_fi:.3g}x", True)
        + _td("–" if r.incumbent_fraction_of_floor is None else f"{100 * r.incumbent_fraction_of_floor:.0f}%", True)
        + _td(_esc(r.note)) + "</tr>" for r in rounds)
    return f'<table class="rounds"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _section_html(s: DefinitionSection, backend: str) -> str:
    anchor = _slug(s.name)
    out = [f'<section class="definition" id="{anchor}"><h2>{_esc(s.name)}</h2>']
    n_sol = len(s.leaderboard)
    out.append(f'<p class="meta"><span>{n_sol} solution{"s" if n_sol != 1 else ""}</span>'
               f'<span>{len(s.submissions)} submission{"s" if len(s.submissions) != 1 else ""}</span>'
               f'<span>{len(s.workloads)} workloads</span></p>')
    for n in s.notices:
        out.append(f'<div class="notice">{_esc(n)}</div>')
    out.append("<h3>Leaderboard</h3>")
    if s.promotable:
        out.append(_leaderboard_table(s))
    else:
        out.append('<p class="empty">no promotable solution</p>')
    out.append('<p class="legend-note">Speedup = baseline latency / candidate latency (above 1× is faster). '
               f"Scores are the {SCORE_TIP}. Each solution's latest finished submission counts; only promotable "
               "ones (every workload PASSED, no failed audit, no static-gate error, rows as the harness sealed "
               "them) are ranked, by score. The others are listed below, unranked, whatever they scored.</p>")
    out.append(_partial_notice(s.leaderboard))
    if s.not_promotable:
        out.append(f'<h3 id="{anchor}-not-promotable">Not promotable <span class="muted">'
                   f"({len(s.not_promotable)})</span></h3>")
        out.append(_not_promotable_table(s))
    best = s.best
    if best is not None:
        out.append(f'<h3>Per workload: <a href="{best.page}">{_esc(best.solution_name)}</a> '
                   f'<span class="muted">(submission {best.submission_id}, rank 1 of the promotable)</span></h3>')
        out.append(_workload_table(best))
        charts = []
        lat = latency_chart(best)
        if lat is not None:
            charts.append(_figure(lat, backend, "Bars per workload, log scale. The floor is the least time the "
                                                "GPU's measured bandwidth and bf16 rate allow; FlashInfer official "
                                                "times plan() inside the call, as the contest does."))
        if s.roofline is not None:
            r = s.roofline
            cap = _esc(f"{r.ceilings_note}; {r.cost_note or 'workload costs unknown'}. "
                       "Candidate timed as the kernel (setup outside); FlashInfer with plan() in setup.")
            for ch in roofline_charts(r, best.solution_name):
                charts.append(_figure(ch, backend, cap))
        if charts:
            out.append('<div class="charts">' + "".join(charts) + "</div>")
        else:
            out.append('<p class="empty">no timed workloads to plot</p>')
    out.append("<h3>Controller trajectory</h3>")
    if not s.runs:
        out.append('<p class="empty">no controller runs</p>')
    for run, rounds in s.runs.items():
        total = rounds[-1].cumulative_spend_usd if rounds else None
        spent = f", ${total:.2f} spent" if total is not None else ""
        out.append(f'<h4>{_esc(run)} <span class="muted">({len(rounds)} rounds{spent})</span></h4>')
        charts = [_figure(ch, backend) for ch in trajectory_charts(run, rounds)]
        if charts:
            out.append('<div class="charts">' + "".join(charts) + "</div>")
        out.append(_rounds_table(rounds))
    if len(s.submissions) > 1:
        rows = "".join(
            "<tr>" + _td(f'<a href="{c.page}">{c.submission_id}</a>', True) + _td(_esc(c.solution_name))
            + _td(_status(c.status)) + _td(f"{c.passed}/{len(c.evaluated)}", True)
            + _td(_score(c, "vs_reference", not c.promotable), True)
            + _td(_score(c, "vs_flashinfer_official", not c.promotable), True)
            + _td(_promotable_mark(c)) + _td(_esc(c.created_at[:19].replace("T", " "))) + _td(_esc(c.hardware))
            + "</tr>" for c in s.submissions)
        head = "".join(_th(n, "", num) for n, num in (("submission", True), ("solution", False), ("status", False),
                                                        ("workloads", True), ("score", True), ("vs FI official", True),
                                                        ("promotable", False), ("created (UTC)", False),
                                                        ("hardware", False)))
        out.append(f"<details><summary>All {len(s.submissions)} submissions</summary>"
                   f'<table class="submissions"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></details>')
    out.append("</section>")
    return "\n".join(out)


INLINE_LIMIT = 200_000  # characters of an artifact shown inline on its candidate's page (the rest: the link)


def _candidate_page(c: Candidate, w: _Writer, backend: str) -> str:
    base = f"files/sub-{c.submission_id}"
    log_hrefs: dict[int, str] = {}
    for wl in c.workloads:
        if wl.log_blob:
            text = w.blob_text(wl.log_blob)
            if text is not None:
                log_hrefs[wl.evaluation_id] = "../" + w.write(f"{base}/logs/{wl.evaluation_id}-{_slug(wl.label)}.txt",
                                                              text)
    src_links = []
    for s in c.sources:
        href = w.write(f"{base}/source/{_slug(s['path'])}.txt", s["content"])
        src_links.append(f'<a href="../{href}">{_esc(s["path"])}</a>')
    body = [f'<header class="top"><h1>{_esc(c.solution_name)} <span class="muted">submission {c.submission_id}</span>'
            f'</h1><p class="meta"><a href="../index.html#{_slug(c.definition)}">← {_esc(c.definition)}</a></p></header>'
            "<main>"]
    body.append('<dl class="kv">' + "".join(
        f"<dt>{_esc(k)}</dt><dd>{v}</dd>" for k, v in [
            ("status", _status(c.status) + _seal_warning(c)), ("author", _esc(c.author)),
            ("language", _esc(c.language)),
            ("solution hash", f"<code>{_esc(c.solution_hash)}</code>"), ("hardware", _esc(c.hardware or "–")),
            ("created", _esc(c.created_at)), ("finished", _esc(c.finished_at or "(not finished)")),
            ("score vs reference", _score(c, "vs_reference", not c.promotable)),
            ("score vs FlashInfer official", _score(c, "vs_flashinfer_official", not c.promotable)),
            ("score vs FlashInfer kernel", _score(c, "vs_flashinfer_kernel", not c.promotable)),
            ("mean % of floor", fmt_pct(c.mean_fraction_of_floor)),
            ("promotable", _promotable_mark(c) if c.promotable else
             '<span class="bad">no</span><ul class="reasons">'
             + "".join(f"<li>{_esc(r)}</li>" for r in c.blockers) + "</ul>"),
            ("audits", _audit_cell(c.audit_summary, c.static_findings)),
            ("files", _links(c, "../").replace(f'../{c.page}#source', "#source")),
        ]) + "</dl>")
    if c.modified:
        body.append(f'<div class="notice tampered">{_esc(MODIFIED_WARNING)}: {_esc(c.seal_detail)}</div>')
    if not c.promotable:
        n = len(c.blockers)
        body.append(f'<div class="notice tampered">Not promotable ({n} reason{"s" * (n != 1)} above): ranked nowhere, '
                    "whatever it scored; the figures below are its own.</div>")
    partial = _partial_notice([c])
    if partial:
        body.append(partial)
    if c.message:
        body.append(f'<div class="notice">{_esc(c.message)}</div>')
    body.append("<h3>Workloads</h3>")
    body.append(_workload_table(c, log_hrefs))
    lat = latency_chart(c)
    if lat is not None:
        body.append('<div class="charts">' + _figure(lat, backend) + "</div>")
    audits = [("submission", a) for a in c.submission_audits] + [(wl.label, a) for wl in c.workloads for a in wl.audits]
    if c.static_findings:
        rows = "".join(f"<tr><td>{_esc(f.get('severity', '?'))}</td><td>{_esc(f.get('rule', '?'))}</td>"
                       f"<td>{_esc(f.get('path', '?'))}:{_esc(f.get('line', '?'))}</td>"
                       f'<td class="detail">{_esc(f.get("message", ""))}</td></tr>' for f in c.static_findings)
        errors = len(lb.static_errors(c.static_findings))
        body.append(f"<details{' open' if errors else ''}><summary>Static gate ({errors} error"
                    f"{'s' * (errors != 1)}, {len(c.static_findings) - errors} other)</summary><table><thead><tr>"
                    "<th>severity</th><th>rule</th><th>where</th><th>finding</th></tr></thead>"
                    f"<tbody>{rows}</tbody></table></details>")
    if audits:
        rows = "".join(f"<tr><td>{_esc(l)}</td><td>{_esc(a.get('name', '?'))}</td>"
                       f"<td>{'<span class=good>passed</span>' if a.get('passed') else '<span class=bad>FAILED</span>'}"
                       f'</td><td class="detail">{_esc(a.get("detail", ""))}</td></tr>' for l, a in audits)
        body.append(f"<details><summary>Audits ({len(audits)})</summary><table><thead><tr><th>workload</th><th>audit"
                    f"</th><th>result</th><th>detail</th></tr></thead><tbody>{rows}</tbody></table></details>")
    body.append(f'<h3 id="source">Source</h3><p class="links">{"".join(src_links) or "(none recorded)"}</p>')
    for s in c.sources:
        body.append(f"<details open><summary>{_esc(s['path'])}</summary><pre><code>{_esc(s['content'])}</code></pre>"
                    "</details>")
    for kind in ARTIFACT_KINDS:
        a = c.artifacts.get(kind)
        if a is not None and a.href:
            name = ARTIFACT_TITLES[kind]
            body.append(f'<h3 id="{kind}">{_esc(name[0].upper() + name[1:])}</h3>'
                        f'<p><a href="../{a.href}">{_esc(a.title)}</a></p>')
            if a.text is not None and len(a.text) <= INLINE_LIMIT:
                body.append(f"<details><summary>show</summary><pre>{_esc(a.text)}</pre></details>")
    body.append("</main>")
    return _page(f"{c.solution_name} #{c.submission_id}", "".join(body))


def render_index(data: ReportData, backend: str = "auto") -> str:
    parts = ['<header class="top"><h1>Crucible report</h1><p class="meta">'
             f"<span>archive: <code>{_esc(data.archive)}</code></span>"
             f"<span>generated {_esc(data.generated_at)}</span>"
             f"<span>hardware: {_esc(', '.join(data.hardware) or '–')}</span>"
             f"<span>plots: {chart_backend(backend)}</span></p>"]
    if data.sections:
        parts.append('<nav class="toc">' + "".join(f'<a href="#{_slug(s.name)}">{_esc(s.name)}</a>'
                                                   for s in data.sections) + "</nav>")
    parts.append("</header><main>")
    for n in data.notices:
        parts.append(f'<div class="notice">{_esc(n)}</div>')
    if not data.sections:
        parts.append('<p class="empty">the archive holds no submissions</p>')
    for s in data.sections:
        parts.append(_section_html(s, backend))
    parts.append("</main>")
    return _page("Crucible report", "\n".join(parts))


def write_report(archive: Any, out: Union[str, Path], data: Optional[ReportData] = None, backend: str = "auto",
                 **gather: Any) -> Path:
    """Write the report folder (index.html, candidates/, files/); returns the index path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = data or gather_report(archive, **gather)
    w = _Writer(archive, out)
    pages: dict[int, Candidate] = {}
    for s in data.sections:
        for c in s.submissions:
            for kind, a in c.artifacts.items():
                text = a.text if a.text is not None else (w.blob_text(a.blob) if a.blob else None)
                if text is not None:
                    a.text = text
                    a.href = w.write(f"files/sub-{c.submission_id}/{kind}.txt", text)
            pages[c.submission_id] = c
    index = out / "index.html"
    index.write_text(render_index(data, backend), encoding="utf-8")
    for c in pages.values():
        w.write(c.page, _candidate_page(c, w, backend))
    return index
