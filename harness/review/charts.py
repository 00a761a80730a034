"""Chart specs (``Chart``, ``Series``) and the charts of a report section: latency per workload, the roofline,
the controller's trajectory. Rendering to SVG is ``render``'s (matplotlib or the built-in ``svg``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..data.statuses import EvaluationStatus
from .model import Candidate, Roofline, Round

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


def _bar_width(categories: int, series: int) -> int:
    """Wide enough for the bars, no wider: a chart of two workloads need not span the page."""
    return int(max(560, min(1100, 150 + categories * (22 * series + 26))))


def latency_chart(c: Candidate, key: str = "latency") -> Optional[Chart]:
    rows = [w for w in c.workloads if w.evaluated]
    if not any(w.latency_ms for w in rows):
        return None
    cats = [w.label for w in rows]
    series = [Series(f"{c.solution_name} (latency)", cats,
                     [w.latency_ms if w.status == EvaluationStatus.PASSED else None for w in rows],
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
        hl = [(r.memory_bytes_per_s / 1e9, f"memory ceiling {r.memory_bytes_per_s / 1e9:,.0f} GB/s",
               PALETTE["spend"])] if r.memory_bytes_per_s else []
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
