"""The built-in SVG renderer: a ``Chart`` drawn without any plotting library (used when matplotlib is absent)."""

from __future__ import annotations

import html
import math
from typing import Any

from .charts import Chart, Series, _finite


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
