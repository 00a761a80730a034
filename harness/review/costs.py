"""The roofline of a section: the GPU's measured ceilings, the workloads' bytes and flops, the points."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..data.statuses import EvaluationStatus
from .model import Candidate, Roofline, RooflinePoint


def load_ceilings(folder: Path, device_name: str = "", uuid: str = "") -> Optional[dict[str, Any]]:
    """The GPU's measured ceilings from the archive's ``ceilings.json`` (harness.measure.roofline.CeilingsCache)."""
    path = Path(folder) / "ceilings.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not data:
        return None
    entry = data.get(f"{device_name}|{uuid}")
    if entry is None:
        named = [v for k, v in data.items() if k.split("|")[0] == device_name]
        entry = named[0] if len(named) == 1 else (next(iter(data.values())) if len(data) == 1 else None)
    if not isinstance(entry, dict):
        return None
    try:
        memory = max(float(entry["copy_bytes_per_s"]), float(entry["read_bytes_per_s"]))
        return {"gpu_name": entry.get("gpu_name", device_name), "memory_bytes_per_s": memory,
                "flops_per_s": float(entry["bf16_flops_per_s"]), "measured_at": entry.get("measured_at", "")}
    except (KeyError, TypeError, ValueError):
        return None


def dataset_costs(dataset: Any, definition: str) -> dict[str, tuple[float, float]]:
    """Bytes and flops per workload uuid by the definition's operator family (``workload_cost``: exact counts
    where the workload's index blobs allow), or {} when the dataset lacks the definition."""
    try:
        from ..families import family_for

        d = dataset.definition(definition)
        workloads = dataset.workloads_for(definition)
    except Exception:
        return {}
    family = family_for(d.op_type)
    out: dict[str, tuple[float, float]] = {}
    for w in workloads:
        for root in (dataset.root, None):  # an unreadable blob: the count without it
            try:
                cost = family.workload_cost(d, w, root=root)
            except Exception:
                continue
            out[w.uuid] = (float(cost.bytes_moved), float(cost.flops))
            break
    return out


def build_roofline(best: Candidate, costs: dict[str, tuple[float, float]],
                   ceilings: Optional[dict[str, Any]]) -> Roofline:
    passed = [w for w in best.workloads if w.status == EvaluationStatus.PASSED and w.timed_ms]
    fractions = [(w.label, w.fraction_of_floor) for w in best.workloads if w.evaluated]
    points: list[RooflinePoint] = []
    cost_note = ""
    for w in passed:
        cost = (w.bytes_moved, w.flops) if w.bytes_moved else costs.get(w.uuid)
        if cost:
            cost_note = ("bytes and flops recorded by the harness" if w.bytes_moved
                         else "bytes and flops from the dataset (the operator family's workload_cost)")
        elif ceilings and w.floor_ms:
            # Memory-bound floor: the bytes the floor implies at the measured bandwidth.
            cost = (w.floor_ms * 1e-3 * ceilings["memory_bytes_per_s"], 0.0)
            cost_note = "bytes implied by the floor at the measured bandwidth (memory-bound); flops unknown"
        if not cost:
            continue
        points.append(RooflinePoint(w.label, "candidate", cost[0], cost[1], w.timed_ms or 0.0))
        fi_ms = w.fi_kernel_ms or w.fi_official_ms
        if fi_ms:
            points.append(RooflinePoint(w.label, "FlashInfer", cost[0], cost[1], fi_ms))
    memory = ceilings["memory_bytes_per_s"] if ceilings else None
    flops = ceilings["flops_per_s"] if ceilings else None
    if ceilings:
        when = f", measured {ceilings['measured_at'][:10]}" if ceilings.get("measured_at") else ""
        ceilings_note = f"ceilings of {ceilings['gpu_name']} from the archive's ceilings.json{when}"
    else:
        # A memory-bound floor is bytes / bandwidth: the largest bytes/floor is the bandwidth the harness used.
        implied = [costs_b / (w.floor_ms * 1e-3) for w in passed if w.floor_ms
                   for costs_b in [(w.bytes_moved or (costs.get(w.uuid) or (0.0, 0.0))[0])] if costs_b]
        memory = max(implied) if implied else None
        ceilings_note = ("memory ceiling implied by the floors (no ceilings.json in the archive); compute ceiling "
                         "unknown" if memory else "no ceilings recorded")
    return Roofline(points, memory, flops, ceilings_note, cost_note, fractions)
