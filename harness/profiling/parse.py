"""Parsing ncu's CSV (raw page, or the long layout of the details page and nsight-python) into
``KernelProfile`` rows in base units, and finishing a ``ProfileSummary`` from it."""

from __future__ import annotations

import csv
import io
import re
from typing import Any, Callable, Optional, Sequence

from .model import FAILED, ID_COLUMNS, NO_KERNELS, NVTX_INCLUDE, KernelProfile, ProfileSummary

_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9,
            "s": 1e9}
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
# Base units ncu may print with a decimal prefix (Kbyte, Mbyte/second, Ginst, Ksector, Mcycle...).
_PREFIXABLE = ("byte", "inst", "cycle", "sector", "request", "warp", "thread", "block", "transaction", "wavefront",
               "flop", "hz", "Hz")


def parse_number(text: Any) -> Optional[float]:
    """A number as ncu prints it ("1,980,000", "66.72", "n/a"); None when it is not one."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().replace(",", "")
    if not s or s.lower() in ("n/a", "nan", "-", "none"):
        return None
    try:
        return float(s)
    except ValueError:
        return None


def to_base_unit(value: Optional[float], unit: str) -> tuple[Optional[float], str]:
    """(value, unit) in base units: times in ns, bytes in byte, counts without K/M/G prefixes."""
    unit = (unit or "").strip()
    if value is None:
        return None, _base_unit_name(unit)
    if unit in _TIME_NS:
        return value * _TIME_NS[unit], "ns"
    num, slash, den = unit.partition("/")
    if len(num) > 1 and num[0] in _PREFIX and num[1:].startswith(_PREFIXABLE):
        factor = _PREFIX[num[0]]
        # rates: "Gbyte/second" -> byte/second; a prefixed denominator is not printed by ncu
        return value * factor, num[1:] + slash + den
    if den in _TIME_NS and den not in ("second", "s") and num:
        return value / _TIME_NS[den] * 1e9, num + "/second"
    return value, unit


def _base_unit_name(unit: str) -> str:
    if unit in _TIME_NS:
        return "ns"
    num, slash, den = unit.partition("/")
    if len(num) > 1 and num[0] in _PREFIX and num[1:].startswith(_PREFIXABLE):
        return num[1:] + slash + den
    return unit


def _quoted_rows(text: str) -> list[list[str]]:
    """The CSV rows of an ncu output: lines starting with '"' (==PROF==, program output and blank lines dropped)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def parse_raw_csv(text: str) -> list[KernelProfile]:
    """``ncu --csv --page raw``: a header of column names, a row of units, then one row per kernel launch.

    Identification columns ("ID", "Kernel Name", "CC", ...) are kept as attributes; every other column is
    a metric, converted to base units. An empty cell or "n/a" gives value None (reported as missing by the
    digest, never invented).
    """
    rows = _quoted_rows(text)
    if not rows:
        return []
    header = rows[0]
    if "Kernel Name" not in header:
        raise ValueError("not an ncu raw-page CSV: no 'Kernel Name' column in the header")
    if "Metric Name" in header:
        raise ValueError("this is a long-format (details page) CSV; use parse_long_csv")
    body = rows[1:]
    units = [""] * len(header)
    # The units row: its identification cells are empty, and its ID cell is not a number.
    if body and parse_number(body[0][header.index("ID")] if "ID" in header else "x") is None:
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    kernels = []
    for n, row in enumerate(body):
        row = row + [""] * (len(header) - len(row))
        cells = dict(zip(header, row))
        metrics: dict[str, tuple[Optional[float], str]] = {}
        for col, unit, cell in zip(header, units, row):
            if col in ID_COLUMNS:
                continue
            value = parse_number(cell)
            if value is None and cell.strip() and cell.strip().lower() != "n/a":
                continue  # a text attribute (device name, architecture): not a metric
            metrics[col] = to_base_unit(value, unit)
        kid = parse_number(cells.get("ID"))
        kernels.append(KernelProfile(id=int(kid) if kid is not None else n, name=cells.get("Kernel Name", ""),
                                     metrics=metrics, block_size=cells.get("Block Size", ""),
                                     grid_size=cells.get("Grid Size", ""), device=cells.get("Device", ""),
                                     cc=cells.get("CC", "")))
    return kernels


