"""FlashInfer's hook for prebuilt modules, pointed at the modules the baselines' workers compiled before.

FlashInfer loads a module without building it when ``<aot dir>/<name>/<name>.so`` exists, and takes its aot dir
from an installed ``flashinfer_jit_cache`` package (``get_jit_cache_dir``, a ``__version__`` that must start with
FlashInfer's). Otherwise every module goes through ninja, which rebuilds it on any host where FlashInfer's headers
are newer than its objects: every fresh install, so a JIT cache carried to a new host was compiled again (about
half a minute on an H200). This stand-in, put on the path of the baselines' workers only (their ``PYTHONPATH``,
harness.pipeline.worker_options), answers with FlashInfer's own JIT folder for this version and
these architectures, ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops``: a module
compiled once (on this host or another with the same versions) is loaded as it is, its objects need not travel
(``harness copy-archive --with-jit`` carries the ``.so`` alone), and a module not there is compiled as before.
A ``.so`` that does not load (cut short while linked) makes FlashInfer warn and compile it again.
"""

from __future__ import annotations

import os
from pathlib import Path


def __getattr__(name: str) -> str:
    if name == "__version__":  # FlashInfer's own: asked while flashinfer.jit.env is imported, after flashinfer.version
        from flashinfer.version import __version__

        return __version__
    raise AttributeError(name)


def cached_ops_dir(version: str, archs: set[tuple[int, str]], base: str | None) -> Path:
    """FlashInfer's JIT folder of ``version`` for target ``archs`` (pairs like (9, "0a")) under its workspace base,
    named as ``flashinfer.jit.env`` names it."""
    arch = "_".join(f"{major}{minor}" for major, minor in sorted(archs))
    root = Path(base) if base else Path.home()
    return root / ".cache" / "flashinfer" / version / arch / "cached_ops"


def get_jit_cache_dir() -> str:
    """Called once, while ``flashinfer.jit.env`` is imported (its compilation context is loaded by then)."""
    from flashinfer.compilation_context import CompilationContext
    from flashinfer.version import __version__

    return str(cached_ops_dir(__version__, CompilationContext().TARGET_CUDA_ARCHS,
                              os.environ.get("FLASHINFER_WORKSPACE_BASE")))
