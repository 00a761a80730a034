"""The profiler backends (``Profiler``: raw ``ncu``, ``nsight``-python, or unavailable), ``select_backend``
that picks one for this host, and ``profile_workloads`` that profiles a solution on many workloads."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from .diagnose import diagnose, failed_metric_names
from .model import (
    DEFAULT_TIMEOUT_S,
    FAILED,
    METRIC_RETRIES,
    NO_KERNELS,
    NO_PERMISSION,
    OK,
    TIMEOUT,
    UNAVAILABLE,
    ProfileRequest,
    ProfileSummary,
)
from .parse import finish_summary, parse_long_csv, parse_raw_csv
from .process import _read, _tail, _target_status, ncu_collect_command, ncu_import_command, run_bounded, target_command
from .tools import _tool_environment, choose_backend, find_ncu, nsight_python_version, probe_ncu, version_text


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
        from ..sandbox.runner import network_isolation

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
    H200 host's 2025.3.1, so this path has not run on hardware yet (see harness/profiling/target.py).
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
