"""Start, talk to and stop worker processes: each in its own sandbox (harness.sandbox.isolation), with deadlines.

The harness process itself never imports candidate code and never touches CUDA: a candidate that
hangs is killed with its whole namespace, one that crashes leaves a log, and the next request
gets a fresh worker. A worker's output is streamed through a pipe into a bounded buffer (its head and
tail), so a candidate that prints without end costs the harness no memory and ends at its output limit.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from . import protocol
from .messages import ExitRequest, HelloRequest, MalformedReply, Reply, Request, SyncRequest, parse_reply
from .bytecode import worker_bytecode
from .environment_filter import passes
from .extension_cache import MAX_BYTES as EXTENSION_BYTES, folder_environment
from .isolation import Sandbox, SandboxPolicy, human_bytes, make_sandbox
from .log_sink import LOG_LIMIT, LogSink, truncate_log  # noqa: F401 (the harness's names for them)

if TYPE_CHECKING:  # annotations only: the harness launches workers before it imports torch
    import torch

# Variables a worker may inherit; everything else (API keys, tokens, cloud credentials) stays behind.


_SPENT_LOCK = threading.Lock()
_SYNC_S = 10.0  # the least time a sync's answer is waited for (an idle worker answers in a millisecond)


class WorkerCrashed(RuntimeError):
    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


class WorkerBrokeProtocol(WorkerCrashed):
    """A reply that does not fit its op's model (harness.sandbox.messages): the worker is killed, and whoever
    asked records it as a crashed worker (a RUNTIME_ERROR, or the build's COMPILE_ERROR)."""


class WorkerTimeout(RuntimeError):
    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


class WorkerPastDeadline(WorkerTimeout):
    """A request cut at the worker's ``deadline`` (its evaluation's wall-time budget), before its own limit."""


# What one nvcc/cicc job of a heavy CUTLASS instantiation holds (FlashInfer's fused MoE on sm_90 took a 32 GiB
# worker past its limit with 16 jobs on the H200).
COMPILE_JOB_BYTES = 5 << 30


def compile_jobs(memory_bytes: int, requested: Optional[str], cpus: int) -> str:
    """``MAX_JOBS`` for a worker: what the host asked for (else its CPU count), but no more parallel compile jobs
    than the worker's memory limit holds, so a JIT build (FlashInfer's, ``load_inline``'s) finishes instead of
    killing the worker."""
    try:
        asked = int(requested) if requested else cpus
    except ValueError:
        asked = cpus
    return str(max(1, min(asked, memory_bytes // COMPILE_JOB_BYTES)))


def scrubbed_environment(extra: Optional[dict[str, str]] = None, home: Optional[Path] = None) -> dict[str, str]:
    """The worker's environment: the host's variables that pass the filter, never a secret, the harness package
    first on the path; ``extra`` on top, its ``PYTHONPATH`` put before the others rather than replacing them."""
    env = {k: v for k, v in os.environ.items() if passes(k)}
    extra = dict(extra or {})
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding the harness package
    env["PYTHONPATH"] = os.pathsep.join(p for p in [extra.pop("PYTHONPATH", ""), package_root,
                                                    env.get("PYTHONPATH", "")] if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if home is not None:
        # the extension builders' folders too (torch's TORCH_EXTENSIONS_DIR, TVM-FFI's TVM_FFI_CACHE_DIR, never the
        # shared ~/.cache/tvm-ffi): private to the worker, collected for the SASS audit and kept (extension_cache)
        # USER and LOGNAME: the sandbox's user id has no passwd entry on a host that maps it, and getpass.getuser()
        # (torch.compile's cache folder, at import of torch._inductor) then raises KeyError: honest torch.compile
        # glue was a COMPILE_ERROR on such a GPU host (H100, 2026-12-07)
        env.update(HOME=str(home), TMPDIR=str(home), TRITON_CACHE_DIR=str(home / ".triton"),
                   XDG_CACHE_HOME=str(home / ".cache"), USER="worker", LOGNAME="worker", **folder_environment(home))
    env.update(extra)
    return env


@lru_cache(maxsize=1)
def network_isolation() -> tuple[tuple[str, ...], str]:
    """A command prefix that starts the worker without network access, where this host allows it."""
    unshare = shutil.which("unshare")
    if not unshare:
        return (), "unshare not found: worker has the host's network"
    for prefix in ((unshare, "--net", "--"), (unshare, "--user", "--map-root-user", "--net", "--")):
        try:
            probe = subprocess.run([*prefix, sys.executable, "-c", "pass"], capture_output=True, timeout=20)
            ok = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return prefix, "network namespace without interfaces"
    return (), "this host does not allow network namespaces: worker has the host's network"


# Replies carry tensors only for these ops: a call's outputs (run, reference, oracle; recheck: one set per step) and a
# build's torch extensions (harness.sandbox.extension_cache); every other reply carries none.
_OUTPUT_OPS = ("run", "reference", "oracle", "recheck")
PAYLOAD_SLACK = 16 << 20  # safetensors' own header, and a tar's


def reply_payload_limit(message: Request, definition: Any, memory_bytes: int) -> int:
    """The most payload bytes the reply to ``message`` can honestly carry: a reply written by a process that ran
    candidate code is refused past it before it is read, so no worker can stream more into the harness's memory
    than the request's outputs (8 bytes an element: float64, the widest any output or the oracle has).
    ``definition``: the one the worker was built for, where the request names none; ``memory_bytes``: the
    worker's own memory limit, the bound where the outputs' size is not known."""
    if message.op == "build":
        return EXTENSION_BYTES + PAYLOAD_SLACK
    if message.op not in _OUTPUT_OPS:
        return 0
    definition = getattr(message, "definition", None) or definition
    workload = getattr(message, "workload", None)
    try:
        elements = sum(math.prod(definition.shape_of(spec, workload.axes))
                       for spec in definition.outputs.values() if spec.shape is not None)
    except (AttributeError, KeyError, TypeError):  # no definition known: what the worker could hold
        return memory_bytes
    calls = len(message.steps) if message.op == "recheck" else 1
    return min(calls * elements * 8 + PAYLOAD_SLACK, memory_bytes + PAYLOAD_SLACK)


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
    sandbox: bool = True  # False (--no-sandbox): namespaces off, rlimits kept; results say "reduced"
    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    dataset_root: Optional[str] = None  # its blob/ folder is what the worker may read of the dataset
    hidden: tuple[str, ...] = ()  # paths no bind may expose (the archive)
    # host folders the worker may write (the dataset's baselines: FlashInfer's JIT cache, kept between sessions)
    writable: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()  # variables set for the worker on top of the scrubbed ones
    # where the session's workers spend their time: "role.op.step" -> seconds summed over requests: each reply's
    # spent_s, plus the round trip's rest ("role.op.transfer": the channel and (de)serialisation; for the hello,
    # "role.hello.start": the process coming up). One dict shared by the session's workers, read by the session
    # per submission (harness.pipeline.evaluate).
    spent: Optional[dict[str, float]] = field(default=None, compare=False, repr=False)


class WorkerProcess:
    def __init__(self, options: WorkerOptions):
        self.options = options
        self.proc: Optional[subprocess.Popen] = None
        self.workdir: Optional[Path] = None
        self.environment: dict[str, Any] = {}
        self.isolation_note = ""
        self.sandbox: Optional[Sandbox] = None
        self.log: Optional[LogSink] = None
        self.limit_hit = ""  # the sandbox limit the worker ran into, once it has
        # GPU memory as the worker reports it: the most any request held since mark_memory(), and what it
        # still holds between requests (its context's allocations are not in either)
        self.peak_bytes = 0
        self.resident_bytes = 0
        self._definition: Any = None  # what the worker was last asked to build (the size of its outputs)
        # A time.monotonic() past which no request waits, whatever its own limit (a submission's wall-time
        # budget: harness.pipeline.evaluate.Session.submit's budget_s); the worker is killed there.
        self.deadline: Optional[float] = None

    def mark_memory(self) -> None:
        """Start counting the peak afresh (one workload's share)."""
        self.peak_bytes = 0

    # -- life cycle -----------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (it imports torch and friends meanwhile)."""
        o = self.options
        extra = {}
        if o.cpu_only:
            extra.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        elif o.device_index is not None:
            # Index into what this process may see: "2,3" and index 1 mean physical GPU 3.
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
            i = o.device_index
            extra["CUDA_VISIBLE_DEVICES"] = visible[i] if i < len(visible) else str(i)
        if os.environ.get("CRUCIBLE_DUMP_STACKS_AFTER_S"):  # the worker's stacks too, into its log
            extra["CRUCIBLE_DUMP_STACKS_AFTER_S"] = os.environ["CRUCIBLE_DUMP_STACKS_AFTER_S"]
        readable = [str(Path(__file__).resolve().parents[1])]  # the whole harness package
        # the harness's bytecode of torch and friends, to read and never write (harness.sandbox.bytecode)
        bytecode_env, bytecode_folders = worker_bytecode()
        extra.update(bytecode_env)
        readable += bytecode_folders
        if o.dataset_root:
            readable += [str(Path(o.dataset_root) / "blob"), str(Path(o.dataset_root).resolve() / "blob")]
        self.sandbox = make_sandbox(o.policy, o.role, readable, list(o.hidden), os.environ.get("PYTHONPATH", ""),
                                    gpu=not o.cpu_only, writable=list(o.writable), enabled=o.sandbox,
                                    network=not o.isolate_network)
        self.workdir = self.sandbox.folder
        extra["MAX_JOBS"] = compile_jobs(o.policy.memory_bytes, os.environ.get("MAX_JOBS"), os.cpu_count() or 1)
        env = scrubbed_environment({**extra, **dict(o.environment)}, home=self.sandbox.workdir_inside)
        prefix: tuple[str, ...] = ()
        if self.sandbox.full:
            self.isolation_note = ("network namespace without interfaces" if o.isolate_network
                                   else "network isolation off")
            parent = 1  # the namespace's init: the worker dies with it, and it with the harness
        else:
            self.isolation_note = "network isolation off"
            if o.isolate_network:
                prefix, self.isolation_note = network_isolation()
            parent = os.getpid()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        log_r, log_w = os.pipe()
        cmd = [*prefix, *self.sandbox.command(
            [sys.executable, "-m", "harness.sandbox.worker",
             "--role", "reference" if o.role == "reference" else "candidate",
             "--rfd", str(req_r), "--wfd", str(rep_w),
             "--parent-pid", str(parent)])]
        try:
            self.proc = subprocess.Popen(cmd, env=env, cwd=self.sandbox.folder, stdin=subprocess.DEVNULL,
                                         stdout=log_w, stderr=log_w, pass_fds=(req_r, rep_w),
                                         start_new_session=True)
        finally:
            for fd in (req_r, rep_w, log_w):
                os.close(fd)
        self.log = LogSink(log_r, o.policy.output_bytes, self._output_limit)
        self._w, self._r = req_w, rep_r

    def _output_limit(self) -> None:
        self.limit_hit = f"output limit ({human_bytes(self.options.policy.output_bytes)} of stdout/stderr) exceeded"
        self.kill(wait=False)

    @property
    def sandbox_level(self) -> str:
        return self.sandbox.level if self.sandbox is not None else "not started"

    def wait_ready(self) -> dict[str, Any]:
        """The worker's hello: its environment, once its imports are done."""
        reply, _ = self.request(HelloRequest(), timeout_s=self.options.start_timeout_s)
        self.environment = reply.environment
        return self.environment

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_size(self) -> int:
        """Start a new log segment (one workload's share); its offset, for ``log_since``."""
        return self.log.mark() if self.log is not None else 0

    def log_since(self, offset: int) -> str:
        """What the worker printed since ``offset`` (its head and tail past LOG_LIMIT)."""
        return self.log.since(offset) if self.log is not None else ""

    def log_text(self) -> str:
        return self.log.text() if self.log is not None else ""

    def kill(self, wait: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if wait:
                self.proc.wait()

    def ended_by(self, code: Optional[int]) -> str:
        """Why a dead worker ended: the sandbox limit it ran into, else its exit."""
        reason = self.limit_hit or (self.sandbox.exit_reason(code) if self.sandbox is not None else None)
        if reason:
            self.limit_hit = reason
            return f"sandbox: {reason}"
        if self.sandbox is not None and self.sandbox.full and code is not None and 128 < code < 128 + 65:
            code = -(code - 128)  # the namespace's init (sh) reports a signal as 128 + its number
        return describe_exit(code)

    def stop(self, graceful: bool = True) -> None:
        """End the process (asking it first when ``graceful``) and remove its private folder."""
        if self.alive and graceful:
            try:
                self.request(ExitRequest(), timeout_s=10)
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
        if self.log is not None:
            self.log.wait()
        if self.sandbox is not None:
            self.sandbox.close()
        self.workdir = None

    # -- requests -------------------------------------------------------------------------------------

    def request(self, message: Request, timeout_s: float,
                tensors: Optional[dict[str, torch.Tensor]] = None) -> tuple[Reply, dict[str, torch.Tensor]]:
        """Send one request; its reply as the model of its op (harness.sandbox.messages.REPLIES) and its tensors.
        A reply that does not fit that model raises WorkerBrokeProtocol, a WorkerCrashed."""
        if not self.alive:
            raise WorkerCrashed("the worker is not running", self.log_text())
        deadline = time.monotonic() + timeout_s
        cut = self.deadline is not None and self.deadline < deadline  # the evaluation's deadline comes first
        if cut and self.deadline is not None:
            deadline = self.deadline
        sent = time.perf_counter()
        # A nonce per request, echoed by the worker's loop: candidate code shares that process and its descriptors,
        # so a frame it writes into the reply channel (a forged timing) is told apart by the nonce it cannot know
        nonce = secrets.token_hex(16)
        try:
            protocol.require_quiet(self._r)  # the worker answers once per request: more was written by another
            protocol.write_message(self._w, {**message.wire(), "nonce": nonce}, tensors)
            if message.op == "build":
                self._definition = message.definition
            limit = reply_payload_limit(message, getattr(self, "_definition", None), self.options.policy.memory_bytes)
            header, tensors = protocol.read_message(self._r, deadline, max_payload=limit, nonce=nonce)
            if message.op != "exit":
                self._confirm(deadline)
        except protocol.Timeout:
            self.kill()
            if cut:
                raise WorkerPastDeadline("no answer before the evaluation's deadline", self.log_text()) from None
            raise WorkerTimeout(f"no answer within {timeout_s:.0f} s", self.log_text()) from None
        except protocol.ForeignFrame as err:
            self.kill()
            raise WorkerBrokeProtocol(f"the worker broke the protocol: {err}", self.log_text()) from None
        except (protocol.PeerClosed, BrokenPipeError, protocol.ProtocolError) as err:
            if isinstance(err, protocol.ProtocolError):
                self.kill()  # it speaks garbage: whatever it is doing, it is done
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
                code = self.proc.returncode
            raise WorkerCrashed(f"the worker died ({self.ended_by(code)}): {err}", self.log_text()) from None
        try:
            reply: Reply = parse_reply(message.op, header)
        except MalformedReply as err:
            self.kill()  # it speaks garbage: whatever it is doing, it is done
            raise WorkerBrokeProtocol(f"the worker broke the protocol: {err}", self.log_text()) from None
        if reply.spent_s:
            self._account(message.op, reply.spent_s, time.perf_counter() - sent)
        if reply.memory is not None:  # reported by the worker itself: a measure, not a proof
            self.peak_bytes = max(self.peak_bytes, reply.memory.peak_bytes)
            self.resident_bytes = reply.memory.resident_bytes
        if not reply.ok and reply.error is not None and self.sandbox is not None:
            reply.error = self.sandbox.annotate(reply.error)
        return reply, tensors

    def _confirm(self, deadline: float) -> None:
        """The worker's loop answers requests in order, one reply each: a sync answered with its own nonce right
        after the reply means that reply was the loop's. A frame candidate code wrote into the channel before the
        loop's reply (red team round 12, a10: the nonce read from the loop's frame) was taken as the reply; the
        loop's own then arrives here, with the request's nonce, and is a ForeignFrame. An honest worker answers at
        once: it is idle, waiting."""
        nonce = secrets.token_hex(16)
        protocol.write_message(self._w, {**SyncRequest().wire(), "nonce": nonce})
        protocol.read_message(self._r, max(deadline, time.monotonic() + _SYNC_S), max_payload=0, nonce=nonce)

    def _account(self, op: str, steps: dict[str, float], round_trip_s: float) -> None:
        spent, prefix = self.options.spent, f"{self.options.role}.{op}."
        if spent is None:  # nobody reads it (a worker outside a session)
            return
        rest = "start" if op == "hello" else "transfer"  # the hello waits for the process to come up
        with _SPENT_LOCK:  # baselines started in threads beside the session's work share the dict
            for step, seconds in {**steps, rest: max(round_trip_s - sum(steps.values()), 0.0)}.items():
                spent[prefix + step] = spent.get(prefix + step, 0.0) + seconds

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
