"""Limiter -> tactic, read from the skills (pure: skills in, data out; nothing hard-coded here).

- ``ncu-profiling`` names the limiters (yaml `limiters`, match order) and, in its section 5 table, the
  first tactic for each and what must move afterwards (`| **limiter**: evidence | tactic | verify |`);
- the target's tactics skill (``hopper-tactics`` / ``blackwell-tactics``) lists, in its yaml `tactics`,
  the architecture's tactic ids per limiter and the ncu metrics that prove them.

``diagnose`` turns the dominant kernel digest of a profiled workload into a ``Diagnosis`` the request
carries (providers act on its limiter and tactic ids; a model reads the hypothesis text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from harness.data.generation_request import Diagnosis
from harness.data.hardware import hardware_table

from .evidence import KernelDigest, RegimeProfile, short_kernel_name
from .skills import Skill, machine_blocks

NCU_SKILL = "ncu-profiling"
_LIMITER_ROW = re.compile(r"^\|\s*\*\*([a-z0-9-]+)\*\*:?\s*(.*?)\s*\|\s*(.*?)\s*\|\s*(.*?)\s*\|\s*$")


def tactics_skill(target_hardware: str) -> str:
    """The tactics skill that serves a target: its architecture's (``<architecture>-tactics``, the architecture from
    definitions/hardware.yaml), "" for a target the file does not list. It also picks the request's skill excerpt."""
    hw = hardware_table().get(target_hardware)
    return f"{hw.architecture}-tactics" if hw is not None else ""


@dataclass(frozen=True)
class LimiterRow:
    evidence: str
    tactic: str
    verify: str


@dataclass
class TacticBook:
    limiter_order: list[str] = field(default_factory=list)  # ncu-profiling's match order
    rows: dict[str, LimiterRow] = field(default_factory=dict)  # limiter -> first tactic (prose)
    arch_skill: str = ""
    arch_tactics: dict[str, list[dict]] = field(default_factory=dict)  # limiter -> [{id, verify}] of the arch


def limiter_rows(ncu_skill: Skill) -> dict[str, LimiterRow]:
    """The ncu-profiling skill's limiter-to-tactic table (three-column rows starting with a bold limiter id)."""
    rows: dict[str, LimiterRow] = {}
    for line in ncu_skill.body.splitlines():
        m = _LIMITER_ROW.match(line.strip())
        if m and m.group(1) not in rows:
            rows[m.group(1)] = LimiterRow(evidence=m.group(2), tactic=m.group(3), verify=m.group(4))
    return rows


def tactic_book(skills: Mapping[str, Skill], target_hardware: str) -> TacticBook:
    """What the skills say; an absent skill leaves its part empty (the planner then says less, not wrong)."""
    book = TacticBook()
    ncu = skills.get(NCU_SKILL)
    if ncu is not None:
        book.rows = limiter_rows(ncu)
        block = next((b for b in machine_blocks(ncu) if isinstance(b.get("limiters"), dict)), {})
        book.limiter_order = list(block.get("limiters", {}))
    arch = tactics_skill(target_hardware)
    if arch in skills:
        book.arch_skill = arch
        for block in machine_blocks(skills[arch]):
            for t in block.get("tactics") or []:
                book.arch_tactics.setdefault(str(t.get("limiter")), []).append(
                    {"id": str(t.get("id")), "verify": list(t.get("verify") or [])})
    return book


def _facts(d: KernelDigest) -> dict[str, float]:
    """The few numbers a limiter is decided on, for the request (and for a reader to check it)."""
    names = ("waves_per_sm", "dram_pct", "sol_memory_pct", "sol_compute_pct", "occupancy_achieved_pct",
             "occupancy_theoretical_pct", "registers_per_thread")
    out = {n: d.values[n] for n in names if d.values.get(n) is not None}
    if d.spills:
        out["spills"] = d.spills
    if d.top_stalls:
        out[f"stall_{d.top_stalls[0][0]}"] = d.top_stalls[0][1]
    return out


def diagnose(profile: RegimeProfile, book: TacticBook) -> Optional[Diagnosis]:
    """The dominant (longest) kernel of a profiled workload, its limiter and the tactics the skills give."""
    if not profile.digests:
        return None
    d = profile.digests[0]  # digests are sorted longest first: the kernel that sets the time
    tactics = book.arch_tactics.get(d.limiter or "", [])
    verify = list(dict.fromkeys(m for t in tactics for m in t["verify"]))
    return Diagnosis(workload=profile.workload_label, kernel=short_kernel_name(d.kernel, 60),
                     classification=d.classification, limiter=d.limiter,
                     occupancy_limiter=d.occupancy_limiter, tactics=[t["id"] for t in tactics], verify=verify,
                     facts=_facts(d))


def diagnoses_by_regime(profiles: Sequence[RegimeProfile], loop_regimes: Mapping[str, str],
                        book: TacticBook) -> dict[str, Diagnosis]:
    """Loop regime -> the diagnosis of its first profiled workload (profiles come largest share first)."""
    out: dict[str, Diagnosis] = {}
    for p in profiles:
        regime = loop_regimes.get(p.workload_uuid)
        if regime is None or regime in out:
            continue
        found = diagnose(p, book)
        if found is not None:
            out[regime] = found
    return out


def hypothesis_text(diagnosis: Diagnosis, book: TacticBook, fallback: str) -> str:
    """One paragraph for the request: what ncu saw, the limiter, its first tactic and what must move."""
    facts = ", ".join(f"{k} {v:.3g}" for k, v in diagnosis.facts.items())
    head = (f"ncu on {diagnosis.workload} (`{diagnosis.kernel}`): {diagnosis.classification}"
            + (f", limiter {diagnosis.limiter}" if diagnosis.limiter else "") + (f" ({facts})" if facts else "") + ".")
    row = book.rows.get(diagnosis.limiter or "")
    if row is None:
        return f"{head} {fallback}"
    text = f"{head} First tactic: {row.tactic}; verify: {row.verify}."
    if diagnosis.tactics:
        text += f" {book.arch_skill}: {', '.join(diagnosis.tactics)}."
    return text
