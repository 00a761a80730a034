"""Evaluate on every GPU of a Ray cluster (`harness submit --executor ray`): one lane per GPU, one archive.

A lane is a Ray actor that owns one GPU (``num_gpus=1``; on a cluster without GPUs, one CPU each, as many as
asked) and keeps one warm ``Session`` for its lifetime, so imports, the reference's process and outputs,
baselines and ceilings are paid once per lane rather than once per submission. The driver hands each free lane
the next solution.

One archive, one writer: a lane evaluates into a private archive in a temporary folder on its own node and
returns the finished submission as a ``Bundle`` (harness/archive/transfer.py); only the driver writes the real
archive, one transaction per submission. So lanes never lock a SQLite file over a network file system, and a
driver killed at any moment leaves every submission in its archive whole or absent: ``--resume`` skips the
finished ones (harness/archive_transfer.finished_keys) and nothing is duplicated.

Faults: a lane whose actor or node dies mid-evaluation is replaced (a new actor, wherever the cluster has room)
and its solution goes back to the head of the queue, to run on the next free lane; a solution that loses a
lane a second time is archived as HARNESS_ERROR with the reason.

Input seeds: lanes draw them from the driver archive's seed secret (an HMAC of its seal key, sent to the lanes;
the key itself never leaves the driver), so a submission's inputs do not depend on which lane ran it.

Only this module imports ray; harness/cli.py imports it only for ``--executor ray``.
"""

from __future__ import annotations

import collections
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, WorkerCrashedError

from ..archive.database import Archive
from ..archive.queries import last_submission_id
from ..archive.storage import ArchiveStorageError, storage_failure, storage_where
from ..archive.transfer import Bundle, export_submission, import_submission, record_failure
from ..data.dataset import Dataset
from ..data.options import SubmitOptions
from ..data.results import SubmissionResult
from ..data.schema import Solution, dump_json
from ..data.statuses import SubmissionStatus
from ..sandbox.stale import process_alive
from .submission_summary import cut_short, storage_outcome

LANE_ROOT = Path(tempfile.gettempdir()) / "crucible-lanes"
Event = Callable[[str, dict[str, Any]], None]
# What a lost lane looks like to the driver: its actor died (process killed, node removed) or its worker crashed.
LANE_LOST = (RayActorError, WorkerCrashedError)


@dataclass
class RaySettings:
    address: Optional[str] = None  # a running cluster ("auto", "HOST:PORT"); None: start one on this host
    cpu_lanes: Optional[int] = None  # a cluster without GPUs: this many CPU lanes (default: one per CPU)
    max_lanes: Optional[int] = None  # at most this many lanes (default: every GPU, or the CPU lanes)
    retries: int = 1  # times a solution is run again after its lane died under it
    lane_start_timeout_s: float = 900.0  # no lane alive for this long, work still queued: the rest fail


class _LaneArchive(Archive):
    """A lane's private archive, whose input seeds come from the driver's archive (see the module's note)."""

    def __init__(self, folder: Path, seed_secret: Optional[bytes]):
        super().__init__(folder)
        self._driver_seed_secret = seed_secret

    def seed_secret(self) -> Optional[bytes]:
        return self._driver_seed_secret


