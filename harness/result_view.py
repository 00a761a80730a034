"""A submission's result on the terminal (``harness submit`` and ``harness show``): the per-workload table, the
verdict, the scores and where the time went."""

from __future__ import annotations

from typing import Any, Optional

from rich.markup import escape
from rich.table import Table

from .audits.model import audits_json
from .cli_common import fmt, out, styled


def pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def times(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3g}x"


def seconds(phases: Optional[dict[str, float]]) -> str:
    """A workload's wall seconds in the harness (the sum of its phases), "-" where not recorded."""
    return f"{sum(phases.values()):.1f}" if phases else "-"


def print_result(result: Any) -> None:
    table = Table(title=f"submission {result.submission_id}: {result.solution} on {result.definition}",
                  title_justify="left")
    for col in ("workload", "status", "latency ms", "kernel ms", "vs ref", "vs FI official", "vs FI kernel",
                "% of floor", "max abs err", "s"):
        table.add_column(col, justify="left" if col in ("workload", "status") else "right", no_wrap=True)
    table.add_column("note", no_wrap=True, overflow="ellipsis", max_width=60)
    for w in result.workloads:
        note = (w.message or w.timing_note).split("\n")[0]
        kernel = fmt(w.kernel_latency_ms, 4) if w.kernel_latency_ms != w.latency_ms else ""
        table.add_row(w.label, styled(w.status), fmt(w.latency_ms, 4), kernel, times(w.speedup_factor),
                      times(w.speedup_vs_fi_official), times(w.speedup_vs_fi_kernel), pct(w.fraction_of_floor),
                      fmt(w.max_absolute_error), seconds(w.phases_s), escape(note))
    out.print(table)
    out.print(f"status: {styled(result.status)}", highlight=False)
    if result.sandbox and result.sandbox != "full":
        out.print(f"[bold yellow]sandbox: {escape(result.sandbox)}[/]", highlight=False)
    print_promotability(result.promotion_blockers, result.static_findings)
    print_submission_audits(audits_json(result.audits))
    if any(v is not None for v in result.scores.values()):
        names = {"vs_reference": "vs reference", "vs_flashinfer_official": "vs FlashInfer (official, plan inside)",
                 "vs_flashinfer_kernel": "vs FlashInfer (kernel, plan in setup)"}
        partial = result.scores_partial or {}
        out.print("score (mean speedup, 0 if any workload failed): "
                  + "; ".join(f"{names[k]} {times(v)}"
                              + (f" (partial: {len(partial[k])} missing)" if k in partial else "")
                              for k, v in result.scores.items()), highlight=False)
    if result.timing_unavailable_reason:
        out.print(f"[yellow]timing:[/] {result.timing_unavailable_reason}", highlight=False)
    if result.phases_s:
        out.print(time_line(result.wall_s, result.phases_s, result.worker_steps_s), style="dim", highlight=False)
    for n in result.notices:
        out.print(f"[yellow]notice:[/] {escape(n)}", highlight=False)


def time_line(wall_s: float, phases: dict[str, float], steps: dict[str, float]) -> str:
    """Where the submission's time went: the harness's largest phases, and the largest steps inside the workers."""
    top = sorted(phases.items(), key=lambda kv: -kv[1])[:4]
    line = f"time: {wall_s:.1f} s in the harness ({', '.join(f'{k} {v:.1f}' for k, v in top)})"
    if steps:
        line += "; in the workers: " + ", ".join(f"{k} {v:.1f}" for k, v in list(steps.items())[:3])
    return line


def print_submission_audits(audits: list[dict[str, Any]]) -> None:
    """Audits of the whole submission (the instruction proof), as archived (``Audit.to_json``); per-workload audits
    are in the table."""
    for a in audits:
        mark = "[green]passed[/]" if a["passed"] else "[red]failed[/]"
        out.print(f"audit {a['name']} {mark}: {escape(a['detail'])}", highlight=False)


def print_promotability(blockers: list[str], findings: list[dict[str, Any]]) -> None:
    if not blockers:
        out.print("promotable: [green]yes[/] (every workload PASSED, every audit clean)", highlight=False)
    else:
        out.print(f"promotable: [red]no[/] ({len(blockers)} reason(s)); first: {escape(blockers[0])}", highlight=False)
    shown = 10
    for f in findings[:shown]:
        colour = "red" if f["severity"] == "error" else "yellow"
        where = escape(f"{f['path']}:{f['line']}")
        out.print(f"  static [{colour}]{f['severity']}[/] {f['rule']} {where}: {escape(f['message'])}",
                  highlight=False)
    if len(findings) > shown:
        out.print(f"  ... and {len(findings) - shown} more static finding(s) (`--json` lists them all)",
                  highlight=False)
