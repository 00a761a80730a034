"""Running things: the target's and ncu's command lines, a bounded subprocess run (its process group
killed on timeout), and reading what the run left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .model import NVTX_INCLUDE, NVTX_RANGE, ProfileRequest


def target_command(request: ProfileRequest, backend: str, status_file: Path, nsight_dir: Optional[Path] = None,
                   solution: Optional[Path] = None, dataset: Optional[Path] = None,
                   workload: Optional[str] = None) -> list[str]:
    """The command line of the process that runs the candidate once (what ncu launches, or nsight runs); the
    solution, dataset and workload default to the request's (a ``Wall`` gives its inbox's)."""
    cmd = [request.python, "-m", "harness.profiling.target", "--solution", str(solution or request.solution_path),
           "--workload", workload or request.workload_uuid, "--seed", str(request.seed),
           "--dataset", str(dataset or request.dataset_root),
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


def _target_status(data: Optional[bytes]) -> dict[str, Any]:
    """The target's status file as it was handed back (empty where it wrote none or garbage)."""
    try:
        status = json.loads(data or b"{}")
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}
