"""Profile a candidate's kernels with Nsight Compute: one interface, two backends, one result type.

What a profile is for: ncu explains *why* a kernel takes its time (SOL, occupancy, stalls); the harness
timer says *how long*. ncu replays every kernel many times, so its durations are never quoted as latency.

Backends (``select_backend`` picks one; both return a ``ProfileSummary``):
- ``ncu``: runs ``ncu --clock-control none ... -o REPORT python -m harness.profiling.target ...`` as a
  subprocess with the worker's scrubbed environment, in a private folder, with a deadline, then reads
  the report back with ``ncu --import REPORT --csv --page raw --print-units base``. NVTX filtering
  (``--nvtx --nvtx-include crucible_candidate/``) restricts profiling to the one call of the candidate
  that ``harness.profiling.target`` wraps in that push/pop range; warm-up calls (JIT, autotuning) and
  ``setup`` (FlashInfer's ``plan``) stay outside it.
- ``nsight``: nsight-python 1.x, which needs ncu >= 2026.2.1 (the H200 host has 2025.3.1, so ``auto``
  picks ``ncu`` there). ``harness.profiling.target --backend nsight`` imports ``nsight`` before CUDA and
  wraps the same single call in ``nsight.annotate``; its CSV is parsed by the same long-format reader.

Nothing here touches a GPU: the GPU work happens in the child processes. Missing ncu, missing counter
permission (ERR_NVGPUCTRPERM), a target that fails, a deadline or an empty profile each end as a
``ProfileSummary`` with a status and a reason, never as an exception.

The archive keeps one row per profile (``m004_profiles``): the raw report as a blob (the .ncu-rep, or
the CSV where no report was written) and a JSON digest (status, reason, command, per-kernel digests).

Modules: model (constants, statuses, ``KernelProfile``, ``ProfileSummary``, ``ProfileRequest``), parse (ncu's
CSV layouts, ``finish_summary``), diagnose (status and reason of an ncu run), tools (finding ncu, versions,
the GPU's architecture, ``choose_backend``), process (command lines, bounded runs), backends (the profilers,
``select_backend``, ``profile_workloads``), archive (the profiles table's rows), target (the profiled process,
``python -m harness.profiling.target``), static_resources (a Triton kernel's registers, shared memory and
occupancy for an architecture, compiled on any host from the launches its host code records: no GPU, no ncu).
"""

from __future__ import annotations

from .archive import archived_profiles, ensure_profiles_table, record_profile
from .backends import (NcuProfiler, NsightPythonProfiler, Profiler, UnavailableProfiler, profile_workloads,
                       select_backend)
from .diagnose import diagnose, failed_metric_names
from .model import (DEFAULT_TIMEOUT_S, FAILED, ID_COLUMNS, METRIC_RETRIES, NO_KERNELS, NO_PERMISSION, NSIGHT_MIN_NCU,
                    NVTX_INCLUDE, NVTX_RANGE, OK, STATUSES, TIMEOUT, UNAVAILABLE, KernelProfile, ProfileRequest,
                    ProfileSummary)
from .parse import (arch_from_cc, finish_summary, kernels_arch, parse_long_csv, parse_ncu_csv, parse_number,
                    parse_raw_csv, to_base_unit)
from .process import ncu_collect_command, ncu_import_command, run_bounded, target_command
from .tools import (choose_backend, detect_arch, find_ncu, nsight_python_version, parse_ncu_version, parse_version,
                    probe_ncu, version_text)

__all__ = [
    "DEFAULT_TIMEOUT_S", "FAILED", "ID_COLUMNS", "METRIC_RETRIES", "NO_KERNELS", "NO_PERMISSION", "NSIGHT_MIN_NCU",
    "NVTX_INCLUDE", "NVTX_RANGE", "OK", "STATUSES", "TIMEOUT", "UNAVAILABLE", "KernelProfile", "NcuProfiler",
    "NsightPythonProfiler", "ProfileRequest", "ProfileSummary", "Profiler", "UnavailableProfiler", "arch_from_cc",
    "archived_profiles", "choose_backend", "detect_arch", "diagnose", "ensure_profiles_table", "failed_metric_names",
    "find_ncu", "finish_summary", "kernels_arch", "ncu_collect_command", "ncu_import_command",
    "nsight_python_version", "parse_long_csv", "parse_ncu_csv", "parse_ncu_version", "parse_number",
    "parse_raw_csv", "parse_version", "probe_ncu", "profile_workloads", "record_profile", "run_bounded",
    "select_backend", "target_command", "to_base_unit", "version_text",
]
