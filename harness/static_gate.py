"""Static gate: scan a candidate solution's sources before anything is built or imported.

The gate is the first and cheapest stage of the pipeline (DESIGN.md section 5, harness-anchors 8(c) C2).
It reads source text only: nothing here imports, compiles or runs candidate code. It does not prove a
candidate honest (token pasting, getattr chains and string building can hide almost anything from a
source scan); the artifact checks and the runtime audits do that. Its job is to stop the obvious reward
hacks in ~milliseconds and to tell the author exactly which line is the problem.

Public API (pure functions; the only I/O is reading the YAML policy in `load_policy`):

    policy = load_policy("definitions/audit_policy.yaml", definition=..., op_type=...)
    findings = scan_sources({"main.py": src}, "triton", policy)
    gate_passed(findings)   # True iff no finding has severity "error"

Python and Triton files are analysed with `ast`, with import aliases resolved (`import torch as t`,
`from torch import cuda`, `from os import environ`, `E = torch.cuda.Event`). CUDA/C++ files are matched
token by token on a copy of the text in which comments and string literals are blanked (line and column
positions are kept), and the string literals are checked separately.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict

Severity = Literal["error", "warning"]

DEFAULT_POLICY_PATH = Path(__file__).resolve().parent.parent / "definitions" / "audit_policy.yaml"

PYTHON_SUFFIXES = frozenset({".py", ".pyi"})
CPP_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc"})
# Files that are data or prose. In a CUDA/C++ solution any other file could be pulled in by #include,
# so unknown suffixes are scanned as C++ there; these few are skipped to avoid noise from prose.
DOCUMENT_SUFFIXES = frozenset({".md", ".txt", ".rst", ".json", ".yaml", ".yml", ".toml"})
CPP_LANGUAGES = frozenset({"cuda", "cpp", "c++"})

SNIPPET_MAX_CHARS = 240


# --------------------------------------------------------------------------------------------------
# Models


class Finding(BaseModel):
    """One rule hit. `line` and `col` are 1-based; `snippet` is the offending source line."""

    model_config = ConfigDict(frozen=True)

    rule: str
    severity: Severity
    path: str
    line: int
    col: int
    message: str
    snippet: str


@dataclass(frozen=True)
class RuleSpec:
    id: str
    default_severity: Severity
    languages: tuple[str, ...]  # "python", "cpp"
    summary: str


def _rule(id: str, severity: Severity, languages: str, summary: str) -> RuleSpec:
    return RuleSpec(id, severity, tuple(languages.split(",")), summary)


# The catalogue of rule ids. Ids are stable: policies, archived findings and tests refer to them.
# definitions/audit_policy.yaml repeats these defaults with documentation; a test keeps the two equal.
RULES: dict[str, RuleSpec] = {
    r.id: r
    for r in (
        _rule("syntax", "error", "python", "Python source that does not parse cannot be analysed, so it is rejected."),
        _rule("timer_tampering", "error", "python,cpp",
              "Replacing or talking to the timing machinery (torch.cuda, torch.cuda.Event, time, CUPTI, "
              "triton.testing, flashinfer, the harness) or defining CUDA runtime symbols that would interpose on it."),
        _rule("monkeypatch", "error", "python",
              "Assigning attributes of imported modules (torch, torch.Tensor, torch.nn.functional, ...), "
              "overriding torch ops, or using mock patching."),
        _rule("tensor_subclass", "error", "python",
              "Tensor subclasses and __torch_function__/__torch_dispatch__ hooks, which can defer work into "
              "the harness's checks (lazy outputs)."),
        _rule("concurrency", "error", "python,cpp",
              "Threads, processes, subprocesses, asyncio, signals, finalizers: work that can run outside the timed call."),
        _rule("harness_internals", "error", "python,cpp",
              "Introspection that can reach the harness's state: gc, inspect, sys.modules, frames, __globals__, "
              "__code__, builtins, imports of harness/controller, includes from outside the solution."),
        _rule("env_probe", "error", "python,cpp",
              "Probing the environment to tell an evaluation from a test (os.environ, getenv, platform, socket, "
              "/proc, pytest, TRITON_INTERPRET, CUDA_VISIBLE_DEVICES, argv)."),
        _rule("file_cache", "error", "python,cpp",
              "Writing or probing files, pickles, databases and temp dirs: a cross-process cache of outputs."),
        _rule("file_read", "warning", "python,cpp",
              "Reading files at run time; a kernel needs none, and reading can pick up state left by other runs."),
        _rule("dynamic_code", "error", "python,cpp",
              "exec/eval/compile/__import__/importlib, dynamic attribute lookups on modules, NVRTC and runtime "
              "module loading: code the gate cannot see."),
        _rule("native_ffi", "error", "python,cpp",
              "ctypes/cffi/cuda-python/cpp_extension, dlopen/dlsym, driver entry-point lookups: native code "
              "outside the harness's build and artifact checks."),
        _rule("stream_event_graph", "error", "python,cpp",
              "CUDA streams, events and graphs created or selected by the candidate: side-stream and graph tricks "
              "escape per-call timing."),
        _rule("device_state_tamper", "error", "cpp",
              "Changing device-wide state the timer depends on: persisting-L2 limits and access-policy windows, "
              "device reset, profiler start/stop."),
        _rule("output_cache", "error", "python",
              "A cache outside the function keyed by data_ptr()/id()/hash(): replays an earlier output "
              "instead of computing."),
        _rule("torch_compute", "warning", "python,cpp",
              "Compute done by torch/ATen/FlashInfer instead of the candidate's own kernels (library fallback). "
              "Allocation, view and metadata helpers are allow-listed."),
        _rule("library_fallback", "warning", "cpp",
              "cuBLAS/cuDNN/CUTLASS/FlashInfer and other library use in C++; attribution decides whether the "
              "time is spent in the candidate's own kernels."),
        _rule("static_buffer", "warning", "cpp",
              "static host variables and __device__/__managed__ globals: state that survives between calls "
              "and can serve as a cache."),
        _rule("memoized_function", "warning", "python",
              "functools.lru_cache/cache: tensors hash by identity, so memoising a function of tensors is an "
              "output cache."),
        _rule("global_state", "warning", "python",
              "A function that rebinds a module global (global/nonlocal): state that survives between calls."),
        _rule("silent_fallback", "warning", "python",
              "A bare or broad `except` that does not re-raise: it can hide a failing kernel behind a fallback path."),
        _rule("clock_read", "warning", "python",
              "Reading host clocks or benchmarking itself; a candidate has no need to, and it can use the "
              "reading to tell warmup from timed calls."),
    )
}

ALLOW_LIST_NAMES = ("torch_calls", "tensor_methods", "cpp_calls", "python_names", "cpp_tokens")


class RuleSetting(BaseModel):
    model_config = ConfigDict(frozen=True)

    enabled: bool = True
    severity: Severity


class GatePolicy(BaseModel):
    """The effective policy for one definition: rule switches/severities plus allow-lists.

    Allow-lists (entries ending in `*` match by prefix, e.g. `torch.cuda.get_device_*`, `at::cuda::*`):
      torch_calls     canonical Python names not counted as torch compute (allocation, views, metadata)
      tensor_methods  tensor method names not counted as compute (e.g. a definition may allow `sum`)
      cpp_calls       qualified at::/torch:: names not counted as ATen compute
      python_names    canonical Python names exempt from every rule (per-definition escape hatch)
      cpp_tokens      C++ tokens exempt from every rule (per-definition escape hatch)
    """

    model_config = ConfigDict(frozen=True)

    rules: dict[str, RuleSetting]
    torch_calls: tuple[str, ...] = ()
    tensor_methods: tuple[str, ...] = ()
    cpp_calls: tuple[str, ...] = ()
    python_names: tuple[str, ...] = ()
    cpp_tokens: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()  # which policy sections were applied, in order (provenance)

    def setting(self, rule: str) -> RuleSetting:
        return self.rules.get(rule) or RuleSetting(severity=RULES[rule].default_severity)


class PolicyError(ValueError):
    """The policy file is malformed (unknown rule id, unknown allow-list, bad severity)."""


# --------------------------------------------------------------------------------------------------
# Policy loading (layering: default -> op_type -> definition)


def builtin_policy() -> GatePolicy:
    """Catalogue defaults with empty allow-lists: everything torch-ish is flagged. Fail-closed fallback."""
    return GatePolicy(rules={r.id: RuleSetting(severity=r.default_severity) for r in RULES.values()},
                      layers=("builtin",))


def _apply_layer(rules: dict[str, dict[str, Any]], allow: dict[str, list[str]], layer: Any, where: str) -> None:
    if layer is None:
        return
    if not isinstance(layer, Mapping):
        raise PolicyError(f"{where}: expected a mapping, got {type(layer).__name__}")
    unknown_keys = set(layer) - {"rules", "allow", "instruction_claims", "thresholds"}
    if unknown_keys:
        raise PolicyError(f"{where}: unknown keys {sorted(unknown_keys)} "
                          "(expected 'rules', 'allow', 'instruction_claims' and/or 'thresholds')")
    # thresholds belong to the runtime audits (harness/audits.py: policy_thresholds); checked here too, so a
    # typo fails when the policy loads.
    from .audits import policy_thresholds

    try:
        policy_thresholds({"default": {"thresholds": layer.get("thresholds") or {}}}, None, None)
    except ValueError as err:
        raise PolicyError(f"{where}: {str(err).removeprefix('default.')}") from None
    # instruction_claims belong to the instruction proof (harness/sass.py: policy_claims); checked here so that
    # a misspelt family fails when the policy loads instead of passing unnoticed.
    from .sass import unknown_claims

    claims = layer.get("instruction_claims") or []
    if not isinstance(claims, list) or unknown_claims(claims):
        raise PolicyError(f"{where}.instruction_claims: expected a list of known instruction families, got {claims!r}")
    for rule_id, override in (layer.get("rules") or {}).items():
        if rule_id not in RULES:
            raise PolicyError(f"{where}.rules: unknown rule id {rule_id!r}; known: {sorted(RULES)}")
        if isinstance(override, bool):  # shorthand: `torch_compute: false`
            override = {"enabled": override}
        if not isinstance(override, Mapping) or set(override) - {"enabled", "severity"}:
            raise PolicyError(f"{where}.rules.{rule_id}: expected {{enabled: bool, severity: error|warning}}")
        if "severity" in override and override["severity"] not in ("error", "warning"):
            raise PolicyError(f"{where}.rules.{rule_id}.severity: {override['severity']!r} is not error|warning")
        rules[rule_id].update(override)
    for list_name, entries in (layer.get("allow") or {}).items():
        if list_name not in ALLOW_LIST_NAMES:
            raise PolicyError(f"{where}.allow: unknown allow-list {list_name!r}; known: {list(ALLOW_LIST_NAMES)}")
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise PolicyError(f"{where}.allow.{list_name}: expected a list of strings")
        for entry in entries:  # layers extend allow-lists; order kept, duplicates dropped
            if entry not in allow[list_name]:
                allow[list_name].append(entry)


def policy_from_mapping(data: Mapping[str, Any] | None, definition: str | None = None,
                        op_type: str | None = None) -> GatePolicy:
    """Build the effective policy from a parsed policy document (pure; see load_policy)."""
    data = data or {}
    unknown_sections = set(data) - {"version", "default", "op_type", "definition"}
    if unknown_sections:
        raise PolicyError(f"unknown top-level sections {sorted(unknown_sections)}")
    rules: dict[str, dict[str, Any]] = {r.id: {"enabled": True, "severity": r.default_severity} for r in RULES.values()}
    allow: dict[str, list[str]] = {name: [] for name in ALLOW_LIST_NAMES}
    layers = ["default"]
    _apply_layer(rules, allow, data.get("default"), "default")
    if op_type is not None:
        section = (data.get("op_type") or {}).get(op_type)
        if section is not None:
            _apply_layer(rules, allow, section, f"op_type.{op_type}")
            layers.append(f"op_type:{op_type}")
    if definition is not None:
        section = (data.get("definition") or {}).get(definition)
        if section is not None:
            _apply_layer(rules, allow, section, f"definition.{definition}")
            layers.append(f"definition:{definition}")
    return GatePolicy(
        rules={rule_id: RuleSetting(**setting) for rule_id, setting in rules.items()},
        layers=tuple(layers),
        **{name: tuple(entries) for name, entries in allow.items()},
    )


def load_policy(path: str | Path = DEFAULT_POLICY_PATH, definition: str | None = None,
                op_type: str | None = None) -> GatePolicy:
    """Read the YAML policy and layer default -> op_type[op_type] -> definition[definition].

    A relative `path` that does not exist from the working directory is looked up from the repository
    root, so `load_policy("definitions/audit_policy.yaml")` works from anywhere.
    """
    path = Path(path)
    if not path.is_absolute() and not path.exists():
        path = DEFAULT_POLICY_PATH.parent.parent / path
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if data is not None and not isinstance(data, Mapping):
        raise PolicyError(f"{path}: expected a mapping at top level")
    return policy_from_mapping(data, definition=definition, op_type=op_type)


def gate_passed(findings: Iterable[Finding]) -> bool:
    """The gate passes iff no finding has severity 'error' (warnings are recorded, not blocking)."""
    return not any(f.severity == "error" for f in findings)


# --------------------------------------------------------------------------------------------------
# Shared helpers


class _NameMatcher:
    """Exact names plus prefix patterns (entries ending in '*')."""

    __slots__ = ("exact", "prefixes")

    def __init__(self, entries: Iterable[str]):
        entries = list(entries)
        self.exact = frozenset(e for e in entries if not e.endswith("*"))
        self.prefixes = tuple(e[:-1] for e in entries if e.endswith("*"))

    def __call__(self, name: str) -> bool:
        return name in self.exact or (bool(self.prefixes) and name.startswith(self.prefixes))


@dataclass
class _Hit:
    rule: str
    line: int
    col: int
    message: str


def _snippet(lines: list[str], line: int) -> str:
    text = lines[line - 1].rstrip() if 0 < line <= len(lines) else ""
    return text if len(text) <= SNIPPET_MAX_CHARS else text[:SNIPPET_MAX_CHARS] + "..."


def _longest_prefix(table: Mapping[str, Any], dotted: str) -> tuple[str, Any] | None:
    """Entry for the longest dotted prefix of `dotted` present in `table` ('a.b.c' -> 'a.b.c', 'a.b', 'a')."""
    name = dotted
    while True:
        entry = table.get(name)
        if entry is not None:
            return name, entry
        cut = name.rfind(".")
        if cut <= 0:
            return None
        name = name[:cut]


# --------------------------------------------------------------------------------------------------
# Python: name tables (canonical dotted names after alias resolution)

_WHY = {
    "syntax": "code the gate cannot analyse is rejected",
    "timer_tampering": "the harness times and synchronises the candidate with these; replacing them falsifies the measurement",
    "monkeypatch": "changing a library the harness shares with the candidate can alter how the candidate is checked or timed",
    "tensor_subclass": "a tensor subclass or torch-function hook can defer or fake work until the harness inspects the output",
    "concurrency": "work started outside the call can finish after the timer stops or race the harness",
    "harness_internals": "it can reach the harness's state (reference outputs, timers, call counts) through the interpreter",
    "env_probe": "the candidate must behave the same whether it is tested, warmed up or timed",
    "file_cache": "files outlive the process and can carry outputs between runs (cross-process cache)",
    "file_read": "a kernel needs no files at run time; reading one can pick up state left by another run",
    "dynamic_code": "code built or looked up at run time is invisible to this gate",
    "native_ffi": "native code loaded this way bypasses the harness's build and artifact checks",
    "stream_event_graph": "work on candidate-owned streams, events or graphs can escape per-call timing",
    "device_state_tamper": "device-wide cache/limit state persists across calls and can defeat the cold-L2 flush",
    "output_cache": "it can replay an earlier output when the harness reuses a buffer instead of computing the result",
    "torch_compute": "compute outside the candidate's own kernels is a library fallback, not the candidate's kernel",
    "library_fallback": "library kernels are not the candidate's own; attribution must show the time is spent in candidate kernels",
    "static_buffer": "state that survives between calls can be used to cache outputs",
    "memoized_function": "tensors hash by identity, so a memoised function of tensors replays earlier outputs",
    "global_state": "module state that survives between calls can carry outputs from one call to the next",
    "silent_fallback": "a swallowed failure can hide a broken kernel behind a slower or library path",
    "clock_read": "a candidate has no need to time itself, and the reading can tell warmup from timed calls",
}

_CONCURRENCY_NAMES = (
    "threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "pty", "signal", "atexit",
    "sched", "weakref.finalize", "torch.multiprocessing", "_interpreters", "_xxsubinterpreters",
    "os.fork", "os.forkpty", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp", "os.kill", "os.killpg",
    "os.spawnl", "os.spawnle", "os.spawnlp", "os.spawnlpe", "os.spawnv", "os.spawnve", "os.spawnvp", "os.spawnvpe",
    "os.execl", "os.execle", "os.execlp", "os.execlpe", "os.execv", "os.execve", "os.execvp", "os.execvpe",
    "os.register_at_fork",
)
_HARNESS_NAMES = (
    "gc", "inspect", "__builtin__", "__main__", "harness", "controller", "crucible", "flashinfer_bench",
    "sys.modules", "sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace",
    "sys.setprofile", "sys.gettrace", "sys.getprofile", "sys.addaudithook", "sys.monitoring", "sys.meta_path",
    "sys.path_hooks", "sys.path_importer_cache", "sys.path", "sys.exc_info", "sys.exception", "sys.last_traceback",
    "traceback.walk_stack", "traceback.extract_stack", "traceback.walk_tb", "types.FrameType",
    "builtins.globals", "builtins.locals", "builtins.vars",
)
_ENV_NAMES = (
    "os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv", "os.unsetenv", "os.uname", "os.getlogin",
    "os.getpid", "os.getppid", "os.getuid", "os.ctermid", "sys.argv", "sys.orig_argv",
    "platform", "socket", "getpass", "pwd", "grp", "resource", "psutil", "uuid.getnode", "pytest", "_pytest",
)
_FILE_NAMES = (
    "pickle", "_pickle", "cPickle", "shelve", "dbm", "joblib", "dill", "cloudpickle", "sqlite3", "tempfile",
    "shutil", "glob", "fcntl", "mmap", "diskcache", "h5py", "lmdb",
    "os.open", "os.write", "os.makedirs", "os.mkdir", "os.remove", "os.unlink", "os.rename", "os.replace",
    "os.rmdir", "os.removedirs", "os.listdir", "os.scandir", "os.walk", "os.stat", "os.lstat", "os.access",
    "os.chmod", "os.symlink", "os.link", "os.truncate", "os.mkfifo", "os.memfd_create", "os.utime",
    "os.path.exists", "os.path.lexists", "os.path.isfile", "os.path.isdir", "os.path.islink",
    "os.path.getmtime", "os.path.getctime", "os.path.getatime", "os.path.getsize",
    "torch.save", "torch.load", "torch.from_file", "torch.UntypedStorage.from_file",
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.load", "numpy.memmap", "numpy.fromfile",
    "numpy.savetxt", "numpy.loadtxt", "numpy.genfromtxt",
)
_DYNAMIC_NAMES = (
    "builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__", "importlib", "imp", "runpy",
    "zipimport", "pkgutil", "marshal", "code", "codeop", "types.CodeType", "types.FunctionType",
)
_FFI_NAMES = (
    "ctypes", "_ctypes", "cffi", "torch.utils.cpp_extension", "torch.ops.load_library",
    "torch.classes.load_library", "pycuda", "cupy", "cuda.bindings", "cuda.cuda", "cuda.cudart", "cuda.nvrtc",
    "cuda.core", "numba", "tvm_ffi.load_module",
)
_STREAM_NAMES = (
    "torch.cuda.Stream", "torch.cuda.ExternalStream", "torch.cuda.Event", "torch.cuda.graph", "torch.cuda.graphs",
    "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables", "torch.cuda.graph_pool_handle", "torch.cuda.stream",
    "torch.cuda.set_stream", "torch.cuda.StreamContext", "torch.cuda.streams", "torch.Stream", "torch.Event",
    "torch.cuda.is_current_stream_capturing", "triton.testing.do_bench_cudagraph",
)
_MONKEYPATCH_NAMES = (
    "unittest.mock", "mock", "torch.library.Library", "torch.library.impl", "torch.library.register_kernel",
    "torch.overrides", "torch.utils._python_dispatch", "torch._C._set_torch_function_mode",
)
_SUBCLASS_NAMES = (
    "torch.Tensor._make_subclass", "torch.Tensor.as_subclass", "torch._C._disabled_torch_function_impl",
    "torch.Tensor.__torch_function__", "torch.Tensor.__torch_dispatch__",
)
_CLOCK_NAMES = (
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.process_time_ns", "time.thread_time", "time.thread_time_ns",
    "time.clock_gettime", "time.clock_gettime_ns", "datetime.datetime.now", "datetime.datetime.utcnow",
    "datetime.datetime.today", "timeit", "triton.testing.do_bench", "torch.utils.benchmark",
)

# canonical name -> rule id. Longest prefix wins, so "os.environ.get" -> "os.environ" -> env_probe.
_PY_BANNED: dict[str, str] = {}
for _rule_id, _names in (
    ("concurrency", _CONCURRENCY_NAMES), ("harness_internals", _HARNESS_NAMES), ("env_probe", _ENV_NAMES),
    ("file_cache", _FILE_NAMES), ("dynamic_code", _DYNAMIC_NAMES), ("native_ffi", _FFI_NAMES),
    ("stream_event_graph", _STREAM_NAMES), ("monkeypatch", _MONKEYPATCH_NAMES), ("tensor_subclass", _SUBCLASS_NAMES),
    ("clock_read", _CLOCK_NAMES),
):
    for _name in _names:
        _PY_BANNED[_name] = _rule_id

# Assigning into these namespaces is timer tampering; assigning into any other imported module is a monkeypatch.
_TIMER_NAMESPACES = (
    "torch.cuda", "time", "cupti", "triton.testing", "flashinfer", "flashinfer_bench", "harness", "controller",
    "torch.profiler", "torch.autograd.profiler", "torch.utils.benchmark", "timeit",
)
# A setattr with a computed attribute name on these may hit a timer namespace below them.
_TIMER_ANCESTORS = frozenset({"torch", "triton", "torch.autograd", "torch.utils"})

# Roots whose uses count as compute unless allow-listed (torch) or at all (libraries with fused kernels).
_COMPUTE_ROOTS = frozenset({"torch", "flashinfer", "flash_attn", "xformers", "vllm", "sgl_kernel", "deep_gemm",
                            "apex", "transformer_engine", "liger_kernel"})

# Tensor methods that do compute; called on a local value outside a @triton.jit body they are flagged
# (a Python list/set/dict has none of these, so false positives are rare).
_TENSOR_COMPUTE_METHODS = frozenset({
    "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "dot", "softmax", "log_softmax", "exp",
    "exp2", "sum", "mean", "amax", "amin", "logsumexp", "norm", "sqrt", "rsqrt", "tanh", "sigmoid", "relu",
    "topk", "cumsum", "argsort", "argmax", "argmin", "masked_fill", "masked_fill_", "index_select", "index_add",
    "index_add_", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "mul", "mul_", "div",
    "div_", "einsum", "outer", "kron", "tensordot", "prod", "var", "std",
})

_FRAME_ATTRS = frozenset({
    "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next", "gi_frame",
    "cr_frame", "ag_frame", "__globals__", "__code__", "__builtins__", "__closure__", "__subclasses__",
})

_IDENTITY_METHODS = frozenset({"data_ptr", "_cdata", "__hash__", "storage_offset", "unsafe_ptr"})
_CACHE_ACCESS_METHODS = frozenset({"get", "setdefault", "pop", "__getitem__", "__setitem__", "__contains__"})

# (str.replace / DataFrame.rename are too common to treat .replace()/.rename() as file operations.)
_FILE_WRITE_METHODS = frozenset({"write_text", "write_bytes", "touch", "mkdir", "unlink", "symlink_to",
                                 "hardlink_to", "tofile", "exists", "is_file", "is_dir"})
_FILE_READ_METHODS = frozenset({"read_text", "read_bytes"})

_OPEN_FUNCTIONS = frozenset({"builtins.open", "io.open", "codecs.open", "os.fdopen", "pathlib.Path.open"})
_MEMO_DECORATORS = frozenset({"functools.lru_cache", "functools.cache", "functools.cached_property"})
_TRITON_DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics", "triton.language.jit"})
_TENSOR_BASES = frozenset({"torch.Tensor", "torch.nn.Parameter", "torch._C.TensorBase", "torch._C._TensorBase"})
_BROAD_EXCEPTIONS = frozenset({"Exception", "BaseException"})

# Builtins that are resolved to "builtins.<name>" unless the module rebinds them.
_WATCHED_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "open",
                               "setattr", "getattr", "delattr", "id", "hash", "object"})

_ENV_MARKER_RE = re.compile(
    r"pytest|TRITON_INTERPRET|CUDA_VISIBLE_DEVICES|CUDA_LAUNCH_BLOCKING|CRUCIBLE|FLASHINFER_BENCH|"
    r"(?:^|[\s\"'])/proc(?:/|$)|(?:^|[\s\"'])/sys/|LD_PRELOAD"
)
_TEMP_PATH_RE = re.compile(r"(?:^|[\s\"'=])/(?:tmp|dev/shm|var/tmp)(?:/|$)|~/\.cache")
_QUOTES_AND_SPACE = "\"' \t"
_INTERNAL_STRINGS = frozenset({"__builtins__", "__globals__", "__code__", "__import__", "__subclasses__",
                               "f_back", "f_locals", "f_globals", "tb_frame", "_getframe"})


# --------------------------------------------------------------------------------------------------
# Python scanner


def _chain_parts(node: ast.AST) -> list[str] | None:
    """['torch', 'cuda', 'Event'] for `torch.cuda.Event`; None if the chain does not start at a Name.

    `getattr(x, "name")` with a literal name counts as `x.name`, so `getattr(torch, "cuda").Event` is
    torch.cuda.Event.
    """
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and _str_const(node.args[1]) is not None):
            parts.append(node.args[1].value)
            node = node.args[0]
        else:
            break
    if isinstance(node, ast.Name):
        parts.append(node.id)
        parts.reverse()
        return parts
    return None


def _str_const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@dataclass
class _FunctionFacts:
    """What one function body binds, for telling local state from state that survives the call."""

    local_names: set[str]
    declared_global: set[str]
    identity_names: set[str]  # locals assigned from data_ptr()/id()/hash() expressions
    mutable_default_params: set[str]
    first_global_statement: ast.AST | None


@dataclass
class _FunctionFrame:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    is_triton_kernel: bool
    facts: _FunctionFacts | None = None  # computed on first need (most functions never need it)


# Cheap text pre-filter: without any of these words no identity-keyed cache is possible, and the
# per-function analysis that finds one is skipped.
_IDENTITY_HINT_RE = re.compile(r"(?:id|hash)\b|data_ptr|_cdata|__hash__|storage_offset|unsafe_ptr")


def _may_key_by_identity(source: str) -> bool:
    for m in _IDENTITY_HINT_RE.finditer(source):
        word = m.group(0)
        if word not in ("id", "hash") or m.start() == 0 or not _is_word_char(source[m.start() - 1]):
            return True
    return False


# Fields never worth visiting: expression contexts and operator singletons (Load(), Add(), In(), ...).
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "type_ignores"})
_VISITED_FIELDS: dict[type, tuple[str, ...]] = {}


def _iter_statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Every statement, nested ones included, without descending into expressions (much cheaper than
    ast.walk; imports, assignments, definitions and global declarations are all statements)."""
    stack = list(body)
    while stack:
        stmt = stack.pop()
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(stmt, field, None)
            if nested:
                stack.extend(nested)
        for handler in getattr(stmt, "handlers", ()):
            stack.extend(handler.body)
        for case in getattr(stmt, "cases", ()):
            stack.extend(case.body)


