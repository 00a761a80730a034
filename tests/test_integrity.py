"""The worker's own code proven unchanged after candidate code ran in its process (harness.sandbox.integrity),
and the census of the candidate's Python threads: as table tests of the fingerprint, and through a real worker
process fed candidates that patch the timer, the thread census or the check itself (by spellings the static
gate is not asked about here: the worker is driven directly)."""

from __future__ import annotations

import sys
import threading
import time
import types
import warnings

import pytest

from harness.audits.verdicts import thread_verdict
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.sandbox import integrity
from harness.sandbox.integrity import Integrity, changed, snapshot
from harness.sandbox.messages import BuildRequest, RecheckRequest, RunRequest
from harness.sandbox.runner import WorkerOptions, WorkerProcess
from support import KV8_PS1, TORCH_CANDIDATE, solution_dict


def test_replacing_removing_and_rebinding_code_are_seen_adding_and_mutating_data_are_not(monkeypatch):
    import harness.measure.roofline as roofline

    check = Integrity()
    assert check.check() == []
    monkeypatch.setattr(roofline, "brand_new_name", 1, raising=False)  # a lazy import adds names: fine
    assert check.check() == []
    fn = next(v for v in vars(roofline).values()
              if isinstance(v, types.FunctionType) and v.__module__ == roofline.__name__)
    monkeypatch.setattr(fn, "__code__", (lambda *a, **k: None).__code__)
    assert f"harness.measure.roofline.{fn.__name__}" in check.check()  # and wherever else it was imported


@pytest.mark.parametrize("how", ["replace", "remove", "class_method", "defaults"])
def test_each_kind_of_change_is_named(how, monkeypatch):
    import harness.sandbox.worker_calls as calls
    import harness.sandbox.runner as runner

    before = snapshot()
    if how == "replace":
        monkeypatch.setattr(calls, "thread_count", lambda: 7)
        want = "harness.sandbox.worker_calls.thread_count"
    elif how == "remove":
        monkeypatch.delattr(calls, "poisoned")
        want = "harness.sandbox.worker_calls.poisoned"
    elif how == "class_method":
        monkeypatch.setattr(runner.WorkerProcess, "request", lambda *a, **k: None)
        want = "harness.sandbox.runner.WorkerProcess.request"
    else:
        monkeypatch.setattr(calls.recheck_calls, "__defaults__", (None,))
        want = "harness.sandbox.worker_calls.recheck_calls"
    assert want in changed(before, snapshot())


def test_replacing_the_check_itself_blinds_nothing(monkeypatch):
    import harness.measure.roofline as roofline

    check = Integrity()
    frozen = dict(check.before)  # a copy: the fingerprint itself is read-only
    monkeypatch.setattr(integrity, "snapshot", lambda: frozen)  # the module's name: not what the check holds
    monkeypatch.setattr(integrity.Integrity, "_check", lambda self: [])
    monkeypatch.setattr(roofline, "measure_ceilings", lambda *a: None)
    assert "harness.measure.roofline.measure_ceilings" in check.check()
    assert "harness.sandbox.integrity.snapshot" in check.check()


def test_a_python_thread_of_the_candidates_is_counted_whenever_it_started():
    check = Integrity()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="sneaky", daemon=True)
    t.start()
    try:
        assert check.new_threads() == ["sneaky"]
        audit = thread_verdict(10, 10, check.new_threads())
        assert not audit.passed and "sneaky" in audit.detail
    finally:
        stop.set()
        t.join()
    assert check.new_threads() == [] and thread_verdict(10, 10, []).passed



def test_torch_compiles_idle_compile_workers_are_torchs_own_and_a_job_on_them_is_not(monkeypatch):
    """torch.compile (vLLM's routing is written with it) leaves Inductor's compile-thread pool alive and waiting after
    a compiled function's first call; its workers are torch's. One running the candidate's code is the candidate's,
    and so is an idle pool of the candidate's own."""
    from concurrent.futures import ThreadPoolExecutor

    from torch._inductor import async_compile, config

    monkeypatch.setattr(config, "compile_threads", 2)  # a one-core host would make no pool
    check = Integrity()
    pool = async_compile.AsyncCompile.pool()
    pool.submit(lambda: None).result()  # a compile job done: its worker waits for the next
    own = ThreadPoolExecutor(1, thread_name_prefix="candidate-pool")
    own.submit(lambda: None).result()
    release = threading.Event()
    try:
        assert [n for n in check.new_threads() if n.startswith("ThreadPoolExecutor")] == []
        assert [n for n in check.new_threads() if n.startswith("candidate-pool")] == ["candidate-pool_0"]
        busy = pool.submit(release.wait)  # the candidate's code running on torch's worker
        deadline = time.monotonic() + 5
        while not [n for n in check.new_threads() if n.startswith("ThreadPoolExecutor")]:
            assert time.monotonic() < deadline, check.new_threads()
            time.sleep(0.01)
    finally:
        release.set()
        own.shutdown()
    busy.result()


