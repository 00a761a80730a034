"""The ncu metric table, read from the ncu-profiling skill: metric names per architecture, thresholds, limiters.

The only file the evidence package reads: the skill's yaml block (editing the skill changes the digest,
not this code).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional, Union

ROOT = Path(__file__).resolve().parent.parent.parent
SKILL_PATH = ROOT / "skills" / "ncu-profiling"

FIELD_UNITS = {
    "duration_ns": "ns", "sol_compute_pct": "%", "sol_memory_pct": "%", "dram_pct": "%",
    "dram_read_bytes": "B", "dram_write_bytes": "B",
    "occupancy_achieved_pct": "%", "occupancy_theoretical_pct": "%",
    "occupancy_limit_registers": "blocks/SM", "occupancy_limit_shared_mem": "blocks/SM",
    "occupancy_limit_warps": "blocks/SM", "occupancy_limit_blocks": "blocks/SM",
    "waves_per_sm": "waves", "registers_per_thread": "regs/thread",
    "shared_mem_static_bytes": "B", "shared_mem_dynamic_bytes": "B",
    "local_loads": "inst", "local_stores": "inst", "l1_hit_pct": "%", "l2_hit_pct": "%",
    "tensor_pipe_pct": "%", "mma_sync_inst": "inst", "wgmma_inst": "inst", "tcgen05_pipe_pct": "%",
    "tcgen05_inst": "inst", "tmem_pct": "%", "issue_active_pct": "%",
}


@lru_cache(maxsize=8)
def _load_config(path: str) -> dict[str, Any]:
    from ..skills import SkillError, load_skill, machine_blocks

    blocks = machine_blocks(load_skill(path))
    block = next((b for b in blocks if isinstance(b.get("metrics"), dict) and "classification" in b), None)
    if block is None:
        raise SkillError(f"{path}: no yaml block with `metrics` and `classification`")
    return block


def ncu_config(skill_path: Union[str, Path, None] = None) -> dict[str, Any]:
    """The ncu-profiling skill's machine-readable block (metrics per arch, thresholds, limiters). Read-only."""
    return _load_config(str(skill_path or SKILL_PATH))


def table_arch(arch: Optional[str], config: Optional[Mapping[str, Any]] = None) -> str:
    """The metric table for an architecture: its own if the skill has one, else the nearest older one,
    else the oldest (its names are then reported missing where the chip lacks them, never invented)."""
    config = config or ncu_config()
    tables = list(config["metrics"])
    if arch in tables:
        return arch
    number = lambda a: int(re.sub(r"\D", "", a) or 0)  # noqa: E731
    if arch:
        older = [t for t in tables if number(t) <= number(arch)]
        if older:
            return max(older, key=number)
    return min(tables, key=number)


def metric_table(arch: Optional[str], config: Optional[Mapping[str, Any]] = None) -> dict[str, str]:
    """digest field -> ncu metric name for an architecture (stall metrics excluded)."""
    config = config or ncu_config()
    table = config["metrics"][table_arch(arch, config)]
    return {k: v for k, v in table.items() if k not in ("stall_ratio_pattern", "stall_reasons")}


def stall_metrics(arch: Optional[str], config: Optional[Mapping[str, Any]] = None) -> dict[str, str]:
    """stall reason -> ncu metric (warps stalled per issued instruction)."""
    config = config or ncu_config()
    table = config["metrics"][table_arch(arch, config)]
    pattern = table["stall_ratio_pattern"]
    return {r: pattern.format(reason=r) for r in table.get("stall_reasons", [])}


def requested_metrics(arch: Optional[str], config: Optional[Mapping[str, Any]] = None) -> list[str]:
    """Every metric name to pass to ``ncu --metrics`` for this architecture, deduplicated, in table order."""
    names = list(metric_table(arch, config).values()) + list(stall_metrics(arch, config).values())
    return list(dict.fromkeys(names))
