"""Helpers shared by the Python and the C/C++ scanners of the static gate."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SNIPPET_MAX_CHARS = 240
# Namespaces of PyTorch's own operators: registering into them does not make their ops the candidate's.
_TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized", "_quantized", "c10d", "_c10d_functional",
                               "mkldnn", "mkl", "cuda", "sparse", "profiler", "inductor", "higher_order"})


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


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


# Why each rule matters, appended to every finding's message.
_WHY = {
    "syntax": "code the gate cannot analyse is rejected",
    "timer_tampering": "the harness times and synchronises the candidate with these; "
                       "replacing them falsifies the measurement",
    "monkeypatch": "changing a library the harness shares with the candidate "
                   "can alter how the candidate is checked or timed",
    "tensor_subclass": "a tensor subclass or torch-function hook can defer or fake work "
                       "until the harness inspects the output",
    "concurrency": "work started outside the call can finish after the timer stops or race the harness",
    "harness_internals": "it can reach the harness's state (reference outputs, timers, call counts) "
                         "through the interpreter",
    "env_probe": "the candidate must behave the same whether it is tested, warmed up or timed",
    "env_read": "the worker's environment is fixed for the process, so this cannot tell a test call from a timed "
                "one; it is recorded, not blocking",
    "file_cache": "files outlive the process and can carry outputs between runs (cross-process cache)",
    "file_read": "a kernel needs no files at run time; reading one can pick up state left by another run",
    "dynamic_code": "code built or looked up at run time is invisible to this gate",
    "native_ffi": "native code loaded, or process memory reached by address, this way bypasses the harness's "
                  "build and artifact checks and can reach its state in this process (torch.utils.cpp_extension "
                  "load/load_inline is the supported way to build C++/CUDA)",
    "stream_event_graph": "work on candidate-owned streams, events or graphs can escape per-call timing",
    "device_state_tamper": "device-wide cache/limit state persists across calls and can defeat the cold-L2 flush",
    "output_cache": "it can replay an earlier output when the harness reuses a buffer instead of computing the result",
    "torch_compute": "compute outside the candidate's own kernels is a library fallback; run-time attribution "
                     "confirms or clears it",
    "library_fallback": "library kernels are not the candidate's own; run-time attribution must show the time is "
                        "spent in candidate kernels",
    "static_buffer": "state that survives between calls can be used to cache outputs",
    "memoized_function": "tensors hash by identity, so a memoised function of tensors replays earlier outputs",
    "global_state": "module state that survives between calls can carry outputs from one call to the next",
    "silent_fallback": "a swallowed failure can hide a broken kernel behind a slower or library path",
    "clock_read": "a candidate has no need to time itself, and the reading can tell warmup from timed calls",
}

# Markers of environment probing and of shared temp/cache paths, looked for in string literals of both languages.
_ENV_MARKER_RE = re.compile(
    r"pytest|TRITON_INTERPRET|CUDA_VISIBLE_DEVICES|CUDA_LAUNCH_BLOCKING|CRUCIBLE|FLASHINFER_BENCH|"
    r"(?:^|[\s\"'])/proc(?:/|$)|(?:^|[\s\"'])/sys/|LD_PRELOAD"
)
# Environment variable names whose value can reveal the harness or where it runs (the markers above, in any case:
# PYTEST_CURRENT_TEST, CRUCIBLE_*; what the worker's environment is given: its sandbox folders and caches, the
# interpreter's paths, the loader's preloads). Reading one is env_probe; reading another by its literal name is
# env_read (harness/audits/static_gate/python_env.py).
_REVEALING_ENV_NAME_RE = re.compile(
    _ENV_MARKER_RE.pattern + r"|^(?:HOME|TMPDIR|TMP|TEMP|USER|LOGNAME|HOSTNAME|PWD|PATH|SLURM\w*|XDG_\w+|"
    r"TORCH_EXTENSIONS_DIR|TVM_FFI_CACHE_DIR|TRITON_CACHE_DIR|TRITON_\w*INTERPRET\w*|PYTHON\w*|LD_\w+|CI|GITHUB_\w+)$",
    re.IGNORECASE)
_TEMP_PATH_RE = re.compile(r"(?:^|[\s\"'=])/(?:tmp|dev/shm|var/tmp)(?:/|$)|~/\.cache")
_QUOTES_AND_SPACE = "\"' \t"
