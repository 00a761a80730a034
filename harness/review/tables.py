"""The report's tables: the leaderboard (with FlashInfer's rows), the solutions not promotable, per workload,
controller rounds."""

from __future__ import annotations

from typing import Optional

from . import leaderboard as lb
from .html import (_audit_cell, _clamp, _esc, _links, _reasons_cell, _score, _seal_warning, _speed, _status, _td, _th,
                   fmt_ms, fmt_pct)
from .model import SCORE_KEYS, BaselineRow, Candidate, DefinitionSection, Round


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
             _td(fmt_pct(b.fraction_of_floor), True), _td('<span class="muted">–</span>'), _td("–", True),
             _td("–", True),
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


def _runs_side_by_side(runs: dict[str, list[Round]]) -> str:
    """Runs of one definition next to each other, round by round: where each run's incumbent stood (speedup against
    FlashInfer, else mean latency) and what it had spent, so assisted and full-agent runs can be compared."""
    names = list(runs)
    numbers = sorted({r.round for rs in runs.values() for r in rs})
    head = _th("round", "", True) + "".join(
        _th(f"{name} ({(runs[name][0].mode or '?') if runs[name] else '?'}, "
            f"{(runs[name][0].provider or '?') if runs[name] else '?'})", "", True) for name in names)

    def cell(r: Optional[Round]) -> str:
        if r is None:
            return _td("–", True)
        score = (f"{r.incumbent_speedup_vs_fi:.3g}x" if r.incumbent_speedup_vs_fi is not None
                 else fmt_ms(r.incumbent_latency_ms if r.incumbent_latency_ms is not None else r.best_latency_ms))
        spend = "" if r.cumulative_spend_usd is None else f" · ${r.cumulative_spend_usd:.2f}"
        return _td(_esc(score + spend), True)

    rows = "".join("<tr>" + _td(str(n), True) + "".join(cell(next((r for r in runs[name] if r.round == n), None))
                                                      for name in names) + "</tr>" for n in numbers)
    return f'<table class="rounds side-by-side"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
