"""Evidence for a generation request: kernel digests, workload statistics, regimes and the largest gaps.

Everything here is a pure function of its arguments (profiles, measured results, workload axes, weights,
rules); the only file it reads is the ncu-profiling skill, whose yaml block holds the metric names per
architecture and the classification thresholds (editing the skill changes the digest, not this code).

- ``digest_kernel`` / ``digest_summary``: one ``KernelDigest`` per kernel of a ``ProfileSummary``
  (harness.profile): duration, SOL compute / memory / DRAM, DRAM bytes, achieved vs theoretical
  occupancy and its limiter, registers, shared memory, spills, L1/L2 hit rates, tensor pipe, waves,
  top warp stalls; three significant digits with units; metrics ncu did not return are listed as
  missing and left ``None``. Classification (skill section 4): at-roofline, latency-bound,
  memory-bound, compute-bound; then the limiter id (skill ``limiters``, first match in order).
- ``workload_stats``: per workload its axes, latency, share of the (weighted) total time, % of the
  roofline floor, speedup vs FlashInfer and time above the floor; each assigned a regime by the
  operator family's regime rules (data: first matching rule wins; harness.families).
- ``build_evidence`` -> ``Evidence``: the regime table, per-regime kernel digests and the three largest
  gaps; ``to_json`` / ``from_json`` and ``to_markdown`` (bounded, under 4 KB by default: what a model reads).

(``controller/latency_evidence.py`` is the loop's latency-only table, used when no profile is at hand;
``controller/incumbent_evidence.py`` profiles the loop's incumbent and renders this record for requests.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import yaml

from harness.families import family_for
from harness.families.regimes import REGIME_CONDITIONS, assign_regime, length_ratio  # noqa: F401  (re-exported)
from harness.families.regimes import load_regime_rules as _load_rules
from harness.profile import KernelProfile, ProfileSummary

ROOT = Path(__file__).resolve().parent.parent
SKILL_PATH = ROOT / "skills" / "ncu-profiling"
WEIGHTS_FILE = "workload_weights.yaml"

# ---------------------------------------------------------------------------------------------
# The metric table (from the skill)

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
OCCUPANCY_LIMITS = ("registers", "shared_mem", "warps", "blocks")  # tie order for the limiter
CLASSES = ("at-roofline", "latency-bound", "memory-bound", "compute-bound", "unknown")


@lru_cache(maxsize=8)
def _load_config(path: str) -> dict[str, Any]:
    from .skills import SkillError, load_skill, machine_blocks

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


# ---------------------------------------------------------------------------------------------
# Numbers


def sig(value: Optional[float], digits: int = 3) -> Optional[float]:
    """``value`` rounded to ``digits`` significant digits (None, 0, inf and nan pass through)."""
    if value is None or not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{digits}g}")


def _prefixed(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def fmt_quantity(value: Optional[float], unit: str) -> str:
    """Three significant digits with the unit attached, scaled for reading: "689 us", "2.15 GB", "66.7%"."""
    if value is None:
        return "n/a"
    if unit == "ns":
        if abs(value) >= 1e6:
            return f"{value / 1e6:.3g} ms"
        if abs(value) >= 1e3:
            return f"{value / 1e3:.3g} us"
        return f"{value:.3g} ns"
    if unit == "%":
        return f"{value:.3g}%"
    if unit == "B":
        return _prefixed(value, "B")
    if unit == "inst":
        return _prefixed(value, "inst")
    return f"{value:.3g} {unit}".rstrip()


# ---------------------------------------------------------------------------------------------
# Kernel digest


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


def _merge_launches(kernels: Sequence[KernelProfile]) -> KernelProfile:
    """Launches of one kernel as one: ``.sum`` metrics add up, the rest is a duration-weighted mean."""
    if len(kernels) == 1:
        return kernels[0]
    weights = [k.value("gpu__time_duration.sum") or 0.0 for k in kernels]
    if not any(weights):
        weights = [1.0] * len(kernels)
    names = list(dict.fromkeys(m for k in kernels for m in k.metrics))
    merged: dict[str, tuple[Optional[float], str]] = {}
    for m in names:
        known = [(k.value(m), w) for k, w in zip(kernels, weights) if k.value(m) is not None]
        unit = next((k.unit(m) for k in kernels if m in k.metrics), "")
        if not known:
            merged[m] = (None, unit)
        elif m.endswith(".sum"):
            merged[m] = (sum(x for x, _ in known), unit)
        else:
            wsum = sum(w for _, w in known)
            merged[m] = ((sum(x * w for x, w in known) / wsum) if wsum > 0 else known[0][0], unit)
    first = kernels[0]
    return KernelProfile(id=first.id, name=first.name, metrics=merged, block_size=first.block_size,
                         grid_size=first.grid_size, device=first.device, cc=first.cc)


def classify(sol_compute_pct: Optional[float], sol_memory_pct: Optional[float],
             fraction_of_floor: Optional[float], thresholds: Mapping[str, Any]) -> str:
    """Skill section 4, in order: at-roofline, latency-bound, memory-bound, compute-bound (else unknown)."""
    if fraction_of_floor is not None and fraction_of_floor >= float(thresholds["at_roofline_fraction_of_floor"]):
        return "at-roofline"
    if sol_compute_pct is None or sol_memory_pct is None:
        return "unknown"
    below = float(thresholds["latency_bound_below_sol_pct"])
    if sol_compute_pct < below and sol_memory_pct < below:
        return "latency-bound"
    return "memory-bound" if sol_memory_pct >= sol_compute_pct else "compute-bound"


def occupancy_limiter(values: Mapping[str, Optional[float]]) -> tuple[Optional[str], Optional[float]]:
    """The smallest of launch__occupancy_limit_{registers,shared_mem,warps,blocks} (blocks per SM)."""
    known = [(n, values.get(f"occupancy_limit_{n}")) for n in OCCUPANCY_LIMITS]
    known = [(n, v) for n, v in known if v is not None]
    if not known:
        return None, None
    smallest = min(v for _, v in known)
    return next(n for n, v in known if v == smallest), smallest


def _limiter_rules(d: KernelDigest, stalls: Mapping[str, float], t: Mapping[str, Any],
                   span_ns: Optional[float], roofline_bytes: Optional[float]) -> dict[str, Optional[bool]]:
    """Each limiter id of the skill -> does it hold (None: not decidable from the data at hand)."""
    v = d.values
    top = d.top_stalls[0][0] if d.top_stalls else None
    top_ratio = d.top_stalls[0][1] if d.top_stalls else None
    significant = float(t["stall_ratio_significant"])
    tensor = v.get("tensor_pipe_pct") if v.get("tensor_pipe_pct") is not None else v.get("tcgen05_pipe_pct")
    achieved, theoretical = v.get("occupancy_achieved_pct"), v.get("occupancy_theoretical_pct")
    waves, duration, spills = v.get("waves_per_sm"), v.get("duration_ns"), d.spills
    return {
        "spills": None if spills is None else spills > float(t["spills_when_local_ops_above"]),
        "grid-too-small": None if waves is None else (waves < float(t["small_grid_below_waves"])
                                                      and d.classification == "latency-bound"),
        "launch-gaps": None if span_ns is None or not duration else span_ns > 1.2 * duration,
        "extra-dram-traffic": (None if roofline_bytes is None or v.get("dram_read_bytes") is None
                               else v["dram_read_bytes"] > 1.2 * roofline_bytes),
        "register-occupancy": d.occupancy_limiter == "registers" and top == "long_scoreboard",
        "shared-memory-occupancy": d.occupancy_limiter == "shared_mem" and top == "long_scoreboard",
        "tail-imbalance": (None if achieved is None or theoretical is None
                           else theoretical - achieved > float(t["occupancy_gap_pct_points"])),
        "dependent-loads": top == "long_scoreboard" and top_ratio is not None and top_ratio > significant,
        "cuda-core-compute": (stalls.get("math_pipe_throttle", 0.0) > significant
                              and (tensor or 0.0) < float(t["tensor_pipe_in_use_pct"])),
        # "the tensor pipe is the busiest pipe": the digest holds no other pipe, so compute-bound with the
        # tensor pipe in use stands in for it.
        "tensor-pipe": d.classification == "compute-bound" and (tensor or 0.0) >= float(t["tensor_pipe_in_use_pct"]),
        "shared-memory-stalls": top in ("short_scoreboard", "mio_throttle"),
        "memory-bandwidth": d.classification == "memory-bound",
    }


def name_limiter(d: KernelDigest, stalls: Mapping[str, float], config: Mapping[str, Any],
                 span_ns: Optional[float] = None, roofline_bytes: Optional[float] = None) -> Optional[str]:
    """The first limiter of the skill's list (in its order) that holds; None at the roofline or if none does."""
    if d.classification == "at-roofline":
        return None
    rules = _limiter_rules(d, stalls, config["classification"], span_ns, roofline_bytes)
    return next((lid for lid in config.get("limiters", {}) if rules.get(lid)), None)


