"""Who may lead a leaderboard, and why not: pure decisions over archived submissions.

A submission is promotable when nothing in ``promotion_reasons`` applies: every workload PASSED, no
runtime audit failed, the static gate found no error, the audits ran, and its rows still match the
archive's seal. Only promotable solutions are ranked (by score); the others are listed apart with their
reasons, whatever they scored. The reasons come from the archived data itself (workload statuses and
audits, the static gate's findings, the submission's own audits) and from the verdict the harness
recorded when it finished the submission (``promotion_blockers``), so an archive written before that
verdict existed is judged the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..data.statuses import EvaluationStatus, SubmissionStatus

MODIFIED = "archive modified outside the harness (the seal does not match)"

T = TypeVar("T")


def static_errors(findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if isinstance(f, dict) and f.get("severity") == "error"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _grouped(items: Sequence[tuple[str, str]], total: int, what: Callable[[str], str]) -> list[str]:
    """(key, label) pairs as one line per key, in first-seen order: what(key) on n of total workloads (labels)."""
    by_key: dict[str, list[str]] = {}
    for key, label in items:
        by_key.setdefault(key, []).append(label)
    out = []
    for key, labels in by_key.items():
        shown = ", ".join(labels[:3]) + (", ..." if len(labels) > 3 else "")
        out.append(f"{what(key)} on {len(labels)} of {_plural(total, 'workload')} ({shown})")
    return out


def promotion_reasons(status: str, workloads: Sequence[dict[str, Any]], static_findings: Sequence[dict[str, Any]],
                      audit_level: str = "", submission_audits: Sequence[dict[str, Any]] = (),
                      recorded: Sequence[str] = (), recorded_promotable: bool | None = None,
                      modified: bool = False) -> list[str]:
    """Why this submission cannot lead (empty: it can), most telling first, one line per kind of reason.

    ``workloads``: {"label", "status", "audits"} per workload; ``recorded``: the promotion blockers the harness
    archived with the submission (harness.audits.verdicts.promotion_blockers): those the data here does not show are
    kept as they are."""
    reasons = [MODIFIED] if modified else []
    shown: list[str] = []  # the recorded blockers these reasons stand for: exact lines, or prefixes + ":"
    if audit_level == "off":
        reasons.append("audits were switched off")
        shown.append("audits were switched off")
    for a in submission_audits:
        if isinstance(a, dict) and not a.get("passed"):
            reasons.append(f"audit {a.get('name', '?')} failed: {a.get('detail', '')}")
            shown.append(f"audit {a.get('name', '?')} failed")
    errors = static_errors(static_findings)
    if errors:
        first = errors[0]
        reasons.append(f"static gate: {_plural(len(errors), 'error finding')}, first {first.get('rule', '?')} at "
                       f"{first.get('path', '?')}:{first.get('line', '?')}")
        shown.append("static gate")
    evaluated = [w for w in workloads if w.get("status") != SubmissionStatus.SKIPPED]
    failed = [(str(a.get("name", "?")), str(w.get("label", "?"))) for w in evaluated
              for a in w.get("audits") or [] if isinstance(a, dict) and not a.get("passed")]
    reasons += _grouped(failed, len(evaluated), lambda name: f"audit {name} failed")
    shown += [f"{label}: audit {name} failed" for name, label in failed]
    not_passed = [(str(w.get("status")), str(w.get("label", "?"))) for w in evaluated
                  if w.get("status") != EvaluationStatus.PASSED]
    reasons += _grouped(not_passed, len(evaluated), str)
    shown += [f"{label}: {s}" for s, label in not_passed]
    if not evaluated:
        reasons.append("no workload was evaluated")
        shown.append("no workload was evaluated")
    reasons += [str(r) for r in recorded
                if not any(str(r) == k or str(r).startswith(k + ":") for k in shown)]
    if not reasons and status != EvaluationStatus.PASSED:
        reasons.append(f"submission {status}")
    if not reasons and recorded_promotable is False:
        reasons.append("recorded as not promotable")
    return reasons


@dataclass(frozen=True)
class AuditSummary:
    """What the audits column shows: static-gate errors and failed runtime audits, counted."""

    static_errors: int
    static_warnings: int
    failed: tuple[tuple[str, str, str], ...]  # (workload label or "submission", audit name, detail)
    audited: bool  # any runtime audit ran

    @property
    def clean(self) -> bool:
        return self.audited and not self.static_errors and not self.failed

    @property
    def names(self) -> list[str]:
        return sorted({n for _, n, _ in self.failed})

    def text(self) -> str:
        """'2 static-gate errors, 26 failed audits (attribution, fresh_input_recheck)', 'clean' or '–'."""
        parts = []
        if self.static_errors:
            parts.append(_plural(self.static_errors, "static-gate error"))
        if self.failed:
            parts.append(f"{_plural(len(self.failed), 'failed audit')} ({', '.join(self.names)})")
        if parts:
            return ", ".join(parts)
        return "clean" if self.audited else "–"


def audit_summary(static_findings: Iterable[dict[str, Any]], workloads: Iterable[tuple[str, Sequence[dict[str, Any]]]],
                  submission_audits: Sequence[dict[str, Any]] = ()) -> AuditSummary:
    """``workloads``: (label, audits) per workload."""
    findings = [f for f in static_findings if isinstance(f, dict)]
    failed: list[tuple[str, str, str]] = []
    audited = False
    for label, audits in [("submission", submission_audits), *workloads]:
        for a in audits:
            if not isinstance(a, dict):
                continue
            audited = True
            if not a.get("passed"):
                failed.append((label, str(a.get("name", "?")), str(a.get("detail", ""))))
    return AuditSummary(len(static_errors(findings)), sum(f.get("severity") == "warning" for f in findings),
                        tuple(failed), audited)


def split_ranked(items: Iterable[T], promotable: Callable[[T], bool],
                 key: Callable[[T], Any]) -> tuple[list[T], list[T]]:
    """(promotable items sorted by ``key``, the others sorted by ``key``): the others never rank above."""
    items = list(items)
    return (sorted((i for i in items if promotable(i)), key=key),
            sorted((i for i in items if not promotable(i)), key=key))


def partial_scores(raw: Any) -> dict[str, list[str]]:
    """``scores_partial`` as archived ({score key: workloads its baseline did not cover}); {} when absent or
    malformed, and keys with no workload left out."""
    if not isinstance(raw, dict):
        return {}
    out = {}
    for key, labels in raw.items():
        if isinstance(labels, (list, tuple)) and labels:
            out[str(key)] = [str(x) for x in labels]
    return out


def clip(text: str, limit: int = 160) -> str:
    """One line of at most ``limit`` characters ('…' where cut)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"