def _remove_stale_lane_folders() -> None:
    """Lane folders of lanes killed outright (their node's process is gone): a killed actor cannot clean up."""
    if not LANE_ROOT.is_dir():
        return
    for folder in LANE_ROOT.iterdir():
        pid = folder.name.split("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


class Lane:
    """The actor's body (made a Ray actor with its resources by ``_lane_class``)."""

    def __init__(self, dataset_root: str, options: SubmitOptions, seed_secret: Optional[bytes], gpu: bool):
        from .evaluate import Session

        LANE_ROOT.mkdir(parents=True, exist_ok=True)
        _remove_stale_lane_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=LANE_ROOT))
        self.archive = _LaneArchive(self.folder, seed_secret)
        if gpu:  # Ray's CUDA_VISIBLE_DEVICES names this lane's GPU: the first visible one, for every worker
            options = SubmitOptions(**{**options.__dict__, "device_index": 0})
        self.session = Session(Dataset(dataset_root), self.archive, options)
        self.baseline_runs_sent = 0

    def describe(self) -> dict[str, Any]:
        """Warm the lane (the reference's process: imports, the card's state) and say where it is."""
        self.session.reference_worker()
        env = self.session.environment
        ctx = ray.get_runtime_context()
        return {"actor_id": ctx.get_actor_id(), "node_id": ctx.get_node_id(), "host": socket.gethostname(),
                "pid": os.getpid(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "hardware": env.get("hardware"), "driver": env.get("driver"), "cuda": env.get("cuda"),
                "has_gpu": self.session.has_gpu}

    def evaluate(self, solution: Solution, audit_level: Optional[str] = None,
                 workloads: Optional[list[str]] = None, budget_s: Optional[float] = None) -> dict[str, Any]:
        """One submission in the private archive, returned whole: {"bundle", "result", "error"}. ``audit_level``
        and ``workloads`` override the lane's for this submission (the controller's full and paired runs, drafts);
        ``budget_s``: its wall time from now (Session.submit; a draft's request's), on this node's clock."""
        before = self._last_submission()
        result, error = None, None
        saved = self.session.options.workloads
        if workloads is not None:
            self.session.options.workloads = list(workloads)
        try:
            result = self.session.submit(solution, audit_level=audit_level, budget_s=budget_s)
            submission_id: Optional[int] = result.submission_id
        except Exception as err:  # the session archived it as HARNESS_ERROR (Session._close_cut_short)
            error = f"{type(err).__name__}: {err}"
            last = self._last_submission()
            submission_id = last if last > before else None
        finally:
            self.session.options.workloads = saved
        bundle = export_submission(self.archive, submission_id, self.baseline_runs_sent) if submission_id else None
        if bundle is not None:
            self.baseline_runs_sent = max([b["id"] for b in bundle.baseline_runs], default=self.baseline_runs_sent)
        return {"bundle": bundle, "result": result, "error": error}

    def close(self) -> None:
        self.session.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _last_submission(self) -> int:
        return last_submission_id(self.archive.db)


def _lane_class(gpu: bool) -> Any:
    # max_restarts=0: a dead lane is replaced by the driver (it knows which solution the lane held), not by Ray.
    return ray.remote(num_gpus=1 if gpu else 0, num_cpus=1, max_restarts=0)(Lane)


@dataclass
class _LaneState:
    name: str
    handle: Any
    info: dict[str, Any] = field(default_factory=dict)
    item: Optional[tuple[int, Solution]] = None


def lane_record(lane: _LaneState, attempt: int) -> dict[str, Any]:
    """What a submission's options keep of the lane that ran it (`harness show` prints it)."""
    keep = ("actor_id", "node_id", "host", "gpu_ids")
    return {"executor": "ray", "lane": lane.name, "attempt": attempt, **{k: lane.info.get(k) for k in keep}}


def submit_on_ray(solutions: list[Solution], dataset: Dataset, archive: Archive, options: SubmitOptions,
                  settings: Optional[RaySettings] = None, on_event: Optional[Event] = None,
                  on_result: Optional[Callable[[SubmissionResult], None]] = None) -> list[SubmissionResult]:
    """Evaluate ``solutions`` on the cluster's lanes; every result is archived in ``archive`` by this process.
    Results come back in the order they finish (``on_result`` is called as each one is archived)."""
    settings = settings or RaySettings()
    emit = on_event or (lambda kind, data: None)
    if not ray.is_initialized():
        # log_to_driver off: the lanes' own output would interleave with the progress display
        ray.init(address=settings.address, log_to_driver=False, include_dashboard=False,
                 **({} if settings.address else {"num_cpus": settings.cpu_lanes}))
    resources = ray.cluster_resources()
    gpu = int(resources.get("GPU", 0)) > 0
    count = int(resources["GPU"]) if gpu else (settings.cpu_lanes or max(1, int(resources.get("CPU", 1))))
    count = max(1, min(count, settings.max_lanes or count, len(solutions)))
    lane_class = _lane_class(gpu)
    secret = None if options.fresh_seeds else archive.seed_secret()
    lane_options = SubmitOptions(**{**options.__dict__, "device_index": None})
    names = iter(f"lane{i}" for i in range(1 << 30))

    starting: dict[Any, _LaneState] = {}  # describe() ref -> lane not yet warm
    idle: list[_LaneState] = []
    running: dict[Any, _LaneState] = {}  # evaluate() ref -> busy lane
    every: list[_LaneState] = []

    def start_lane() -> None:
        lane = _LaneState(next(names), lane_class.remote(str(dataset.root), lane_options, secret, gpu))
        every.append(lane)
        starting[lane.handle.describe.remote()] = lane

    queue = collections.deque(enumerate(solutions))
    lost: collections.Counter[int] = collections.Counter()
    results: list[SubmissionResult] = []
    emit("lanes", {"lanes": count, "gpu": gpu, "queued": len(queue)})
    for _ in range(count):
        start_lane()
    no_lane_since: Optional[float] = None
    start_failure = ""  # why the last lane that failed to start did (said when no lane is left)

    def finish(result: SubmissionResult, lane: Optional[str] = None) -> None:
        results.append(result)
        emit("finished", {"lane": lane, "solution": result.solution, "status": result.status,
                          "submission_id": result.submission_id, "queued": len(queue), "done": len(results)})
        if on_result is not None:
            on_result(result)

    def fail(index: int, solution: Solution, reason: str, lane: Optional[str] = None) -> None:
        options_kept = {"executor": "ray", "audit_level": options.audit_level}
        finish(_into_archive(archive, solution, options_kept, lambda: SubmissionResult(
            record_failure(archive, dump_json(solution), solution.content_hash, reason, options_kept), solution.name,
            solution.definition, SubmissionStatus.HARNESS_ERROR, [], notices=[reason])), lane)

    try:
        while queue or running:
            while idle and queue:
                lane, (i, solution) = idle.pop(0), queue.popleft()
                lane.item = (i, solution)
                running[lane.handle.evaluate.remote(solution)] = lane
                emit("assigned", {"lane": lane.name, "solution": solution.name, "host": lane.info.get("host"),
                                  "node_id": lane.info.get("node_id"), "attempt": lost[i] + 1, "queued": len(queue)})
            if not running and not idle and queue:  # nothing alive to run the rest
                no_lane_since = no_lane_since or time.monotonic()
                if not starting or time.monotonic() - no_lane_since > settings.lane_start_timeout_s:
                    for i, solution in list(queue):
                        fail(i, solution, "no Ray lane could start to evaluate it"
                             + (f" (last: {start_failure})" if start_failure else ""))
                    queue.clear()
                    break
            else:
                no_lane_since = None
            ready, _ = ray.wait([*running, *starting], num_returns=1, timeout=1.0)
            for ref in ready:
                if ref in starting:
                    lane = starting.pop(ref)
                    try:
                        lane.info = ray.get(ref)
                    except RayError as err:  # it died warming up: nothing of it was queued on it
                        start_failure = _reason(err)
                        emit("lane_lost", {"lane": lane.name, "reason": start_failure, "requeued": None})
                        continue
                    idle.append(lane)
                    emit("lane_ready", {"lane": lane.name, **lane.info})
                    continue
                lane = running.pop(ref)
                i, solution = lane.item or (0, solutions[0])
                lane.item = None
                try:
                    payload = ray.get(ref)
                except LANE_LOST as err:
                    lost[i] += 1
                    requeue = lost[i] <= settings.retries
                    emit("lane_lost", {"lane": lane.name, "reason": _reason(err), "host": lane.info.get("host"),
                                       "requeued": solution.name if requeue else None})
                    if requeue:
                        queue.appendleft((i, solution))
                    else:
                        fail(i, solution, f"its Ray lane died under it {lost[i]} time(s), the last {lane.name} "
                                          f"on {lane.info.get('host')}: {_reason(err)}")
                    start_lane()  # a replacement, wherever the cluster has room (pending while it has none)
                    continue
                except RayError as err:  # the lane's own code failed: the lane lives on, the submission is lost
                    idle.append(lane)
                    fail(i, solution, f"the Ray lane {lane.name} failed: {_reason(err)}", lane.name)
                    continue
                idle.append(lane)
                record = lane_record(lane, lost[i] + 1)
                finish(_into_archive(archive, solution, {"executor": "ray", "audit_level": options.audit_level},
                                     lambda: _archive_payload(archive, payload, solution, record)), lane.name)
    finally:
        _stop(every, idle)  # a busy lane is killed: its workers end with it (the sandbox's pdeathsig)
    return results


def lane_count(settings: RaySettings) -> int:
    """How many lanes the cluster gives (its GPUs, else its CPUs or ``cpu_lanes``), joining it if needed."""
    if not ray.is_initialized():
        ray.init(address=settings.address, log_to_driver=False, include_dashboard=False)
    resources = ray.cluster_resources()
    count = int(resources.get("GPU", 0)) or settings.cpu_lanes or max(1, int(resources.get("CPU", 1)))
    return min(count, settings.max_lanes or count)


class LaneClient:
    """One lane for a caller that evaluates one solution at a time (a controller run): ``submit`` as a Session's,
    run on the lane, the result imported into the driver's archive. A lane lost mid-evaluation is replaced and the
    submission run again (``retries`` times), then archived as HARNESS_ERROR. ``progress("start", ...)`` is
    called once the submission is in the archive (its id exists only then)."""

    def __init__(self, dataset: Dataset, archive: Archive, options: SubmitOptions,
                 settings: Optional[RaySettings] = None, progress: Optional[Event] = None):
        self.dataset, self.archive, self.options = dataset, archive, options
        self.settings = settings or RaySettings()
        self.progress = progress or (lambda kind, data: None)
        if not ray.is_initialized():
            ray.init(address=self.settings.address, log_to_driver=False, include_dashboard=False)
        self.gpu = int(ray.cluster_resources().get("GPU", 0)) > 0
        self.secret = None if options.fresh_seeds else archive.seed_secret()
        self._lane: Optional[_LaneState] = None
        self._count = 0

    def lane(self) -> _LaneState:
        if self._lane is None:
            lane_options = SubmitOptions(**{**self.options.__dict__, "device_index": None})
            handle = _lane_class(self.gpu).remote(str(self.dataset.root), lane_options, self.secret, self.gpu)
            lane = _LaneState(f"lane{self._count}", handle)
            self._count += 1
            try:
                lane.info = ray.get(handle.describe.remote(), timeout=self.settings.lane_start_timeout_s)
            except BaseException:
                _stop([lane], [])
                raise
            self._lane = lane
        return self._lane

    @property
    def has_gpu(self) -> bool:
        return bool(self.lane().info.get("has_gpu"))

    def submit(self, solution: Solution, *, audit_level: Optional[str] = None,
               budget_s: Optional[float] = None) -> SubmissionResult:
        """``budget_s``: as Session.submit's, from now: a lane's start and a lost lane's attempts spend it too (each
        attempt is sent what is left, in seconds: the lane's clock is not this one's)."""
        reason, kept = "", {"executor": "ray", "audit_level": audit_level or self.options.audit_level}
        deadline = None if budget_s is None else time.monotonic() + budget_s
        for attempt in range(1, self.settings.retries + 2):
            lane = self.lane()
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                payload = ray.get(lane.handle.evaluate.remote(solution, audit_level, self.options.workloads, left))
            except LANE_LOST as err:
                reason = f"{lane.name} on {lane.info.get('host')}: {_reason(err)}"
                _stop([lane], [])
                self._lane = None  # the next attempt starts a replacement
                continue
            record = lane_record(lane, attempt)
            result = _into_archive(self.archive, solution, kept,
                                   lambda: _archive_payload(self.archive, payload, solution, record))
            break
        else:
            message = f"its Ray lane died under it {self.settings.retries + 1} time(s), the last {reason}"
            result = _into_archive(self.archive, solution, kept, lambda: SubmissionResult(
                record_failure(self.archive, dump_json(solution), solution.content_hash, message, kept),
                solution.name, solution.definition, SubmissionStatus.HARNESS_ERROR, [], notices=[message]))
        self.progress("start", {"submission_id": result.submission_id, "solution": solution.name,
                                "definition": solution.definition})
        return result

    def close(self) -> None:
        if self._lane is not None:
            _stop([self._lane], [self._lane])
            self._lane = None


def _into_archive(archive: Archive, solution: Solution, options: dict[str, Any],
                  write: Callable[[], SubmissionResult]) -> SubmissionResult:
    """``write`` (a lane's submission, or a failure, into the driver's archive). A full disk there (a quota, an I/O
    error) ends as on the local executor: an ArchiveStorageError whose one line says what, where and what became of
    the submission, archived as HARNESS_ERROR where the archive can still take that. Nothing is half-written: a
    lane's rows land in one transaction, and a blob is whole or absent (Archive.put_blob)."""
    try:
        return write()
    except Exception as err:
        reason = storage_failure(err)
        if reason is None:
            raise
        before = _last_submission(archive)
        try:
            sub_id: Optional[int] = record_failure(archive, dump_json(solution), solution.content_hash,
                                                   cut_short(err)[1], options)
            closed = True
        except Exception:  # the archive cannot take even that: a RUNNING row left is closed by the next session
            after = _last_submission(archive)
            sub_id, closed = (after if after > before >= 0 else None), False
        raise ArchiveStorageError(storage_outcome(reason, storage_where(err, archive.folder), sub_id, closed)) from err


def _last_submission(archive: Archive) -> int:
    try:
        return last_submission_id(archive.db)
    except Exception:  # a disk that fails reads too
        return -1


def _archive_payload(archive: Archive, payload: dict[str, Any], solution: Solution,
                     lane: dict[str, Any]) -> SubmissionResult:
    """The lane's finished submission written into the driver's archive; the result names the new ids."""
    bundle: Optional[Bundle] = payload.get("bundle")
    result: Optional[SubmissionResult] = payload.get("result")
    if bundle is None:  # it failed before anything was archived: said here, in the real archive
        reason = f"the harness failed on the lane: {payload.get('error')}"
        sub_id = record_failure(archive, dump_json(solution), solution.content_hash, reason, {"ray_lane": lane})
        return SubmissionResult(sub_id, solution.name, solution.definition, SubmissionStatus.HARNESS_ERROR, [],
                                notices=[reason])
    new_id, evaluation_ids = import_submission(archive, bundle, lane)
    if result is None:
        result = SubmissionResult(new_id, solution.name, solution.definition, bundle.submission["status"], [],
                                  notices=[str(payload.get("error"))])
    result.submission_id = new_id
    for w in result.workloads:
        w.evaluation_id = evaluation_ids.get(w.evaluation_id) if w.evaluation_id is not None else None
    return result


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:500]


def _stop(lanes: list[_LaneState], warm: list[_LaneState]) -> None:
    """Close the warm lanes (their workers, their private folders), then end every actor: one still starting
    (unschedulable on a shrunk cluster) or one that cannot answer in time is simply killed."""
    refs = []
    for lane in warm:
        try:
            refs.append(lane.handle.close.remote())
        except RayError:
            pass
    if refs:
        try:
            ray.wait(refs, num_returns=len(refs), timeout=30.0)
        except (RayError, GetTimeoutError):
            pass
    for lane in lanes:
        try:
            ray.kill(lane.handle)
        except (RayError, ValueError):
            pass
