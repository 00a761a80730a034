"""The trusted side of a session: one reference worker, which runs the definition's reference and never candidate
code, and what it computes for the judges.

- the reference's outputs per (workload, seed), and its float64 oracle (the precision audit's yardstick), kept for
  the session and, with the archive's seeds, in the archive for later sessions (harness.pipeline.reference_cache);
- checks that need the call's inputs (a family's ``compare_needs_inputs``), run where the inputs can be drawn
  again;
- the reference's official latency (only when asked, or to spot-check figures carried from another card);
- the GPU's ceilings for the roofline, and the keys that say which card and toolchain produced a figure.

The harness process itself never initialises CUDA: what it knows of the GPU, it asks this worker.
"""

from __future__ import annotations

import dataclasses
import platform
from typing import Any, Callable, ContextManager, Optional

import torch

from . import early_workers, reference_cache

from ..measure import scores
from ..archive.database import Archive
from ..measure.correctness import CheckResult, Tolerance
from ..data.dataset import Dataset, EvalPreset
from ..families import family_for
from ..sandbox.messages import CeilingsRequest, JudgeRequest, OracleRequest, ReferenceRequest, TimeRequest
from ..sandbox.runner import WorkerCrashed, WorkerOptions, WorkerProcess, WorkerTimeout
from ..data.schema import Definition, EvaluationStatus, Workload
from ..measure.timing_records import aggregate_timing

Outputs = tuple[dict[str, Any], dict[str, torch.Tensor]]


class SandboxUnavailable(RuntimeError):
    """--require-sandbox on a host that cannot give the full sandbox."""


class ReferenceFailed(RuntimeError):
    """The definition's reference (or its float64 oracle) could not run on a workload: a dataset whose workload this
    host cannot hold (red team round 12: axes of 10^8 asked 819 GB), a reference that raises. The submission is the
    harness's failure (HARNESS_ERROR); the command says so on one line. ``details``: the worker's traceback."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


@dataclasses.dataclass(frozen=True)
class TrustedSettings:
    """What the session's options say about its trusted side."""

    require_sandbox: bool = False  # refuse a host without the full sandbox
    sandbox: bool = True  # namespaces for workers at all
    reference_timing: bool = False  # time the reference when no figure is cached
    reuse_outputs: bool = False  # seeds from the archive's secret: outputs may be read back and kept


def reference_timing_settings(preset: EvalPreset) -> tuple[int, int, int]:
    """(warm-up calls, timed calls, draws) for timing the reference: the solutions' settings, capped by the
    preset's reference_* fields (a yardstick needs fewer calls of a slow reference than a candidate's figure)."""
    return (min(preset.warmup, preset.reference_warmup), min(preset.iterations, preset.reference_iterations),
            min(preset.num_trials, preset.reference_trials))


