"""The evidence a model reads: the regime table, kernel digests per regime and the largest gaps, in Markdown
bounded in bytes (detail is shed in steps until it fits)."""

from __future__ import annotations

from typing import Callable, Sequence

from .kernel_digest import RegimeProfile
from .regimes import Gap, RegimeRow

# Detail levels, most first: kernels per regime, workload names per regime, kernel-name length, digest detail
# (KernelDigest.line), characters of a reason or note.
LEVELS = (dict(kernels=3, labels=4, name=60, detail=0, reason=160),
          dict(kernels=2, labels=3, name=48, detail=1, reason=120),
          dict(kernels=1, labels=2, name=40, detail=1, reason=80),
          dict(kernels=1, labels=0, name=32, detail=2, reason=60))
TRUNCATED = "[evidence truncated]\n"


def bounded(render: Callable[..., str], max_bytes: int) -> str:
    """``render(**level)`` at the first level of ``LEVELS`` that fits in ``max_bytes``; a last resort cuts whole
    lines of the least detailed one and says so."""
    text = ""
    for level in LEVELS:
        text = render(**level)
        if len(text.encode()) <= max_bytes:
            return text
    data = text.encode()[: max(max_bytes - len(TRUNCATED.encode()), 0)]
    return data.decode(errors="ignore").rsplit("\n", 1)[0] + "\n" + TRUNCATED


def render(definition: str, solution: str, hardware: str, regimes: Sequence[RegimeRow],
           profiles: Sequence[RegimeProfile], gaps: Sequence[Gap], notes: Sequence[str], *,
           kernels: int, labels: int, name: int, detail: int, reason: int) -> str:
    """The Markdown at one detail level (see ``LEVELS``)."""
    pct = lambda x: "n/a" if x is None else f"{100 * x:.3g}%"  # noqa: E731
    times = lambda x: "n/a" if x is None else f"{x:.3g}x"  # noqa: E731
    out = [f"# Evidence: {solution} on {definition}" + (f" ({hardware})" if hardware else "")]
    out.append("Time = kernel latency per call; floor = roofline floor; share = weighted share of total time.")
    out += ["", "## Regimes",
            "| regime | workloads | share of time | mean % of floor | mean speedup vs FlashInfer |",
            "|---|---|---|---|---|"]
    for r in regimes:
        shown = r.workloads[:labels]
        names = f"{len(r.workloads)}" + (": " + ", ".join(shown) if shown else "")
        if shown and len(r.workloads) > len(shown):
            names += f", +{len(r.workloads) - len(shown)}"
        out.append(f"| {r.name} | {names} | {pct(r.share)} | {pct(r.mean_fraction_of_floor)} | "
                   f"{times(r.mean_speedup_vs_fi)} |")
    out += ["", "## Kernels (ncu, one profiled workload per regime)"]
    if not profiles:
        out.append("Not profiled: no ncu profile available; the evidence is timing only.")
    for p in profiles:
        head = f"**{p.regime}** on {p.workload_label}"
        if p.status != "ok" or not p.digests:
            why = " ".join((p.reason or p.status).split())[:reason]
            out.append(f"{head}: not profiled ({p.status}: {why})")
            continue
        more = len(p.digests) - kernels
        out.append(head + ":" + (f" ({more} shorter kernels not shown)" if more > 0 else ""))
        out += [d.line(name_limit=name, detail=detail) for d in p.digests[:kernels]]
    out += ["", "## Largest gaps (latency - floor)"]
    if not gaps:
        out.append("No floor or latency measured: gaps unknown.")
    for i, g in enumerate(gaps, 1):
        out.append(f"{i}. {g.label} ({g.regime}): {g.gap_us:.3g} us above the floor per call, "
                   f"{pct(g.share)} of all time above the floor")
    for note in notes:
        out.append(f"Note: {' '.join(note.split())[:reason]}")
    return "\n".join(out) + "\n"