class _PythonScanner(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, source: str, own: "_OwnNames", policy: "_CompiledPolicy"):
        self.policy = policy
        self.own = own
        self.hits: list[_Hit] = []
        self.functions: list[_FunctionFrame] = []
        self.aliases: dict[str, str] = {}
        self.rebound_builtins: set[str] = set()
        self.docstrings: set[int] = set()
        self.has_global_declarations = False
        self.may_key_by_identity = _may_key_by_identity(source)
        self._handlers: dict[type, Any] = {}
        self._collect_module_facts(tree)

    # ---- traversal: ast.NodeVisitor's, minus the string building per node and the visits of
    # Load()/Store()/operator singletons (a third of all nodes), to keep 2000 lines well under 50 ms.

    def visit(self, node: ast.AST) -> None:
        cls = type(node)
        handler = self._handlers.get(cls)
        if handler is None:
            handler = getattr(self, "visit_" + cls.__name__, None) or self.generic_visit
            self._handlers[cls] = handler
        handler(node)

    def generic_visit(self, node: ast.AST) -> None:
        cls = type(node)
        fields = _VISITED_FIELDS.get(cls)
        if fields is None:
            fields = _VISITED_FIELDS[cls] = tuple(f for f in cls._fields if f not in _SKIPPED_FIELDS)
        visit = self.visit
        for field in fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        visit(item)
            elif isinstance(value, ast.AST):
                visit(value)

    # ---- pre-pass: aliases, rebound builtins, docstrings

    def _collect_module_facts(self, tree: ast.Module) -> None:
        simple_assigns: list[tuple[str, list[str]]] = []
        if tree.body and isinstance(tree.body[0], ast.Expr) and _str_const(tree.body[0].value) is not None:
            self.docstrings.add(id(tree.body[0].value))
        for node in _iter_statements(tree.body):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom):
                base = self._from_base(node)
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = self._join(base, a.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name in _WATCHED_BUILTINS:
                    self.rebound_builtins.add(node.name)
            elif isinstance(node, ast.Assign):
                parts = _chain_parts(node.value)
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        if parts is not None:
                            simple_assigns.append((target.id, parts))
                        if target.id in _WATCHED_BUILTINS:
                            self.rebound_builtins.add(target.id)
            elif isinstance(node, ast.Expr) and _str_const(node.value) is not None:
                self.docstrings.add(id(node.value))  # docstrings and bare string statements are prose
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                self.has_global_declarations = True
        # `E = torch.cuda.Event` / `env = os.environ` / `w = open` make E, env, w aliases too. Two rounds
        # resolve one level of alias-of-alias; flow-insensitive on purpose (order of definition is irrelevant).
        for _ in range(2):
            for target, parts in simple_assigns:
                resolved = self._resolve_parts(parts)
                if resolved is not None and target not in self.aliases:
                    self.aliases[target] = resolved

    @staticmethod
    def _from_base(node: ast.ImportFrom) -> str:
        return "." * node.level + (node.module or "")

    @staticmethod
    def _join(base: str, name: str) -> str:
        return f"{base}{name}" if (not base or base.endswith(".")) else f"{base}.{name}"

    def _resolve_name(self, name: str) -> str | None:
        resolved = self.aliases.get(name)
        if resolved is not None:
            return resolved
        if name in _WATCHED_BUILTINS and name not in self.rebound_builtins:
            return f"builtins.{name}"
        return None

    def _resolve_parts(self, parts: list[str]) -> str | None:
        base = self._resolve_name(parts[0])
        if base is None:
            return None
        return base if len(parts) == 1 else base + "." + ".".join(parts[1:])

    def _resolve(self, node: ast.AST) -> str | None:
        parts = _chain_parts(node)
        return None if parts is None else self._resolve_parts(parts)

    def _is_own(self, resolved: str) -> bool:
        return (resolved.startswith(".") or resolved.split(".")[0] in self.own.modules
                or (bool(self.own.prefixes) and (resolved + ".").startswith(self.own.prefixes)))

    @property
    def _in_triton_kernel(self) -> bool:
        return bool(self.functions) and self.functions[-1].is_triton_kernel

    # ---- reporting

    def _hit(self, rule: str, node: ast.AST, what: str) -> None:
        self.hits.append(_Hit(rule, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1,
                              f"{what}: {_WHY[rule]}"))

    def _check_reference(self, resolved: str, node: ast.AST, how: str = "uses") -> None:
        """A load of a resolved name (a use, a call target, an import, a base class...)."""
        if self._is_own(resolved) or self.policy.python_names(resolved):
            return
        entry = _longest_prefix(_PY_BANNED, resolved)
        if entry is not None:
            self._hit(entry[1], node, f"{how} `{resolved}`")
            return
        root, _, rest = resolved.partition(".")
        if rest and root in _COMPUTE_ROOTS and not self.policy.torch_calls(resolved):
            kind = "torch" if root == "torch" else f"the {root} library"
            self._hit("torch_compute", node,
                      f"{how} `{resolved}` ({kind}; not on the torch_calls allow-list of allocation/view/metadata helpers)")

    def _check_store(self, resolved: str, node: ast.AST, how: str) -> None:
        """An assignment/deletion of an attribute of an imported module or class."""
        if self._is_own(resolved) or self.policy.python_names(resolved):
            return
        if any(resolved == ns or resolved.startswith(ns + ".") for ns in _TIMER_NAMESPACES):
            self._hit("timer_tampering", node, f"{how} `{resolved}`")
        else:
            self._hit("monkeypatch", node, f"{how} `{resolved}`, an attribute of an imported module")

    def _check_dynamic_store(self, target: str, node: ast.AST, how: str) -> None:
        """setattr/delattr with a computed attribute name on an imported module."""
        if self._is_own(target) or self.policy.python_names(target):
            return
        if target in _TIMER_ANCESTORS or any(target == ns or target.startswith(ns + ".") for ns in _TIMER_NAMESPACES):
            self._hit("timer_tampering", node,
                      f"{how} on `{target}` with a computed attribute name (it can replace timing functions)")
        else:
            self._hit("monkeypatch", node, f"{how} on `{target}` with a computed attribute name")

    # ---- imports

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_import(a.name, a)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._from_base(node)
        for a in node.names:
            if a.name == "*":
                self._check_import(base, a)
                if base.split(".")[0] in _COMPUTE_ROOTS:
                    self._hit("torch_compute", a, f"imports * from `{base}`, which hides which compute functions are used")
            else:
                self._check_import(self._join(base, a.name), a)

    def _check_import(self, resolved: str, node: ast.AST) -> None:
        # Imports are checked against the banned tables only; torch compute is judged where it is used.
        if self._is_own(resolved) or self.policy.python_names(resolved):
            return
        if resolved.split(".")[0] == "builtins":  # the module; implicit builtins resolve to builtins.* too
            self._hit("harness_internals", node, f"imports `{resolved}`")
            return
        entry = _longest_prefix(_PY_BANNED, resolved)
        if entry is not None:
            self._hit(entry[1], node, f"imports `{resolved}`")

    # ---- names and attributes

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        name = node.id
        if name in _FRAME_ATTRS:  # `__builtins__`
            self._hit("harness_internals", node, f"reads `{name}`")
            return
        resolved = self.aliases.get(name)
        if resolved is not None:
            self._check_reference(resolved, node)
        elif name in _WATCHED_BUILTINS and name not in self.rebound_builtins:
            rule = _PY_BANNED.get(f"builtins.{name}")  # exec, eval, compile, __import__, globals, ...
            if rule is not None:
                self._hit(rule, node, f"uses builtin `{name}`")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts = _chain_parts(node)
        if parts is None:  # e.g. `sys._getframe().f_back`, `x.shape[0].bit_length`
            if node.attr in _FRAME_ATTRS:
                self._hit("harness_internals", node, f"reads attribute `{node.attr}`")
            self.generic_visit(node)
            return
        for attr in parts[1:]:
            if attr in _FRAME_ATTRS:
                self._hit("harness_internals", node, f"reads attribute `{attr}` in `{'.'.join(parts)}`")
                break
        resolved = self._resolve_parts(parts)
        if resolved is None:
            return
        if isinstance(node.ctx, ast.Load):
            self._check_reference(resolved, node)
        else:
            self._check_store(resolved, node, "deletes" if isinstance(node.ctx, ast.Del) else "assigns")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        # `torch.cuda.__dict__["synchronize"] = f` / `vars(time)["perf_counter"] = f`
        if not isinstance(node.ctx, ast.Load):
            namespace = self._namespace_dict_owner(node.value)
            if namespace is not None:
                key = _str_const(node.slice)
                if key is not None:
                    self._check_store(f"{namespace}.{key}", node, "assigns via __dict__")
                else:
                    self._check_dynamic_store(namespace, node, "assigns via __dict__")
                self.visit(node.slice)
                return
        self._check_cache_access(node.value, node.slice, node)
        self.generic_visit(node)

    def _namespace_dict_owner(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return self._resolve(node.value)
        if isinstance(node, ast.Call) and self._resolve(node.func) == "builtins.vars" and node.args:
            return self._resolve(node.args[0])
        return None

    # ---- calls

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        resolved = self._resolve(func)
        if resolved is not None:
            self._check_special_call(resolved, node)
        elif isinstance(func, ast.Attribute):
            self._check_method_call(func, node)
        self.generic_visit(node)

    def _check_special_call(self, resolved: str, node: ast.Call) -> None:
        args = node.args
        owner, _, method = resolved.rpartition(".")
        if method in ("__setattr__", "__delattr__") and owner and owner not in ("builtins.object", "builtins.type"):
            # torch.cuda.__setattr__("synchronize", f) is setattr(torch.cuda, "synchronize", f)
            name = _str_const(args[0]) if args else None
            if name is not None:
                self._check_store(f"{owner}.{name}", node, f"{method}() replaces")
            else:
                self._check_dynamic_store(owner, node, f"{method}()")
        elif resolved in _OPEN_FUNCTIONS:
            self._check_open_mode(resolved, node, args[1] if len(args) > 1 else None)
        elif resolved in ("builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                          "builtins.object.__delattr__") and args:
            how = "setattr" if "setattr" in resolved else "delattr"
            target = self._resolve(args[0])
            if target is not None:
                name = _str_const(args[1]) if len(args) > 1 else None
                if name is not None:
                    self._check_store(f"{target}.{name}", node, f"{how}() replaces")
                else:
                    self._check_dynamic_store(target, node, f"{how}()")
        elif resolved == "builtins.getattr" and args:
            target = self._resolve(args[0])
            name = _str_const(args[1]) if len(args) > 1 else None
            if name is not None:
                if name in _FRAME_ATTRS or name in _INTERNAL_STRINGS:
                    self._hit("harness_internals", node, f"reads attribute `{name}` through getattr()")
                if target is not None:
                    self._check_reference(f"{target}.{name}", node, "getattr() reaches")
            elif target is not None and not self._is_own(target):
                self._hit("dynamic_code", node, f"getattr() on module `{target}` with a computed attribute name")

    def _check_open_mode(self, resolved: str, node: ast.Call, mode_arg: ast.AST | None) -> None:
        for kw in node.keywords:
            if kw.arg == "mode":
                mode_arg = kw.value
        if mode_arg is None:
            self._hit("file_read", node, f"`{resolved}()` opens a file for reading")
            return
        mode = _str_const(mode_arg)
        if mode is None:
            self._hit("file_cache", node, f"`{resolved}()` with a computed mode (cannot prove it only reads)")
        elif any(c in mode for c in "wax+"):
            self._hit("file_cache", node, f"`{resolved}()` opens a file for writing (mode {mode!r})")
        else:
            self._hit("file_read", node, f"`{resolved}()` opens a file for reading (mode {mode!r})")

    def _check_method_call(self, func: ast.Attribute, node: ast.Call) -> None:
        """A method called on a value that is not an imported module (a local tensor, path, dict...)."""
        method = func.attr
        if method in _CACHE_ACCESS_METHODS and node.args:
            self._check_cache_access(func.value, node.args[0], node)
        elif method == "update" and node.args and isinstance(node.args[0], ast.Dict):
            for key in node.args[0].keys:
                if key is not None and self._check_cache_access(func.value, key, node):
                    break
        if self._in_triton_kernel:
            return  # inside @triton.jit, x.sum()/x.to() are Triton tensor methods compiled into the kernel
        if method in _TENSOR_COMPUTE_METHODS and not self.policy.tensor_methods(method):
            self._hit("torch_compute", node, f"calls tensor method `.{method}()`")
        elif method in _FILE_WRITE_METHODS:
            self._hit("file_cache", node, f"calls `.{method}()` (a file-system write or probe)")
        elif method in _FILE_READ_METHODS:
            self._hit("file_read", node, f"calls `.{method}()`")
        elif method == "open" and isinstance(func.value, ast.Call):  # Path(...).open("w")
            self._check_open_mode("Path.open", node, node.args[0] if node.args else None)

    # ---- identity-keyed caches

    def _facts(self, frame: _FunctionFrame) -> _FunctionFacts:
        if frame.facts is None:
            frame.facts = self._function_facts(frame.node)
        return frame.facts

    def _derives_identity(self, expr: ast.AST, facts: _FunctionFacts) -> str | None:
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Call):
                if isinstance(sub.func, ast.Attribute) and sub.func.attr in _IDENTITY_METHODS:
                    return f".{sub.func.attr}()"
                resolved = self._resolve(sub.func)
                if resolved in ("builtins.id", "builtins.hash"):
                    return f"{resolved.split('.')[1]}()"
            elif isinstance(sub, ast.Attribute) and sub.attr == "_cdata":
                return "._cdata"
            elif isinstance(sub, ast.Name) and sub.id in facts.identity_names:
                return f"`{sub.id}` (assigned from data_ptr()/id()/hash())"
        return None

    @staticmethod
    def _outlives_call(container: ast.AST, facts: _FunctionFacts) -> bool:
        if isinstance(container, ast.Name):
            name = container.id
            return (name not in facts.local_names or name in facts.declared_global
                    or name in facts.mutable_default_params)
        return _chain_parts(container) is not None  # self._cache, fn.cache, module.cache

    def _check_cache_access(self, container: ast.AST, key: ast.AST, node: ast.AST) -> bool:
        if not self.may_key_by_identity or not self.functions or self._resolve(container) is not None:
            return False
        frame = self.functions[-1]
        facts = self._facts(frame)
        if not self._outlives_call(container, facts):
            return False
        derivation = self._derives_identity(key, facts)
        if derivation is None:
            return False
        self._hit("output_cache", node,
                  f"output/result cache keyed by tensor identity: `{ast.unparse(container)}` is indexed in "
                  f"{frame.node.name}() with a key derived from {derivation}")
        return True

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                self._check_cache_access(right, left, node)
            left = right
        self.generic_visit(node)

    # ---- functions, classes, control flow

    def _function_facts(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> _FunctionFacts:
        a = node.args
        params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        params += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
        positional = [*a.posonlyargs, *a.args]
        mutable_defaults: set[str] = set()
        for param, default in [*zip(positional[len(positional) - len(a.defaults):], a.defaults),
                               *zip(a.kwonlyargs, a.kw_defaults)]:
            if isinstance(default, (ast.Dict, ast.List, ast.Set)) or (
                    isinstance(default, ast.Call) and isinstance(default.func, ast.Name)
                    and default.func.id in ("dict", "list", "set", "defaultdict", "OrderedDict")):
                mutable_defaults.add(param.arg)
        local_names = set(params)
        declared: set[str] = set()
        first_global: ast.AST | None = None
        assignments: list[tuple[list[str], ast.AST]] = []
        for stmt in node.body:
            for sub in ast.walk(stmt):
                if isinstance(sub, (ast.Global, ast.Nonlocal)):
                    declared.update(sub.names)
                    if first_global is None:
                        first_global = sub
                elif isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
                    local_names.add(sub.id)
                elif isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and sub.value is not None:
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                    assignments.append((names, sub.value))
        facts = _FunctionFacts(local_names, declared, set(), mutable_defaults, first_global)
        if self.may_key_by_identity:
            for _ in range(2):  # two rounds: `p = x.data_ptr(); key = (p, n)` taints key too
                for names, value in assignments:
                    if self._derives_identity(value, facts) is not None:
                        facts.identity_names.update(names)
        return facts

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        is_kernel = False
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            resolved = self._resolve(target)
            if resolved in _TRITON_DECORATORS:
                is_kernel = True
            elif resolved in _MEMO_DECORATORS:
                self._hit("memoized_function", deco, f"`{node.name}()` is memoised with `{resolved}`")
        if node.name == "__del__":
            self._hit("concurrency", node, "defines a finalizer `__del__`, which runs code outside the timed call")
        elif node.name in ("__torch_function__", "__torch_dispatch__"):
            self._hit("tensor_subclass", node, f"defines `{node.name}`")
        frame = _FunctionFrame(node, is_kernel or self._in_triton_kernel)
        self.functions.append(frame)
        try:
            self.generic_visit(node)
        finally:
            self.functions.pop()
        if not self.has_global_declarations:
            return
        facts = self._facts(frame)
        assigned_globals = facts.declared_global & facts.local_names
        if assigned_globals:
            self._hit("global_state", facts.first_global_statement or node,
                      f"`{node.name}()` rebinds module state {sorted(assigned_globals)} via global/nonlocal")

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            resolved = self._resolve(base)
            if resolved in _TENSOR_BASES:
                self._hit("tensor_subclass", base, f"class `{node.name}` subclasses `{resolved}`")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self._in_triton_kernel:
            self._hit("torch_compute", node, "uses the `@` (matmul) operator outside a Triton kernel")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.MatMult) and not self._in_triton_kernel:
            self._hit("torch_compute", node, "uses the `@=` (matmul) operator outside a Triton kernel")
        self.generic_visit(node)

    def _visit_try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            broad = handler.type is None
            if isinstance(handler.type, ast.Name):
                broad = handler.type.id in _BROAD_EXCEPTIONS
            elif isinstance(handler.type, ast.Tuple):
                broad = any(isinstance(e, ast.Name) and e.id in _BROAD_EXCEPTIONS for e in handler.type.elts)
            if broad and not any(isinstance(s, ast.Raise) for st in handler.body for s in ast.walk(st)):
                caught = "everything" if handler.type is None else ast.unparse(handler.type)
                self._hit("silent_fallback", handler, f"`except` catches {caught} and does not re-raise")
        self.generic_visit(node)

    visit_Try = _visit_try
    visit_TryStar = _visit_try

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if not isinstance(value, str) or id(node) in self.docstrings or not value:
            return
        if value in _INTERNAL_STRINGS:
            self._hit("harness_internals", node, f"names interpreter internal `{value}` in a string")
        marker = _ENV_MARKER_RE.search(value)
        if marker:
            self._hit("env_probe", node, f"string mentions `{marker.group(0).strip(_QUOTES_AND_SPACE)}`")
        if _TEMP_PATH_RE.search(value):
            self._hit("file_cache", node, f"string names a shared temp/cache path ({value[:60]!r})")


# --------------------------------------------------------------------------------------------------
# C++/CUDA scanner

_CPP_LEXEME_RE = re.compile(
    r"(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))"
    r"|(?P<string>R\"(?P<delim>[^()\\\s\"]{0,16})\(.*?\)(?P=delim)\"|(?:u8|u|U|L)?\"(?:\\.|[^\"\\\n])*\"?)"
    r"|(?P<char>'(?:\\.|[^'\\\n])+')",
    re.S,
)
_NOT_NEWLINE_RE = re.compile(r"[^\n]")


def _strip_cpp(source: str) -> tuple[str, str, list[tuple[int, str]]]:
    """Return (code, code_with_strings, strings).

    `code` has comments and the insides of string/char literals blanked; `code_with_strings` has only the
    comments blanked. Both keep every offset, so line/column positions match the original source.
    `strings` holds (offset, content) of each string literal.
    """
    code_parts: list[str] = []
    with_strings: list[str] = []
    strings: list[tuple[int, str]] = []
    pos = 0
    for m in _CPP_LEXEME_RE.finditer(source):
        start, end = m.span()
        code_parts.append(source[pos:start])
        with_strings.append(source[pos:start])
        text = m.group(0)
        if m.group("comment") is not None:
            blank = _NOT_NEWLINE_RE.sub(" ", text)
            code_parts.append(blank)
            with_strings.append(blank)
        else:
            quote = text.index('"') if m.group("string") is not None else 0
            inner = text[quote + 1:-1] if len(text) - quote >= 2 else ""
            code_parts.append(text[:quote + 1] + _NOT_NEWLINE_RE.sub(" ", text[quote + 1:-1]) + text[-1:]
                              if len(text) - quote >= 2 else text)
            with_strings.append(text)
            if m.group("string") is not None:
                strings.append((start, inner))
        pos = end
    code_parts.append(source[pos:])
    with_strings.append(source[pos:])
    return "".join(code_parts), "".join(with_strings), strings


# Patterns deliberately start with a literal (no \b or look-behind in front): Python's regex engine then
# skips ahead to candidate positions quickly. The word boundary is checked afterwards (_starts_token).
# Kind "call": a libc-style function that must not be a method (`x.system(`, `p->fork(` are not flagged).
_WORD, _CALL = "word", "call"


def _cpp_token_rules() -> list[tuple[str, re.Pattern[str], str, str]]:
    # (rule id, pattern on comment/string-blanked code, boundary kind, what the match is)
    return [
        ("stream_event_graph", re.compile(
            r"(?:cudaStreamCreate\w*|cuStreamCreate\w*|cudaEventCreate\w*|cuEventCreate\w*|cudaGraph\w*|cuGraph\w*|"
            r"cudaStreamBeginCapture\w*|cudaStreamEndCapture|cuStreamBeginCapture\w*|cuStreamEndCapture|"
            r"cudaEventDisableTiming|cudaStreamPerThread|cudaStreamNonBlocking|CU_STREAM_NON_BLOCKING|"
            r"getStreamFromPool|getStreamFromExternal|CUDAEvent)\b"), _WORD, "CUDA stream/event/graph API"),
        ("concurrency", re.compile(r"std::(?:thread|jthread|async)\b|omp_\w+\s*\(|#[ \t]*pragma[ \t]+omp\b"),
         _WORD, "host concurrency API"),
        ("concurrency", re.compile(
            r"(?:pthread_create|fork|vfork|posix_spawnp?|popen|system|execv|execve|execvp|execvpe|execl|execle|"
            r"execlp)\s*\("), _CALL, "process/thread API"),
        ("env_probe", re.compile(
            r"(?:getenv|secure_getenv|setenv|putenv|unsetenv|gethostname|getpid|getppid|uname|getlogin)\s*\("),
         _CALL, "environment probe"),
        ("env_probe", re.compile(r"environ\b"), _WORD, "environment probe"),
        ("file_cache", re.compile(r"(?:ofstream|fstream|filesystem)\b"), _WORD, "file-system API"),
        ("file_cache", re.compile(
            r"(?:freopen|mkstemp|mkdtemp|tmpfile|tmpnam|shm_open|mmap|creat|mkdir|unlink|rename|fwrite)\s*\("),
         _CALL, "file-system write"),
        ("file_read", re.compile(r"ifstream\b"), _WORD, "file read"),
        ("file_read", re.compile(r"fread\s*\("), _CALL, "file read"),
        ("native_ffi", re.compile(
            r"(?:dlopen|dlsym|dlmopen|dlvsym|LoadLibrary\w*|GetProcAddress|cudaGetDriverEntryPoint\w*|"
            r"cuGetProcAddress\w*)\b"), _WORD, "dynamic symbol loading"),
        ("dynamic_code", re.compile(
            r"(?:nvrtc\w+|cuModuleLoad\w*|cuLinkCreate\w*|cuLinkAdd\w*|cuLibraryLoad\w*|cudaLibraryLoad\w*|"
            r"PyRun_\w+|PyImport_\w+|PyEval_\w+|Py_CompileString\w*)\b|"
            r"py(?:bind11)?::(?:exec|eval|eval_file|module_?::import)\b"), _WORD, "run-time code loading"),
        ("device_state_tamper", re.compile(
            r"(?:cudaDeviceSetLimit|cuCtxSetLimit|cudaCtxResetPersistingL2Cache|cuCtxResetPersistingL2Cache|"
            r"cudaStreamSetAttribute|cuStreamSetAttribute|cudaLimitPersistingL2CacheSize|accessPolicyWindow|"
            r"cudaAccessProperty\w*|cudaDeviceReset|cudaSetDeviceFlags|cudaProfilerStart|cudaProfilerStop|"
            r"cuProfilerStart|cuProfilerStop)\b"), _WORD, "device-state API"),
        ("timer_tampering", re.compile(r"cupti\w*|CUpti_\w+"), _WORD, "CUPTI API"),
        ("library_fallback", re.compile(
            r"(?:cublas\w*|cudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|getCurrentCUDABlasHandle|"
            r"getCurrentCUDABlasLtHandle)\b|(?:cutlass|flashinfer)::"), _WORD, "library API"),
    ]


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _starts_token(code: str, start: int, kind: str) -> bool:
    """True if the match at `start` begins a token: not inside an identifier, and for _CALL not a method."""
    if start == 0:
        return True
    before = code[start - 1]
    if _is_word_char(before):
        return False
    return kind != _CALL or before not in ".>"


_CPP_TOKEN_RULES = _cpp_token_rules()
_CPP_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*([<\"])([^>\"\n]+)[>\"]", re.M)
_CPP_INCLUDE_RULES = (
    ("library_fallback", re.compile(r"cublas|cudnn|cutlass|cute/|flashinfer|cusparse|cufft|cusolver")),
    ("dynamic_code", re.compile(r"nvrtc")),
    ("native_ffi", re.compile(r"dlfcn")),
    ("timer_tampering", re.compile(r"cupti")),
)
_CPP_ATEN_CALL_RE = re.compile(r"((?:at|torch)::(?:\w+::)*\w+)\s*(?:<[^;(){}<>]*>\s*)?\(")
_CPP_ATEN_METHOD_RE = re.compile(
    r"(?:\.|->)\s*(matmul|mm|bmm|addmm|baddbmm|einsum|softmax|log_softmax|scaled_dot_product_attention|"
    r"index_select|masked_fill)\s*\(")
# A definition (not a call) of a CUDA runtime/driver/CUPTI/NVTX function interposes on the real symbol.
# Only families of real API names are matched, so a helper such as `cudaCheck(...)` is not mistaken for one.
_CPP_RUNTIME_SYMBOL_RE = re.compile(
    r"(cuda(?:Malloc|Free|Memcpy|Memset|Mem|Event|Stream|Device|Launch|GetLastError|PeekAtLastError|GetDevice|"
    r"SetDevice|Graph|Func|Ctx|Occupancy|Host|Pointer|GetDriverEntryPoint|Profiler|RuntimeGetVersion|"
    r"DriverGetVersion|Ipc|Import|External|ThreadSynchronize)\w*|"
    r"cu(?:Init|Ctx|Mem|Launch|Stream|Event|Module|Graph|Device|Func|Library|Kernel|Profiler|Driver|"
    r"GetProcAddress)\w*|cupti[A-Z]\w*|nvtx[A-Z]\w*)\s*\(")
_CPP_NOT_A_TYPE = frozenset({"return", "else", "do", "case", "if", "while", "for", "switch", "throw", "new",
                             "delete", "sizeof", "co_return", "co_await"})
_CPP_STATIC_RE = re.compile(r"static\b")
_CPP_DEVICE_GLOBAL_RE = re.compile(r"__(?:device|managed)__\b")
_CPP_DECL_END_RE = re.compile(r"[;={\[(]")
_CPP_NOT_STATE = frozenset({"const", "constexpr", "consteval", "inline", "__forceinline__", "__inline__",
                            "__global__", "__constant__", "struct", "class", "union", "enum", "__shared__",
                            "typedef", "using", "operator"})
_CPP_FOPEN_RE = re.compile(r"(?:fopen|open)\s*\(")


def _matching_paren(code: str, open_at: int) -> int:
    """Offset of the ')' matching the '(' at open_at (strings already blanked), or -1."""
    depth = 0
    for i in range(open_at, min(len(code), open_at + 4000)):
        c = code[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        elif c in ";{}" and depth <= 1:
            return -1
    return -1


def _split_top_level_args(text: str) -> list[str]:
    args, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i])
            start = i + 1
    args.append(text[start:])
    return [a.strip() for a in args]


class _CppScanner:
    def __init__(self, source: str, policy: "_CompiledPolicy"):
        self.policy = policy
        self.code, self.with_strings, self.strings = _strip_cpp(source)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.hits: list[_Hit] = []

    def _position(self, offset: int) -> tuple[int, int]:
        line_index = bisect.bisect_right(self.line_starts, offset) - 1
        return line_index + 1, offset - self.line_starts[line_index] + 1

    def _hit(self, rule: str, offset: int, token: str, what: str) -> None:
        if self.policy.cpp_tokens(token):
            return
        line, col = self._position(offset)
        self.hits.append(_Hit(rule, line, col, f"{what}: {_WHY[rule]}"))

    def scan(self) -> list[_Hit]:
        code = self.code
        for rule, pattern, boundary, kind in _CPP_TOKEN_RULES:
            for m in pattern.finditer(code):
                if _starts_token(code, m.start(), boundary):
                    token = m.group(0).rstrip("( \t")
                    self._hit(rule, m.start(), token, f"uses `{token}` ({kind})")
        self._scan_includes()
        self._scan_open_calls()
        self._scan_aten()
        self._scan_runtime_symbol_definitions()
        self._scan_persistent_state()
        self._scan_strings()
        return self.hits

    def _scan_includes(self) -> None:
        for m in _CPP_INCLUDE_RE.finditer(self.with_strings):
            header = m.group(2).strip()
            for rule, pattern in _CPP_INCLUDE_RULES:
                if pattern.search(header):
                    self._hit(rule, m.start(2), header, f"includes `{header}`")
            if m.group(1) == '"' and (header.startswith("/") or ".." in header.split("/")):
                self._hit("harness_internals", m.start(2), header,
                          f"includes `{header}` from outside the solution's own sources")

    def _scan_open_calls(self) -> None:
        for m in _CPP_FOPEN_RE.finditer(self.code):
            if not _starts_token(self.code, m.start(), _CALL):
                continue
            open_at = m.end() - 1
            close_at = _matching_paren(self.code, open_at)
            name = m.group(0).rstrip("( \t")
            if close_at < 0:
                continue
            args = _split_top_level_args(self.with_strings[open_at + 1:close_at])
            if name.endswith("fopen"):
                mode_text = args[1] if len(args) > 1 else ""
                mode = re.fullmatch(r'"([^"]*)"', mode_text)
                if mode is None:
                    self._hit("file_cache", m.start(), name, f"`{name}` with a mode that is not a literal "
                                                             f"(cannot prove it only reads)")
                elif any(c in mode.group(1) for c in "wa+"):
                    self._hit("file_cache", m.start(), name, f"`{name}` opens a file for writing (mode \"{mode.group(1)}\")")
                else:
                    self._hit("file_read", m.start(), name, f"`{name}` opens a file for reading")
            elif re.search(r"\bO_(?:WRONLY|RDWR|CREAT|APPEND|TRUNC)\b", self.with_strings[open_at:close_at]):
                self._hit("file_cache", m.start(), name, f"`{name}` opens a file for writing")
            elif len(args) >= 2:  # open(path, flags): POSIX open, read-only
                self._hit("file_read", m.start(), name, f"`{name}` opens a file")

    def _scan_aten(self) -> None:
        for m in _CPP_ATEN_CALL_RE.finditer(self.code):
            if m.start() > 0 and (_is_word_char(self.code[m.start() - 1]) or self.code[m.start() - 1] == ":"):
                continue  # c10::at::..., my_at::...
            name = m.group(1)
            if not self.policy.cpp_calls(name):
                self._hit("torch_compute", m.start(), name,
                          f"calls `{name}` (ATen/torch; not on the cpp_calls allow-list of allocation/stream helpers)")
        for m in _CPP_ATEN_METHOD_RE.finditer(self.code):
            self._hit("torch_compute", m.start(1), m.group(1), f"calls tensor method `.{m.group(1)}()`")

    def _scan_runtime_symbol_definitions(self) -> None:
        code = self.code
        for m in _CPP_RUNTIME_SYMBOL_RE.finditer(code):
            if not _starts_token(code, m.start(), _WORD):
                continue
            close_at = _matching_paren(code, m.end() - 1)
            if close_at < 0:
                continue
            after = code[close_at + 1:close_at + 200].lstrip()
            if not after.startswith("{"):
                continue
            before = code[max(0, m.start() - 80):m.start()].rstrip(" \t\n*&")
            previous = re.search(r"(\w+)$", before)
            if previous is None or previous.group(1) in _CPP_NOT_A_TYPE:
                continue
            self._hit("timer_tampering", m.start(), m.group(1),
                      f"defines function `{m.group(1)}`, which shadows the CUDA/CUPTI/NVTX symbol of that name")

    def _scan_persistent_state(self) -> None:
        code = self.code
        for pattern, kind in ((_CPP_STATIC_RE, "static"), (_CPP_DEVICE_GLOBAL_RE, "device global")):
            for m in pattern.finditer(code):
                if not _starts_token(code, m.start(), _WORD):
                    continue
                segment = code[m.end():m.end() + 400]
                end = _CPP_DECL_END_RE.search(segment)
                if end is None or end.group(0) == "(":
                    continue  # a function (or something we cannot read as a variable)
                declaration = segment[:end.start()]
                words = re.findall(r"\w+", declaration)
                if not words or _CPP_NOT_STATE.intersection(words):
                    continue
                if kind == "device global" and "static" in code[max(0, m.start() - 12):m.start()]:
                    continue  # `static __device__ x;` is reported once, by the static pattern
                variable = words[-1]
                self._hit("static_buffer", m.start(), variable,
                          f"declares {kind} variable `{variable}` ({' '.join(words)})")

    def _scan_strings(self) -> None:
        include_lines = {self._position(m.start())[0] for m in _CPP_INCLUDE_RE.finditer(self.with_strings)}
        for offset, content in self.strings:
            if not content or self._position(offset)[0] in include_lines:
                continue
            marker = _ENV_MARKER_RE.search(content)
            if marker:
                token = marker.group(0).strip(_QUOTES_AND_SPACE)
                self._hit("native_ffi" if token == "LD_PRELOAD" else "env_probe", offset, token,
                          f"string literal mentions `{token}`")
            if _TEMP_PATH_RE.search(content):
                self._hit("file_cache", offset, content, f"string literal names a shared temp/cache path ({content[:60]!r})")


# --------------------------------------------------------------------------------------------------
# Entry point


@dataclass(frozen=True)
class _CompiledPolicy:
    torch_calls: _NameMatcher
    tensor_methods: _NameMatcher
    cpp_calls: _NameMatcher
    python_names: _NameMatcher
    cpp_tokens: _NameMatcher

    @classmethod
    def of(cls, policy: GatePolicy) -> "_CompiledPolicy":
        return cls(*(_NameMatcher(getattr(policy, name)) for name in ALLOW_LIST_NAMES))


@dataclass(frozen=True)
class _OwnNames:
    """Names that belong to the candidate itself: its .py modules and the torch op namespaces its C++
    registers (TORCH_LIBRARY(ns, m) makes torch.ops.ns.* the candidate's own kernels, not torch compute)."""

    modules: frozenset[str]
    prefixes: tuple[str, ...]  # dotted prefixes ending in "."


_TORCH_LIBRARY_RE = re.compile(r"TORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(\w+)")


def _own_names(sources: Mapping[str, str]) -> _OwnNames:
    modules, prefixes = set(), set()
    for path, text in sources.items():
        p = Path(path)
        if p.suffix in PYTHON_SUFFIXES:
            parts = p.with_suffix("").parts
            if parts:
                modules.add(parts[0])
        elif "TORCH_LIBRARY" in text:
            prefixes.update(f"torch.ops.{ns}." for ns in _TORCH_LIBRARY_RE.findall(text))
    return _OwnNames(frozenset(modules), tuple(sorted(prefixes)))


def _source_kind(path: str, language: str) -> str | None:
    suffix = Path(path).suffix.lower()
    if suffix in PYTHON_SUFFIXES:
        return "python"
    if suffix in CPP_SUFFIXES:
        return "cpp"
    if suffix in DOCUMENT_SUFFIXES:
        return None
    # Unknown suffix: C/C++ can #include any file, Python can only import .py files (other routes, such
    # as reading a file and exec-ing it, are flagged where they happen).
    return "cpp" if language.lower() in CPP_LANGUAGES else None


def _scan_python(source: str, own: _OwnNames, policy: _CompiledPolicy) -> list[_Hit]:
    why = _WHY["syntax"]
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [_Hit("syntax", exc.lineno or 1, exc.offset or 1, f"Python syntax error: {exc.msg}: {why}")]
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. null bytes, absurd nesting
        return [_Hit("syntax", 1, 1, f"source cannot be parsed ({type(exc).__name__}: {exc}): {why}")]
    scanner = _PythonScanner(tree, source, own, policy)
    try:
        scanner.visit(tree)
    except RecursionError:
        scanner.hits.append(_Hit("syntax", 1, 1, f"source is nested too deeply to analyse: {why}"))
    return scanner.hits



# Rules about compute done by a library rather than the solution's own kernels.
LIBRARY_RULES = frozenset({"torch_compute", "library_fallback"})


def declared_library(finding: Finding) -> Finding:
    """A finding as it applies to one of the dataset's own baselines: calling the library is what a baseline
    declares it does, so the library rules only warn (the finding stays archived); every other rule stands."""
    if finding.rule not in LIBRARY_RULES or finding.severity == "warning":
        return finding
    return finding.model_copy(update={"severity": "warning",
                                      "message": finding.message + " (allowed: the dataset's own library baseline)"})


def scan_sources(sources: Mapping[str, str], language: str, policy: GatePolicy) -> list[Finding]:
    """Scan every source file of one solution; return findings sorted by (path, line, col, rule).

    `sources` maps a path inside the solution to its text. `.py` files get the Python/Triton rules and C/C++/CUDA
    files the token rules whatever `language` says (a CUDA solution may ship a Python wrapper and vice versa);
    `language` ("python", "triton", "cuda", "cpp") decides how files with unknown suffixes are treated.
    Disabled rules are dropped and severities come from `policy`. One finding per (rule, path, line, col).
    """
    compiled = _CompiledPolicy.of(policy)
    own = _own_names(sources)
    findings: dict[tuple[str, int, int, str], Finding] = {}
    for path, source in sources.items():
        kind = _source_kind(path, language)
        if kind is None:
            continue
        if kind == "python":
            hits = _scan_python(source, own, compiled)
        else:
            hits = _CppScanner(source, compiled).scan()
        lines = source.splitlines()
        seen_cpp_lines: set[tuple[str, int]] = set()
        for hit in sorted(hits, key=lambda h: (h.line, h.col)):
            setting = policy.setting(hit.rule)
            if not setting.enabled:
                continue
            if kind == "cpp":  # token and include patterns overlap; one finding per rule and line is enough
                if (hit.rule, hit.line) in seen_cpp_lines:
                    continue
                seen_cpp_lines.add((hit.rule, hit.line))
            key = (path, hit.line, hit.col, hit.rule)
            if key not in findings:
                findings[key] = Finding(rule=hit.rule, severity=setting.severity, path=path, line=hit.line,
                                        col=hit.col, message=hit.message, snippet=_snippet(lines, hit.line))
    return [findings[key] for key in sorted(findings)]


__all__ = [
    "ALLOW_LIST_NAMES", "DEFAULT_POLICY_PATH", "Finding", "GatePolicy", "PolicyError", "RULES", "RuleSetting",
    "RuleSpec", "builtin_policy", "gate_passed", "load_policy", "policy_from_mapping", "scan_sources",
]
