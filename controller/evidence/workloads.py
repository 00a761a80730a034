"""``workload_stats``: per workload its axes, latency, share of the (weighted) total time, % of the roofline
floor, speedup vs FlashInfer and time above the floor; each assigned a regime by the operator family's
regime rules (data: first matching rule wins; harness.families)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from harness.data.statuses import EvaluationStatus
from harness.families import family_for
from harness.families.regimes import assign_regime, length_ratio
from harness.families.regimes import load_regime_rules as _load_rules

from .weights import weight_for

# The rules are the operator family's data (``OperatorFamily.regime_rules``); the engine is harness.families.regimes.
# Callers that know the definition pass its op_type; the default is the first family this controller served.
DEFAULT_OP_TYPE = "gqa_paged"


def load_regime_rules(source: Union[str, Sequence[Mapping[str, Any]], None] = None,
                      op_type: str = DEFAULT_OP_TYPE) -> list[dict[str, Any]]:
    """Rules from YAML text or a list of dicts, checked; without a source, those of ``op_type``'s family."""
    return _load_rules(family_for(op_type).regime_rules if source is None else source)


@dataclass
class WorkloadStat:
    uuid: str
    label: str
    axes: dict[str, int]
    status: str = EvaluationStatus.PASSED.value
    latency_ms: Optional[float] = None  # kernel latency (setup outside the timed call) where measured
    floor_ms: Optional[float] = None
    fraction_of_floor: Optional[float] = None
    speedup_vs_fi: Optional[float] = None  # vs the faster FlashInfer baseline, plan in setup
    weight: float = 1.0
    share: Optional[float] = None  # weight x latency / sum over workloads
    gap_ms: Optional[float] = None  # latency - floor (negative only if faster than the floor)
    length_ratio: Optional[float] = None  # max / mean request length, where known
    regime: str = ""

    @property
    def weighted_gap_ms(self) -> Optional[float]:
        return None if self.gap_ms is None else self.weight * max(self.gap_ms, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WorkloadStat":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _get(obj: Any, *names: str) -> Any:
    """The first non-None of these names: an attribute, a key, or a key of the row's ``extra`` (archive rows)."""
    for n in names:
        if isinstance(obj, Mapping):
            if obj.get(n) is not None:
                return obj[n]
            extra = obj.get("extra")
            if isinstance(extra, Mapping) and extra.get(n) is not None:
                return extra[n]
        elif getattr(obj, n, None) is not None:
            return getattr(obj, n)
    return None


def workload_stats(results: Iterable[Any], axes: Mapping[str, Mapping[str, int]], *, definition: str = "",
                   weights: Optional[Mapping[str, Any]] = None,
                   lengths: Optional[Mapping[str, Sequence[int]]] = None,
                   rules: Union[str, Sequence[Mapping[str, Any]], None] = None,
                   op_type: str = DEFAULT_OP_TYPE) -> list[WorkloadStat]:
    """Per workload: axes, latency, weighted share of the total, % of floor, speedup vs FlashInfer, regime.

    ``results``: harness WorkloadResults, archive evaluation rows (their ``extra`` is read too) or dicts with
    the same names. The latency is the kernel latency where there is one (setup outside the timed call: the
    figure ``fraction_of_floor`` and ``speedup_vs_fi_kernel`` are computed from), else the official latency.
    Regimes by ``rules``, else by the rules of ``op_type``'s family.
    """
    loaded = load_regime_rules(rules, op_type)
    stats = []
    for r in results:
        uuid = _get(r, "workload", "workload_uuid", "uuid") or ""
        label = _get(r, "label", "workload_label") or uuid[:8]
        latency = _get(r, "kernel_latency_ms", "latency_ms")
        floor = _get(r, "floor_ms")
        fraction = _get(r, "fraction_of_floor")
        if fraction is None and floor is not None and latency:
            fraction = floor / latency
        w = WorkloadStat(uuid=uuid, label=label, axes=dict(axes.get(uuid, {})), status=_get(r, "status") or "",
                         latency_ms=latency, floor_ms=floor, fraction_of_floor=fraction,
                         speedup_vs_fi=_get(r, "speedup_vs_fi_kernel", "speedup_vs_flashinfer_kernel"),
                         weight=weight_for(weights, definition, uuid, label),
                         gap_ms=(latency - floor) if latency is not None and floor is not None else None,
                         length_ratio=length_ratio((lengths or {}).get(uuid)))
        w.regime = assign_regime(w, loaded)
        stats.append(w)
    total = sum(w.weight * w.latency_ms for w in stats if w.latency_ms is not None)
    for w in stats:
        if w.latency_ms is not None and total > 0:
            w.share = w.weight * w.latency_ms / total
    return stats
