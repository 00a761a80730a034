"""A ``Chart`` as an SVG element: through matplotlib's SVG backend when it is importable, else the built-in one.
Both give the same charts with labelled axes and units."""

from __future__ import annotations

import io
import math
import re

from .charts import Chart
from .svg import _chart_width, _esc, _tick_label, render_builtin


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
