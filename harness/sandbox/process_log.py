"""Processes started in the worker, seen by a Python audit hook: what the census of live processes
(``integrity.new_processes``) misses, a process that started and ended between two looks.

A process is outside every count the harness keeps: the CPU's attribution, and on a GPU the CUPTI trace of the
worker's process, which the official timer reads (a daemon that computes while the worker waits for it is neither
timed nor attributed). The static gate refuses the candidate's own ways of starting one and the library helpers it
knows to run a command line they are given (red team round 9: ``torch._inductor.cpp_builder.run_compile_cmd("sh -c
'...'")``); this log is the run-time net under it, for a helper the gate does not know.

Legitimate starts are a library's toolchain, started by that library's own building code (the first frame outside the
standard library is in one of its modules that builds, ``_SPAWNERS``: torch's extension builder and Inductor, Triton's
backends and build, TVM-FFI's and FlashInfer's JIT): Triton's compiler (``ptxas``, the launcher's C
compiler, ``ldconfig``), PyTorch's and TVM-FFI's extension builders (``ninja``, ``nvcc``, the C++ compiler),
torch.compile's worker pool (a Python); and the harness's own checks. A shell or ``os.system`` is never a library's
toolchain, and anything started from the candidate's own files is the candidate's. ``ninja`` runs its build file's
commands in a shell this hook does not see, so its start is refused (``ShellInBuild``, raised from the hook) unless the
file has the shape the library's builder writes (``build_file_check``; red team round 10); an accepted start reads a
sealed copy of the very bytes checked, so a rewrite racing the build changes nothing ninja runs. An audit hook cannot
be removed once added, and it is added when the worker starts, before any candidate code is imported.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from . import build_file_check

# Shells: a library's own toolchain never needs one (Triton, PyTorch's extension builder and torch.compile's pool run
# their programs directly); a command line handed to a library helper usually starts with one.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "fish", "busybox", "env"})
_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                     "os.forkpty", "pty.spawn"})
_STDLIB = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))
_HARNESS = os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep
STARTED: list[str] = []  # what the candidate started: "`sh -c ...` from main.py:12"
_MAX_KEPT = 20


# The modules of each library that start its toolchain (relative to the package's folder; a folder ends in "/"): a
# start whose first frame outside the standard library is elsewhere in the library is a callback of the candidate's
# run by library code (red team round 9c: `functools.partial` of `uuid._get_command_stdout` handed to
# `torch.no_grad()` started `python -c ...` from torch/utils/_contextlib.py).
_SPAWNERS = {
    # _dynamo/debug_utils.py: torch.compile's `nvcc --version` (its one command, fixed) for a repro's header
    "torch": ("utils/cpp_extension.py", "_inductor/", "_dynamo/debug_utils.py"),
    "triton": ("backends/", "runtime/build.py", "runtime/driver.py", "knobs.py", "compiler/", "tools/"),
    "tvm_ffi": ("cpp/", "utils/", "libinfo.py"),
    "flashinfer": ("jit/", "utils.py", "compilation_context.py"),
}


def _spawning_modules() -> tuple[str, ...]:
    """The files and folders whose code may start a toolchain program (the packages found, not imported)."""
    import importlib.util

    places = []
    for name, parts in _SPAWNERS.items():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            root = os.path.realpath(os.path.dirname(spec.origin))
            places += [os.path.join(root, part) for part in parts]
    return tuple(places)


_LIBRARIES = _spawning_modules()


def _text(word: object) -> str:
    return os.fsdecode(word) if isinstance(word, (bytes, os.PathLike)) else str(word)


def _program(event: str, args: tuple) -> str:
    """The command line an event starts, as text (a fork has none)."""
    if event == "subprocess.Popen":
        executable, argv = args[0], args[1]
        words = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv or [])
        return " ".join(_text(w) for w in ([executable] if executable and not words else words))
    if event == "os.system":
        return f"sh -c {_text(args[0])!r}"
    if event in ("os.exec", "os.posix_spawn"):
        return " ".join(_text(w) for w in (args[1] or [args[0]]))
    if event == "os.spawn":
        return " ".join(_text(w) for w in (args[2] or [args[1]]))
    return event  # os.fork, os.forkpty, pty.spawn


def _stem(program: str) -> str:
    """``/usr/bin/bash`` -> ``bash``."""
    return os.path.basename(program.split(" ", 1)[0])


def _standard_library(path: str) -> bool:
    """A module of Python's own (subprocess, os, multiprocessing...), not a package installed beside them (an image's
    Python keeps site-packages inside its stdlib folder)."""
    return path.startswith(_STDLIB) and "/site-packages/" not in path and "/dist-packages/" not in path


def _starter() -> tuple[str, int]:
    """The file and line of the first frame outside the standard library and this module: who asked."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.realpath(frame.f_code.co_filename)
        if path != os.path.realpath(__file__) and not _standard_library(path):
            return path, frame.f_lineno
        frame = frame.f_back
    return "", 0


class ShellInBuild(PermissionError):
    """A build would run a program of the candidate's: a build file's flags, paths or statements are not what a
    library's builder writes (``build_file_check``: ninja runs its commands in a shell), or the environment the
    toolchain inherits was changed to redirect it (``_REDIRECTS``)."""


