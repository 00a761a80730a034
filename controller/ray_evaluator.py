"""`controller loop --executor ray`: each run evaluates on a Ray lane of its own (one GPU anywhere in the
cluster), and runs go side by side, one per lane. The lane is harness/pipeline/ray_executor.py's ``LaneClient``, which
answers like a Session (``submit``, ``has_gpu``, ``options``), so ``HarnessEvaluator``'s logic (drafts, full
evaluations, paired measurements on one GPU) is used unchanged; only the driver writes the archive.

Not moved to the lanes: ncu profiling of incumbents runs where the driver runs (with no GPU there, requests
carry latency evidence and say why, as on any host without a profiler).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import SubmitOptions

from .evaluator import HarnessEvaluator
from .loop import LoopConfig, run_loop
from .store import Store


class RayEvaluator(HarnessEvaluator):
    # A lane's submit takes an audit level only, not the shorter run of a screening: on Ray every candidate is
    # evaluated in full (successive halving is off; controller/screening.py reads this).
    screen = None  # type: ignore[assignment]

    def __init__(self, dataset: Dataset, archive: Archive, options: SubmitOptions, settings: Any):
        super().__init__(dataset, archive, options)
        self.settings = settings

    @property
    def session(self) -> Any:
        if self._session is None:
            from harness.pipeline.ray_executor import LaneClient

            self._session = LaneClient(self.dataset, self.archive, self.options, self.settings,
                                       progress=self._progress)
        return self._session


def ray_runner(address: Optional[str]) -> Callable[..., dict[str, Any]]:
    """run_loops' runner for a new run (a LoopConfig) or a resumed one (a run id), its evaluations on Ray."""
    from harness.pipeline.ray_executor import RaySettings

    settings = RaySettings(address=address)

    def runner(job: Any, archive_path: Path | str, on_event: Any = None, device_index: Optional[int] = None) -> dict:
        archive = Archive(archive_path)
        if isinstance(job, LoopConfig):
            config, resume = job, None
        else:
            row = Store(archive).run(job)
            if row is None:
                raise ValueError(f"no run {job!r} in {archive.folder}")
            config, resume = LoopConfig.model_validate(row["config"]), job
        options = SubmitOptions(workloads=config.workloads, timeout_s=config.timeout_s, spare_worker=True)
        evaluator = RayEvaluator(Dataset(config.dataset), archive, options, settings)
        try:
            return run_loop(None if resume else config, archive_path, resume=resume, on_event=on_event,
                            evaluator=evaluator)
        finally:
            evaluator.close()

    return runner


def ray_lanes(address: Optional[str], jobs: int) -> int:
    """Lanes to spread ``jobs`` runs over (0 for a single run, which needs no count)."""
    if jobs < 2:
        return 0
    from harness.pipeline.ray_executor import RaySettings, lane_count

    return lane_count(RaySettings(address=address))
