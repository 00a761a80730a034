"""Locating the tools: ncu (where, which version), nsight-python's version, the GPU's architecture, and
which backend those facts allow (``choose_backend``, pure)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional, Sequence

from .diagnose import diagnose
from .model import NSIGHT_MIN_NCU
from .parse import arch_from_cc


def parse_ncu_version(text: str) -> Optional[tuple[int, ...]]:
    """(2025, 3, 1, 0) from ``ncu --version`` ("Version 2025.3.1.0 (build ...)")."""
    m = re.search(r"Version\s+(\d+(?:\.\d+)+)", text or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def parse_version(text: Optional[str]) -> Optional[tuple[int, ...]]:
    if not text:
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def version_text(version: Optional[Sequence[int]]) -> str:
    return ".".join(str(x) for x in version) if version else "unknown"


def choose_backend(preference: str, ncu_version: Optional[Sequence[int]], nsight_version: Optional[Sequence[int]],
                   ncu_reason: str = "") -> tuple[Optional[str], str]:
    """Which backend to use, from facts only (pure): (name or None, why).

    - ``nsight`` needs nsight-python 1.x importable and ncu >= 2026.2.1 (it drives ncu itself);
    - ``ncu`` needs an ncu binary;
    - ``auto`` prefers nsight where it works, else ncu, else None.
    """
    if preference not in ("auto", "ncu", "nsight"):
        raise ValueError(f"unknown profiler backend {preference!r}; choose auto, ncu or nsight")
    have_ncu = ncu_version is not None
    ncu_note = f"ncu {version_text(ncu_version)}" if have_ncu else (ncu_reason or "ncu not found on PATH")
    if nsight_version is None:
        nsight_ok, nsight_why = False, "nsight-python is not installed"
    elif nsight_version[0] < 1:
        nsight_ok, nsight_why = False, (f"nsight-python {version_text(nsight_version)} is older than 1.0 (re-launches "
                                        "the script per decorator); use the raw ncu backend")
    elif not have_ncu:
        nsight_ok, nsight_why = False, f"nsight-python {version_text(nsight_version)} needs ncu, and {ncu_note}"
    elif tuple(ncu_version[:3]) < NSIGHT_MIN_NCU:
        nsight_ok, nsight_why = False, (f"nsight-python {version_text(nsight_version)} needs ncu >= "
                                        f"{version_text(NSIGHT_MIN_NCU)}, this host has {ncu_note}")
    else:
        nsight_ok, nsight_why = True, f"nsight-python {version_text(nsight_version)} with {ncu_note}"
    if preference == "nsight":
        return ("nsight", nsight_why) if nsight_ok else (None, nsight_why)
    if preference == "ncu":
        return ("ncu", ncu_note) if have_ncu else (None, ncu_note)
    if nsight_ok:
        return "nsight", nsight_why
    if have_ncu:
        return "ncu", f"{ncu_note} (nsight backend not used: {nsight_why})"
    return None, ncu_note


def find_ncu(env_path: Optional[str] = None) -> Optional[str]:
    """ncu on PATH, else the usual install folders (/usr/local/cuda/bin, /opt/nvidia/nsight-compute/*)."""
    found = shutil.which("ncu", path=env_path)
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "ncu"]
    candidates += sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"), reverse=True)
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def probe_ncu(ncu: Optional[str], timeout_s: float = 60) -> tuple[Optional[tuple[int, ...]], str]:
    """(version, text or reason) of an ncu binary; (None, reason) when it does not run."""
    if ncu is None:
        return None, "ncu not found on PATH (nor in /usr/local/cuda/bin, /opt/nvidia/nsight-compute)"
    try:
        proc = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=timeout_s,
                              env=_tool_environment())
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{ncu} --version failed: {err}"
    text = proc.stdout + proc.stderr
    version = parse_ncu_version(text)
    if version is None:
        status, reason = diagnose(proc.returncode, text)
        return None, reason or f"{ncu} --version printed no version: {text.strip()[:200]}"
    return version, text.strip()


def nsight_python_version() -> Optional[tuple[int, ...]]:
    """The installed nsight-python's version, without importing it (importing loads ncu's injection library)."""
    import importlib.metadata
    import importlib.util

    try:
        if importlib.util.find_spec("nsight") is None:
            return None
        return parse_version(importlib.metadata.version("nsight-python"))
    except (importlib.metadata.PackageNotFoundError, ValueError, ImportError):
        return None


def detect_arch(timeout_s: float = 30) -> tuple[Optional[str], str]:
    """The first GPU's architecture (sm_90, sm_100) from ``nvidia-smi --query-gpu=compute_cap``; the harness
    never initialises CUDA itself. (None, why) when it cannot tell."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi not found"
    try:
        proc = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"nvidia-smi failed: {err}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    index = int(visible) if visible.isdigit() and int(visible) < len(lines) else 0
    arch = arch_from_cc(lines[index]) if lines else None
    if arch:
        return arch, f"compute capability {lines[index]}"
    return None, f"nvidia-smi said {proc.stdout.strip()[:80]!r}"


def _tool_environment(extra: Optional[dict[str, str]] = None, home: Optional[Path] = None) -> dict[str, str]:
    from ..sandbox.runner import scrubbed_environment

    return scrubbed_environment(extra, home=home)
