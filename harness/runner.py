"""Start, talk to and stop worker processes: scrubbed environment, private folder, no network, deadlines.

The harness process itself never imports candidate code and never touches CUDA: a candidate that
hangs is killed with its whole process group, one that crashes leaves a log, and the next request
gets a fresh worker.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import torch

from . import protocol

LOG_LIMIT = 5 << 20  # the official evaluator keeps at most 5 MiB of log

# Variables a worker may inherit; everything else (API keys, tokens, cloud credentials) stays behind.
_PASS_PREFIXES = ("CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "NCCL_", "NVSHMEM_", "LC_", "OMP_", "MKL_", "OPENBLAS_",
                  "FLASHINFER_", "LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "LANG", "TERM", "TZ",
                  "CRUCIBLE_CUDA_ARCH", "MAX_JOBS", "CC", "CXX")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)


class WorkerCrashed(RuntimeError):
    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


class WorkerTimeout(RuntimeError):
    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def scrubbed_environment(extra: Optional[dict[str, str]] = None, home: Optional[Path] = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.startswith(_PASS_PREFIXES) and not _SECRET.search(k)}
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [package_root, env.get("PYTHONPATH", "")] if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if home is not None:
        env.update(HOME=str(home), TMPDIR=str(home), TRITON_CACHE_DIR=str(home / ".triton"),
                   TORCH_EXTENSIONS_DIR=str(home / ".torch_extensions"), XDG_CACHE_HOME=str(home / ".cache"))
    env.update(extra or {})
    return env


@lru_cache(maxsize=1)
def network_isolation() -> tuple[tuple[str, ...], str]:
    """A command prefix that starts the worker without network access, where this host allows it."""
    unshare = shutil.which("unshare")
    if not unshare:
        return (), "unshare not found: worker has the host's network"
    for prefix in ((unshare, "--net", "--"), (unshare, "--user", "--map-root-user", "--net", "--")):
        try:
            ok = subprocess.run([*prefix, sys.executable, "-c", "pass"], capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return prefix, "network namespace without interfaces"
    return (), "this host does not allow network namespaces: worker has the host's network"


def truncate_log(text: str, limit: int = LOG_LIMIT) -> str:
    data = text.encode(errors="replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    cut = len(data) - 2 * half
    return (data[:half].decode(errors="replace") + f"\n[... {cut} bytes of log cut ...]\n"
            + data[-half:].decode(errors="replace"))


def exit_on_sigterm() -> None:
    """Make SIGTERM (``timeout``, ``kill``, a batch scheduler) end the process as an exception would, so the
    ``finally`` blocks run: workers stop, and a submission cut short is archived as INTERRUPTED, not left RUNNING."""
    import threading

    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit)


@dataclass
class WorkerOptions:
    role: str = "candidate"
    device_index: Optional[int] = None  # which GPU (CUDA_VISIBLE_DEVICES); None: as the host has it
    cpu_only: bool = False  # no GPU: Triton runs in its interpreter
    isolate_network: bool = True
    start_timeout_s: float = 120.0


class WorkerProcess:
    def __init__(self, options: WorkerOptions):
        self.options = options
        self.proc: Optional[subprocess.Popen] = None
        self.workdir: Optional[Path] = None
        self.environment: dict[str, Any] = {}
        self.isolation_note = ""

    # -- life cycle -----------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (it imports torch and friends meanwhile)."""
        self.workdir = Path(tempfile.mkdtemp(prefix=f"crucible-{self.options.role}-"))
        extra = {}
        if self.options.cpu_only:
            extra.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        elif self.options.device_index is not None:
            # Index into what this process may see: "2,3" and index 1 mean physical GPU 3.
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
            i = self.options.device_index
            extra["CUDA_VISIBLE_DEVICES"] = visible[i] if i < len(visible) else str(i)
        env = scrubbed_environment(extra, home=self.workdir)
        prefix: tuple[str, ...] = ()
        self.isolation_note = "network isolation off"
        if self.options.isolate_network:
            prefix, self.isolation_note = network_isolation()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.log_path = self.workdir / "worker.log"
        log = open(self.log_path, "wb")
        cmd = [*prefix, sys.executable, "-m", "harness.worker", "--role", self.options.role,
               "--rfd", str(req_r), "--wfd", str(rep_w), "--parent-pid", str(os.getpid())]
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, pass_fds=(req_r, rep_w), start_new_session=True)
        log.close()
        os.close(req_r)
        os.close(rep_w)
        self._w, self._r = req_w, rep_r

    def wait_ready(self) -> dict[str, Any]:
        """The worker's hello: its environment, once its imports are done."""
        header, _ = self.request({"op": "hello"}, timeout_s=self.options.start_timeout_s)
        self.environment = header.get("environment", {})
        return self.environment

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except (OSError, AttributeError):
            return 0

    def log_since(self, offset: int) -> str:
        """What the worker printed since ``offset`` (one workload's share of the log)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return truncate_log(f.read().decode(errors="replace"))
        except (OSError, AttributeError):
            return ""

    def log_text(self) -> str:
        try:
            return truncate_log(self.log_path.read_text(errors="replace"))
        except (OSError, AttributeError):
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def stop(self, graceful: bool = True) -> None:
        """End the process (asking it first when ``graceful``) and remove its private folder."""
        if self.alive and graceful:
            try:
                self.request({"op": "exit"}, timeout_s=10)
                self.proc.wait(timeout=10)
            except Exception:
                pass
        self.kill()
        for fd in (getattr(self, "_w", None), getattr(self, "_r", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._w = self._r = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # -- requests -------------------------------------------------------------------------------------

    def request(self, message: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        if not self.alive:
            raise WorkerCrashed("the worker is not running", self.log_text())
        deadline = time.monotonic() + timeout_s
        try:
            protocol.write_message(self._w, message)
            return protocol.read_message(self._r, deadline)
        except protocol.Timeout:
            self.kill()
            raise WorkerTimeout(f"no answer within {timeout_s:.0f} s", self.log_text()) from None
        except (protocol.PeerClosed, BrokenPipeError, protocol.ProtocolError) as err:
            if isinstance(err, protocol.ProtocolError):
                self.kill()  # it speaks garbage: whatever it is doing, it is done
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
                code = self.proc.returncode
            raise WorkerCrashed(f"the worker died ({describe_exit(code)}): {err}", self.log_text()) from None

    def __enter__(self) -> "WorkerProcess":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
