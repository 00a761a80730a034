"""The worker's own code, proven unchanged after candidate code ran in its process.

The candidate is imported into the worker, as the contest's harness imports it: the timer, the input generator,
the mutation and thread checks share its interpreter. The static gate refuses code that reaches for them
(``sys.modules``, the harness's modules, monkeypatching); this is the run-time proof behind it. Before any
candidate code runs, the worker imports everything it will call later and fingerprints it: every function,
class method and module attribute of the harness's own modules (the worker's ``__main__`` included), the
third-party callables its judgments rest on (CUPTI's bindings, ``torch.equal``, ``torch.cuda.synchronize``,
the clocks, the thread census), and the code object, defaults and closure of every function. After each request
it compares. A change is tampering: the reply fails, and so does every later request of that worker.

Only changes and removals count: lazily imported submodules add attributes, which honest code does too.

It also keeps the census of Python threads: a thread the candidate starts (by any spelling the static gate
missed) is still alive when the recheck counts, even if it was started during the correctness calls.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import types
from typing import Any, Iterable, Mapping

from .dispatcher_guard import DispatcherGuard

# Imported before the candidate is: modules the worker only reaches for later (inside a request).
PRELOAD = ("harness.measure.timing", "harness.measure.cupti_trace", "harness.measure.gpu_state",
           "harness.measure.roofline", "harness.audits.sass", "harness.families", "harness.sandbox.build",
           "harness.sandbox.worker_calls", "harness.data.inputs", "safetensors.torch")

# Third-party callables the worker's judgments rest on: (module, attribute names; "*" every callable).
THIRD_PARTY = (("torch", ("equal", "allclose", "isfinite", "empty", "zeros", "stack", "cat")),
               # the Python half of torch.Tensor (clone, copy_, equal... of the mutation check; TensorBase, its C
               # half, cannot be assigned to)
               ("torch.Tensor", ("*",)),
               ("torch.UntypedStorage", ("*",)),  # data_ptr of the aliasing check
               ("torch.cuda.Event", ("*",)), ("torch.cuda.Stream", ("*",)),  # record/elapsed_time of the wall clocks
               ("torch.cuda", ("synchronize", "Event", "current_stream", "Stream", "is_available",
                               # what the L2 flush, the memory figures and the GPU state are read with: a card that
                               # reports no L2 would make the cold-L2 flush a no-op
                               "get_device_properties", "current_device", "device_count", "device", "get_device_name",
                               "is_initialized", "empty_cache", "memory_reserved", "max_memory_reserved",
                               "reset_peak_memory_stats", "memory_allocated", "max_memory_allocated")),
               ("time", ("perf_counter", "perf_counter_ns", "monotonic", "time", "sleep")),
               ("threading", ("active_count", "enumerate", "Thread")),
               ("os", ("listdir", "getpid", "_exit", "write", "read")),
               # every builtin the worker's checks call by name (isinstance, type, len...): `len.__self__` is the
               # builtins module, reached without naming it
               ("builtins", ("*",)),
               # the standard library the timer's spans and medians and the input fingerprint are computed with
               ("bisect", ("*",)), ("math", ("*",)), ("statistics", ("public",)), ("hashlib", ("public",)),
               ("functools", ("partial", "reduce")), ("select", ("public",)),
               # the framing of every reply (harness.sandbox.protocol): JSON headers, safetensors payloads
               ("json", ("*",)), ("json.encoder", ("*",)), ("json.decoder", ("*",)),
               ("json.encoder.JSONEncoder", ("*",)), ("json.decoder.JSONDecoder", ("*",)), ("struct", ("*",)),
               ("safetensors.torch", ("save", "load")),
               # CUPTI's bindings: their public functions only (a compiled module may keep callbacks and state in
               # its globals, rebound as the timer runs)
               ("cupti", ("public",)), ("cupti.cupti", ("public",)))


def preload(cuda: bool) -> None:
    """Import what the worker calls later, so its fingerprint exists before the candidate can touch it."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # a module this host cannot import (no GPU libraries): the worker never calls it
            continue
    if cuda:
        from ..measure.cupti_trace import _load_cupti

        _load_cupti()  # CUPTI's bindings: the official timer's