def digest_kernel(kernel: KernelProfile, arch: Optional[str] = None, *, fraction_of_floor: Optional[float] = None,
                  config: Optional[Mapping[str, Any]] = None, span_ns: Optional[float] = None,
                  roofline_bytes: Optional[float] = None, launches: int = 1) -> KernelDigest:
    """Reduce one kernel's metrics to the digest fields of its architecture's table."""
    config = config or ncu_config()
    digits = int(config.get("digest_significant_digits", 3))
    table = metric_table(arch, config)
    values: dict[str, Optional[float]] = {}
    missing: list[str] = []
    for fld, metric in table.items():
        x = kernel.value(metric)
        values[fld] = sig(x, digits)
        if x is None:
            missing.append(metric)
    by_reason = stall_metrics(arch, config)
    stalls_all = {r: kernel.value(m) for r, m in by_reason.items()}
    missing += [by_reason[r] for r, x in stalls_all.items() if x is None]
    stalls = {r: x for r, x in stalls_all.items() if x is not None}
    top_n = int(config.get("digest_top_stalls", 3))
    top = sorted(((r, x) for r, x in stalls.items() if x > 0), key=lambda rx: -rx[1])[:top_n]
    units = {f: FIELD_UNITS.get(f, "") for f in values}
    sol_memory = values.get("sol_memory_pct") if values.get("sol_memory_pct") is not None else values.get("dram_pct")
    d = KernelDigest(kernel=kernel.name, arch=arch, values=values, units=units,
                     top_stalls=[(r, sig(x, digits)) for r, x in top], missing=missing, launches=launches)
    d.occupancy_limiter, d.occupancy_limit_blocks_per_sm = occupancy_limiter(values)
    d.classification = classify(values.get("sol_compute_pct"), sol_memory, fraction_of_floor,
                                config["classification"])
    d.limiter = name_limiter(d, stalls, config, span_ns, roofline_bytes)
    return d