# Variables that make a toolchain program run another program or load other code: the compilers a builder picks
# (Triton's launcher build reads CC), nvcc's extra flags (`-ccbin`), gcc's search for its own parts (the variable form
# of `-B`), the dynamic loader's preloads. Changed after the worker started, they are the candidate's (every route to
# set one is a gate error; red team round 11 found `triton.knobs.setenv`).
_REDIRECTS = ("CC", "CXX", "CUDAHOSTCXX", "NVCC_CCBIN", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "GCC_EXEC_PREFIX",
              "COMPILER_PATH", "CCACHE_PREFIX", "CCACHE_COMPILER", "LD_PRELOAD", "LD_AUDIT")
_STARTING_ENVIRONMENT: dict[str, str | None] = {}


def _redirected(event: str, args: tuple) -> str:
    """The redirecting variables a start's environment changed since the worker started, or ""."""
    env = {"subprocess.Popen": 3, "os.exec": 2, "os.posix_spawn": 2}.get(event)
    given = args[env] if env is not None and len(args) > env and args[env] is not None else os.environ
    values = {_text(k): _text(v) for k, v in (given.items() if hasattr(given, "items") else ())}
    changed = [name for name in _REDIRECTS if values.get(name) != _STARTING_ENVIRONMENT.get(name)]
    return f"the environment redirects the toolchain ({', '.join(changed)} changed)" if changed else ""


def _ninja_file(args: tuple) -> str:
    """The build file a ``ninja`` start reads: ``-C DIR``'s or the working folder's ``build.ninja``."""
    argv = [_text(w) for w in (args[1] if isinstance(args[1], (list, tuple)) else [])]
    folder = next((argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "-C"), None) or _text(args[2] or ".")
    name = next((argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "-f"), "build.ninja")
    return os.path.join(folder, name)


_SEALED: list[int] = []  # the sealed copies ninja was pointed at; kept open for the worker's life (a few per build)


def _sealed_copy(data: bytes) -> str:
    """A path to a copy of ``data`` no one can change: a memory file sealed against writes, shrinking and growing,
    whose seals cannot be lifted, read by the child through this process's ``/proc`` entry."""
    import fcntl

    fd = os.memfd_create("build.ninja", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    _SEALED.append(fd)
    return f"/proc/{os.getpid()}/fd/{fd}"


def _read_from_sealed_copy(argv: list, data: bytes) -> None:
    """Point a ``ninja`` start at a sealed copy of the build file just checked, in place (the list an audit event
    carries is the one ``subprocess`` then runs): a thread or process of the candidate's that rewrites the file
    between the check and ninja's read of it changes nothing ninja runs (red team round 10's left race)."""
    words = [_text(w) for w in argv]
    keep = [argv[0]]
    i = 1
    while i < len(argv):
        if words[i] == "-f":
            i += 2  # the library's own choice of file, checked above: replaced by its copy
            continue
        keep.append(argv[i])
        i += 1
    argv[:] = [keep[0], "-f", _sealed_copy(data), *keep[1:]]


def _refused_build(args: tuple) -> str:
    """Why a ``ninja`` start's build file is refused, or "" (unreadable: ninja fails on it as well). A file accepted
    is what ninja reads: the start is pointed at a sealed copy of the very bytes checked."""
    try:
        with open(_ninja_file(args), "rb") as f:
            data = f.read(4 << 20)
    except (OSError, TypeError, IndexError):
        return ""
    refused = build_file_check.problem(data.decode("utf-8", errors="replace"))
    if not refused and isinstance(args[1], list) and hasattr(os, "memfd_create"):
        try:
            _read_from_sealed_copy(args[1], data)
        except OSError:  # no memory files here (an old kernel, a filter): ninja reads the file itself, as before
            pass
    return refused


def _hook(event: str, args: tuple) -> None:
    if event not in _EVENTS:
        return
    refused = ""
    try:
        program = _program(event, args)
        path, line = _starter()
        if path.startswith(_HARNESS):
            return  # the worker's own checks
        refused = _redirected(event, args)
        if not refused and event == "subprocess.Popen" and _stem(program) == "ninja":
            refused = _refused_build(args)
        if not refused and path.startswith(_LIBRARIES) and event != "os.system" and _stem(program) not in _SHELLS:
            return  # a library's own toolchain, run by the module of it that builds
        if len(STARTED) < _MAX_KEPT:
            STARTED.append(f"`{program[:120]}` from {os.path.basename(path) or '?'}:{line}"
                           + (f" (refused: {refused})" if refused else ""))
    except Exception:  # an audit hook must never raise into the code it watches: an odd argument is recorded as such
        if len(STARTED) < _MAX_KEPT:
            STARTED.append(f"{event} (unreadable arguments)")
    if refused:  # raised from the hook, the start does not happen: the build fails, and the log names it
        raise ShellInBuild(refused if refused.startswith("the environment") else
                           f"the build file is not what the library's builder writes, and ninja runs it in a shell: "
                           f"{refused}")


def install() -> None:
    """Add the hook (once; it cannot be removed)."""
    if not getattr(install, "done", False):
        _STARTING_ENVIRONMENT.update({name: os.environ.get(name) for name in _REDIRECTS})
        sys.addaudithook(_hook)
        install.done = True  # type: ignore[attr-defined]


def started() -> list[str]:
    """The processes the candidate started so far, as the recheck's reply names them."""
    return [f"started {s}" for s in STARTED]

