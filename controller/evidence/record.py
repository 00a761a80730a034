"""``build_evidence`` -> ``EvidenceRecord``: the regime table, per-regime kernel digests and the three largest
gaps of one solution; ``to_json`` / ``from_json`` and ``to_markdown`` (evidence.markdown: bounded, under 4 KB
by default). A request carries that Markdown as its ``harness.data.generation_request.Evidence``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from harness.profiling import ProfileSummary

from . import markdown
from .digest import digest_summary
from .kernel_digest import RegimeProfile
from .regimes import Gap, RegimeRow, largest_gaps, regime_table
from .workloads import WorkloadStat


@dataclass
class EvidenceRecord:
    definition: str
    solution: str
    hardware: str = ""
    workloads: list[WorkloadStat] = field(default_factory=list)
    regimes: list[RegimeRow] = field(default_factory=list)
    profiles: list[RegimeProfile] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """profile / latency-only / correctness-only (the names harness.data.generation_request.Evidence uses)."""
        if any(p.digests for p in self.profiles):
            return "profile"
        return "latency-only" if any(w.latency_ms is not None for w in self.workloads) else "correctness-only"

    def to_json(self) -> dict[str, Any]:
        return {"definition": self.definition, "solution": self.solution, "hardware": self.hardware,
                "kind": self.kind, "workloads": [w.to_json() for w in self.workloads],
                "regimes": [r.to_json() for r in self.regimes], "profiles": [p.to_json() for p in self.profiles],
                "gaps": [g.to_json() for g in self.gaps], "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "EvidenceRecord":
        return cls(definition=data["definition"], solution=data["solution"], hardware=data.get("hardware", ""),
                   workloads=[WorkloadStat.from_json(w) for w in data.get("workloads", [])],
                   regimes=[RegimeRow.from_json(r) for r in data.get("regimes", [])],
                   profiles=[RegimeProfile.from_json(p) for p in data.get("profiles", [])],
                   gaps=[Gap.from_json(g) for g in data.get("gaps", [])], notes=list(data.get("notes", [])))

    def to_markdown(self, max_bytes: int = 4096) -> str:
        """The model's view: regime table, kernel digests per regime, largest gaps; at most ``max_bytes``.

        Detail is shed in steps (fewer kernels and workload names, shorter lines) until it fits; a last
        resort cuts whole lines and says so.
        """
        return markdown.bounded(self._render, max_bytes)

    def _render(self, kernels: int, labels: int, name: int, detail: int, reason: int) -> str:
        return markdown.render(self.definition, self.solution, self.hardware, self.regimes, self.profiles,
                               self.gaps, self.notes, kernels=kernels, labels=labels, name=name, detail=detail,
                               reason=reason)


def build_evidence(definition: str, solution: str, stats: Sequence[WorkloadStat],
                   summaries: Iterable[ProfileSummary] = (), *, hardware: str = "", notes: Sequence[str] = (),
                   config: Optional[Mapping[str, Any]] = None,
                   roofline_bytes: Optional[Mapping[str, float]] = None) -> EvidenceRecord:
    """Assemble the record: regime table, each profile's digests under its workload's regime, top-3 gaps.

    ``roofline_bytes``: uuid -> the workload's minimum bytes (its operator family's workload_cost), which lets
    the digest name the ``extra-dram-traffic`` limiter; without it that limiter is not decided.
    """
    by_uuid = {w.uuid: w for w in stats}
    regimes = regime_table(stats)
    profiles = []
    for s in summaries:
        w = by_uuid.get(s.workload_uuid)
        digests = (digest_summary(s, fraction_of_floor=w.fraction_of_floor if w else None, config=config,
                                  roofline_bytes=(roofline_bytes or {}).get(s.workload_uuid))
                   if s.status == "ok" else [])
        profiles.append(RegimeProfile(regime=w.regime if w else "unmeasured", workload_uuid=s.workload_uuid,
                                      workload_label=w.label if w else s.workload_uuid[:8], status=s.status,
                                      reason=s.reason, digests=digests))
    order = {r.name: i for i, r in enumerate(regimes)}
    profiles.sort(key=lambda p: order.get(p.regime, len(order)))
    return EvidenceRecord(definition=definition, solution=solution, hardware=hardware, workloads=list(stats),
                          regimes=regimes, profiles=profiles, gaps=largest_gaps(stats), notes=list(notes))
