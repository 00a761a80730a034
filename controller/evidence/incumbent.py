"""The loop's evidence about its incumbent: ncu digests when a profiler is here, else why not.

``IncumbentProfiler`` is the port the loop profiles through (tests inject a fake that replays ncu CSV
fixtures); ``NcuIncumbentProfiler`` is the real one: a GPU (``harness.profiling.detect_arch``) and a
profiler backend (``select_backend(...).available()``), then ``profile_workloads`` in sandboxed children.

``profile_incumbent`` does the I/O once per incumbent: workload statistics from its archived evaluations,
one representative workload per regime, profiles already archived for the same code reused (a resumed
run plans the same), the others profiled and archived as `harness profile` archives them, then the
Evidence Markdown and one ncu Diagnosis per loop regime. No usable digest gives latency evidence and a
note saying why; the loop catches anything else, so a profile never stops a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from harness.data.generation_request import Diagnosis
from harness.profiling import (NO_PERMISSION, OK, UNAVAILABLE, ProfileSummary, detect_arch, profile_workloads,
                               select_backend)
from harness.data.schema import Solution, dump_json

from ..tactics import TacticBook, diagnoses_by_regime
from .ncu_metrics import requested_metrics
from .profiles import archive_profiles, archived_summaries, measured_stats, profile_targets
from .record import build_evidence

EVIDENCE_MAX_BYTES = 4096  # what a model reads: the record's Markdown stays under this


class IncumbentProfiler(Protocol):
    arch: Optional[str]  # sm_90, sm_100: which metric names to request

    def available(self) -> tuple[bool, str]: ...

    def profile(self, solution: Solution, workload_uuids: Sequence[str]) -> list[ProfileSummary]: ...


class NcuIncumbentProfiler:
    """ncu (or nsight-python) on one GPU (``device_index``; default the first visible); each workload in a fresh
    process, ncu and the candidate inside the candidate's sandbox (harness.profiling.wall)."""

    def __init__(self, dataset_root: Path, backend: str = "auto", timeout_s: float = 600.0, seed: int = 0,
                 isolate_network: bool = True, device_index: Optional[int] = None,
                 hidden: Sequence[str] = (), sandbox: bool = True):
        self.dataset_root, self.backend_name, self.timeout_s = Path(dataset_root), backend, timeout_s
        self.seed, self.isolate_network, self.device_index = seed, isolate_network, device_index
        self.hidden, self.sandbox = tuple(hidden), sandbox  # the archive's folder: never in the profile's view
        self.arch: Optional[str] = None
        self._backend: Any = None
        self._answer: Optional[tuple[bool, str]] = None

    def available(self) -> tuple[bool, str]:
        if self._answer is None:  # asked once: nvidia-smi and `ncu --version` are subprocesses
            self.arch, why = detect_arch()
            if self.arch is None:
                self._answer = (False, f"no GPU ({why})")
            else:
                self._backend = select_backend(self.backend_name)
                self._answer = self._backend.available()
        return self._answer

    def profile(self, solution: Solution, workload_uuids: Sequence[str]) -> list[ProfileSummary]:
        return profile_workloads(self._backend, dump_json(solution), solution.content_hash, workload_uuids,
                                 self.dataset_root, requested_metrics(self.arch), seed=self.seed,
                                 timeout_s=self.timeout_s, isolate_network=self.isolate_network,
                                 device_index=self.device_index, sandbox=self.sandbox, hidden=self.hidden)


@dataclass
class IncumbentEvidence:
    """What the loop puts in requests about one incumbent."""

    ncu_markdown: Optional[str] = None  # None: the request carries latency evidence
    note: str = ""  # why latency, or what was profiled
    diagnoses: dict[str, Diagnosis] = field(default_factory=dict)  # loop regime -> ncu diagnosis
    profiler_unusable: bool = False  # no profiler / no counter permission: do not ask again this run

    @property
    def source(self) -> str:
        return "ncu" if self.ncu_markdown else "latency"


def _failure_note(summaries: Sequence[ProfileSummary], labels: Mapping[str, str]) -> str:
    return "; ".join(f"{labels.get(s.workload_uuid, s.workload_uuid[:8])}: {s.status}"
                     + (f" ({' '.join(s.reason.split())[:160]})" if s.reason else "")
                     for s in summaries if s.status != OK)


def profile_incumbent(profiler: IncumbentProfiler, archive: Any, dataset: Any, definition: Any, solution: Solution,
                      submission: Mapping[str, Any], workloads: Sequence[Any], loop_regimes: Mapping[str, str],
                      book: TacticBook) -> IncumbentEvidence:
    """Profile (or reuse archived profiles of) the incumbent on one workload per regime; see the module doc."""
    measured = measured_stats(dataset, definition, submission, workloads)
    targets = profile_targets(measured.stats, loop_regimes)
    reused = archived_summaries(archive, solution.content_hash, targets)
    missing = [u for u in targets if u not in reused]
    fresh = profiler.profile(solution, missing) if missing else []
    archive_profiles(archive, fresh, measured, definition.name, profiler.arch, submission_id=submission.get("id"))
    by_uuid = {**{s.workload_uuid: s for s in fresh}, **reused}
    summaries = [by_uuid[u] for u in targets if u in by_uuid]
    hardware = (submission.get("environment") or {}).get("hardware", "")
    evidence = build_evidence(definition.name, solution.name, measured.stats, summaries, hardware=hardware,
                              roofline_bytes=measured.roofline_bytes)
    failed = _failure_note(summaries, measured.labels)
    if evidence.kind != "profile":
        return IncumbentEvidence(note=f"ncu profile failed: {failed or 'no kernel digests'}",
                                 profiler_unusable=any(s.status in (NO_PERMISSION, UNAVAILABLE) for s in summaries))
    note = (f"ncu profiles of {solution.name} on {len(summaries)} workload(s)"
            + (f", {len(reused)} reused from the archive" if reused else "")
            + (f"; failed: {failed}" if failed else ""))
    return IncumbentEvidence(ncu_markdown=evidence.to_markdown(EVIDENCE_MAX_BYTES), note=note,
                             diagnoses=diagnoses_by_regime(evidence.profiles, loop_regimes, book))
