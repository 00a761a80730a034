"""Submissions read from the archive as ``Candidate`` rows (workloads, sources, artifacts), and the leaderboard
order over them (one row per solution; who may be ranked is ``harness.review.leaderboard``'s decision)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Optional

from ..archive import queries as q
from ..data.statuses import EvaluationStatus, NO_VERDICT
from . import leaderboard as lb
from .model import ARTIFACT_KINDS, ARTIFACT_TITLES, Artifact, Candidate, WorkloadRow


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


def _finite(v: Any) -> Optional[float]:
    """A figure the report can show and plot, or None (shown as missing)."""
    x = _num(v)
    return x if x is not None and math.isfinite(x) else None


def _time_ms(v: Any) -> Optional[float]:
    """A time: finite and above zero, else None (shown as missing). An archive an older import filled may hold an
    infinite, zero or negative latency, on which the latency chart's log scale failed (red team round 12, V6)."""
    x = _finite(v)
    return x if x is not None and x > 0 else None


def _workload_row(e: dict[str, Any]) -> WorkloadRow:
    x = _loads(e.get("extra"))
    throttled = x.get("throttled")
    return WorkloadRow(
        evaluation_id=e["id"], uuid=e["workload_uuid"], label=e["workload_label"] or e["workload_uuid"][:8],
        status=e["status"], latency_ms=_time_ms(e["latency_ms"]),
        kernel_latency_ms=_time_ms(x.get("kernel_latency_ms")),
        reference_latency_ms=_time_ms(e["reference_latency_ms"]), speedup_vs_reference=_finite(e["speedup_factor"]),
        fi_official_ms=_time_ms(x.get("flashinfer_official_ms")), fi_kernel_ms=_time_ms(x.get("flashinfer_kernel_ms")),
        speedup_vs_fi_official=_finite(x.get("speedup_vs_flashinfer_official")),
        speedup_vs_fi_kernel=_finite(x.get("speedup_vs_flashinfer_kernel")), floor_ms=_time_ms(x.get("floor_ms")),
        fraction_of_floor=_finite(x.get("fraction_of_floor")), throttled=None if throttled is None else bool(throttled),
        aligned=None if e["aligned"] is None else bool(e["aligned"]), max_absolute_error=_num(e["max_absolute_error"]),
        audits=[a for a in x.get("audits") or [] if isinstance(a, dict)], message=e["message"] or "",
        timing_note=e["timing_note"] or "", log_blob=e["log_blob"], bytes_moved=_finite(x.get("bytes_moved")),
        flops=_finite(x.get("flops")))


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
        for r in q.artifact_rows(db, sub["id"]):
            if r["kind"] in ARTIFACT_KINDS:
                title = r["name"] if r["name"] and r["name"] != r["kind"] else ARTIFACT_TITLES[r["kind"]]
                found[r["kind"]] = Artifact(r["kind"], title, r["blob"])
    for kind, blob in (_loads(sub.get("options")).get("artifacts") or {}).items():
        if kind in ARTIFACT_KINDS and isinstance(blob, str) and kind not in found:
            found[kind] = Artifact(kind, ARTIFACT_TITLES[kind], blob)
    labels = {w.uuid: w.label for w in workloads}
    if "profile" not in found and "profiles" in tables:
        rows = q.submission_profile_rows(db, sub["id"]) or q.unattached_profile_rows(db, sub["solution_hash"])
        if rows:
            found["profile"] = Artifact("profile", f"profile digest ({len(rows)} workload{'s' * (len(rows) != 1)})",
                                        text=format_profiles(rows, labels))
    if "transcript" not in found and {"candidates", "requests", "responses"} <= tables:
        text = controller_transcript(archive, sub["id"], sub["solution_hash"])
        if text:
            found["transcript"] = Artifact("transcript", "generation transcript", text=text)
    if "build_log" not in found:
        # A failed build is recorded as each workload's log: that log is the build log.
        failed_build = next((w for w in workloads if w.status == EvaluationStatus.COMPILE_ERROR and w.log_blob), None)
        if failed_build is not None:
            found["build_log"] = Artifact("build_log", "build log (failed build)", failed_build.log_blob)
    return found


PROFILE_KEYS_SHOWN = {"kernels", "reason", "missing_metrics", "status", "backend", "tool_version", "arch", "command",
                      "requested_metrics", "workload_uuid", "solution_hash", "seed", "report_path", "csv_blob",
                      "log_blob", "wall_s"}


def format_profiles(rows: list[dict[str, Any]], labels: Optional[dict[str, str]] = None) -> str:
    """Profile rows (harness.profiling.record_profile) as text: status, tool, and each kernel's metrics."""
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
    cands = q.candidate_rows_of_submission(db, submission_id) or q.candidate_rows_of_solution(db, solution_hash)
    cand = next((c for c in cands if c.get("request_id")), None)
    if cand is None:
        return ""
    req = q.request_rows(db, cand["request_id"])
    resp = q.response_rows_of_request(db, cand["request_id"])
    parts = [f"# Candidate {cand['solution_name']}: run {cand['run_id']}, round {cand['round']}"
             + (f", request {req[0]['key']}" if req else "")]
    if req:
        try:
            from ..data.generation_request import GenerationRequest, render_prompt

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
    sub = q.submission_row(archive.db, submission_id)
    if sub is None:
        from ..archive.database import ArchiveError

        raise ArchiveError(f"no submission {submission_id} in {archive.folder}")
    return _candidate(archive, sub, environments)


def _candidate(archive: Any, sub: dict[str, Any], environments: Optional[dict[str, str]] = None) -> Candidate:
    evals = q.evaluation_rows(archive.db, sub["id"])
    workloads = [_workload_row(e) for e in evals]
    sol = q.solution_rows(archive.db, sub["solution_hash"])
    sources: list[dict[str, str]] = []
    language, unreadable = "", "the archive has no solution row for it"
    if sol:
        language = sol[0]["language"] or ""
        blob = str(sol[0]["blob"] or "")
        try:
            sources = [{"path": str(s.get("path", "")), "content": str(s.get("content", ""))}
                       for s in json.loads(archive.get_blob(blob)).get("sources", [])]
            unreadable = ""
        except OSError as e:
            unreadable = f"solution blob {blob[:12]}: {e.strerror or e}"
        except (ValueError, AttributeError, TypeError):  # not JSON (UnicodeDecodeError too), or no solution's JSON
            unreadable = f"solution blob {blob[:12]}: not a solution's JSON (damaged)"
    hardware = ""
    if sub.get("environment_id"):
        if environments is not None and sub["environment_id"] in environments:
            hardware = environments[sub["environment_id"]]
        else:
            hardware = q.environment_hardware(archive.db, sub["environment_id"]) or ""
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
        scores=scores, workloads=workloads, sources=sources, sources_unreadable=unreadable,
        artifacts=_artifacts(archive, sub, workloads),
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
    return (c.modified, c.status != EvaluationStatus.PASSED, -(s if s is not None else -math.inf),
            -(f if f is not None else -math.inf), -c.submission_id)


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
