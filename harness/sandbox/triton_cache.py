"""Which Triton kernels the worker compiled from files outside the solution: a library's kernels, whatever the
solution's own functions are called.

Run-time attribution (harness.audits.attribution) reads kernel names from CUPTI, and a Triton kernel's name is its
Python function's. A solution that launches a library's Triton kernel (FlashInfer's `merge_state_kernel`, FLA's
chunk kernels) and defines a function of the same name in its own files would have that library kernel counted as
its own. Triton records where each kernel was defined: the first line of the `.source` file it writes into its
cache for every compiled kernel is `#loc = loc("FILE":LINE:COL)`, FILE the defining module's path. The worker's
cache is private (harness.sandbox.runner: TRITON_CACHE_DIR under the worker's home), so every kernel the candidate
launched was compiled into it during this evaluation.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional


# the kernel's own definition: "#loc" with no number (helpers it calls, maybe a library's, are "#locN" after it)
_DEFINED_AT = re.compile(r'^#loc = loc\("((?:[^"\\]|\\.)*)":\d+:\d+\)', re.MULTILINE)
_MAX_FILES = 4096  # a cache never holds more kernels than a solution launched; more is not a cache of its own
_HEAD_BYTES = 4096


def compiled_kernels(cache_dir: Path) -> dict[str, set[str]]:
    """Kernel name -> the files its compiled variants were defined in (real paths), from the `.source` files."""
    found: dict[str, set[str]] = {}
    try:
        sources = sorted(cache_dir.glob("*/*.source"))[:_MAX_FILES]
    except OSError:
        return found
    for source in sources:
        try:
            with open(source, "rb") as f:
                head = f.read(_HEAD_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
        match = _DEFINED_AT.search(head)
        if match is None:
            continue
        defined = match.group(1).encode().decode("unicode_escape", errors="replace")
        found.setdefault(source.stem, set()).add(os.path.realpath(defined))
    return found


def triton_cache_dir(workdir: Path) -> Path:
    """The worker's Triton cache: TRITON_CACHE_DIR, which the runner sets under the worker's private home."""
    return Path(os.environ.get("TRITON_CACHE_DIR", workdir / ".triton"))


def kernels_outside(cache_dir: Path, solution_folder: Path) -> list[str]:
    """Names of kernels with a variant compiled from a file outside ``solution_folder``."""
    root = os.path.join(os.path.realpath(solution_folder), "")
    return sorted(name for name, files in compiled_kernels(cache_dir).items()
                  if any(not f.startswith(root) for f in files))


def kernels_from_elsewhere(workdir: Path, package: Optional[Path]) -> list[str]:
    """The Triton kernels a worker in ``workdir`` compiled from files outside the solution's ``package`` (its
    folder, harness.sandbox.build.Built.package); none for a solution that is no Python package."""
    return kernels_outside(triton_cache_dir(workdir), package) if package is not None else []
