"""The report's data model: plain dataclasses of what the archive holds, as a reader sees it.

Numbers follow the harness's meaning: latencies in ms (the official latency: mean over trials of each
trial's median); speedup = baseline / candidate (above 1 is faster); ``fraction_of_floor`` = roofline
floor / latency (1.0 is the hardware limit); scores are mean speedups over workloads, 0 if any failed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional

from ..data.statuses import EvaluationStatus, SubmissionStatus
from . import leaderboard as lb

ARTIFACT_KINDS = ("build_log", "sass", "profile", "transcript")
ARTIFACT_TITLES = {"source": "source", "build_log": "build log", "sass": "SASS summary", "profile": "profile digest",
                   "transcript": "transcript"}
SCORE_KEYS = ("vs_reference", "vs_flashinfer_official", "vs_flashinfer_kernel")


@dataclass
class WorkloadRow:
    evaluation_id: int
    uuid: str
    label: str
    status: str
    latency_ms: Optional[float] = None
    kernel_latency_ms: Optional[float] = None
    reference_latency_ms: Optional[float] = None
    speedup_vs_reference: Optional[float] = None
    fi_official_ms: Optional[float] = None
    fi_kernel_ms: Optional[float] = None
    speedup_vs_fi_official: Optional[float] = None
    speedup_vs_fi_kernel: Optional[float] = None
    floor_ms: Optional[float] = None
    fraction_of_floor: Optional[float] = None
    throttled: Optional[bool] = None
    aligned: Optional[bool] = None
    max_absolute_error: Optional[float] = None
    audits: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    timing_note: str = ""
    log_blob: Optional[str] = None
    bytes_moved: Optional[float] = None  # when the harness records the workload's cost in extra
    flops: Optional[float] = None

    @property
    def evaluated(self) -> bool:
        return self.status != SubmissionStatus.SKIPPED

    @property
    def failed_audits(self) -> list[dict[str, Any]]:
        return [a for a in self.audits if not a.get("passed")]

    @property
    def timed_ms(self) -> Optional[float]:
        """The time the roofline judges: the kernel's (setup outside the timed call) when recorded."""
        return self.kernel_latency_ms or self.latency_ms


@dataclass
class Artifact:
    kind: str  # build_log | sass | profile | transcript
    title: str
    blob: Optional[str] = None  # the content is this blob's...
    text: Optional[str] = None  # ...or this text (profile digests, transcripts put together from tables)
    href: Optional[str] = None  # set when the report is written


@dataclass
class Candidate:
    submission_id: int
    solution_hash: str
    solution_name: str
    definition: str
    author: str
    language: str
    status: str
    created_at: str
    finished_at: Optional[str]
    message: str
    scores: dict[str, Optional[float]]
    workloads: list[WorkloadRow]
    sources: list[dict[str, str]] = field(default_factory=list)  # {"path", "content"}
    # why ``sources`` could not be read from the archive ("" when they were): a missing or damaged blob, never
    # taken for a solution without files (two of them would compare as identical)
    sources_unreadable: str = ""
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    hardware: str = ""
    runs: int = 1  # submissions of this solution for this definition
    rank: Optional[int] = None
    seal_state: str = ""  # harness.archive.seal: sealed | modified | unsealed | unverifiable ("" when not checked)
    seal_detail: str = ""
    sandbox: str = ""  # harness.sandbox.isolation: "full", "reduced (why)", "" for archives from before the sandbox
    static_findings: list[dict[str, Any]] = field(default_factory=list)  # the static gate's, from the options
    audit_level: str = ""  # "" for archives from before audit levels
    submission_audits: list[dict[str, Any]] = field(default_factory=list)  # of the whole submission
    # harness.audits.verdicts.promotion_blockers, as archived
    recorded_blockers: list[str] = field(default_factory=list)
    recorded_promotable: bool | None = None  # None where the archive predates the verdict
    scores_partial: dict[str, list[str]] = field(default_factory=dict)  # score key -> workloads left out

    @property
    def modified(self) -> bool:
        """Its rows were changed outside the harness (the seal does not match): never a leader."""
        return self.seal_state == "modified"

    @property
    def blockers(self) -> list[str]:
        """Why it cannot lead (leaderboard.promotion_reasons); empty: promotable."""
        return lb.promotion_reasons(self.status, [{"label": w.label, "status": w.status, "audits": w.audits}
                                                  for w in self.workloads], self.static_findings, self.audit_level,
                                    self.submission_audits, self.recorded_blockers, self.recorded_promotable,
                                    self.modified)

    @property
    def promotable(self) -> bool:
        return not self.blockers

    @property
    def audit_summary(self) -> lb.AuditSummary:
        return lb.audit_summary(self.static_findings, [(w.label, w.audits) for w in self.workloads],
                                self.submission_audits)

    def score(self, key: str = "vs_reference") -> Optional[float]:
        v = self.scores.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def evaluated(self) -> list[WorkloadRow]:
        return [w for w in self.workloads if w.evaluated]

    @property
    def passed(self) -> int:
        return sum(w.status == EvaluationStatus.PASSED for w in self.workloads)

    @property
    def mean_fraction_of_floor(self) -> Optional[float]:
        values = [w.fraction_of_floor for w in self.workloads
                  if w.status == EvaluationStatus.PASSED and w.fraction_of_floor is not None
                  and math.isfinite(w.fraction_of_floor)]
        return statistics.fmean(values) if values else None

    @property
    def failed_audits(self) -> list[tuple[str, str]]:
        return [(w.label, a.get("name", "?")) for w in self.workloads for a in w.failed_audits]

    @property
    def audited(self) -> bool:
        return any(w.audits for w in self.workloads)

    @property
    def page(self) -> str:
        return f"candidates/sub-{self.submission_id}.html"


