"""Numbers as the evidence shows them: three significant digits with units, scaled for reading."""

from __future__ import annotations

import math
from typing import Optional


def sig(value: Optional[float], digits: int = 3) -> Optional[float]:
    """``value`` rounded to ``digits`` significant digits (None, 0, inf and nan pass through)."""
    if value is None or not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{digits}g}")


def _prefixed(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def fmt_quantity(value: Optional[float], unit: str) -> str:
    """Three significant digits with the unit attached, scaled for reading: "689 us", "2.15 GB", "66.7%"."""
    if value is None:
        return "n/a"
    if unit == "ns":
        if abs(value) >= 1e6:
            return f"{value / 1e6:.3g} ms"
        if abs(value) >= 1e3:
            return f"{value / 1e3:.3g} us"
        return f"{value:.3g} ns"
    if unit == "%":
        return f"{value:.3g}%"
    if unit == "B":
        return _prefixed(value, "B")
    if unit == "inst":
        return _prefixed(value, "inst")
    return f"{value:.3g} {unit}".rstrip()
