"""The static gate's policy: the rule catalogue, the YAML policy (layers default -> op_type -> definition)
and the findings it produces. Pure; the only I/O is reading the YAML file in `load_policy`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from ..thresholds import policy_thresholds

Severity = Literal["error", "warning"]

DEFAULT_POLICY_PATH = Path(__file__).resolve().parents[3] / "definitions" / "audit_policy.yaml"

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
        _rule("monkeypatch", "error", "python,cpp",
              "Assigning attributes of imported modules (torch, torch.Tensor, torch.nn.functional, ...), "
              "overriding torch ops, or using mock patching."),
        _rule("tensor_subclass", "error", "python",
              "Tensor subclasses and __torch_function__/__torch_dispatch__ hooks, which can defer work into "
              "the harness's checks (lazy outputs)."),
        _rule("concurrency", "error", "python,cpp",
              "Threads, processes, subprocesses, asyncio, signals, finalizers: "
              "work that can run outside the timed call."),
        _rule("harness_internals", "error", "python,cpp",
              "Introspection that can reach the harness's state: gc, inspect, sys.modules, frames, __globals__, "
              "__code__, builtins, imports of harness/controller, includes from outside the solution."),
        _rule("env_probe", "error", "python,cpp",
              "Probing the environment to tell an evaluation from a test (os.environ, getenv, platform, socket, "
              "/proc, pytest, TRITON_INTERPRET, CUDA_VISIBLE_DEVICES, argv)."),
        _rule("env_read", "warning", "python,cpp",
              "Reading one environment variable by its literal name (os.environ.get(\"MYKERNEL_DEBUG\"), os.getenv, "
              "getenv(\"MYKERNEL_DEBUG\") in C++): "
              "the worker's environment is fixed for the whole process, so it cannot tell a test call from a timed "
              "one. Names that reveal the harness, computed names and the whole environment are env_probe."),
        _rule("file_cache", "error", "python,cpp",
              "Writing or probing files, pickles, databases and temp dirs: a cross-process cache of outputs."),
        _rule("file_read", "warning", "python,cpp",
              "Reading files at run time; a kernel needs none, and reading can pick up state left by other runs."),
        _rule("dynamic_code", "error", "python,cpp",
              "exec/eval/compile/__import__/importlib, dynamic attribute lookups on modules, NVRTC and runtime "
              "module loading: code the gate cannot see."),
        _rule("native_ffi", "error", "python,cpp",
              "ctypes/cffi/cuda-python/cupy/pycuda, torch.ops.load_library, dlopen/dlsym, driver entry-point "
              "lookups: native code outside the harness's build and artifact checks (torch.utils.cpp_extension "
              "load/load_inline are the supported build path; their C++ sources are scanned)."),
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
              "Compute done by torch/ATen/FlashInfer instead of the candidate's own kernels (library fallback); "
              "run-time attribution confirms or clears it (LIBRARY_RULES). Constants, dtypes, allocation, views, "
              "metadata and device queries are never findings."),
        _rule("library_fallback", "warning", "cpp",
              "cuBLAS/cuDNN/CUTLASS/FlashInfer and other library use in C++ (also in load_inline sources and "
              "link flags); run-time attribution decides whether the time is spent in the candidate's own kernels."),
        _rule("static_buffer", "warning", "cpp",
              "static host variables and __device__/__managed__ globals: state that survives between calls "
              "and can serve as a cache."),
        _rule("memoized_function", "warning", "python",
              "functools.lru_cache/cache: tensors hash by identity, so memoising a function of tensors is an "
              "output cache (no finding when every argument is a scalar: annotated so, or so at every call)."),
        _rule("global_state", "warning", "python",
              "A function that rebinds a module global (global/nonlocal) to a value derived from its arguments "
              "or from the global itself: state that survives between calls."),
        _rule("silent_fallback", "warning", "python",
              "A bare or broad `except` that does not re-raise: it can hide a failing kernel behind a fallback path."),
        _rule("clock_read", "warning", "python,cpp",
              "Reading host clocks or benchmarking itself; a candidate has no need to, and it can use the "
              "reading to tell warmup from timed calls."),
    )
}

ALLOW_LIST_NAMES = ("torch_calls", "tensor_methods", "cpp_calls", "python_names", "cpp_tokens", "env_writes")


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
      env_writes      environment variables a solution may set by literal name (build settings read by
                      torch.utils.cpp_extension, e.g. TORCH_CUDA_ARCH_LIST); writing any other is env_probe
    """

    model_config = ConfigDict(frozen=True)

    rules: dict[str, RuleSetting]
    torch_calls: tuple[str, ...] = ()
    tensor_methods: tuple[str, ...] = ()
    cpp_calls: tuple[str, ...] = ()
    python_names: tuple[str, ...] = ()
    cpp_tokens: tuple[str, ...] = ()
    env_writes: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()  # which policy sections were applied, in order (provenance)

    def setting(self, rule: str) -> RuleSetting:
        return self.rules.get(rule) or RuleSetting(severity=RULES[rule].default_severity)