def _function_marks(fn: Any) -> tuple:
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    return (id(fn), id(code), id(getattr(fn, "__defaults__", None)), id(getattr(fn, "__kwdefaults__", None)),
            tuple(id(c) for c in closure))


def _marks(value: Any) -> tuple:
    if isinstance(value, (types.FunctionType, types.MethodType)):
        return _function_marks(getattr(value, "__func__", value))
    return (id(value),)


def _own_modules() -> Iterable[tuple[str, types.ModuleType]]:
    for name, module in list(sys.modules.items()):
        if isinstance(module, types.ModuleType) and (name == "harness" or name.startswith("harness.")
                                                     or name == "__main__"):
            yield name, module


def snapshot() -> dict[str, tuple]:
    """``"module.attr"`` (and ``"module.Class.attr"``) -> identity marks, for everything trusted."""
    marks: dict[str, tuple] = {}
    for name, module in _own_modules():
        for attr, value in list(vars(module).items()):
            if attr.startswith("__") and attr not in ("__dict__",):
                continue
            marks[f"{name}.{attr}"] = _marks(value)
            if isinstance(value, type) and getattr(value, "__module__", "") == name:
                for member, inner in list(vars(value).items()):
                    if not member.startswith("__") or member in ("__init__", "__call__"):
                        marks[f"{name}.{attr}.{member}"] = _marks(inner)
    for module_name, attrs in THIRD_PARTY:
        module = _resolve(module_name)
        if module is None:
            continue
        if attrs == ("public",):
            names = [a for a, v in vars(module).items() if callable(v) and not a.startswith("_")]
        elif attrs != ("*",):
            names = list(attrs)
        elif isinstance(module, type):  # a class: what it resolves, inherited names too (shadowing one is a change)
            names = [a for a in dir(module) if not a.startswith("__") or a in ("__eq__", "__setitem__")]
        else:  # a module: every name it holds (json's _default_encoder is state, not a callable)
            names = [a for a in vars(module) if not a.startswith("__")]
        for attr in names:
            try:
                if isinstance(module, type):  # what the class holds, not what a lookup makes of it (a C classmethod
                    # is a new bound object on every lookup)
                    value = next(vars(k)[attr] for k in module.__mro__ if attr in vars(k))
                else:
                    value = getattr(module, attr)
                marks[f"{module_name}.{attr}"] = _marks(value)
            except Exception:  # a descriptor that refuses the class itself: nothing to fingerprint
                continue
    return marks


def _resolve(dotted: str) -> Any:
    """A module by name, or a class inside one ("torch.Tensor"); None where it is not imported."""
    if dotted in sys.modules:
        return sys.modules[dotted]
    parent, _, name = dotted.rpartition(".")
    return getattr(sys.modules[parent], name, None) if parent in sys.modules else None


def changed(before: Mapping[str, tuple], after: Mapping[str, tuple]) -> list[str]:
    """What was replaced or removed (new names are not counted: lazy imports add them)."""
    return sorted(k for k, v in before.items() if after.get(k) != v)


def python_threads() -> dict[int, str]:
    """Live Python threads by ident, with a name: the ``threading`` ones, and those ``_thread.start_new_thread``
    started (threading never lists them; ``sys._current_frames`` holds every thread with a Python state). Foreign
    threads that merely called into Python (threading's dummies) are not counted."""
    out: dict[int, str] = {}
    for ident in sys._current_frames():
        out[ident] = f"thread {ident} (not a threading.Thread)"
    for t in threading.enumerate():
        if t.ident is None:
            continue
        if isinstance(t, threading._DummyThread):  # type: ignore[attr-defined]
            out.pop(t.ident, None)
        else:
            out[t.ident] = t.name
    return out


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command name) of every process this worker's /proc shows."""
    out = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (not Linux): nothing to count
        return out
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:  # gone meanwhile
                continue
            name = stat[stat.find("(") + 1:stat.rfind(")")]
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) < 2 or not fields[1].isdigit():
                continue
            state, ppid = fields[:2]
            out[int(entry)] = (int(ppid), state, "".join(c if c.isprintable() and c.isascii() else "?" for c in name))
    return out


def _descendants(roots: set[int], table: Mapping[int, tuple[int, str, str]]) -> set[int]:
    found, grew = set(roots), True
    while grew:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in found and pid not in found}
        found |= more
        grew = bool(more)
    return found


