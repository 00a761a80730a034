"""``KernelDigest``: one kernel's ncu metrics reduced to the digest fields, and one Markdown bullet of it;
``RegimeProfile``: the digests of the workload profiled for one regime (or why it was not profiled)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .quantities import fmt_quantity


def short_kernel_name(name: str, limit: int = 60) -> str:
    """Readable kernel name: no return type, parameters or template arguments; namespaces kept."""
    s = re.sub(r"^void\s+", "", name.strip())
    depth, out = 0, []
    for ch in s:  # drop <...> and (...) at any depth
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip() or name.strip()
    return s if len(s) <= limit else s[: limit - 1] + "~"


@dataclass
class KernelDigest:
    kernel: str
    arch: Optional[str]
    values: dict[str, Optional[float]]  # field -> value (3 significant digits), None = missing
    units: dict[str, str]
    occupancy_limiter: Optional[str] = None  # registers | shared_mem | warps | blocks
    occupancy_limit_blocks_per_sm: Optional[float] = None
    top_stalls: list[tuple[str, float]] = field(default_factory=list)  # (reason, warps stalled per issue)
    classification: str = "unknown"
    limiter: Optional[str] = None  # id from the skill's `limiters`
    missing: list[str] = field(default_factory=list)  # metric names ncu did not return
    launches: int = 1

    def get(self, name: str) -> Optional[float]:
        return self.values.get(name)

    def formatted(self, name: str) -> str:
        return fmt_quantity(self.values.get(name), self.units.get(name, ""))

    @property
    def spills(self) -> Optional[float]:
        lo, st = self.values.get("local_loads"), self.values.get("local_stores")
        return None if lo is None and st is None else (lo or 0) + (st or 0)

    @property
    def shared_mem_bytes(self) -> Optional[float]:
        a, b = self.values.get("shared_mem_static_bytes"), self.values.get("shared_mem_dynamic_bytes")
        return None if a is None and b is None else (a or 0) + (b or 0)

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "arch": self.arch, "launches": self.launches,
                "values": dict(self.values), "units": dict(self.units),
                "occupancy_limiter": self.occupancy_limiter,
                "occupancy_limit_blocks_per_sm": self.occupancy_limit_blocks_per_sm,
                "top_stalls": [[r, v] for r, v in self.top_stalls], "classification": self.classification,
                "limiter": self.limiter, "missing": list(self.missing)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "KernelDigest":
        return cls(kernel=data["kernel"], arch=data.get("arch"), values=dict(data.get("values", {})),
                   units=dict(data.get("units", {})), occupancy_limiter=data.get("occupancy_limiter"),
                   occupancy_limit_blocks_per_sm=data.get("occupancy_limit_blocks_per_sm"),
                   top_stalls=[(r, v) for r, v in data.get("top_stalls", [])],
                   classification=data.get("classification", "unknown"), limiter=data.get("limiter"),
                   missing=list(data.get("missing", [])), launches=int(data.get("launches", 1)))

    def line(self, name_limit: int = 60, detail: int = 0) -> str:
        """One Markdown bullet. ``detail`` 0 = everything, 1 = no caches/tensor/waves, 2 = the essentials."""
        v = self.values
        parts = [f"`{short_kernel_name(self.kernel, name_limit)}`"
                 + (f" x{self.launches}" if self.launches > 1 else "") + f" {self.formatted('duration_ns')}"]
        sol = f"SOL mem {self.formatted('sol_memory_pct')} / compute {self.formatted('sol_compute_pct')}"
        if detail == 0 and v.get("dram_pct") is not None:
            sol += f" (DRAM {self.formatted('dram_pct')})"
        parts.append(sol)
        occ = f"occ {self.formatted('occupancy_achieved_pct')}/{self.formatted('occupancy_theoretical_pct')}"
        if self.occupancy_limiter:
            blocks = self.occupancy_limit_blocks_per_sm
            occ += f" ({self.occupancy_limiter}" + (f", {blocks:.3g} blocks/SM)" if blocks is not None else ")")
        parts.append(occ)
        regs = v.get("registers_per_thread")
        parts.append(f"{regs:.3g} regs" if regs is not None else "regs n/a")
        if detail == 0 and self.shared_mem_bytes is not None:
            parts.append(f"smem {fmt_quantity(self.shared_mem_bytes, 'B')}")
        spills = self.spills
        parts.append("spills n/a" if spills is None else f"spills {fmt_quantity(spills, 'inst')}" if spills
                     else "no spills")
        if detail == 0:
            extras = []
            if v.get("waves_per_sm") is not None:
                extras.append(f"waves {v['waves_per_sm']:.3g}")
            if v.get("l2_hit_pct") is not None:
                extras.append(f"L2 hit {self.formatted('l2_hit_pct')}")
            if v.get("l1_hit_pct") is not None:
                extras.append(f"L1 hit {self.formatted('l1_hit_pct')}")
            tensor = v.get("tensor_pipe_pct") if v.get("tensor_pipe_pct") is not None else v.get("tcgen05_pipe_pct")
            if tensor is not None:
                extras.append(f"tensor pipe {fmt_quantity(tensor, '%')}")
            if extras:
                parts.append(", ".join(extras))
        if self.top_stalls:
            shown = self.top_stalls if detail < 2 else self.top_stalls[:2]
            parts.append("stalls " + ", ".join(f"{r} {x:.3g}" for r, x in shown))
        parts.append(self.classification + (f", limiter {self.limiter}" if self.limiter else ""))
        if self.missing and detail < 2:
            shown = ", ".join(self.missing[:2]) + (f" +{len(self.missing) - 2}" if len(self.missing) > 2 else "")
            parts.append(f"missing: {shown}")
        return "- " + "; ".join(parts)


@dataclass
class RegimeProfile:
    regime: str
    workload_uuid: str
    workload_label: str
    status: str  # harness.profiling statuses
    reason: str = ""
    digests: list[KernelDigest] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"regime": self.regime, "workload_uuid": self.workload_uuid, "workload_label": self.workload_label,
                "status": self.status, "reason": self.reason, "digests": [d.to_json() for d in self.digests]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RegimeProfile":
        return cls(regime=data["regime"], workload_uuid=data["workload_uuid"], workload_label=data["workload_label"],
                   status=data["status"], reason=data.get("reason", ""),
                   digests=[KernelDigest.from_json(d) for d in data.get("digests", [])])