class PolicyError(ValueError):
    """The policy file is malformed (unknown rule id, unknown allow-list, bad severity)."""


# --------------------------------------------------------------------------------------------------
# Policy loading (layering: default -> op_type -> definition)


def builtin_policy() -> GatePolicy:
    """Catalogue defaults with empty allow-lists: every torch call is flagged except the built-in constants,
    allocation, view, metadata and device-query helpers. Fail-closed fallback."""
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
    # thresholds belong to the runtime audits (harness/audits/thresholds.py: policy_thresholds); checked here too,
    # so a typo fails when the policy loads.
    try:
        policy_thresholds({"default": {"thresholds": layer.get("thresholds") or {}}}, None, None)
    except ValueError as err:
        raise PolicyError(f"{where}: {str(err).removeprefix('default.')}") from None
    # instruction_claims belong to the instruction proof (harness/audits/sass.py: policy_claims); checked here so that
    # a misspelt family fails when the policy loads instead of passing unnoticed.
    from ..sass import unknown_claims

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
    data = read_policy_yaml(path)
    if data is not None and not isinstance(data, Mapping):
        raise PolicyError(f"{path}: expected a mapping at top level")
    return policy_from_mapping(data, definition=definition, op_type=op_type)


def read_policy_yaml(path: Path) -> Any:
    """The policy file parsed: a regular file of at most 1 MiB (a FIFO in a dataset would block every submission);
    PolicyError on one line where it cannot be read or is not YAML (it was a traceback mid-submission)."""
    from ...data.schema import SchemaError, read_text

    try:
        return yaml.safe_load(read_text(path, 1 << 20))
    except (SchemaError, yaml.YAMLError, RecursionError) as err:
        raise PolicyError(f"{path}: cannot be read as the audit policy ({' '.join(str(err).split())[:200]})") from None


def gate_passed(findings: Iterable[Finding]) -> bool:
    """The gate passes iff no finding has severity 'error' (warnings are recorded, not blocking)."""
    return not any(f.severity == "error" for f in findings)


# --------------------------------------------------------------------------------------------------
# Library compute: left to run-time attribution

# Rules about compute done by a library (PyTorch/ATen, cuBLAS, cuDNN, CUTLASS, FlashInfer...) rather than the
# solution's own kernels. A source scan cannot tell how much of the GPU time such a call takes; the official
# timer's CUPTI records can. So the shipped policy keeps these rules at `warning` on every layer, and a
# warning of one of these rules means "to be confirmed by attribution": cleared when attribution ran and
# found the time in the candidate's kernels, confirmed when it found a fallback, unconfirmed (a promotion
# blocker) when attribution could not run. A policy may still raise them to `error`.
LIBRARY_RULES = frozenset({"torch_compute", "library_fallback"})
# Appended to the library findings of the dataset's own baselines (declared_library): they await nothing.
DECLARED_LIBRARY_NOTE = " (allowed: the dataset's own library baseline)"


