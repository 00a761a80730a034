"""The regime table (one row per regime: its workloads, share of time, mean % of floor and speedup), the
workload to profile per regime, and the largest gaps between latency and the roofline floor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from .quantities import sig
from .workloads import WorkloadStat


@dataclass
class RegimeRow:
    name: str
    workloads: list[str]  # labels
    uuids: list[str]
    share: Optional[float]
    mean_fraction_of_floor: Optional[float]
    mean_speedup_vs_fi: Optional[float]
    representative: Optional[str] = None  # uuid to profile for this regime

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RegimeRow":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


def _weighted_mean(pairs: Sequence[tuple[Optional[float], float]]) -> Optional[float]:
    known = [(x, w) for x, w in pairs if x is not None and w > 0]
    if not known:
        return None
    return sum(x * w for x, w in known) / sum(w for _, w in known)


def _size(w: WorkloadStat) -> float:
    a = w.axes
    return float(a.get("num_kv_indices", 0) * a.get("page_size", 1) or sum(v for v in a.values() if v))


def representatives(stats: Sequence[WorkloadStat]) -> dict[str, str]:
    """regime -> the uuid to profile: the most (weighted) time above the floor, else the largest share of
    time, else (nothing measured) the middle workload by size."""
    out: dict[str, str] = {}
    for regime in dict.fromkeys(w.regime for w in stats):
        members = [w for w in stats if w.regime == regime]
        gaps = [w for w in members if w.weighted_gap_ms is not None]
        shares = [w for w in members if w.share is not None]
        if gaps:
            out[regime] = max(gaps, key=lambda w: w.weighted_gap_ms).uuid
        elif shares:
            out[regime] = max(shares, key=lambda w: w.share).uuid
        else:
            ordered = sorted(members, key=lambda w: (_size(w), w.uuid))
            out[regime] = ordered[(len(ordered) - 1) // 2].uuid
    return out


def regime_table(stats: Sequence[WorkloadStat]) -> list[RegimeRow]:
    """One row per regime, largest share of time first (regimes without timing keep rule order)."""
    reps = representatives(stats)
    rows = []
    for regime in dict.fromkeys(w.regime for w in stats):
        members = [w for w in stats if w.regime == regime]
        shares = [w.share for w in members if w.share is not None]
        rows.append(RegimeRow(name=regime, workloads=[w.label for w in members], uuids=[w.uuid for w in members],
                              share=sum(shares) if shares else None,
                              mean_fraction_of_floor=_weighted_mean([(w.fraction_of_floor, w.weight) for w in members]),
                              mean_speedup_vs_fi=_weighted_mean([(w.speedup_vs_fi, w.weight) for w in members]),
                              representative=reps.get(regime)))
    return sorted(rows, key=lambda r: -(r.share if r.share is not None else -1.0))


@dataclass
class Gap:
    uuid: str
    label: str
    regime: str
    gap_us: float  # latency - floor, one call
    share: Optional[float]  # of all (weighted) time above the floor

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Gap":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


def largest_gaps(stats: Sequence[WorkloadStat], n: int = 3) -> list[Gap]:
    """The ``n`` workloads with the most weighted time above the roofline floor."""
    known = [w for w in stats if w.weighted_gap_ms is not None]
    total = sum(w.weighted_gap_ms for w in known)
    ranked = sorted(known, key=lambda w: (-w.weighted_gap_ms, w.uuid))[:n]
    return [Gap(uuid=w.uuid, label=w.label, regime=w.regime, gap_us=sig(max(w.gap_ms, 0.0) * 1e3),
                share=(w.weighted_gap_ms / total) if total > 0 else None) for w in ranked]