# A stand-in of tqdm's monitor (tqdm is not installed here): its thread class, waiting in its own module's code.
_TQDM_MONITOR = """
import threading


class TMonitor(threading.Thread):
    def __init__(self, tqdm_cls):
        super().__init__(daemon=True, name="tqdm_monitor")
        self.tqdm_cls, self.was_killed = tqdm_cls, threading.Event()
        self.start()

    def run(self):
        while not self.was_killed.wait(0.01):
            for bar in list(self.tqdm_cls._instances):
                bar.refresh()
"""
_TQDM = """
class tqdm:
    _instances = []

    def refresh(self):
        pass
"""


@pytest.mark.parametrize("bar_class, tqdms", [("tqdm", True), ("own", False)])
def test_tqdms_idle_monitor_is_tqdms_own_unless_it_refreshes_a_bar_of_the_candidates(tmp_path, monkeypatch, bar_class,
                                                                                      tqdms):
    """tqdm starts a monitor thread with a library's first bar (torch.compile's autotuning on an H100): it is tqdm's.
    Watching a bar of a class of the candidate's, it runs the candidate's `refresh`: the candidate's."""
    (tmp_path / "tqdm").mkdir()
    (tmp_path / "tqdm" / "__init__.py").write_text(_TQDM)
    (tmp_path / "tqdm" / "_monitor.py").write_text(_TQDM_MONITOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("tqdm", "tqdm._monitor"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import tqdm
    from tqdm._monitor import TMonitor

    class Own(tqdm.tqdm):
        def refresh(self):
            pass

    check = Integrity()
    tqdm.tqdm._instances.append(tqdm.tqdm() if bar_class == "tqdm" else Own())
    monitor = TMonitor(tqdm.tqdm)
    try:
        time.sleep(0.05)
        assert (check.new_threads() == []) is tqdms, check.new_threads()
    finally:
        monitor.was_killed.set()
        monitor.join()


# -- through a worker process ---------------------------------------------------------------------------------

DATASET = Dataset()
DEFINITION = DATASET.definition(KV8_PS1)
WORKLOAD = DATASET.workloads_for(KV8_PS1)[0]
ROOT = str(DATASET.root)

PATCH_TIMER = '''
import sys
_timing = sys.modules["harness.measure.timing"]
_timing.time_trial = lambda fn, args, **kw: None
'''
PATCH_AT_CALL = '''
import sys
_done = []

def _patch():
    if not _done:
        sys.modules["harness.sandbox.worker_calls"].thread_count = lambda: 3
        _done.append(1)
'''
THREAD_AT_IMPORT = '''
import threading
threading.Thread(target=threading.Event().wait, name="kept-alive", daemon=True).start()
'''


def _worker_with(source: str) -> tuple[WorkerProcess, Solution]:
    worker = WorkerProcess(WorkerOptions(cpu_only=True, dataset_root=ROOT, sandbox=False, isolate_network=False))
    worker.start()
    return worker, Solution.model_validate(solution_dict(source))


def _torch_candidate_calling(prefix: str, call: str = "") -> str:
    body = TORCH_CANDIDATE.replace("    batch, heads, dim = q.shape", f"    {call}\n    batch, heads, dim = q.shape"
                                   if call else "    batch, heads, dim = q.shape")
    return prefix + body


def test_a_candidate_that_patches_the_timer_at_import_fails_its_build():
    worker, solution = _worker_with(_torch_candidate_calling(PATCH_TIMER))
    try:
        reply, _ = worker.request(BuildRequest(solution=solution, definition=DEFINITION), timeout_s=120)
        assert not reply.ok and reply.status == "RUNTIME_ERROR"
        assert "harness integrity" in reply.error and "harness.measure.timing.time_trial" in reply.error
        reply, _ = worker.request(RunRequest(workload=WORKLOAD, seed=1, dataset_root=ROOT), timeout_s=120)
        assert not reply.ok and "harness integrity" in reply.error  # and every later request
    finally:
        worker.stop(graceful=False)


def test_a_patch_made_during_a_call_fails_that_call():
    worker, solution = _worker_with(_torch_candidate_calling(PATCH_AT_CALL, "_patch()"))
    try:
        reply, _ = worker.request(BuildRequest(solution=solution, definition=DEFINITION), timeout_s=120)
        assert reply.ok, reply.error
        reply, _ = worker.request(RunRequest(workload=WORKLOAD, seed=1, dataset_root=ROOT), timeout_s=120)
        assert not reply.ok and "harness.sandbox.worker_calls.thread_count" in reply.error
    finally:
        worker.stop(graceful=False)


def test_an_honest_candidate_passes_and_a_thread_started_at_import_is_reported_by_the_recheck():
    for source, threads in ((TORCH_CANDIDATE, []), (_torch_candidate_calling(THREAD_AT_IMPORT), ["kept-alive"])):
        worker, solution = _worker_with(source)
        try:
            reply, _ = worker.request(BuildRequest(solution=solution, definition=DEFINITION), timeout_s=120)
            assert reply.ok, reply.error
            reply, _ = worker.request(RunRequest(workload=WORKLOAD, seed=1, dataset_root=ROOT), timeout_s=120)
            assert reply.ok, reply.error
            steps = [{"kind": "fresh", "seed": 5}, {"kind": "fresh", "seed": 6}]
            reply, _ = worker.request(RecheckRequest(workload=WORKLOAD, steps=steps, dataset_root=ROOT),
                                      timeout_s=120)
            assert reply.ok, reply.error
            assert reply.candidate_threads == threads
        finally:
            worker.stop(graceful=False)


def test_the_python_half_of_torch_tensor_is_fingerprinted(monkeypatch):
    import torch

    check = Integrity()
    monkeypatch.setattr(torch.Tensor, "clone", lambda self, *a, **k: self)  # the mutation check's copies
    assert "torch.Tensor.clone" in check.check()


def test_a_thread_started_without_threading_is_counted_too():
    import _thread
    import time

    check = Integrity()
    stop = []
    _thread.start_new_thread(lambda: [time.sleep(0.01) for _ in iter(lambda: bool(stop), True)], ())
    time.sleep(0.05)
    try:
        assert len(check.new_threads()) == 1 and "not a threading.Thread" in check.new_threads()[0]
    finally:
        stop.append(1)
        time.sleep(0.05)
    assert check.new_threads() == []


def test_json_and_the_framing_are_fingerprinted(monkeypatch):
    import json

    import harness.sandbox.protocol as protocol

    check = Integrity()
    monkeypatch.setattr(json, "dumps", lambda *a, **k: '{"ok": true}')
    assert b'"mutated_inputs": ["k_cache"]' in protocol.encode({"mutated_inputs": ["k_cache"]})  # its own dumps
    monkeypatch.setattr(json.encoder.JSONEncoder, "encode", lambda self, o: "{}")
    assert {"json.dumps", "json.encoder.JSONEncoder.encode"} <= set(check.check())



# -- PyTorch's operators' kernels (harness.sandbox.dispatcher_guard) ----------------------------------------------

def test_a_kernel_registered_for_pytorchs_own_operators_is_tampering_and_the_candidates_own_ops_are_not():
    import torch

    from harness.sandbox.dispatcher_guard import DispatcherGuard

    guard = DispatcherGuard()
    own = torch.library.Library("crucible_test_own", "DEF")  # an honest custom op in a namespace of its own
    own.define("double(Tensor x) -> Tensor")
    own.impl("double", lambda x: x * 2, "CPU")
    assert guard.foreign() == []
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():  # PyTorch warns of the override once per process: another test may have
            warnings.simplefilter("ignore")  # had it; the dispatcher's own record is what is judged
            lib.impl("equal", lambda a, b: True, "CPU")
        found = guard.foreign()
        assert any(f.startswith("aten::equal: CPU kernel registered at ") and __file__ in f for f in found), found
        assert any("PyTorch's CPU kernel" in f and "was replaced" in f for f in found), found
    finally:
        lib._destroy()
    assert guard.foreign() == []  # the kernel given back: PyTorch's again
    lib = torch.library.Library("aten", "IMPL")
    try:  # a key the operator had no kernel of, through the public API (its line names torch/library.py)
        torch.library.impl(lib, "zero_", "AutogradCPU")(lambda x: x)
        assert [f for f in guard.foreign() if f.startswith("aten::zero_: AutogradCPU kernel registered at ")]
    finally:
        lib._destroy()


OVERRIDE_EQUAL = '''
import torch as _t
_LIB = []

def _override():
    if not _LIB:
        _LIB.append(_t.library.Library("aten", "IMPL"))
        _LIB[0].impl("equal", lambda a, b: True, "CPU")
'''


def test_a_candidate_that_replaces_torch_equal_in_the_dispatcher_fails_that_call():
    """Red team round 4: an aten kernel of its own made the mutation check's torch.equal answer True."""
    source = _torch_candidate_calling(OVERRIDE_EQUAL, "_override()")
    worker, solution = _worker_with(source)
    try:
        reply, _ = worker.request(BuildRequest(solution=solution, definition=DEFINITION), timeout_s=120)
        assert reply.ok, reply.error
        reply, _ = worker.request(RunRequest(workload=WORKLOAD, seed=1, dataset_root=ROOT), timeout_s=120)
        assert not reply.ok and "harness integrity" in reply.error and "aten::equal" in reply.error, reply.error
    finally:
        worker.stop(graceful=False)