def _sandbox_init() -> bool:
    """Whether pid 1 is the sandbox's own first process (harness.sandbox.isolation: ``sh -c INIT crucible-sandbox``),
    not a container's init or a harness that runs as pid 1, whose other children are no candidate's."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return b"\0crucible-sandbox\0" in f.read()
    except OSError:
        return False


def torch_compile_processes() -> set[int]:
    """The worker processes of torch.compile's own compile pool (Inductor's SubprocPool or process pool), kept
    alive between compiles as its threads are."""
    module = sys.modules.get("torch._inductor.async_compile")
    pool_of = getattr(getattr(module, "AsyncCompile", None), "process_pool", None)
    cache_info = getattr(pool_of, "cache_info", None)
    if cache_info is None or not cache_info().currsize:
        return set()
    pool = pool_of()
    pids = {getattr(getattr(pool, "process", None), "pid", None), *(getattr(pool, "_processes", None) or ())}
    return {p for p in pids if isinstance(p, int)}


def other_processes() -> dict[int, str]:
    """Processes alive beside the worker: in its PID namespace (its parent is the namespace's first process) every one
    but that first and the worker; without one (reduced sandbox) the worker's descendants. Forked, spawned by a
    library's helper or daemonised alike; zombies do nothing and are left out."""
    me, table = os.getpid(), _processes()
    mine = _descendants({me}, table) - {me}
    if os.getppid() == 1 and _sandbox_init():
        mine |= set(table) - {1, me}
    return {pid: table[pid][2] for pid in mine if pid in table and table[pid][1] not in ("Z", "X")}


def _path(frame: Any) -> str:
    return frame.f_code.co_filename.replace("\\", "/")


def _waiting_for_a_compile_job(frame: Any) -> bool:
    """A pool worker between jobs: its innermost Python frame is the pool's own loop, blocked on its queue (a job
    running, Python or builtin, puts the job's frame or `_WorkItem.run` on top)."""
    return (frame is not None and frame.f_code.co_name == "_worker"
            and _path(frame).endswith("concurrent/futures/thread.py"))


def _only_code_of(frame: Any, folder: str = "/torch/_inductor/") -> bool:
    """Every frame of the stack is threading's bootstrap or the library's own code under ``folder`` (torch.compile's
    pools' reader loops, tqdm's monitor)."""
    seen = 0
    while frame is not None:
        if not (_path(frame).endswith("/threading.py") or folder in _path(frame)):
            return False
        frame, seen = frame.f_back, seen + 1
    return seen > 0


def torch_compile_threads() -> set[int]:
    """Idle threads of torch.compile's own compiler (Inductor's compile-thread pool, its subprocess pool's reader):
    torch starts them on a compiled function's first call and keeps them, waiting, for the next compile."""
    module = sys.modules.get("torch._inductor.async_compile")
    if module is None:
        return set()
    frames = sys._current_frames()
    idle: set[int] = set()
    pool = getattr(getattr(module, "AsyncCompile", None), "pool", None)
    cache_info = getattr(pool, "cache_info", None)
    if cache_info is not None and cache_info().currsize:  # made already: asking for it makes none
        idle |= {t.ident for t in getattr(pool(), "_threads", ())
                 if t.ident is not None and _waiting_for_a_compile_job(frames.get(t.ident))}
    for t in threading.enumerate():
        target = getattr(t, "_target", None)
        if (t.ident is not None and str(getattr(target, "__module__", "")).startswith("torch._inductor.")
                and _only_code_of(frames.get(t.ident))):
            idle.add(t.ident)
    return idle


def tqdm_monitor_threads() -> set[int]:
    """tqdm's monitor: the daemon thread tqdm starts with a library's first progress bar (torch.compile's autotuning on
    a GPU host, H100 2026-12-07: "tqdm_monitor" alive at the recheck) and keeps, waiting, in tqdm's own code. It
    refreshes the bars it watches, so a bar of a class of the candidate's (its `refresh` run on that thread) makes it
    the candidate's, and so does a monitor class of its own making."""
    if "tqdm._monitor" not in sys.modules:
        return set()
    frames, idle = sys._current_frames(), set()
    for t in threading.enumerate():
        kind = type(t)
        if t.ident is None or kind.__name__ != "TMonitor" or kind.__module__ != "tqdm._monitor":
            continue
        bars = getattr(t, "tqdm_cls", None)
        classes = [bars] + [type(bar) for bar in list(getattr(bars, "_instances", None) or ())]
        if (all(str(getattr(c, "__module__", "")).startswith("tqdm") for c in classes)
                and _only_code_of(frames.get(t.ident), "/tqdm/")):
            idle.add(t.ident)
    return idle


class _Modes:
    """Torch function and dispatch modes active in the worker: a mode of the candidate's, left on the stack, runs
    its code inside every torch call the worker makes after the candidate's (``torch.equal`` of the mutation check
    answering True, the output read for the reply, the L2 flush). torch's own default-device mode
    (``torch.set_default_device``) is the one allowed. The functions are held from before the candidate ran."""

    def __init__(self) -> None:
        import torch
        from torch.utils._device import DeviceContext

        c = torch._C
        self._function_depth, self._function_at = c._len_torch_function_stack, c._get_function_stack_at
        self._dispatch_depth, self._dispatch_at = c._len_torch_dispatch_stack, c._get_dispatch_stack_at
        self._infra = [(key, c._get_dispatch_mode) for key in (c._TorchDispatchModeKey.FAKE,
                                                              c._TorchDispatchModeKey.PROXY,
                                                              c._TorchDispatchModeKey.FUNCTIONAL)]
        self._device_context, self._device_hook = DeviceContext, DeviceContext.__dict__.get("__torch_function__")

    def foreign(self) -> list[str]:
        found = [f"torch function mode {type(self._function_at(i)).__name__}" for i in range(self._function_depth())
                 if type(self._function_at(i)) is not self._device_context]
        found += [f"torch dispatch mode {type(self._dispatch_at(i)).__name__}" for i in range(self._dispatch_depth())]
        found += [f"torch dispatch mode {type(mode).__name__}" for key, get in self._infra
                  if (mode := get(key)) is not None]
        if self._device_context.__dict__.get("__torch_function__") is not self._device_hook:
            found.append("torch.utils._device.DeviceContext.__torch_function__")
        return found


class Integrity:
    """The fingerprint taken before candidate code, and what differs from it now."""

    def __init__(self) -> None:
        # the functions themselves, held here: replacing this module's names later changes nothing of the check
        self._snapshot, self._changed, self._threads = snapshot, changed, python_threads
        self._compile_threads, self._tqdm_threads = torch_compile_threads, tqdm_monitor_threads
        self.before = types.MappingProxyType(snapshot())  # read-only: no .clear() or item assignment
        self.threads = python_threads()
        self._processes, self._compile_processes = other_processes, torch_compile_processes
        self.processes = other_processes()
        self.tampered: list[str] = []
        self._modes = _Modes().foreign
        self._kernels = DispatcherGuard().foreign
        self.check = self._check  # bound now: a method replaced on the class later is not the one called

    def _check(self, kernels: bool = True) -> list[str]:
        """The names changed so far (sticky: once tampered, always tampered). ``kernels``: PyTorch's operators'
        kernels too (harness.sandbox.dispatcher_guard: tens of milliseconds, once per request)."""
        if not self.tampered:
            self.tampered = (self._changed(self.before, self._snapshot()) + self._modes()
                             + (self._kernels() if kernels else []))
        return self.tampered

    def new_threads(self) -> list[str]:
        """Python threads alive now that were not when the worker started: the candidate's (torch.compile's idle
        compile workers are torch's own, and tqdm's idle monitor of libraries' bars is tqdm's)."""
        torch_own = self._compile_threads() | self._tqdm_threads()
        return sorted(name for ident, name in self._threads().items()
                      if ident not in self.threads and ident not in torch_own)

    def new_processes(self) -> list[str]:
        """Processes alive now that were not when the worker started (harness.sandbox.integrity.other_processes),
        torch.compile's own pool workers and their children left out: the candidate's."""
        now, pools = self._processes(), self._compile_processes()
        torch_own = _descendants(pools, _processes()) if pools else set()
        return sorted(f"pid {pid} ({name})" for pid, name in now.items()
                      if pid not in self.processes and pid not in torch_own)
