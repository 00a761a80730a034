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
from .process import _tail, _target_status, ncu_collect_command, ncu_import_command, target_command
from .tools import choose_backend, find_ncu, nsight_python_version, probe_ncu, version_text
from .wall import Wall, Walled


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

    def _extra(self, request: ProfileRequest) -> dict[str, str]:
        """The target's environment on top of the scrubbed one (``Wall`` adds HOME and the folders)."""
        extra: dict[str, str] = {}
        if request.allow_cpu:
            extra["TRITON_INTERPRET"] = "1"
        if request.device_index is not None:
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
            i = request.device_index
            extra["CUDA_VISIBLE_DEVICES"] = visible[i] if i < len(visible) else str(i)
        return extra

    def _wall(self, request: ProfileRequest, tool: Optional[str]) -> Wall | ProfileSummary:
        """The request's sandbox inbox, or a FAILED summary saying why it cannot be made."""
        try:
            return Wall(request, tool)
        except (OSError, ValueError) as err:  # SchemaError is a ValueError
            return self._summary(request, FAILED, f"profile not prepared: {err}")

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
        wall = self._wall(request, self.ncu)
        if isinstance(wall, ProfileSummary):
            return wall
        with wall:
            return self._profile_in(request, wall)

    def _profile_in(self, request: ProfileRequest, wall: Wall) -> ProfileSummary:
        metrics = list(request.metrics)
        dropped: list[str] = []
        deadline = time.monotonic() + request.timeout_s
        started = time.perf_counter()
        for attempt in range(METRIC_RETRIES + 1):  # runs again only after dropping metrics ncu does not know
            def collect(out: Path) -> list[str]:
                target = target_command(request, "ncu", out / "target_status.json", solution=wall.solution,
                                        dataset=wall.dataset, workload=wall.workload)
                report_base = out / "profile" if self.export_report else None
                return ncu_collect_command(self.ncu, request, report_base, out / "ncu.log", metrics, target)

            walled = wall.run(collect, ["ncu.log", "target_status.json", "profile.ncu-rep"],
                              max(deadline - time.monotonic(), 1.0), self._extra(request))
            run = walled.run
            log = walled.files.get("ncu.log", b"").decode(errors="replace")
            text = "\n".join([log, run.stdout, run.stderr, *walled.notes])
            target_status = _target_status(walled.files.get("target_status.json"))
            common = dict(command=walled.command, log=_tail(text), sandbox=walled.sandbox,
                          wall_s=time.perf_counter() - started)
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
        report, report_path = None, None
        if self.export_report:
            report = walled.files.get("profile.ncu-rep")
            if report is None:
                status, reason = diagnose(run.returncode, text)
                if status == OK:
                    status, reason = NO_KERNELS, f"ncu wrote no report: {reason or 'nothing was profiled'}"
                return self._summary(request, status, reason, missing_metrics=dropped, **common)
            kept = request.keep_workdir
            report_path = str((kept if kept is not None else wall.inbox) / "profile.ncu-rep")
            imported = self._import(request, wall, report, max(deadline - time.monotonic(), 1.0))
            raw_csv = imported.files.get("raw.csv", b"").decode(errors="replace")
            if imported.run.timed_out or imported.run.returncode != 0:
                status, reason = diagnose(imported.run.returncode, imported.run.stdout + imported.run.stderr)
                return self._summary(request, FAILED if status == OK else status,
                                     f"ncu --import failed: {reason or imported.run.stdout.strip()[:500]}",
                                     missing_metrics=dropped, report_path=report_path, **common)
        else:
            raw_csv = log
        summary = self._summary(request, OK, "", missing_metrics=dropped, raw_csv=raw_csv, report_path=report_path,
                                report=report, **common)
        return finish_summary(summary, parse_raw_csv)

    def _import(self, request: ProfileRequest, wall: Wall, report: bytes, timeout_s: float) -> Walled:
        """``ncu --import`` of the report, inside a sandbox too: the report came from the candidate's wall."""
        path = wall.put("profile.ncu-rep", report)

        def argv(out: Path) -> list[str]:
            return ["sh", "-c", 'out="$1"; shift; exec "$@" > "$out"', "sh", str(out / "raw.csv"),
                    *ncu_import_command(self.ncu, path)]

        return wall.run(argv, ["raw.csv"], timeout_s, gpu=False)


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
        wall = self._wall(request, self.ncu)
        if isinstance(wall, ProfileSummary):
            return wall
        with wall:
            extra = self._extra(request)
            # nsight-python spawns ncu itself, which must be on the target's PATH.
            path = os.environ.get("PATH", "")
            if self.ncu and shutil.which("ncu", path=path) is None:
                extra["PATH"] = os.pathsep.join([str(Path(self.ncu).parent), path])

            def argv(out: Path) -> list[str]:
                return target_command(request, "nsight", out / "target_status.json", out / "nsight",
                                      solution=wall.solution, dataset=wall.dataset, workload=wall.workload)

            started = time.perf_counter()
            walled = wall.run(argv, ["target_status.json", "nsight/profile.csv", "nsight/*.ncu-rep"],
                              request.timeout_s, extra)
            run = walled.run
            text = "\n".join([run.stdout, run.stderr, *walled.notes])
            common = dict(command=walled.command, log=_tail(text), sandbox=walled.sandbox,
                          wall_s=time.perf_counter() - started)
            if run.timed_out:
                return self._summary(request, TIMEOUT, f"no result within {request.timeout_s:.0f} s", **common)
            status, reason = diagnose(run.returncode, text)
            failure = self._target_failure(_target_status(walled.files.get("target_status.json")), text)
            if status in (NO_PERMISSION, UNAVAILABLE):
                return self._summary(request, status, reason, **common)
            if failure or status == FAILED:
                return self._summary(request, FAILED, failure or reason, **common)
            if "profile.csv" not in walled.files:
                return self._summary(request, NO_KERNELS, "nsight-python wrote no data", **common)
            reports = sorted(name for name in walled.files if name.endswith(".ncu-rep"))
            kept = request.keep_workdir
            summary = self._summary(request, OK, raw_csv=walled.files["profile.csv"].decode(errors="replace"),
                                    report_path=str(kept / reports[0]) if reports and kept is not None else None,
                                    report=walled.files[reports[0]] if reports else None, **common)
            return finish_summary(summary, parse_long_csv)


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
                      device_index: Optional[int] = None, sandbox: bool = True,
                      hidden: Iterable[str] = ()) -> list[ProfileSummary]:
    """Profile the solution on each workload, one fresh target process (and ncu run) per workload, each in the
    candidate worker's sandbox (``sandbox=False``: on purpose without; ``hidden``: the archive's folder)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="crucible-profile-sol-") as tmp:
        sol_path = Path(tmp) / "solution.json"
        sol_path.write_text(json.dumps(solution_json))
        for uuid in workload_uuids:
            request = ProfileRequest(solution_path=sol_path, workload_uuid=uuid, dataset_root=Path(dataset_root),
                                     metrics=list(metrics), seed=seed, solution_hash=solution_hash,
                                     timeout_s=timeout_s, warmup=warmup, isolate_network=isolate_network,
                                     allow_cpu=allow_cpu, device_index=device_index, sandbox=sandbox,
                                     hidden=tuple(str(h) for h in hidden))
            summary = profiler.profile(request)  # carries the report's bytes: its folder is gone
            out.append(summary)
            if progress:
                progress(uuid, summary)
    return out
