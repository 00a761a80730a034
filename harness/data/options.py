"""The settings of a submission session (``SubmitOptions``): which workloads, limits, timing, audits, sandbox.

Read by ``harness.pipeline.evaluate.Session`` and passed on by the CLI, ``harness.pipeline.parallel`` and the
controller;
``harness.pipeline.evaluate`` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..sandbox.isolation import SandboxPolicy


@dataclass
class SubmitOptions:
    workloads: Optional[list[str]] = None
    timeout_s: Optional[float] = None  # per workload, build included; default from the preset (300 s)
    all_workloads_on_cpu: bool = False
    cpu_max_input_mib: float = 12.0  # larger workloads are too slow for the Triton interpreter
    # so are longer recurrences (GDN prefill's tokens: OperatorFamily.serial_steps): the family's own recurrent
    # example took 98 s on 134 tokens and 257 s on 294 (its calls and the checks) of a workload's 300 s
    cpu_max_serial_steps: int = 200
    timing: bool = True
    baselines: bool = True  # measure FlashInfer baselines (cached per GPU, toolchain and workload)
    # Time the Python reference too (the speedup a FlashInfer-Bench trace stores): minutes on large workloads,
    # and not the contest's score (FlashInfer's is), so only when asked (--time-reference) or cached.
    reference_timing: bool = False
    audit_level: str = "fast"  # "fast" (the loop's default) or "full" (promotion): see harness.audits.verdicts
    isolate_network: bool = True
    device_index: Optional[int] = None
    sandbox: bool = True  # False (--no-sandbox): no namespaces; every result then says "sandbox: reduced"
    require_sandbox: bool = False  # a host that cannot give the full sandbox is an error (SandboxUnavailable)
    sandbox_policy: Optional[SandboxPolicy] = None  # default: the dataset's sandbox.yaml
    # Keep one candidate process launched ahead (it imports torch and Triton while the current candidate
    # runs): for sessions that evaluate many solutions (the controller, a folder of solutions). A one-off
    # submission would only pay for a process it never uses.
    spare_worker: bool = False
    # Seeds drawn afresh for this session (--fresh-seeds) instead of from the archive's secret: nothing the
    # reference computed in earlier sessions is reused (harness.pipeline.reference_cache).
    fresh_seeds: bool = False
    # Build every torch extension afresh (--fresh-builds) instead of giving a solution's worker the extension folder
    # its earlier worker built (harness.sandbox.extension_cache): a judge's final run, where no file the solution
    # wrote in an earlier evaluation may reach this one.
    fresh_builds: bool = False
