"""The run's trajectory: per round, where the incumbent stands, overall and per regime. Pure functions.

Each round summary (controller/loop.py ``summarize``, archived with the round) carries ``incumbent``:
the incumbent after the round's decisions, with its mean latency, speedup vs FlashInfer and fraction of
the roofline floor over all workloads and per regime. This module turns those summaries into the table
people read (Markdown) and the data a plot needs; the CLI (``controller trajectory``) writes them out.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Optional

from harness.data.statuses import EvaluationStatus

from .promote import EvalRecord


def _mean(values: Iterable[Optional[float]]) -> Optional[float]:
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return statistics.fmean(values)  # type: ignore[arg-type]


def standing(records: list[EvalRecord]) -> dict[str, Any]:
    """Mean latency, speedup vs FlashInfer (and vs the reference) and fraction of floor, over all workloads and per
    regime.

    A figure is None when any workload lacks it (failed, untimed, no baseline): never a partial mean.
    """
    passed = bool(records) and all(r.status == EvaluationStatus.PASSED for r in records)

    def figures(group: list[EvalRecord]) -> dict[str, Optional[float]]:
        if not passed:
            return {"latency_ms": None, "speedup_vs_fi": None, "speedup_vs_reference": None,
                    "fraction_of_floor": None}
        return {"latency_ms": _mean(r.latency_ms for r in group),
                "speedup_vs_fi": _mean(r.speedup_vs_fi for r in group),
                "speedup_vs_reference": _mean(r.speedup_vs_reference for r in group),
                "fraction_of_floor": _mean(r.fraction_of_floor for r in group)}

    regimes: dict[str, list[EvalRecord]] = {}
    for r in records:
        regimes.setdefault(r.regime or "all", []).append(r)
    return {**figures(records), "workloads": len(records),
            "regimes": {name: {**figures(group), "workloads": len(group)} for name, group in sorted(regimes.items())}}


def _fmt(value: Optional[float], kind: str) -> str:
    if value is None:
        return "-"
    if kind == "ms":
        return f"{value:.4g}"
    if kind == "x":
        return f"{value:.3g}x"
    return f"{100 * value:.0f}%"


def regime_names(rounds: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for r in rounds:
        for name in ((r.get("incumbent") or {}).get("regimes") or {}):
            if name not in names:
                names.append(name)
    return names


def trajectory_markdown(report: dict[str, Any]) -> str:
    """One row per round: the incumbent after the round, overall and per regime, and what was decided."""
    rounds = report.get("rounds") or []
    names = regime_names(rounds)
    timed = any((r.get("incumbent") or {}).get("latency_ms") is not None for r in rounds)
    timing = report.get("timing") or ("official timer" if timed else "no latencies: timing unavailable where this ran")
    # Where no round has a FlashInfer figure (no library baseline on this GPU) the reference is the yardstick.
    speedup = ("speedup_vs_fi", "vs FlashInfer")
    if (not any((r.get("incumbent") or {}).get("speedup_vs_fi") for r in rounds)
            and any((r.get("incumbent") or {}).get("speedup_vs_reference") for r in rounds)):
        speedup = ("speedup_vs_reference", "vs reference (no library baseline)")
    head = ["round", "incumbent", "mean ms", speedup[1], "% of floor",
            *[f"{n} ms (% floor)" for n in names], "candidates", "decision", "search"]
    lines = [f"# Trajectory: {report.get('definition', '?')} "
             f"({report.get('provider', '?')}, run {report.get('run_id', '?')})",
             "", f"Timing: {timing}. Stop: {report.get('stop_reason') or '-'}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rounds:
        inc = r.get("incumbent") or {}
        regimes = inc.get("regimes") or {}
        cells = [str(r.get("round")), f"`{inc.get('name', '-')}`", _fmt(inc.get("latency_ms"), "ms"),
                 _fmt(inc.get(speedup[0]), "x"), _fmt(inc.get("fraction_of_floor"), "%")]
        for n in names:
            g = regimes.get(n) or {}
            cells.append(f"{_fmt(g.get('latency_ms'), 'ms')} ({_fmt(g.get('fraction_of_floor'), '%')})")
        decision = str(r.get("decision", ""))
        if not r.get("candidates") and r.get("stopped"):  # no candidate came back: the provider's reason says why
            decision += f" (no candidate: {' '.join(str(r['stopped'][-1]).split())[:160]})"
        cells += [str(r.get("candidates", 0)), decision.replace("|", "/").replace("\n", " "),
                  str(r.get("search") or "-").replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_trajectory(report: dict[str, Any], path: str) -> Optional[str]:
    """Incumbent latency per round, overall and per regime (log scale); None where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rounds = report.get("rounds") or []
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r.get("round") for r in rounds]
    series = {"mean": [(r.get("incumbent") or {}).get("latency_ms") for r in rounds]}
    for n in regime_names(rounds):
        series[n] = [((r.get("incumbent") or {}).get("regimes") or {}).get(n, {}).get("latency_ms") for r in rounds]
    plotted = 0
    for label, ys in series.items():
        points = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if points:
            ax.plot(*zip(*points), marker="o", label=label, linewidth=2.5 if label == "mean" else 1.2)
            plotted += 1
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    ax.set_xlabel("round")
    ax.set_ylabel("incumbent latency (ms)")
    if plotted:
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no latencies: timing unavailable where this ran", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_title(f"{report.get('definition', '')}: incumbent per round")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
