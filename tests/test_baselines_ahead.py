"""Baselines started beside the candidate's first workload (harness.pipeline.baselines_ahead): their starts and
first calls (a library's JIT compile) run side by side, on the definition's smallest workload, end before anything
is timed, and never outlive the session."""

import threading
import time

from harness.data.dataset import Dataset
from harness.data.options import SubmitOptions
from harness.data.schema import Solution
from harness.pipeline import candidate_workers
from harness.pipeline.baselines_ahead import BaselinesAhead
from harness.pipeline.evaluate import input_bytes
from harness.sandbox.messages import RunRequest, TimeRequest
from harness.sandbox.runner import WorkerCrashed, WorkerTimeout
from support import KV8_PS1, solution_dict

FIRST_CALL_S = 0.4


class FakeProcess:
    """A worker process: builds at once; its first call takes FIRST_CALL_S (a JIT compile), or ``behaviour``."""

    launched: list = []
    behaviour = "compile"  # "compile" | "timeout" | "hang"

    def __init__(self, options):
        self.options, self.alive, self.stopped, self.killed = options, True, False, False
        self.calls: list = []  # (message type, workload uuid or None, start, end)
        self._killed = threading.Event()
        FakeProcess.launched.append(self)

    def launch(self):
        pass

    def wait_ready(self):
        return {}

    def log_text(self):
        return "nvcc ..."

    def request(self, message, timeout_s):
        start = time.perf_counter()
        if isinstance(message, RunRequest):
            if FakeProcess.behaviour == "timeout":
                raise WorkerTimeout("no reply within the limit", "")
            wait = 30 if FakeProcess.behaviour == "hang" else FIRST_CALL_S
            if self._killed.wait(wait):
                raise WorkerCrashed("the worker ended (killed)", "")
        self.calls.append((type(message).__name__, getattr(getattr(message, "workload", None), "uuid", None),
                           start, time.perf_counter()))
        return type("R", (), {"ok": True, "compile_only": False, "note": "", "log": ""})(), {}

    def kill(self, wait=True):
        self.killed, self.alive = True, False
        self._killed.set()

    def stop(self, graceful=True):
        self.alive, self.stopped = False, True
        self._killed.set()


def _ahead(monkeypatch, behaviour="compile"):
    FakeProcess.launched, FakeProcess.behaviour = [], behaviour
    monkeypatch.setattr(candidate_workers, "WorkerProcess", FakeProcess)
    workers = candidate_workers.CandidateWorkers(SubmitOptions(), lambda role, cpu_only=None: ("options", role),
                                                 lambda name: __import__("contextlib").nullcontext())
    dataset = Dataset()
    baselines = [Solution.model_validate(solution_dict(f"def run(*a):\n    pass  # {n}\n", name=n))
                 for n in ("decode_mode", "tensor_core_mode")]
    return BaselinesAhead(workers, dataset), dataset, dataset.definition(KV8_PS1), baselines


def test_baselines_start_side_by_side_and_compile_on_the_smallest_workload(monkeypatch):
    ahead, dataset, definition, baselines = _ahead(monkeypatch)
    dataset.workloads_for(definition.name, None)  # parsed before the clock starts: the session has them already
    began = time.perf_counter()
    ahead.begin(baselines, definition, timeout_s=60)
    assert time.perf_counter() - began < FIRST_CALL_S / 2  # the session goes on at once
    assert ahead.pending
    taken = [ahead.take(b.content_hash) for b in baselines]
    both = time.perf_counter() - began
    assert both < 2 * FIRST_CALL_S * 0.9, f"the two first calls ran one after the other ({both:.2f} s)"
    smallest = min(dataset.workloads_for(KV8_PS1), key=lambda w: input_bytes(definition, w))
    for (worker, failure), process in zip(taken, FakeProcess.launched):
        assert failure is None and worker is process and worker.alive
        assert [c[:2] for c in worker.calls] == [("BuildRequest", None), ("RunRequest", smallest.uuid)]
    assert not ahead.pending
    assert ahead.take(baselines[0].content_hash) is None  # taken once; a later start is the session's own


