"""The options of a session's workers (``worker_options_for``), without torch: the Session computes them, and so
does ``harness submit`` before it imports torch, to launch the first workers early (harness.pipeline.early_workers);
one function, so that the two agree exactly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..data.options import SubmitOptions
from ..sandbox.isolation import SandboxPolicy
from ..sandbox.runner import WorkerOptions

# One folder for the FlashInfer JIT modules of every archive on a host (FlashInfer compiles the two decode modules in
# about 34 s on an H200); unset, each archive keeps its own, which travels with the archive to another host.
FLASHINFER_CACHE_ENV = "CRUCIBLE_FLASHINFER_CACHE"
# The folder holding the stand-in flashinfer_jit_cache package (its docstring says why): first on the baselines'
# workers' PYTHONPATH, so FlashInfer loads the modules compiled before instead of building them again
FLASHINFER_PREBUILT = Path(__file__).resolve().parents[1] / "sandbox" / "flashinfer_prebuilt"


def flashinfer_cache(archive_folder: Path) -> Path:
    """Where the baselines' workers keep FlashInfer's JIT modules (the one folder they may write)."""
    chosen = os.environ.get(FLASHINFER_CACHE_ENV, "").strip()
    return Path(chosen).expanduser() if chosen else Path(archive_folder) / "cache" / "flashinfer"


def gpu_visible() -> bool:
    """Will the workers see a GPU? Asked without touching CUDA here (the harness process never does): device
    nodes and CUDA_VISIBLE_DEVICES. Only a guess for starting a process early; the reference worker decides."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def gpus_guessed() -> int:
    """How many GPUs the workers will see, by the same guess as ``gpu_visible`` (CUDA_VISIBLE_DEVICES, else the
    device nodes); the reference worker gives the true count."""
    if not gpu_visible():
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    return len(list(Path("/dev").glob("nvidia[0-9]*")))


def one_lane_certain(solutions: int) -> bool:
    """Will these solutions run in one lane on this host, whatever a probe of the GPUs says? One solution, or a host
    whose device nodes and CUDA_VISIBLE_DEVICES show at most one GPU (a probe could only find fewer)."""
    return solutions <= 1 or gpus_guessed() <= 1


def worker_options_for(role: str, options: SubmitOptions, policy: SandboxPolicy, dataset_root: Path | str,
                       archive_folder: Path | str, cpu_only: bool,
                       spent: Optional[dict[str, float]] = None) -> WorkerOptions:
    """A session's options for a worker of ``role``: the submission's ``options`` (device, network, sandbox), the
    sandbox ``policy``, the dataset's root (its blob/ is readable), the archive's folder (hidden from every
    worker); ``spent``: the session's accounting of its workers' time (not compared)."""
    writable: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    if role == "baseline":  # FlashInfer's JIT modules, compiled once per archive (or host) rather than per session
        cache = flashinfer_cache(Path(archive_folder))
        cache.mkdir(parents=True, exist_ok=True)
        writable = (str(cache.resolve()),)
        environment = (("FLASHINFER_WORKSPACE_BASE", str(cache.resolve())),
                       ("PYTHONPATH", str(FLASHINFER_PREBUILT)))
    return WorkerOptions(role=role, device_index=options.device_index, cpu_only=cpu_only,
                         isolate_network=options.isolate_network, sandbox=options.sandbox, policy=policy,
                         dataset_root=str(dataset_root), hidden=(str(Path(archive_folder).resolve()),),
                         writable=writable, environment=environment, spent=spent)
