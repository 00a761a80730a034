"""HTML pieces the report's tables and pages are made of: formatted numbers, cells, markers, figures, the page."""

from __future__ import annotations

import math
import re
from pathlib import Path
from string import Template
from typing import Any, Optional, Sequence

from ..archive.seal import MODIFIED_WARNING
from ..data.statuses import EvaluationStatus, SubmissionStatus
from . import leaderboard as lb
from .charts import Chart
from .model import ARTIFACT_KINDS, ARTIFACT_TITLES, Candidate
from .render import render_chart
from .svg import _esc

TEMPLATES = Path(__file__).parent / "templates"
CSS = (TEMPLATES / "report.css").read_text(encoding="utf-8")
PAGE = Template((TEMPLATES / "page.html").read_text(encoding="utf-8"))


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
    cls = s if s in (EvaluationStatus.PASSED, SubmissionStatus.RUNNING, SubmissionStatus.SKIPPED,
                   SubmissionStatus.INTERRUPTED) else "fail"
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


def _page(title: str, body: str, css_href: str = "") -> str:
    return PAGE.substitute(title=_esc(title), css=CSS, body=body)


def _links(c: Candidate, prefix: str = "") -> str:
    items = [f'<a href="{prefix}{c.page}#source">source</a>']
    for kind in ARTIFACT_KINDS:
        a = c.artifacts.get(kind)
        if a is not None and a.href:
            items.append(f'<a href="{prefix}{a.href}">{_esc(ARTIFACT_TITLES[kind])}</a>')
        else:
            items.append(f'<span class="none" title="not recorded">{_esc(ARTIFACT_TITLES[kind])}</span>')
    return '<span class="links">' + "".join(items) + "</span>"
