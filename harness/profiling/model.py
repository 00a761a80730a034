"""What a profile is: constants, statuses, and the result types (``KernelProfile``, ``ProfileSummary``) and
the request (``ProfileRequest``) every backend shares."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

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
    sandbox: str = ""  # "full", or "reduced (why)": the wall the profiled candidate ran in

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
    keep_workdir: Optional[Path] = None  # the files the profile's commands handed back are copied here (kept)
    sandbox: bool = True  # the candidate worker's sandbox around the profiler (False: on purpose, said in the summary)
    hidden: tuple[str, ...] = ()  # folders never in the sandbox's view, even under a readable one (the archive)
