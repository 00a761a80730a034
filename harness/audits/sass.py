"""Instruction proof: which instructions the built code holds (SASS), and whether claimed ones execute.

A solution (``spec.instruction_claims``) or the definition's policy (``instruction_claims`` in
definitions/audit_policy.yaml) may claim instruction families, e.g. ``wgmma``. Two proofs:

1. the SASS of the code the candidate built holds the family's opcodes (``cuobjdump -sass`` of the
   cubins / the .so's fatbin / Triton's cached cubins; ``nvdisasm`` for bare cubins);
2. at the ``full`` audit level, where Nsight Compute runs, the family's instruction counter is non-zero
   over the candidate's own kernels. Code that is compiled in but never taken proves nothing.

The HMMA counter (``sm__inst_executed_pipe_tensor_op_hmma``) counts mma.sync only: it is the proof of
an ``hmma`` claim and of nothing else. A wgmma kernel shows 0 there, and an mma.sync kernel shows
non-zero without any wgmma, so it never stands in for the gmma or tcgen05 counters.

Everything here is pure except ``find_disassembler`` and ``disassemble`` (subprocesses, files).
A host without a disassembler or a profiler gets a note, never a failed audit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from .model import Audit

SUMMARY_LIMIT = 4000  # characters of the archived `sass` artifact


@dataclass(frozen=True)
class Family:
    name: str
    opcodes: tuple[str, ...]  # base opcodes (before the first '.') that belong to the family
    meaning: str
    counters: Mapping[str, str] = field(default_factory=dict)  # arch -> ncu metric counting its executions


# The one table. Opcode names were read from cuobjdump of kernels compiled here with nvcc 13.0 (inline PTX,
# tests/fixtures/sass/*.cu): wgmma bf16/fp8/int8 -> HGMMA/QGMMA/IGMMA (BGMMA is the b1 form); tcgen05.mma
# kind::f16|tf32 -> UTCHMMA, f8f6f4 -> UTCQMMA, i8 -> UTCIMMA, mxf4 -> UTCOMMA. Counters: skills/ncu-profiling.
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("wgmma", ("HGMMA", "IGMMA", "QGMMA", "BGMMA"), "warpgroup MMA (wgmma.mma_async, sm_90a)",
           {"sm_90": "sm__inst_executed_pipe_tensor_op_gmma.sum"}),
    # FP8 on the tensor cores, as the contest's MoE and DSA indexer kernels claim it: the FP8 forms only (the
    # SASS proves the kind; the counters count every form of their family, so they prove that it ran)
    Family("qgmma", ("QGMMA",), "FP8 warpgroup MMA (wgmma.mma_async kind e4m3/e5m2, sm_90a)",
           {"sm_90": "sm__inst_executed_pipe_tensor_op_gmma.sum"}),
    Family("tcgen05", ("UTCHMMA", "UTCQMMA", "UTCIMMA", "UTCOMMA", "UTCMMA"), "tcgen05.mma (sm_100a)",
           {"sm_100": "sm__inst_executed_pipe_tc.sum"}),
    Family("utcqmma", ("UTCQMMA",), "FP8/FP6/FP4 tcgen05.mma (kind::f8f6f4, sm_100a)",
           {"sm_100": "sm__inst_executed_pipe_tc.sum"}),
    Family("hmma", ("HMMA",), "mma.sync on the tensor cores",
           {"sm_90": "sm__inst_executed_pipe_tensor_op_hmma.sum",
            "sm_100": "sm__inst_executed_pipe_tensor_subpipe_hmma.sum"}),
    Family("tma", ("UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UBLKCP", "UBLKRED", "UBLKPF"),
           "TMA tensor and bulk copies (cp.async.bulk)"),
    Family("cp_async", ("LDGSTS",), "cp.async global -> shared"),
    Family("ldsm", ("LDSM",), "ldmatrix"),
)}
# What an mma.sync pipe counter must never prove (see the module docstring).
HMMA_COUNTERS = frozenset(FAMILIES["hmma"].counters.values())


# -- parsing ---------------------------------------------------------------------------------------------


@dataclass
class KernelSass:
    name: str
    arch: str  # sm_90, sm_100 (cuobjdump prints sm_90 for sm_90a code)
    opcodes: dict[str, int] = field(default_factory=dict)  # full opcode with modifiers -> count

    def bases(self) -> Counter:
        out: Counter = Counter()
        for op, n in self.opcodes.items():
            out[base_opcode(op)] += n
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch, "opcodes": dict(self.opcodes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "KernelSass":
        return cls(str(data["name"]), str(data.get("arch", "")), {str(k): int(v) for k, v in data["opcodes"].items()})


_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?"
                          r"([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)(?=[\s;])")
_CUOBJDUMP_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_NVDISASM_TEXT = re.compile(r"^\.text\.(\S+):\s*$")
_SECTION = re.compile(r"^\s*\.section\s+(\S+?),")
_ARCH = re.compile(r"^\s*(?:code for|\.target)\s+(sm_\d+[a-z]?)")


def base_opcode(opcode: str) -> str:
    """``HGMMA.64x128x16.F32.BF16`` -> ``HGMMA``."""
    return opcode.split(".", 1)[0]


def arch_key(arch: Optional[str]) -> str:
    """``sm_90a`` -> ``sm_90``: the counter tables are per chip, not per feature set."""
    m = re.match(r"(sm_\d+)", arch or "")
    return m.group(1) if m else (arch or "")


def parse_sass(text: str) -> list[KernelSass]:
    """Per-kernel opcode histograms from ``cuobjdump -sass`` or ``nvdisasm`` output (several files concatenated
    are fine: each ``code for``/``.target`` line sets the architecture of the functions after it)."""
    kernels: list[KernelSass] = []
    current: Optional[KernelSass] = None
    arch = ""
    for line in text.splitlines():
        m = _ARCH.match(line)
        if m:
            arch = arch_key(m.group(1))
            continue
        m = _CUOBJDUMP_FUNCTION.match(line) or _NVDISASM_TEXT.match(line)
        if m:
            current = KernelSass(m.group(1), arch)
            kernels.append(current)
            continue
        m = _SECTION.match(line)
        if m and not m.group(1).startswith(".text."):  # nvdisasm data sections hold no instructions
            current = None
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            current.opcodes[m.group(1)] = current.opcodes.get(m.group(1), 0) + 1
    return [k for k in kernels if k.opcodes]


def histogram(kernels: Iterable[KernelSass]) -> dict[str, int]:
    """Base opcode -> count over all kernels (what the claims are judged on)."""
    total: Counter = Counter()
    for k in kernels:
        total.update(k.bases())
    return dict(total)


def families_present(bases: Mapping[str, int]) -> dict[str, int]:
    """Family -> number of its instructions in a base-opcode histogram (families with none left out)."""
    out = {f.name: sum(bases.get(op, 0) for op in f.opcodes) for f in FAMILIES.values()}
    return {name: n for name, n in out.items() if n}


def summary_text(kernels: Sequence[KernelSass], header: str = "", limit: int = SUMMARY_LIMIT, top: int = 8) -> str:
    """The archived ``sass`` artifact: families and top opcodes per kernel, bounded to ``limit`` characters."""
    lines = [header] if header else []
    fams = families_present(histogram(kernels))
    lines.append(f"{len(kernels)} kernel(s); families: "
                 + (", ".join(f"{n} {c}" for n, c in fams.items()) or "none of " + ", ".join(FAMILIES)))
    for i, k in enumerate(kernels):
        kf = families_present(k.bases())
        ops = sorted(k.opcodes.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        block = [f"{k.name} [{k.arch}] {sum(k.opcodes.values())} instructions"
                 + (f"; {', '.join(f'{n} {c}' for n, c in kf.items())}" if kf else ""),
                 "  top: " + ", ".join(f"{op} {n}" for op, n in ops)]
        family_ops = sorted(op for op in k.opcodes if any(base_opcode(op) in FAMILIES[f].opcodes for f in kf))
        if family_ops:
            block.append("  family opcodes: " + ", ".join(family_ops[:12]))
        text = "\n".join(lines + block)
        if len(text) > limit - 60:
            lines.append(f"... {len(kernels) - i} more kernel(s) not listed")
            break
        lines += block
    return "\n".join(lines)[:limit]


# -- claims and the verdict ------------------------------------------------------------------------------


def unknown_claims(claims: Iterable[str]) -> list[str]:
    return [c for c in claims if c not in FAMILIES]


def counter_metrics(claims: Iterable[str], arch: Optional[str]) -> list[str]:
    """The ncu metrics that prove the claims on ``arch``, plus the HMMA counter for the record (never as proof)."""
    key = arch_key(arch)
    names = [FAMILIES[c].counters[key] for c in claims if c in FAMILIES and key in FAMILIES[c].counters]
    names += [m for m in sorted(HMMA_COUNTERS) if m == FAMILIES["hmma"].counters.get(key)]
    return list(dict.fromkeys(names))


def instruction_proof(claims: Sequence[str], bases: Optional[Mapping[str, int]],
                      counters: Optional[Mapping[str, Optional[float]]], arch: Optional[str], *,
                      sass_note: str = "", counter_note: str = "") -> Audit:
    """One ``Audit`` (harness.audits.model) named ``instruction_proof``.

    ``bases``: base-opcode histogram of the built code, None when there is no SASS (``sass_note`` says why:
    no disassembler, nothing compiled on this host); that is never held against the candidate.
    ``counters``: ncu metric -> value summed over the candidate's kernels, None when not collected
    (``counter_note`` says why). A claimed family fails when its opcodes are absent from the SASS, or when
    its counter on ``arch`` was collected and is zero.
    """
    key = arch_key(arch)
    unknown = unknown_claims(claims)
    if unknown:
        return _audit(False, f"unknown instruction families {unknown}; known: {', '.join(FAMILIES)}")
    if bases is None:
        what = f"claims {list(claims)} not checked" if claims else "no claims"
        return _audit(True, f"no SASS ({sass_note or 'nothing to disassemble'}): {what}")
    present = families_present(bases)
    if not claims:
        return _audit(True, "no claims; SASS holds " + (", ".join(f"{f} {n}" for f, n in present.items()) or
                                                         "no tensor-core, TMA, cp.async or ldmatrix instructions"))
    problems, proven = [], []
    for claim in claims:
        family = FAMILIES[claim]
        if not present.get(claim):
            mma = {f: n for f, n in present.items() if f in ("wgmma", "qgmma", "tcgen05", "utcqmma", "hmma")}
            problems.append(f"{claim} claimed, but the SASS holds none of {'/'.join(family.opcodes)}"
                            + (f" (it holds {', '.join(f'{f} {n}' for f, n in mma.items())})" if mma else ""))
            continue
        metric = family.counters.get(key)
        if counters is None or metric is None:
            proven.append(f"{claim}: {present[claim]} in SASS")
            continue
        value = counters.get(metric)
        if value is None:
            proven.append(f"{claim}: {present[claim]} in SASS; {metric} not returned by the profiler")
        elif value <= 0:
            hmma = next((counters.get(m) for m in HMMA_COUNTERS if m != metric and counters.get(m)), None)
            problems.append(f"{claim}: {present[claim]} in SASS but {metric} = 0: never executed"
                            + (f" (mma.sync ran {hmma:.4g} instructions; the HMMA counter is no proof of {claim})"
                               if hmma else ""))
        else:
            proven.append(f"{claim}: {present[claim]} in SASS, {metric} = {value:.4g}")
    counted = counters is not None and any(FAMILIES[c].counters.get(key) for c in claims)
    tail = "" if counted else f"; counters not checked ({counter_note or 'not collected'})"
    if problems:
        return _audit(False, "; ".join(problems + proven) + tail)
    return _audit(True, "; ".join(proven) + tail)


def _audit(passed: bool, detail: str) -> Audit:
    return Audit(name="instruction_proof", passed=bool(passed), detail=detail)


def own_kernel_counters(kernels: Iterable[tuple[str, Mapping[str, Optional[float]]]], own_names: Iterable[str],
                        metrics: Iterable[str]) -> tuple[dict[str, Optional[float]], list[str]]:
    """Sum ``metrics`` over the profiled kernels that are the candidate's own (their names in its SASS).

    A library kernel (cuBLAS running wgmma) in the same call must not prove the candidate's claim.
    Returns (metric -> sum or None where no own kernel reported it, names of the own kernels matched).
    """
    own = [n for n in own_names if n]
    matched, sums = [], {m: None for m in metrics}
    for name, values in kernels:
        if not any(_same_kernel(o, name) for o in own):
            continue
        matched.append(name)
        for m in sums:
            v = values.get(m)
            if v is not None:
                sums[m] = (sums[m] or 0.0) + v
    return sums, matched


def _same_kernel(sass_name: str, profiled_name: str) -> bool:
    """SASS names are mangled (``_Z12wgmma_kernelPf``), ncu prints them demangled (``wgmma_kernel(float*)``)."""
    if sass_name == profiled_name:
        return True
    ident = re.match(r"(?:void\s+)?(?:[\w:]*::)?(\w+)", profiled_name.strip())
    if not ident:
        return False
    name = ident.group(1)  # Itanium mangling writes an identifier as <length><name>
    return sass_name == name or f"{len(name)}{name}" in sass_name


def policy_claims(data: Optional[Mapping[str, Any]], definition: Optional[str], op_type: Optional[str]) -> list[str]:
    """Claims a definition's policy requires: ``instruction_claims`` in the layers default -> op_type -> definition
    of the audit policy document; a later layer replaces the list (a definition can drop an op_type's claim)."""
    data = data or {}
    claims: list[str] = list((data.get("default") or {}).get("instruction_claims") or [])
    for section, key in (("op_type", op_type), ("definition", definition)):
        layer = (data.get(section) or {}).get(key) if key else None
        if layer and "instruction_claims" in layer:
            claims = list(layer["instruction_claims"] or [])
    return claims


def merged_claims(solution_claims: Optional[Sequence[str]], required: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*required, *(solution_claims or [])]))