def digest_summary(summary: ProfileSummary, *, fraction_of_floor: Optional[float] = None,
                   config: Optional[Mapping[str, Any]] = None, span_ns: Optional[float] = None,
                   roofline_bytes: Optional[float] = None) -> list[KernelDigest]:
    """One digest per distinct kernel of a profile (launches of the same kernel merged), longest first."""
    groups: dict[str, list[KernelProfile]] = {}
    for k in summary.kernels:
        groups.setdefault(k.name, []).append(k)
    out = [digest_kernel(_merge_launches(ks), summary.arch, fraction_of_floor=fraction_of_floor, config=config,
                         span_ns=span_ns, roofline_bytes=roofline_bytes, launches=len(ks))
           for ks in groups.values()]
    return sorted(out, key=lambda d: -(d.get("duration_ns") or 0.0))


# ---------------------------------------------------------------------------------------------
# Workload weights (definitions/workload_weights.yaml)

NO_WEIGHTS = {"default": 1.0, "by_label": {}, "by_definition": {}}


def load_workload_weights(path: Union[str, Path, None]) -> dict[str, Any]:
    """The optional weights file (a path, or the dataset folder holding it). Missing -> every weight 1."""
    if path is None:
        return dict(NO_WEIGHTS)
    path = Path(path)
    if path.is_dir():
        path = path / WEIGHTS_FILE
    if not path.exists():
        return dict(NO_WEIGHTS)
    return validate_weights(yaml.safe_load(path.read_text()) or {}, str(path))