@dataclass
class Round:
    run: str
    round: int
    best_latency_ms: Optional[float] = None
    spend_usd: Optional[float] = None  # spent in this round
    cumulative_spend_usd: Optional[float] = None
    candidates: Optional[int] = None
    best_solution: str = ""
    note: str = ""
    metric: str = ""  # what best_latency_ms measures, e.g. "mean over workloads"
    passed: Optional[int] = None
    promoted: Optional[int] = None
    # where the incumbent stood after the round (the loop's round summary, controller/trajectory.py)
    incumbent: str = ""
    incumbent_latency_ms: Optional[float] = None
    incumbent_fraction_of_floor: Optional[float] = None
    incumbent_speedup_vs_fi: Optional[float] = None
    incumbent_regimes: dict[str, Optional[float]] = field(default_factory=dict)  # regime -> mean ms
    # "assisted" (a person's --hint in every request) or "full agent", and the provider: runs compared side by side
    mode: str = ""
    provider: str = ""


@dataclass
class RooflinePoint:
    label: str
    who: str  # "candidate" or "FlashInfer"
    bytes_moved: float
    flops: float
    latency_ms: float

    @property
    def intensity(self) -> Optional[float]:
        return self.flops / self.bytes_moved if self.bytes_moved and self.flops else None

    @property
    def flops_per_s(self) -> float:
        return self.flops / (self.latency_ms * 1e-3)

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / (self.latency_ms * 1e-3)


@dataclass
class Roofline:
    points: list[RooflinePoint]
    memory_bytes_per_s: Optional[float]
    flops_per_s: Optional[float]
    ceilings_note: str
    cost_note: str
    fractions: list[tuple[str, Optional[float]]]  # (workload, fraction of floor): always available

    @property
    def has_flops(self) -> bool:
        return any(p.flops for p in self.points)


@dataclass
class BaselineRow:
    """FlashInfer as a leaderboard row, over the leading solution's workloads (the figures every candidate row is
    compared with): the same score, speedups and % of floor, computed from the archived baseline timings."""

    name: str
    timing: str  # what was timed: "plan() inside the call" (the contest's way) or "plan() in setup"
    workloads: int
    vs_reference: Optional[float]
    vs_fi_official: Optional[float]
    vs_fi_kernel: Optional[float]
    fraction_of_floor: Optional[float]


def baseline_rows(leader: Optional[Candidate]) -> list[BaselineRow]:
    """One row per FlashInfer timing recorded on ``leader``'s PASSED workloads; none without baseline figures."""
    out = []
    for timing, attr in (("plan() inside the call", "fi_official_ms"), ("plan() in setup", "fi_kernel_ms")):
        rows = [w for w in (leader.workloads if leader else [])
                if w.status == EvaluationStatus.PASSED and getattr(w, attr)]
        if not rows:
            continue

        def mean_ratio(numerator: str, rows=rows, attr=attr) -> Optional[float]:
            values = [getattr(w, numerator) / getattr(w, attr) for w in rows if getattr(w, numerator)]
            return statistics.fmean(values) if values else None

        out.append(BaselineRow("FlashInfer (official)" if attr == "fi_official_ms" else "FlashInfer (kernel)", timing,
                               len(rows), mean_ratio("reference_latency_ms"), mean_ratio("fi_official_ms"),
                               mean_ratio("fi_kernel_ms"), mean_ratio("floor_ms")))
    return out


@dataclass
class DefinitionSection:
    name: str
    leaderboard: list[Candidate]  # one row per solution (its latest finished submission), ranked
    submissions: list[Candidate]  # every submission, newest first
    workloads: list[tuple[str, str]]  # (uuid, label) in evaluation order
    roofline: Optional[Roofline]
    runs: dict[str, list[Round]]
    notices: list[str] = field(default_factory=list)

    @property
    def promotable(self) -> list[Candidate]:
        """The ranked rows."""
        return [c for c in self.leaderboard if c.promotable]

    @property
    def not_promotable(self) -> list[Candidate]:
        return [c for c in self.leaderboard if not c.promotable]

    @property
    def best(self) -> Optional[Candidate]:
        """The top promotable solution: the only one the per-workload table and the plots show."""
        return next(iter(self.promotable), None)

    @property
    def baselines(self) -> list[BaselineRow]:
        return baseline_rows(self.best)


@dataclass
class ReportData:
    archive: str
    generated_at: str
    sections: list[DefinitionSection]
    hardware: list[str]
    notices: list[str] = field(default_factory=list)