# -- the I/O edge ----------------------------------------------------------------------------------------


def _triton_bin() -> Optional[Path]:
    """Triton ships cuobjdump and nvdisasm beside its ptxas; found without importing triton."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "backends" / "nvidia" / "bin"


def find_disassembler(env_path: Optional[str] = None) -> Optional[tuple[str, str]]:
    """(tool, path): cuobjdump (reads cubins and the fatbins inside a .so) before nvdisasm (bare cubins),
    each looked up on PATH, then $CUDA_HOME/bin and /usr/local/cuda/bin, then Triton's bundled copy."""
    folders = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin", Path("/usr/local/cuda/bin")]
    tb = _triton_bin()
    if tb is not None:
        folders.append(tb)
    for tool in ("cuobjdump", "nvdisasm"):
        found = shutil.which(tool, path=env_path)
        if found:
            return tool, found
        for folder in folders:
            candidate = folder / tool
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return tool, str(candidate)
    return None


def disassemble(paths: Sequence[Path], tool: tuple[str, str],
                timeout_s: float = 120) -> tuple[list[KernelSass], list[str]]:
    """Disassemble each file; (kernels, notes). A file without device code is a note, not an error."""
    name, exe = tool
    kernels: list[KernelSass] = []
    notes: list[str] = []
    for path in paths:
        if name == "nvdisasm" and path.suffix != ".cubin":
            notes.append(f"{path.name}: nvdisasm reads bare cubins only (cuobjdump not found)")
            continue
        cmd = [exe, "-sass", str(path)] if name == "cuobjdump" else [exe, str(path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as err:
            notes.append(f"{path.name}: {name} failed: {err}")
            continue
        found = parse_sass(proc.stdout)
        if not found:
            why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            notes.append(f"{path.name}: no SASS ({why[:160]})")
        kernels += found
    return kernels, notes