def validate_weights(data: Any, where: str = "weights") -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping with default / by_label / by_definition")
    unknown = set(data) - {"default", "by_label", "by_definition"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (allowed: default, by_label, by_definition)")
    out = {"default": data.get("default", 1.0), "by_label": data.get("by_label") or {},
           "by_definition": data.get("by_definition") or {}}

    def check(x: Any, what: str) -> None:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 or not math.isfinite(x):
            raise ValueError(f"{where}: {what} must be a number >= 0, got {x!r}")

    check(out["default"], "default")
    if not isinstance(out["by_label"], dict):
        raise ValueError(f"{where}: by_label must map workload labels or uuids to weights")
    for k, x in out["by_label"].items():
        check(x, f"by_label.{k}")
    if not isinstance(out["by_definition"], dict):
        raise ValueError(f"{where}: by_definition must map definition names to tables")
    for d, table in out["by_definition"].items():
        if not isinstance(table, dict):
            raise ValueError(f"{where}: by_definition.{d} must map workload labels or uuids to weights")
        for k, x in table.items():
            check(x, f"by_definition.{d}.{k}")
    return out


def weight_for(weights: Optional[Mapping[str, Any]], definition: str, uuid: str, label: str) -> float:
    """by_definition[definition][uuid or label], else by_label[uuid or label], else default (1)."""
    if not weights:
        return 1.0
    table = (weights.get("by_definition") or {}).get(definition) or {}
    for key in (uuid, label):
        if key in table:
            return float(table[key])
    by_label = weights.get("by_label") or {}
    for key in (uuid, label):
        if key in by_label:
            return float(by_label[key])
    return float(weights.get("default", 1.0))


# ---------------------------------------------------------------------------------------------
# Regimes

# The rules are the operator family's data (``OperatorFamily.regime_rules``); the engine is harness.families.regimes.
# Callers that know the definition pass its op_type; the default is the first family this controller served.
DEFAULT_OP_TYPE = "gqa_paged"


def load_regime_rules(source: Union[str, Sequence[Mapping[str, Any]], None] = None,
                      op_type: str = DEFAULT_OP_TYPE) -> list[dict[str, Any]]:
    """Rules from YAML text or a list of dicts, checked; without a source, those of ``op_type``'s family."""
    return _load_rules(family_for(op_type).regime_rules if source is None else source)


# ---------------------------------------------------------------------------------------------
# Workload statistics


@dataclass
class WorkloadStat:
    uuid: str
    label: str
    axes: dict[str, int]
    status: str = "PASSED"
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


# ---------------------------------------------------------------------------------------------
# The evidence record


@dataclass
class RegimeProfile:
    regime: str
    workload_uuid: str
    workload_label: str
    status: str  # harness.profile statuses
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


@dataclass
class Evidence:
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
        """profile / latency-only / correctness-only (the names harness.generation_request.Evidence uses)."""
        if any(p.digests for p in self.profiles):
            return "profile"
        return "latency-only" if any(w.latency_ms is not None for w in self.workloads) else "correctness-only"

    def to_json(self) -> dict[str, Any]:
        return {"definition": self.definition, "solution": self.solution, "hardware": self.hardware,
                "kind": self.kind, "workloads": [w.to_json() for w in self.workloads],
                "regimes": [r.to_json() for r in self.regimes], "profiles": [p.to_json() for p in self.profiles],
                "gaps": [g.to_json() for g in self.gaps], "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Evidence":
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
        levels = [dict(kernels=3, labels=4, name=60, detail=0, reason=160),
                  dict(kernels=2, labels=3, name=48, detail=1, reason=120),
                  dict(kernels=1, labels=2, name=40, detail=1, reason=80),
                  dict(kernels=1, labels=0, name=32, detail=2, reason=60)]
        text = ""
        for level in levels:
            text = self._render(**level)
            if len(text.encode()) <= max_bytes:
                return text
        marker = "[evidence truncated]\n"
        data = text.encode()[: max(max_bytes - len(marker.encode()), 0)]
        return data.decode(errors="ignore").rsplit("\n", 1)[0] + "\n" + marker

    def _render(self, kernels: int, labels: int, name: int, detail: int, reason: int) -> str:
        pct = lambda x: "n/a" if x is None else f"{100 * x:.3g}%"  # noqa: E731
        times = lambda x: "n/a" if x is None else f"{x:.3g}x"  # noqa: E731
        out = [f"# Evidence: {self.solution} on {self.definition}" + (f" ({self.hardware})" if self.hardware else "")]
        out.append("Time = kernel latency per call; floor = roofline floor; share = weighted share of total time.")
        out += ["", "## Regimes",
                "| regime | workloads | share of time | mean % of floor | mean speedup vs FlashInfer |",
                "|---|---|---|---|---|"]
        for r in self.regimes:
            shown = r.workloads[:labels]
            names = f"{len(r.workloads)}" + (": " + ", ".join(shown) if shown else "")
            if shown and len(r.workloads) > len(shown):
                names += f", +{len(r.workloads) - len(shown)}"
            out.append(f"| {r.name} | {names} | {pct(r.share)} | {pct(r.mean_fraction_of_floor)} | "
                       f"{times(r.mean_speedup_vs_fi)} |")
        out += ["", "## Kernels (ncu, one profiled workload per regime)"]
        if not self.profiles:
            out.append("Not profiled: no ncu profile available; the evidence is timing only.")
        for p in self.profiles:
            head = f"**{p.regime}** on {p.workload_label}"
            if p.status != "ok" or not p.digests:
                why = " ".join((p.reason or p.status).split())[:reason]
                out.append(f"{head}: not profiled ({p.status}: {why})")
                continue
            more = len(p.digests) - kernels
            out.append(head + ":" + (f" ({more} shorter kernels not shown)" if more > 0 else ""))
            out += [d.line(name_limit=name, detail=detail) for d in p.digests[:kernels]]
        out += ["", "## Largest gaps (latency - floor)"]
        if not self.gaps:
            out.append("No floor or latency measured: gaps unknown.")
        for i, g in enumerate(self.gaps, 1):
            out.append(f"{i}. {g.label} ({g.regime}): {g.gap_us:.3g} us above the floor per call, "
                       f"{pct(g.share)} of all time above the floor")
        for note in self.notes:
            out.append(f"Note: {' '.join(note.split())[:reason]}")
        return "\n".join(out) + "\n"


def build_evidence(definition: str, solution: str, stats: Sequence[WorkloadStat],
                   summaries: Iterable[ProfileSummary] = (), *, hardware: str = "", notes: Sequence[str] = (),
                   config: Optional[Mapping[str, Any]] = None,
                   roofline_bytes: Optional[Mapping[str, float]] = None) -> Evidence:
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
    return Evidence(definition=definition, solution=solution, hardware=hardware, workloads=list(stats),
                    regimes=regimes, profiles=profiles, gaps=largest_gaps(stats), notes=list(notes))
