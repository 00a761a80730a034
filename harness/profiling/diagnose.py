"""Reading what went wrong in an ncu run: the status and reason from its exit code and output, and the
requested metrics ncu did not know."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from .model import FAILED, NO_KERNELS, NO_PERMISSION, NVTX_INCLUDE, OK, UNAVAILABLE

_PERMISSION = re.compile(r"ERR_NVGPUCTRPERM")
_NOT_LOADED = re.compile(r"LibraryNotLoaded|Failed to initialize the profiler|libcuda\.so.*not found", re.I)
_NOT_FOUND = re.compile(r"command not found|No such file or directory.*ncu|ncu: not found", re.I)
_NO_KERNELS = re.compile(r"No kernels were profiled", re.I)
_BAD_METRIC = re.compile(r"Failed to find metric\s+(\S+)")
_ERROR_LINE = re.compile(r"^==ERROR==.*$", re.M)


def failed_metric_names(text: str, requested: Sequence[str]) -> list[str]:
    """Requested metrics that ncu said it cannot find (``==ERROR== Failed to find metric X``)."""
    missing = []
    for raw in _BAD_METRIC.findall(text):
        token = raw.removeprefix("regex:").lstrip("^").rstrip("$").replace("\\", "")
        token = token.split("(")[0].rstrip(".")
        for m in requested:
            if m not in missing and (m == token or m.startswith(token + ".") or token.startswith(m)):
                missing.append(m)
    return missing


def diagnose(returncode: Optional[int], text: str) -> tuple[str, str]:
    """(status, reason) for an ncu run from its exit code and everything it printed; OK if nothing is wrong."""
    if _PERMISSION.search(text):
        return NO_PERMISSION, ("ERR_NVGPUCTRPERM: the driver restricts GPU performance counters to administrators; "
                               "the host administrator must allow them (NVreg_RestrictProfilingToAdminUsers=0) "
                               "or run the profiler as root. Evidence stays timing-only.")
    if returncode == 127 or _NOT_FOUND.search(text):
        return UNAVAILABLE, "ncu: command not found (install Nsight Compute or put it on PATH)"
    if _NOT_LOADED.search(text):
        line = next((m.group(0) for m in _ERROR_LINE.finditer(text) if _NOT_LOADED.search(m.group(0))), "")
        return UNAVAILABLE, f"the profiler could not start ({line.strip() or 'LibraryNotLoaded'})"
    if _NO_KERNELS.search(text):
        return NO_KERNELS, (f"no kernel ran inside the NVTX range {NVTX_INCLUDE!r} (the candidate launched nothing, "
                            "or ran on CPU)")
    errors = [m.group(0).strip() for m in _ERROR_LINE.finditer(text) if not _BAD_METRIC.search(m.group(0))]
    if errors:
        return FAILED, "; ".join(errors)[:2000]
    if returncode not in (0, None):
        return FAILED, f"exit code {returncode}"
    return OK, ""