_LONG_ALIASES = {
    "metric": ("Metric Name", "Metric"),
    "value": ("Metric Value", "Value", "AvgValue"),
    "unit": ("Metric Unit", "Unit"),
    "kernel": ("Kernel Name", "Kernel"),
    "id": ("ID",),
    "cc": ("CC",),
}


def parse_long_csv(text: str) -> list[KernelProfile]:
    """One row per (kernel, metric): ncu's details page (``--page details --csv``) and nsight-python's
    dataframes (columns Annotation, Metric, Value/AvgValue, Unit, Kernel, ...). Rows group into kernels by
    ID (ncu) or by kernel name (nsight-python)."""
    kept = "\n".join(line for line in text.splitlines() if line and not line.startswith("="))
    rows = list(csv.reader(io.StringIO(kept)))
    if not rows:
        return []
    header = rows[0]

    def col(key: str) -> Optional[int]:
        return next((header.index(a) for a in _LONG_ALIASES[key] if a in header), None)

    i_metric, i_value, i_unit, i_kernel, i_id, i_cc = (col(k) for k in
                                                       ("metric", "value", "unit", "kernel", "id", "cc"))
    if i_metric is None or i_value is None or i_kernel is None:
        raise ValueError("not a long-format profile CSV: needs metric, value and kernel columns")
    kernels: dict[str, KernelProfile] = {}
    for row in rows[1:]:
        if len(row) <= max(i_metric, i_value, i_kernel) or not row[i_metric]:
            continue
        key = row[i_id] if i_id is not None else row[i_kernel]
        if key not in kernels:
            kid = parse_number(row[i_id]) if i_id is not None else None
            kernels[key] = KernelProfile(id=int(kid) if kid is not None else len(kernels), name=row[i_kernel],
                                         cc=row[i_cc] if i_cc is not None else "")
        unit = row[i_unit] if i_unit is not None and i_unit < len(row) else ""
        kernels[key].metrics[row[i_metric]] = to_base_unit(parse_number(row[i_value]), unit)
    return list(kernels.values())


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    """Either layout, detected from the header."""
    rows = _quoted_rows(text)
    if rows and "Metric Name" not in rows[0] and "Kernel Name" in rows[0]:
        return parse_raw_csv(text)
    return parse_long_csv(text)


def arch_from_cc(cc: Optional[str]) -> Optional[str]:
    """"9.0" -> "sm_90", "10.0" -> "sm_100"; None when unknown."""
    if not cc:
        return None
    m = re.match(r"\s*(\d+)\.(\d+)", str(cc))
    return f"sm_{m.group(1)}{m.group(2)}" if m else None


def kernels_arch(kernels: Sequence[KernelProfile]) -> Optional[str]:
    for k in kernels:
        arch = arch_from_cc(k.cc)
        if arch is None:
            major = k.value("device__attribute_compute_capability_major")
            minor = k.value("device__attribute_compute_capability_minor")
            if major is not None and minor is not None:
                arch = f"sm_{int(major)}{int(minor)}"
        if arch:
            return arch
    return None



def finish_summary(summary: ProfileSummary, parser: Callable[[str], list[KernelProfile]]) -> ProfileSummary:
    """Parse the CSV into kernels, note the architecture and which requested metrics came back empty."""
    try:
        summary.kernels = parser(summary.raw_csv)
    except (ValueError, csv.Error) as err:
        summary.status, summary.reason = FAILED, f"could not parse the profiler's CSV: {err}"
        return summary
    if not summary.kernels:
        summary.status = NO_KERNELS
        summary.reason = summary.reason or f"the profile holds no kernel (NVTX range {NVTX_INCLUDE!r} matched nothing)"
        return summary
    summary.arch = kernels_arch(summary.kernels)
    returned = {m for kern in summary.kernels for m, (v, _) in kern.metrics.items() if v is not None}
    for m in summary.requested_metrics:
        if m not in returned and m not in summary.missing_metrics:
            summary.missing_metrics.append(m)
    return summary