def awaits_attribution(finding: Finding | Mapping[str, Any]) -> bool:
    """True for a library-compute warning (LIBRARY_RULES) that run-time attribution is to confirm or clear; not for
    an error (a policy that forbids library compute outright) nor for a baseline's declared library use.
    Accepts a Finding or its model_dump() (as archived with an evaluation)."""
    from .python_env_flags import DEAD_BRANCH_NOTE
    from .python_reach import NEVER_CALLED_NOTE, NEVER_IMPORTED_NOTE

    data = finding.model_dump() if isinstance(finding, Finding) else finding
    message = str(data.get("message", ""))
    return (data.get("rule") in LIBRARY_RULES and data.get("severity") == "warning"
            and not any(note in message for note in (DECLARED_LIBRARY_NOTE, NEVER_IMPORTED_NOTE, NEVER_CALLED_NOTE,
                                                     DEAD_BRANCH_NOTE)))


def in_a_file_never_imported(finding: Finding) -> Finding:
    """A finding in a Python file that no import of the solution reaches (python_reach: a repository's tests and
    benchmarks packed beside the kernel): shown, as a warning that blocks nothing and awaits no attribution."""
    from .python_reach import NEVER_IMPORTED_NOTE

    if NEVER_IMPORTED_NOTE in finding.message:
        return finding
    return finding.model_copy(update={"severity": "warning", "message": finding.message + NEVER_IMPORTED_NOTE})


def in_a_function_never_called(finding: Finding, spans: Mapping[str, Iterable[tuple[int, int]]]) -> Finding:
    """A finding in the body of a function that only a main guard calls (python_reach.never_called: path -> its line
    spans): shown, as a warning that blocks nothing and awaits no attribution; any other finding as it is."""
    from .python_reach import NEVER_CALLED_NOTE

    return _noted_in_spans(finding, spans, NEVER_CALLED_NOTE)


def in_code_never_run(finding: Finding, spans: Mapping[str, Iterable[tuple[int, int]]]) -> Finding:
    """A finding in a branch that runs only under an environment variable no worker has (python_env_flags: path ->
    its line spans): shown, as a warning that blocks nothing and awaits no attribution; any other as it is."""
    from .python_env_flags import DEAD_BRANCH_NOTE

    return _noted_in_spans(finding, spans, DEAD_BRANCH_NOTE)


def _noted_in_spans(finding: Finding, spans: Mapping[str, Iterable[tuple[int, int]]], note: str) -> Finding:
    if note in finding.message or not any(first <= finding.line <= last
                                          for first, last in spans.get(finding.path, ())):
        return finding
    return finding.model_copy(update={"severity": "warning", "message": finding.message + note})


def declared_library(finding: Finding) -> Finding:
    """A finding as it applies to one of the dataset's own baselines: calling the library is what a baseline
    declares it does, so the library rules only warn and await no attribution (the finding stays archived, its
    message ending in DECLARED_LIBRARY_NOTE); every other rule stands."""
    if finding.rule not in LIBRARY_RULES or DECLARED_LIBRARY_NOTE in finding.message:
        return finding
    return finding.model_copy(update={"severity": "warning", "message": finding.message + DECLARED_LIBRARY_NOTE})


# --------------------------------------------------------------------------------------------------
# Allow-lists compiled for the scanners


class _NameMatcher:
    """Exact names plus prefix patterns (entries ending in '*')."""

    __slots__ = ("exact", "prefixes")

    def __init__(self, entries: Iterable[str]):
        entries = list(entries)
        self.exact = frozenset(e for e in entries if not e.endswith("*"))
        self.prefixes = tuple(e[:-1] for e in entries if e.endswith("*"))

    def __call__(self, name: str) -> bool:
        return name in self.exact or (bool(self.prefixes) and name.startswith(self.prefixes))


@dataclass(frozen=True)
class _CompiledPolicy:
    torch_calls: _NameMatcher
    tensor_methods: _NameMatcher
    cpp_calls: _NameMatcher
    python_names: _NameMatcher
    cpp_tokens: _NameMatcher
    env_writes: _NameMatcher

    @classmethod
    def of(cls, policy: GatePolicy) -> _CompiledPolicy:
        return cls(*(_NameMatcher(getattr(policy, name)) for name in ALLOW_LIST_NAMES))