def test_a_first_call_past_the_limit_is_the_baselines_start_failure(monkeypatch):
    ahead, dataset, definition, baselines = _ahead(monkeypatch, behaviour="timeout")
    ahead.begin(baselines[:1], definition, timeout_s=45)
    worker, failure = ahead.take(baselines[0].content_hash)
    assert worker is None and FakeProcess.launched[0].stopped
    assert failure.status == "TIMEOUT" and "first call on" in failure.message and "45 s limit" in failure.message
    assert failure.log == "nvcc ..."


def test_closing_ends_a_first_call_still_running(monkeypatch):
    ahead, _, definition, baselines = _ahead(monkeypatch, behaviour="hang")
    ahead.begin(baselines, definition, timeout_s=60)
    time.sleep(0.1)
    began = time.perf_counter()
    ahead.close()
    assert time.perf_counter() - began < 2.0  # not the 30 s the calls would have taken
    assert all(p.killed and p.stopped for p in FakeProcess.launched)
    assert not ahead.pending and not any(t.name.startswith("baseline-ahead") for t in threading.enumerate())


def test_a_baseline_taken_from_ahead_is_not_started_again(tmp_path, monkeypatch):
    from harness.archive.database import Archive
    from harness.measure.correctness import Tolerance
    from harness.data.results import WorkloadResult
    from harness.pipeline.baselines import Baselines
    from test_baselines import _Keys

    ahead, dataset, definition, baselines = _ahead(monkeypatch)
    preset, workload = dataset.preset(KV8_PS1), dataset.workloads_for(KV8_PS1)[0]
    fake_dataset = type("D", (), {"baselines": lambda self, name: baselines, "label": dataset.label})()
    starts, evaluated = [], []

    def evaluate(worker, definition, workload, label, preset, tol, timeout_s):
        evaluated.append(worker)
        wr = WorkloadResult(workload.uuid, label, "PASSED")
        wr.latency_ms = wr.kernel_latency_ms = 0.02
        return wr

    ahead.begin(baselines, definition, timeout_s=60)
    b = Baselines(fake_dataset, Archive(tmp_path / "a"), _Keys("GPU-1"), {},
                  lambda *a: starts.append(a) or (None, None), evaluate, ahead)
    assert b.figures(definition, workload, preset, Tolerance(), 60)["official_ms"] == 0.02
    assert starts == [] and evaluated == FakeProcess.launched


def test_nothing_is_timed_while_a_baseline_still_compiles(monkeypatch):
    """The candidate's official timing waits for the threads (no compile beside a measurement), and the wait is not
    counted against the workload's time limit."""
    from harness.pipeline.workload_evaluation import WorkloadEvaluation

    ahead, dataset, definition, baselines = _ahead(monkeypatch)
    ahead.begin(baselines, definition, timeout_s=60)
    order = []

    class Candidate:
        def request(self, message, timeout_s):
            assert isinstance(message, TimeRequest)
            order.append(("timed", all(not t.is_alive() for t in ahead._threads.values()), timeout_s))
            raise WorkerCrashed("stop here", "")

    class Evaluation(WorkloadEvaluation):
        has_gpu = True
        options = SubmitOptions()
        audit_config = type("A", (), {"level": "fast"})()

        def __init__(self):
            self.dataset, self.baselines = dataset, type("B", (), {"ahead": ahead})()
            self._phase = lambda name: __import__("contextlib").nullcontext()

    from harness.data.results import WorkloadResult

    workload = dataset.workloads_for(KV8_PS1)[0]
    wr = WorkloadResult(workload.uuid, "w", "PASSED")
    # 0.2 s left of the workload's limit: the wait for the compiles (FIRST_CALL_S) does not use it up
    Evaluation()._time(Candidate(), definition, workload, [1, 2, 3], dataset.preset(KV8_PS1), wr,
                       time.monotonic() + 0.2)
    [(what, quiet, timeout_s)] = order
    assert what == "timed" and quiet and timeout_s > 0.1 and wr.status == "RUNTIME_ERROR"
    ahead.close()