class TrustedReference:
    """The reference worker and its results (see the module docstring).

    ``worker_options(role, cpu_only)``: the session's options for a worker of that role; ``phase(name)``: the
    session's time accounting; ``launch_beside()``: what to start while the reference imports (the first
    candidate's process); ``carried_trust``: the session's record of spot checks, shared with its baselines.
    """

    def __init__(self, dataset: Dataset, archive: Archive, settings: TrustedSettings,
                 worker_options: Callable[[str, Optional[bool]], WorkerOptions],
                 phase: Callable[[str], ContextManager[Any]], launch_beside: Callable[[], None],
                 carried_trust: dict[tuple[str, str], Optional[bool]]):
        self.dataset, self.archive, self.settings = dataset, archive, settings
        self._worker_options, self._phase, self._launch_beside = worker_options, phase, launch_beside
        self._carried_trust = carried_trust
        self.process: Optional[WorkerProcess] = None
        self.environment: dict[str, Any] = {}
        # (definition, workload, seed) -> (reply header, output tensors)
        self._outputs: dict[tuple[str, str, int], Outputs] = {}
        self._oracle: dict[tuple[str, str, int], Outputs] = {}
        self._latency: dict[str, Optional[float]] = {}
        self._ceilings: Any = None

    # -- the process --------------------------------------------------------------------------------

    def worker(self) -> WorkerProcess:
        if self.process is None or not self.process.alive:
            # The reference is trusted code and needs no Triton interpreter: the same options on any host.
            options = self._worker_options("reference", False)
            if self.settings.require_sandbox and not self._sandbox_full():
                raise SandboxUnavailable(f"--require-sandbox: {self._why_not_full()}")
            # one launched before the harness imported torch (harness submit), else a new one
            self.process = early_workers.take(options)
            if self.process is None:
                self.process = WorkerProcess(options)
                self.process.launch()
            self._launch_beside()
            with self._phase("worker_start"):
                env = self.process.wait_ready()
            self.environment = {
                "host": platform.node(), "platform": platform.platform(), "harness": "crucible 0.1.0",
                "hardware": env.get("device_name") or f"cpu ({platform.processor() or platform.machine()})",
                "network_isolation": self.process.isolation_note, "sandbox": self.process.sandbox_level,
                **env,
            }
        return self.process

    def _sandbox_full(self) -> bool:
        from ..sandbox.isolation import probe

        return self.settings.sandbox and bool(probe()[0])

    def _why_not_full(self) -> str:
        from ..sandbox.isolation import probe

        if not self.settings.sandbox:
            return "the sandbox is switched off (--no-sandbox)"
        return f"this host cannot give the full sandbox: {probe()[1]}"

    @property
    def has_gpu(self) -> bool:
        self.worker()
        return bool(self.environment.get("cuda_available"))

    @property
    def sandbox_level(self) -> str:
        """The wall candidates run behind in this session: "full" or "reduced (why)"."""
        self.worker()
        return str(self.environment.get("sandbox", ""))

    @property
    def gpu_key(self) -> str:
        return f"{self.environment.get('device_name', 'cpu')}|{self.environment.get('uuid', '')}"

    @property
    def gpu_model(self) -> str:
        """Cards of one model, driver and toolchain give the same figures (after a spot check)."""
        return str(self.environment.get("device_name", "cpu"))

    @property
    def toolchain_key(self) -> str:
        env = self.environment
        return " ".join(f"{k} {env.get(k)}" for k in ("torch", "triton", "cuda", "flashinfer", "driver"))

    # -- outputs ------------------------------------------------------------------------------------

    def _computed(self, op: str, phase: str, cache: dict, definition: Definition, workload: Workload,
                  seed: int, keep: bool = True) -> Outputs:
        """``op`` ("reference", or "oracle" in float64) once per seed: from the session, the archive, or the worker.
        ``keep`` False: a seed drawn for this session only (the recheck's), never looked up or stored."""
        key = (definition.name, workload.uuid, seed)
        if key in cache:
            return cache[key]
        worker = self.worker()
        stored_key = reference_cache.cache_key(op, self.gpu_key, self.toolchain_key, definition.content_hash,
                                               workload.uuid, seed)
        reuse = self.settings.reuse_outputs and keep
        stored = self.archive.cached_trusted_outputs(stored_key) if reuse else None
        if stored is not None:
            cache[key] = reference_cache.decode_entry(*stored)
            return cache[key]
        kind = ReferenceRequest if op == "reference" else OracleRequest
        try:
            with self._phase(phase):
                reply, tensors = worker.request(kind(definition=definition, workload=workload, seed=seed,
                                                     dataset_root=str(self.dataset.root)), timeout_s=3600)
        except (WorkerCrashed, WorkerTimeout) as err:  # red team round 12: its death was the candidate's error
            raise ReferenceFailed(f"the {op} could not run on workload {workload.uuid}: {' '.join(str(err).split())}",
                                  getattr(err, "log", "")) from None
        if not reply.ok:  # the trusted side could not run: nothing of any candidate can be judged on this workload
            raise ReferenceFailed(f"the {op} failed on workload {workload.uuid}: {' '.join(str(reply.error).split())}",
                                  reply.traceback or "")
        header = reply.wire()  # as the archive keeps it (harness.pipeline.reference_cache)
        cache[key] = (header, tensors)
        entry = reference_cache.encode_entry(header, tensors) if reuse else None
        if entry is not None:
            self.archive.cache_trusted_outputs(stored_key, *entry)
        return cache[key]

    def outputs(self, definition: Definition, workload: Workload, seed: int,
                keep: bool = True) -> tuple[str, dict[str, torch.Tensor]]:
        """(input fingerprint, outputs) of the reference on this seed's inputs (``keep``: see ``_computed``)."""
        header, tensors = self._computed("reference", "reference", self._outputs, definition, workload, seed, keep)
        return header["input_fingerprint"], tensors

    def oracle(self, definition: Definition, workload: Workload, seed: int) -> dict[str, torch.Tensor]:
        return self._computed("oracle", "audits", self._oracle, definition, workload, seed)[1]

    def judge(self, definition: Definition, workload: Workload, seed: int, got: dict[str, torch.Tensor],
              expected: dict[str, torch.Tensor], tol: Tolerance) -> CheckResult:
        """The family's official check of one call. Most need only the two outputs; a family whose check needs
        the call's inputs (``compare_needs_inputs``) is judged in this worker, which draws them again."""
        family = family_for(definition.op_type)
        if not family.compare_needs_inputs:
            return family.compare(definition, got, expected, tol)
        reply, _ = self.worker().request(
            JudgeRequest(definition=definition, workload=workload, seed=seed, dataset_root=str(self.dataset.root),
                         tolerance=tol), timeout_s=3600,
            tensors={**{f"got/{n}": t for n, t in got.items()}, **{f"want/{n}": t for n, t in expected.items()}})
        if not reply.ok:  # what the outputs made the check raise (an index past every row...)
            return CheckResult(EvaluationStatus.RUNTIME_ERROR,
                               message=f"the official check could not judge the outputs: {reply.error}")
        return CheckResult.from_json(reply.check.model_dump(mode="json"))

    # -- figures ------------------------------------------------------------------------------------

    def latency(self, definition: Definition, workload: Workload, seeds: list[int],
                preset: EvalPreset, measure: bool = False) -> Optional[float]:
        """The reference's official latency on this workload: from the archive (this card's, or another card's
        of the same model and toolchain once a spot check agrees), measured only with ``reference_timing`` or
        ``measure`` (the caller needs the figure: no other yardstick)."""
        warmup, iterations, trials = reference_timing_settings(preset)
        seeds = seeds[:trials]
        tail = (f"{self.toolchain_key}|{definition.content_hash[:16]}|{workload.uuid}|"
                f"{warmup}/{iterations}/{len(seeds)}")
        key, model_key = f"{self.gpu_key}|{tail}", f"model:{self.gpu_model}|{tail}"
        if key not in self._latency:
            cached = self.archive.cached_reference_latency(key)
            if cached is None:
                carried = self.archive.cached_reference_latency(model_key)
                trusted = self._carried_trust.get(("reference", definition.name))
                if carried is not None and trusted:
                    cached = carried
                elif self.settings.reference_timing or measure or (carried is not None and trusted is None):
                    cached = self._time(definition, workload, seeds, warmup, iterations)
                    if cached is not None:
                        if carried is not None:  # this measurement is the spot check of carried figures
                            holds = scores.spot_check_holds(carried, cached)
                            self._carried_trust[("reference", definition.name)] = holds
                        self.archive.cache_reference_latency(key, cached)
                        self.archive.cache_reference_latency(model_key, cached)
            self._latency[key] = cached
        return self._latency[key]

    def _time(self, definition: Definition, workload: Workload, seeds: list[int], warmup: int,
              iterations: int) -> Optional[float]:
        worker = self.worker()
        with self._phase("reference_timing"):
            reply, _ = worker.request(
                TimeRequest(definition=definition, workload=workload, seeds=seeds, warmup=warmup,
                            iterations=iterations, dataset_root=str(self.dataset.root)), timeout_s=3600)
        return aggregate_timing(reply.as_dicts(reply.trials))[0] if reply.ok else None

    def ceilings(self):
        """The roofline's ceilings for this GPU: measured once, then read from the archive folder."""
        from ..measure.roofline import CeilingsCache

        if self._ceilings is None:
            cache = CeilingsCache(self.archive.folder / "ceilings.json")
            name, uuid = self.environment.get("device_name", ""), self.environment.get("uuid", "")
            found = cache.get(name, uuid)
            if found is None:
                worker = self.worker()
                counted = worker.peak_bytes
                reply, _ = worker.request(CeilingsRequest(), timeout_s=600)
                worker.peak_bytes = counted  # the GPU's measure, once per card: no workload's memory
                if not reply.ok:
                    raise RuntimeError(f"measuring the GPU's ceilings failed: {reply.error}")
                found = reply.ceilings
                cache.put(found, uuid)
            self._ceilings = found
        return self._ceilings
