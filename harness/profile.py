"""Profile a candidate's kernels with Nsight Compute: one interface, two backends, one result type.

What a profile is for: ncu explains *why* a kernel takes its time (SOL, occupancy, stalls); the harness
timer says *how long*. ncu replays every kernel many times, so its durations are never quoted as latency.

Backends (``select_backend`` picks one; both return a ``ProfileSummary``):
- ``ncu``: runs ``ncu --clock-control none ... -o REPORT python -m harness.profile_target ...`` as a
  subprocess with the worker's scrubbed environment, in a private folder, with a deadline, then reads
  the report back with ``ncu --import REPORT --csv --page raw --print-units base``. NVTX filtering
  (``--nvtx --nvtx-include crucible_candidate/``) restricts profiling to the one call of the candidate
  that ``harness.profile_target`` wraps in that push/pop range; warm-up calls (JIT, autotuning) and
  ``setup`` (FlashInfer's ``plan``) stay outside it.
- ``nsight``: nsight-python 1.x, which needs ncu >= 2026.2.1 (the H200 host has 2025.3.1, so ``auto``
  picks ``ncu`` there). ``harness.profile_target --backend nsight`` imports ``nsight`` before CUDA and
  wraps the same single call in ``nsight.annotate``; its CSV is parsed by the same long-format reader.

Nothing here touches a GPU: the GPU work happens in the child processes. Missing ncu, missing counter
permission (ERR_NVGPUCTRPERM), a target that fails, a deadline or an empty profile each end as a
``ProfileSummary`` with a status and a reason, never as an exception.

The archive keeps one row per profile (``m004_profiles``): the raw report as a blob (the .ncu-rep, or
the CSV where no report was written) and a JSON digest (status, reason, command, per-kernel digests).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from .migrations import m004_profiles, now

# ---------------------------------------------------------------------------------------------
# Constants

NVTX_RANGE = "crucible_candidate"  # push/pop range in NVTX's default domain (torch.cuda.nvtx)
NVTX_INCLUDE = f"{NVTX_RANGE}/"  # ncu syntax: a trailing '/' selects a push/pop range
NSIGHT_MIN_NCU = (2026, 2, 1)  # nsight-python 1.x needs Nsight Compute 2026.2.1 (CUDA 13.3 U1) or newer
DEFAULT_TIMEOUT_S = 600.0
METRIC_RETRIES = 5  # ncu stops at an unknown metric before the target starts: drop it and run again

# Statuses of a ProfileSummary
OK = "ok"
UNAVAILABLE = "unavailable"  # no profiler on this host (no ncu, nsight-python not importable, no GPU)
NO_PERMISSION = "no_permission"  # ERR_NVGPUCTRPERM: counters restricted to administrators
NO_KERNELS = "no_kernels"  # the range held no kernel launch (or the filter matched none)
TIMEOUT = "timeout"
FAILED = "failed"  # the target failed (build error, exception) or ncu failed otherwise
STATUSES = (OK, UNAVAILABLE, NO_PERMISSION, NO_KERNELS, TIMEOUT, FAILED)

# Columns of ncu's raw page that describe the launch rather than hold a metric.
ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC")

# ---------------------------------------------------------------------------------------------
# Result types


@dataclass
class KernelProfile:
    """One profiled kernel launch: every metric ncu returned, converted to base units."""

    id: int
    name: str
    metrics: dict[str, tuple[Optional[float], str]] = field(default_factory=dict)  # name -> (value, unit)
    block_size: str = ""
    grid_size: str = ""
    device: str = ""
    cc: str = ""

    def value(self, metric: str) -> Optional[float]:
        got = self.metrics.get(metric)
        return None if got is None else got[0]

    def unit(self, metric: str) -> str:
        got = self.metrics.get(metric)
        return "" if got is None else got[1]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "block_size": self.block_size, "grid_size": self.grid_size,
                "device": self.device, "cc": self.cc,
                "metrics": {k: [v, u] for k, (v, u) in self.metrics.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "KernelProfile":
        return cls(id=int(data["id"]), name=data["name"], block_size=data.get("block_size", ""),
                   grid_size=data.get("grid_size", ""), device=data.get("device", ""), cc=data.get("cc", ""),
                   metrics={k: (v, u) for k, (v, u) in data.get("metrics", {}).items()})


@dataclass
class ProfileSummary:
    """What one profile of one candidate call on one workload produced, whichever backend ran it."""

    backend: str
    status: str
    reason: str = ""
    workload_uuid: str = ""
    solution_hash: str = ""
    seed: int = 0
    tool_version: str = ""
    arch: Optional[str] = None  # sm_90, sm_100, ... from the CC column
    command: list[str] = field(default_factory=list)
    requested_metrics: list[str] = field(default_factory=list)
    missing_metrics: list[str] = field(default_factory=list)  # requested, but not returned (or unknown to ncu)
    kernels: list[KernelProfile] = field(default_factory=list)
    raw_csv: str = ""
    report_path: Optional[str] = None  # the .ncu-rep, while its folder exists
    log: str = ""
    wall_s: float = 0.0
    report: Optional[bytes] = field(default=None, repr=False)  # the .ncu-rep's bytes (its folder is temporary)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self, include_raw: bool = False) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("kernels", "raw_csv", "log", "report")}
        data["kernels"] = [k.to_json() for k in self.kernels]
        if include_raw:
            data["raw_csv"], data["log"] = self.raw_csv, self.log
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProfileSummary":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names and k not in ("kernels", "report")}
        return cls(**kw, kernels=[KernelProfile.from_json(k) for k in data.get("kernels", [])])


# ---------------------------------------------------------------------------------------------
# Parsing ncu's CSV

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


# ---------------------------------------------------------------------------------------------
# Reading what went wrong

_PERMISSION = re.compile(r"ERR_NVGPUCTRPERM")
_NOT_LOADED = re.compile(r"LibraryNotLoaded|Failed to initialize the profiler|libcuda\.so.*not found", re.I)
_NOT_FOUND = re.compile(r"command not found|No such file or directory.*ncu|ncu: not found", re.I)
_NO_KERNELS = re.compile(r"No kernels were profiled", re.I)
_BAD_METRIC = re.compile(r"Failed to find metric\s+(\S+)")
_ERROR_LINE = re.compile(r"^==ERROR==.*$", re.M)


def failed_metric_names(text: str, requested: Sequence[str]) -> list[str]:
    """Requested metrics that ncu said it cannot find (``==ERROR== Failed to find metric X``)."""
    missing = []
    for raw in _BAD_METRIC.findall(text):
        token = raw.removeprefix("regex:").lstrip("^").rstrip("$").replace("\\", "")
        token = token.split("(")[0].rstrip(".")
        for m in requested:
            if m not in missing and (m == token or m.startswith(token + ".") or token.startswith(m)):
                missing.append(m)
    return missing


def diagnose(returncode: Optional[int], text: str) -> tuple[str, str]:
    """(status, reason) for an ncu run from its exit code and everything it printed; OK if nothing is wrong."""
    if _PERMISSION.search(text):
        return NO_PERMISSION, ("ERR_NVGPUCTRPERM: the driver restricts GPU performance counters to administrators; "
                               "the host administrator must allow them (NVreg_RestrictProfilingToAdminUsers=0) "
                               "or run the profiler as root. Evidence stays timing-only.")
    if returncode == 127 or _NOT_FOUND.search(text):
        return UNAVAILABLE, "ncu: command not found (install Nsight Compute or put it on PATH)"
    if _NOT_LOADED.search(text):
        line = next((m.group(0) for m in _ERROR_LINE.finditer(text) if _NOT_LOADED.search(m.group(0))), "")
        return UNAVAILABLE, f"the profiler could not start ({line.strip() or 'LibraryNotLoaded'})"
    if _NO_KERNELS.search(text):
        return NO_KERNELS, (f"no kernel ran inside the NVTX range {NVTX_INCLUDE!r} (the candidate launched nothing, "
                            "or ran on CPU)")
    errors = [m.group(0).strip() for m in _ERROR_LINE.finditer(text) if not _BAD_METRIC.search(m.group(0))]
    if errors:
        return FAILED, "; ".join(errors)[:2000]
    if returncode not in (0, None):
        return FAILED, f"exit code {returncode}"
    return OK, ""


def parse_ncu_version(text: str) -> Optional[tuple[int, ...]]:
    """(2025, 3, 1, 0) from ``ncu --version`` ("Version 2025.3.1.0 (build ...)")."""
    m = re.search(r"Version\s+(\d+(?:\.\d+)+)", text or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def parse_version(text: Optional[str]) -> Optional[tuple[int, ...]]:
    if not text:
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def version_text(version: Optional[Sequence[int]]) -> str:
    return ".".join(str(x) for x in version) if version else "unknown"


# ---------------------------------------------------------------------------------------------
# Backend selection


@dataclass
class ProfileRequest:
    """One candidate call on one workload, to be profiled."""

    solution_path: Path  # a Solution JSON the target loads
    workload_uuid: str
    dataset_root: Path
    metrics: list[str]
    seed: int = 0
    solution_hash: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    warmup: int = 1  # untimed calls before the profiled one (JIT compilation, autotuning)
    setup_in_range: bool = False  # also profile the solution's setup (FlashInfer plan) in the range
    isolate_network: bool = True
    allow_cpu: bool = False  # tests: let the target run on CPU (then nothing is profiled)
    python: str = sys.executable
    device_index: Optional[int] = None
    keep_workdir: Optional[Path] = None  # write here instead of a temporary folder (kept afterwards)


def choose_backend(preference: str, ncu_version: Optional[Sequence[int]], nsight_version: Optional[Sequence[int]],
                   ncu_reason: str = "") -> tuple[Optional[str], str]:
    """Which backend to use, from facts only (pure): (name or None, why).

    - ``nsight`` needs nsight-python 1.x importable and ncu >= 2026.2.1 (it drives ncu itself);
    - ``ncu`` needs an ncu binary;
    - ``auto`` prefers nsight where it works, else ncu, else None.
    """
    if preference not in ("auto", "ncu", "nsight"):
        raise ValueError(f"unknown profiler backend {preference!r}; choose auto, ncu or nsight")
    have_ncu = ncu_version is not None
    ncu_note = f"ncu {version_text(ncu_version)}" if have_ncu else (ncu_reason or "ncu not found on PATH")
    if nsight_version is None:
        nsight_ok, nsight_why = False, "nsight-python is not installed"
    elif nsight_version[0] < 1:
        nsight_ok, nsight_why = False, (f"nsight-python {version_text(nsight_version)} is older than 1.0 (re-launches "
                                        "the script per decorator); use the raw ncu backend")
    elif not have_ncu:
        nsight_ok, nsight_why = False, f"nsight-python {version_text(nsight_version)} needs ncu, and {ncu_note}"
    elif tuple(ncu_version[:3]) < NSIGHT_MIN_NCU:
        nsight_ok, nsight_why = False, (f"nsight-python {version_text(nsight_version)} needs ncu >= "
                                        f"{version_text(NSIGHT_MIN_NCU)}, this host has {ncu_note}")
    else:
        nsight_ok, nsight_why = True, f"nsight-python {version_text(nsight_version)} with {ncu_note}"
    if preference == "nsight":
        return ("nsight", nsight_why) if nsight_ok else (None, nsight_why)
    if preference == "ncu":
        return ("ncu", ncu_note) if have_ncu else (None, ncu_note)
    if nsight_ok:
        return "nsight", nsight_why
    if have_ncu:
        return "ncu", f"{ncu_note} (nsight backend not used: {nsight_why})"
    return None, ncu_note


def find_ncu(env_path: Optional[str] = None) -> Optional[str]:
    """ncu on PATH, else the usual install folders (/usr/local/cuda/bin, /opt/nvidia/nsight-compute/*)."""
    found = shutil.which("ncu", path=env_path)
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "ncu"]
    candidates += sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"), reverse=True)
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def probe_ncu(ncu: Optional[str], timeout_s: float = 60) -> tuple[Optional[tuple[int, ...]], str]:
    """(version, text or reason) of an ncu binary; (None, reason) when it does not run."""
    if ncu is None:
        return None, "ncu not found on PATH (nor in /usr/local/cuda/bin, /opt/nvidia/nsight-compute)"
    try:
        proc = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=timeout_s,
                              env=_tool_environment())
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{ncu} --version failed: {err}"
    text = proc.stdout + proc.stderr
    version = parse_ncu_version(text)
    if version is None:
        status, reason = diagnose(proc.returncode, text)
        return None, reason or f"{ncu} --version printed no version: {text.strip()[:200]}"
    return version, text.strip()


def nsight_python_version() -> Optional[tuple[int, ...]]:
    """The installed nsight-python's version, without importing it (importing loads ncu's injection library)."""
    import importlib.metadata
    import importlib.util

    try:
        if importlib.util.find_spec("nsight") is None:
            return None
        return parse_version(importlib.metadata.version("nsight-python"))
    except (importlib.metadata.PackageNotFoundError, ValueError, ImportError):
        return None


def detect_arch(timeout_s: float = 30) -> tuple[Optional[str], str]:
    """The first GPU's architecture (sm_90, sm_100) from ``nvidia-smi --query-gpu=compute_cap``; the harness
    never initialises CUDA itself. (None, why) when it cannot tell."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi not found"
    try:
        proc = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"nvidia-smi failed: {err}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    index = int(visible) if visible.isdigit() and int(visible) < len(lines) else 0
    arch = arch_from_cc(lines[index]) if lines else None
    if arch:
        return arch, f"compute capability {lines[index]}"
    return None, f"nvidia-smi said {proc.stdout.strip()[:80]!r}"


def _tool_environment(extra: Optional[dict[str, str]] = None, home: Optional[Path] = None) -> dict[str, str]:
    from .runner import scrubbed_environment

    return scrubbed_environment(extra, home=home)


# ---------------------------------------------------------------------------------------------
# Running things


def target_command(request: ProfileRequest, backend: str, status_file: Path,
                   nsight_dir: Optional[Path] = None) -> list[str]:
    """The command line of the process that runs the candidate once (what ncu launches, or nsight runs)."""
    cmd = [request.python, "-m", "harness.profile_target", "--solution", str(request.solution_path),
           "--workload", request.workload_uuid, "--seed", str(request.seed), "--dataset", str(request.dataset_root),
           "--warmup", str(request.warmup), "--range", NVTX_RANGE, "--status-file", str(status_file),
           "--backend", backend]
    if request.setup_in_range:
        cmd.append("--setup-in-range")
    if request.allow_cpu:
        cmd.append("--allow-cpu")
    if backend == "nsight":
        cmd += ["--metrics", ",".join(request.metrics), "--out-dir", str(nsight_dir)]
    return cmd


def ncu_collect_command(ncu: str, request: ProfileRequest, report_base: Optional[Path], log_path: Path,
                        metrics: Sequence[str], target: list[str]) -> list[str]:
    """``ncu --clock-control none ... --nvtx --nvtx-include crucible_candidate/ -o REPORT TARGET``.

    With ``report_base`` None, ncu prints the raw page as CSV into the log file instead of writing a report.
    """
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--target-processes", "all",
           "--nvtx", "--nvtx-include", NVTX_INCLUDE, "--metrics", ",".join(metrics), "--log-file", str(log_path)]
    if report_base is not None:
        cmd += ["--force-overwrite", "--export", str(report_base)]
    else:
        cmd += ["--csv", "--page", "raw", "--print-units", "base"]
    return cmd + target


def ncu_import_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


@dataclass
class _Run:
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float


def run_bounded(cmd: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> _Run:
    """Run in its own session; on timeout kill the whole process group (ncu and the target under it)."""
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    except FileNotFoundError as err:
        return _Run(127, "", f"{cmd[0]}: command not found ({err})", False, time.perf_counter() - started)
    except OSError as err:
        return _Run(126, "", f"{cmd[0]}: cannot run: {err}", False, time.perf_counter() - started)
    try:
        out, errtext = proc.communicate(timeout=timeout_s)
        return _Run(proc.returncode, out, errtext, False, time.perf_counter() - started)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, errtext = proc.communicate()
        return _Run(None, out, errtext, True, time.perf_counter() - started)


def _tail(text: str, limit: int = 20000) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} chars cut ...]\n" + text[-limit:]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _target_status(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class Profiler:
    """A profiler backend. ``available()`` says whether it can run here, and if not, why."""

    name = "none"

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    @property
    def version(self) -> str:
        return ""

    def profile(self, request: ProfileRequest) -> ProfileSummary:
        raise NotImplementedError

    # shared plumbing -------------------------------------------------------------------------

    def _workdir(self, request: ProfileRequest) -> tuple[Path, bool]:
        if request.keep_workdir is not None:
            request.keep_workdir.mkdir(parents=True, exist_ok=True)
            return request.keep_workdir, False
        return Path(tempfile.mkdtemp(prefix="crucible-profile-")), True

    def _environment(self, request: ProfileRequest, home: Path) -> dict[str, str]:
        extra: dict[str, str] = {}
        if request.allow_cpu:
            extra["TRITON_INTERPRET"] = "1"
        if request.device_index is not None:
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
            i = request.device_index
            extra["CUDA_VISIBLE_DEVICES"] = visible[i] if i < len(visible) else str(i)
        return _tool_environment(extra, home=home)

    def _prefix(self, request: ProfileRequest) -> list[str]:
        if not request.isolate_network:
            return []
        from .runner import network_isolation

        return list(network_isolation()[0])

    def _summary(self, request: ProfileRequest, status: str, reason: str = "", **kw: Any) -> ProfileSummary:
        return ProfileSummary(backend=self.name, status=status, reason=reason, workload_uuid=request.workload_uuid,
                              solution_hash=request.solution_hash, seed=request.seed, tool_version=self.version,
                              requested_metrics=list(request.metrics), **kw)

    def _target_failure(self, target_status: dict[str, Any], text: str) -> Optional[str]:
        if target_status and not target_status.get("ok", False):
            return f"target: {target_status.get('error') or 'failed'}"
        return None


class UnavailableProfiler(Profiler):
    """What ``select_backend`` returns when nothing can profile here: every profile says why."""

    name = "none"

    def __init__(self, reason: str):
        self.reason = reason

    def available(self) -> tuple[bool, str]:
        return False, self.reason

    def profile(self, request: ProfileRequest) -> ProfileSummary:
        return self._summary(request, UNAVAILABLE, self.reason)


class NcuProfiler(Profiler):
    """Raw Nsight Compute: collect under ncu, then read the report back as the raw page in CSV."""

    name = "ncu"

    def __init__(self, ncu: Optional[str] = None, export_report: bool = True):
        self.ncu = ncu or find_ncu()
        self.export_report = export_report
        self._version: Optional[tuple[int, ...]] = None
        self._why = ""

    def available(self) -> tuple[bool, str]:
        if self._version is None:
            self._version, self._why = probe_ncu(self.ncu)
        if self._version is None:
            return False, self._why
        return True, f"ncu {version_text(self._version)} at {self.ncu}"

    @property
    def version(self) -> str:
        return version_text(self._version) if self._version else ""

    def profile(self, request: ProfileRequest) -> ProfileSummary:
        ok, why = self.available()
        if not ok:
            status = NO_PERMISSION if "ERR_NVGPUCTRPERM" in why else UNAVAILABLE
            return self._summary(request, status, why)
        workdir, temporary = self._workdir(request)
        try:
            return self._profile_in(request, workdir)
        finally:
            if temporary:
                shutil.rmtree(workdir, ignore_errors=True)

    def _profile_in(self, request: ProfileRequest, workdir: Path) -> ProfileSummary:
        env = self._environment(request, workdir)
        metrics = list(request.metrics)
        dropped: list[str] = []
        deadline = time.monotonic() + request.timeout_s
        started = time.perf_counter()
        for attempt in range(METRIC_RETRIES + 1):  # runs again only after dropping metrics ncu does not know
            status_file = workdir / "target_status.json"
            status_file.unlink(missing_ok=True)
            log_path = workdir / "ncu.log"
            log_path.unlink(missing_ok=True)
            report_base = workdir / "profile" if self.export_report else None
            target = target_command(request, "ncu", status_file)
            cmd = self._prefix(request) + ncu_collect_command(self.ncu, request, report_base, log_path, metrics, target)
            run = run_bounded(cmd, env, workdir, max(deadline - time.monotonic(), 1.0))
            log = _read(log_path)
            text = "\n".join([log, run.stdout, run.stderr])
            target_status = _target_status(status_file)
            public_cmd = cmd[len(self._prefix(request)):]
            common = dict(command=public_cmd, log=_tail(text), wall_s=time.perf_counter() - started)
            if run.timed_out:
                return self._summary(request, TIMEOUT, f"no result within {request.timeout_s:.0f} s; ncu and the "
                                     "target were killed", missing_metrics=dropped, **common)
            bad = failed_metric_names(text, metrics)
            if bad and attempt < METRIC_RETRIES:
                dropped += bad
                metrics = [m for m in metrics if m not in bad]
                continue
            status, reason = diagnose(run.returncode, text)
            failure = self._target_failure(target_status, text)
            if status in (NO_PERMISSION, UNAVAILABLE):
                return self._summary(request, status, reason, missing_metrics=dropped, **common)
            if failure and status in (OK, FAILED, NO_KERNELS):
                return self._summary(request, FAILED, failure + (f"; {reason}" if reason else ""),
                                     missing_metrics=dropped, **common)
            if status == FAILED:
                return self._summary(request, status, reason, missing_metrics=dropped, **common)
            break
        report = None
        if self.export_report:
            report = workdir / "profile.ncu-rep"
            if not report.exists():
                status, reason = diagnose(run.returncode, text)
                if status == OK:
                    status, reason = NO_KERNELS, f"ncu wrote no report: {reason or 'nothing was profiled'}"
                return self._summary(request, status, reason, missing_metrics=dropped, **common)
            imported = run_bounded(ncu_import_command(self.ncu, report), env, workdir,
                                   max(deadline - time.monotonic(), 1.0))
            raw_csv = imported.stdout
            if imported.timed_out or imported.returncode != 0:
                status, reason = diagnose(imported.returncode, imported.stdout + imported.stderr)
                return self._summary(request, FAILED if status == OK else status,
                                     f"ncu --import failed: {reason or imported.stderr.strip()[:500]}",
                                     missing_metrics=dropped, report_path=str(report), **common)
        else:
            raw_csv = log
        summary = self._summary(request, OK, "", missing_metrics=dropped, raw_csv=raw_csv,
                                report_path=str(report) if report else None,
                                report=report.read_bytes() if report else None, **common)
        return finish_summary(summary, parse_raw_csv)


class NsightPythonProfiler(Profiler):
    """nsight-python 1.x: the target imports ``nsight`` first and annotates the one call; nsight drives ncu.

    Only the selection logic is tested on CPU; nsight-python 1.x needs ncu >= 2026.2.1, newer than the
    H200 host's 2025.3.1, so this path has not run on hardware yet (see harness/profile_target.py).
    """

    name = "nsight"

    def __init__(self, ncu: Optional[str] = None):
        self.ncu = ncu or find_ncu()
        self._choice: Optional[tuple[Optional[str], str]] = None
        self._nsight_version: Optional[tuple[int, ...]] = None

    def available(self) -> tuple[bool, str]:
        if self._choice is None:
            ncu_version, ncu_why = probe_ncu(self.ncu)
            self._nsight_version = nsight_python_version()
            self._choice = choose_backend("nsight", ncu_version, self._nsight_version, ncu_why)
        name, why = self._choice
        return name == "nsight", why

    @property
    def version(self) -> str:
        return f"nsight-python {version_text(self._nsight_version)}" if self._nsight_version else ""

    def profile(self, request: ProfileRequest) -> ProfileSummary:
        ok, why = self.available()
        if not ok:
            return self._summary(request, UNAVAILABLE, why)
        workdir, temporary = self._workdir(request)
        try:
            env = self._environment(request, workdir)
            # nsight-python spawns ncu itself, which must be on the target's PATH.
            if self.ncu and shutil.which("ncu", path=env.get("PATH")) is None:
                env["PATH"] = os.pathsep.join([str(Path(self.ncu).parent), env.get("PATH", "")])
            out_dir = workdir / "nsight"
            status_file = workdir / "target_status.json"
            cmd = self._prefix(request) + target_command(request, "nsight", status_file, out_dir)
            started = time.perf_counter()
            run = run_bounded(cmd, env, workdir, request.timeout_s)
            text = run.stdout + "\n" + run.stderr
            common = dict(command=cmd[len(self._prefix(request)):], log=_tail(text),
                          wall_s=time.perf_counter() - started)
            if run.timed_out:
                return self._summary(request, TIMEOUT, f"no result within {request.timeout_s:.0f} s", **common)
            status, reason = diagnose(run.returncode, text)
            failure = self._target_failure(_target_status(status_file), text)
            if status in (NO_PERMISSION, UNAVAILABLE):
                return self._summary(request, status, reason, **common)
            if failure or status == FAILED:
                return self._summary(request, FAILED, failure or reason, **common)
            csv_path = out_dir / "profile.csv"
            if not csv_path.exists():
                return self._summary(request, NO_KERNELS, "nsight-python wrote no data", **common)
            reports = sorted(out_dir.glob("*.ncu-rep"))
            summary = self._summary(request, OK, raw_csv=_read(csv_path),
                                    report_path=str(reports[0]) if reports else None,
                                    report=reports[0].read_bytes() if reports else None, **common)
            return finish_summary(summary, parse_long_csv)
        finally:
            if temporary:
                shutil.rmtree(workdir, ignore_errors=True)


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


def select_backend(preference: str = "auto", ncu: Optional[str] = None, export_report: bool = True) -> Profiler:
    """A ready profiler for this host, or an ``UnavailableProfiler`` that says why none is."""
    ncu = ncu or find_ncu()
    ncu_version, ncu_why = probe_ncu(ncu)
    name, why = choose_backend(preference, ncu_version, nsight_python_version(), ncu_why)
    if name == "nsight":
        return NsightPythonProfiler(ncu)
    if name == "ncu":
        profiler = NcuProfiler(ncu, export_report=export_report)
        profiler._version, profiler._why = ncu_version, ncu_why
        return profiler
    return UnavailableProfiler(why)


# ---------------------------------------------------------------------------------------------
# Archive: one row per profile


def ensure_profiles_table(archive: Any) -> None:
    """Apply ``m004_profiles`` to an archive that predates it (recorded in _migrations like any migration)."""
    db = archive.db
    if "profiles" in db.table_names():
        return
    with db.atomic():
        m004_profiles(db)
        if "_migrations" in db.table_names():
            db["_migrations"].insert({"name": m004_profiles.__name__, "applied_at": now()}, ignore=True)


def record_profile(archive: Any, summary: ProfileSummary, digest: dict[str, Any],
                   submission_id: Optional[int] = None) -> int:
    """Store the raw report (the .ncu-rep, else the CSV) as a blob and the digest as JSON; returns the row id."""
    ensure_profiles_table(archive)
    raw_blob = None
    csv_blob = archive.put_blob(summary.raw_csv, "ncu-csv") if summary.raw_csv else None
    if summary.report is not None:
        raw_blob = archive.put_blob(summary.report, "ncu-rep")
    elif summary.report_path and Path(summary.report_path).is_file():
        raw_blob = archive.put_blob(Path(summary.report_path).read_bytes(), "ncu-rep")
    raw_blob = raw_blob or csv_blob
    log_blob = archive.put_blob(summary.log, "profile-log") if summary.log else None
    record = {**summary.to_json(), "csv_blob": csv_blob, "log_blob": log_blob, **digest}
    with archive.db.atomic():
        table = archive.db["profiles"].insert({
            "submission_id": submission_id, "solution_hash": summary.solution_hash,
            "workload_uuid": summary.workload_uuid, "backend": summary.backend, "status": summary.status,
            "raw_blob": raw_blob, "digest": json.dumps(record, default=str),
            "created_at": now()})
    return int(table.last_pk)


def archived_profiles(archive: Any, solution_hash: Optional[str] = None,
                      submission_id: Optional[int] = None) -> list[dict[str, Any]]:
    """Profile rows, newest first, with the digest parsed."""
    if "profiles" not in archive.db.table_names():
        return []
    where, args = [], []
    if solution_hash:
        where.append("solution_hash = ?")
        args.append(solution_hash)
    if submission_id is not None:
        where.append("submission_id = ?")
        args.append(submission_id)
    rows = list(archive.db["profiles"].rows_where(" and ".join(where) or None, args, order_by="id desc"))
    for r in rows:
        r["digest"] = json.loads(r["digest"]) if r.get("digest") else {}
    return rows


# ---------------------------------------------------------------------------------------------
# Many workloads


def profile_workloads(profiler: Profiler, solution_json: dict[str, Any], solution_hash: str,
                      workload_uuids: Iterable[str], dataset_root: Path, metrics: list[str], *, seed: int = 0,
                      timeout_s: float = DEFAULT_TIMEOUT_S, isolate_network: bool = True, allow_cpu: bool = False,
                      warmup: int = 1, progress: Optional[Callable[[str, ProfileSummary], None]] = None,
                      device_index: Optional[int] = None) -> list[ProfileSummary]:
    """Profile the solution on each workload, one fresh target process (and ncu run) per workload."""
    out = []
    with tempfile.TemporaryDirectory(prefix="crucible-profile-sol-") as tmp:
        sol_path = Path(tmp) / "solution.json"
        sol_path.write_text(json.dumps(solution_json))
        for uuid in workload_uuids:
            request = ProfileRequest(solution_path=sol_path, workload_uuid=uuid, dataset_root=Path(dataset_root),
                                     metrics=list(metrics), seed=seed, solution_hash=solution_hash,
                                     timeout_s=timeout_s, warmup=warmup, isolate_network=isolate_network,
                                     allow_cpu=allow_cpu, device_index=device_index)
            summary = profiler.profile(request)  # carries the report's bytes: its folder is gone
            out.append(summary)
            if progress:
                progress(uuid, summary)
    return out
