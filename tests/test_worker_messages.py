"""The typed messages between the harness and its workers (harness.sandbox.messages).

Every request round-trips through the framing and ``parse_request`` with the same JSON keys the dict requests had;
a request the worker cannot read is answered ``ok: False`` naming the problem; a reply that does not fit its op's
model (from a fake worker speaking the framing) ends as the workload's recorded status, never as a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from harness.audits.session_audits import SessionAudits
from harness.audits.verdicts import AuditConfig
from harness.data.dataset import Dataset
from harness.data.results import WorkloadResult
from harness.data.schema import EvaluationStatus, Solution, dump_json
from harness.measure.correctness import Tolerance
from harness.measure.timing_records import TrialTiming
from harness.pipeline.workload_evaluation import CLOCK_TRUTH_CALLS, WorkloadEvaluation
from harness.sandbox import messages
from harness.sandbox.messages import (OPS, REPLIES, BuildRequest, CeilingsRequest, CompiledRequest, ExitRequest,
                                      HelloRequest, JudgeRequest, MalformedReply, OracleRequest, RecheckRequest,
                                      ReferenceRequest, RequestError, RunReply, RunRequest, SassRequest, SyncRequest,
                                      TimeRequest, parse_reply, parse_request)
from harness.sandbox.protocol import encode, read_message, write_message
from harness.sandbox.runner import WorkerCrashed, WorkerOptions, WorkerProcess
from harness.sandbox.worker import Worker

from support import KV8_PS1, triton_example

DATASET = Dataset()
DEFINITION = DATASET.definition(KV8_PS1)
WORKLOAD = DATASET.workloads_for(KV8_PS1)[0]
SOLUTION = Solution.model_validate(triton_example())
ROOT = str(DATASET.root)
W, D = WORKLOAD.model_dump(mode="json"), DEFINITION.model_dump(mode="json")
STEPS = [{"kind": "fresh", "seed": 5}, {"kind": "fresh", "seed": 6}, {"kind": "reuse", "seed": 6, "buffers_of": 0}]
TOL = Tolerance(atol=1e-3, rtol=2e-3)

# (the model the harness builds, the dict the harness sent before the models): the same JSON on the wire
REQUESTS = [
    (HelloRequest(), {"op": "hello"}),
    (ExitRequest(), {"op": "exit"}),
    (SyncRequest(), {"op": "sync"}),
    (CeilingsRequest(), {"op": "ceilings"}),
    (SassRequest(), {"op": "sass"}),
    (CompiledRequest(), {"op": "compiled"}),
    (BuildRequest(solution=SOLUTION, definition=DEFINITION),
     {"op": "build", "solution": dump_json(SOLUTION), "definition": D}),
    (RunRequest(workload=WORKLOAD, seed=3, dataset_root=ROOT),
     {"op": "run", "workload": W, "seed": 3, "dataset_root": ROOT}),
    (ReferenceRequest(definition=DEFINITION, workload=WORKLOAD, seed=3, dataset_root=ROOT),
     {"op": "reference", "definition": D, "workload": W, "seed": 3, "dataset_root": ROOT}),
    (OracleRequest(definition=DEFINITION, workload=WORKLOAD, seed=3, dataset_root=ROOT),
     {"op": "oracle", "definition": D, "workload": W, "seed": 3, "dataset_root": ROOT}),
    (JudgeRequest(definition=DEFINITION, workload=WORKLOAD, seed=3, dataset_root=ROOT, tolerance=TOL),
     {"op": "judge", "definition": D, "workload": W, "seed": 3, "dataset_root": ROOT,
      "tolerance": dataclasses.asdict(TOL)}),
    (TimeRequest(workload=WORKLOAD, seeds=[1, 2], warmup=10, iterations=50, dataset_root=ROOT, clock_truth_calls=9),
     {"op": "time", "workload": W, "seeds": [1, 2], "warmup": 10, "iterations": 50, "dataset_root": ROOT,
      "clock_truth_calls": 9}),
    (TimeRequest(definition=DEFINITION, workload=WORKLOAD, seeds=[1], warmup=10, iterations=50, dataset_root=ROOT),
     {"op": "time", "definition": D, "workload": W, "seeds": [1], "warmup": 10, "iterations": 50,
      "dataset_root": ROOT}),
    (RecheckRequest(workload=WORKLOAD, steps=STEPS, dataset_root=ROOT),
     {"op": "recheck", "workload": W, "steps": STEPS, "dataset_root": ROOT}),
]


def test_the_table_covers_every_op():
    assert {model.op for model, _ in REQUESTS} == set(OPS) == set(REPLIES)
    assert all(callable(getattr(Worker, op)) for op in OPS if op not in ("exit", "sync"))  # a handler per op


@pytest.mark.parametrize("model, legacy", REQUESTS, ids=[f"{m.op}-{i}" for i, (m, _) in enumerate(REQUESTS)])
def test_every_request_round_trips_with_the_keys_it_had(model, legacy):
    assert model.wire() == legacy
    r, w = os.pipe()
    try:
        data = encode(model.wire())
        os.write(w, data)
        header, tensors = read_message(r, deadline=time.monotonic() + 5)
    finally:
        os.close(r)
        os.close(w)
    parsed = parse_request(header)
    assert type(parsed) is type(model) and parsed == model and tensors == {}


@pytest.mark.parametrize("header, words", [
    ({"op": "fly"}, "unknown op 'fly' (known: hello, exit"),
    ({"seed": 3}, "unknown op None"),
    ({"op": "run", "seed": 3, "dataset_root": ROOT}, "invalid run request: workload: Field required"),
    ({"op": "run", "workload": W, "seed": "three", "dataset_root": ROOT},
     "invalid run request: seed: Input should be a valid integer"),
    ({"op": "time", "workload": W, "seeds": [], "warmup": 1, "iterations": 1, "dataset_root": ROOT},
     "invalid time request: seeds: List should have at least 1 item"),
    ({"op": "sass", "timeout": 5}, "invalid sass request: timeout: Extra inputs are not permitted"),
    ({"op": "recheck", "workload": W, "dataset_root": ROOT, "steps": [{"kind": "reuse", "seed": 1}]},
     "a reuse or known step names the buffers it refills"),
    ({"op": "recheck", "workload": W, "dataset_root": ROOT,
      "steps": [{"kind": "fresh", "seed": 1}, {"kind": "reuse", "seed": 1, "buffers_of": 1}]},
     "step 1 reuses the buffers of step 1, not an earlier fresh step"),
])
def test_invalid_requests_are_refused_by_name(header, words):
    with pytest.raises(RequestError) as err:
        parse_request(header)
    assert words in str(err.value)


def test_the_worker_answers_an_invalid_request_and_keeps_serving():
    """In this process: the serve loop of a candidate worker, spoken to over pipes."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    worker = Worker("candidate")
    thread = threading.Thread(target=worker.serve, args=(req_r, rep_w), daemon=True)
    thread.start()
    try:
        answers = []
        for header in ({"op": "run", "seed": "x"}, {"op": "fly"}, {"op": "exit"}):
            write_message(req_w, header)
            answers.append(read_message(rep_r, deadline=time.monotonic() + 30)[0])
        thread.join(10)
    finally:
        for fd in (req_r, req_w, rep_r, rep_w):
            os.close(fd)
    bad_run, bad_op, bye = answers
    assert not bad_run["ok"] and bad_run["status"] == EvaluationStatus.RUNTIME_ERROR.value
    assert bad_run["error"].startswith("invalid run request: workload: Field required")
    assert "seed: Input should be a valid integer" in bad_run["error"]
    assert not bad_op["ok"] and bad_op["error"].startswith("unknown op 'fly'")
    assert bye == {"ok": True} and not thread.is_alive()


def _documented(model: type[BaseModel]) -> list[str]:
    inherited = TrialTiming.model_fields if issubclass(model, TrialTiming) else {}
    return [f"{model.__name__}.{name}" for name, field in model.model_fields.items()
            if name not in inherited and not field.description]


def test_every_field_of_every_message_is_documented():
    models = [m for m in vars(messages).values()
              if isinstance(m, type) and issubclass(m, BaseModel) and m.__module__ == messages.__name__]
    assert len(models) > 20
    assert [f for m in models for f in _documented(m)] == []


# -- replies -------------------------------------------------------------------------------------------------------

TRIAL = {"samples_ms": [0.5], "median_ms": 0.5, "backend": "cupti", "aligned": True, "warmup": 10, "iterations": 1}


@pytest.mark.parametrize("op, header, words", [
    ("run", {"status": "RUNTIME_ERROR"}, "ok: Field required"),
    ("run", {"ok": True}, "an ok reply must carry input_fingerprint"),
    ("run", {"ok": False, "status": "PASSED"}, "status 'PASSED' is not a failure status"),
    ("run", {"ok": True, "input_fingerprint": 7}, "input_fingerprint: Input should be a valid string"),
    ("run", {"ok": True, "input_fingerprint": "f", "mutated_inputs": "all"}, "mutated_inputs: Input should be"),
    ("run", {"ok": True, "input_fingerprint": "f", "verdict": "PASSED"}, "verdict: Extra inputs are not permitted"),
    ("time", {"ok": True, "trials": [{**TRIAL, "median_ms": "fast"}]},
     "trials.0.median_ms: Input should be a valid number"),
    ("time", {"ok": True, "trials": []}, "trials: List should have at least 1 item"),
    ("judge", {"ok": True, "check": {"status": "FINE"}}, "check.status: Input should be"),
    ("sass", {"ok": True, "kernels": [{"name": "k", "opcodes": {"FFMA": "many"}}], "tool": "nvdisasm",
              "files": []}, "kernels.0.opcodes.FFMA: Input should be a valid integer"),
    ("hello", {"ok": True, "memory": {"peak_bytes": -1}}, "memory.peak_bytes: Input should be greater than"),
])
def test_a_malformed_reply_is_named(op, header, words):
    with pytest.raises(MalformedReply) as err:
        parse_reply(op, header)
    assert str(err.value).startswith(f"malformed {op} reply: ") and words in str(err.value)


def test_a_reply_keeps_the_keys_the_worker_sent():
    header = {"ok": True, "input_fingerprint": "f", "mutated_inputs": [], "aliased_outputs": [], "elapsed_s": 0.1,
              "note": "", "memory": {"peak_bytes": 5, "resident_bytes": 1}}
    reply = parse_reply("run", header)
    assert isinstance(reply, RunReply) and reply.memory.peak_bytes == 5 and reply.wire() == header
    assert parse_reply("reference", {"ok": True, "input_fingerprint": "f"}).wire() == {"ok": True,
                                                                                    "input_fingerprint": "f"}


_FAKE = r"""
import json, os, struct, sys
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
import time
replies = json.loads(sys.argv[1])
late = b""  # a frame someone else writes once the sync is answered, between two requests
while True:
    request = json.loads(read(struct.unpack(">Q", read(8))[0]))
    read(struct.unpack(">Q", read(8))[0])
    if request.get("op") == "sync":  # answered at once, as the worker's loop does
        head = json.dumps({"ok": True, "nonce": request["nonce"]}).encode()
        os.write(1, struct.pack(">Q", len(head)) + head + struct.pack(">Q", 0) + late)
        late = b""
        continue
    if not replies:
        while True:
            read(1)
    reply = replies.pop(0)
    time.sleep(reply.pop("_sleep_s", 0))  # a worker that takes this long to answer
    if reply.pop("_forged", False):  # a frame written by someone who does not know the request's nonce
        reply["nonce"] = "0" * 32
    elif "nonce" in request:  # as the worker's loop does
        reply["nonce"] = request["nonce"]
    extra = reply.pop("_twice", False)  # a second frame after the worker's own, written by someone else
    head = json.dumps(reply).encode()
    if reply.pop("_late", False):
        late = struct.pack(">Q", len(head)) + head + struct.pack(">Q", 0)
        head = json.dumps(reply).encode()
    os.write(1, (struct.pack(">Q", len(head)) + head + struct.pack(">Q", 0)) * (2 if extra else 1))
"""


@contextlib.contextmanager
def fake_worker(*replies):
    """A WorkerProcess whose process answers each request with the next of ``replies``, as they are."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", _FAKE, json.dumps(replies)], stdin=req_r, stdout=rep_w,
                            start_new_session=True)  # its own process group: kill() ends it alone
    os.close(req_r)
    os.close(rep_w)
    worker = WorkerProcess(WorkerOptions(cpu_only=True))
    worker.proc, worker._w, worker._r = proc, req_w, rep_r
    try:
        yield worker
    finally:
        worker.stop(graceful=False)


def test_the_runner_kills_a_worker_that_breaks_the_protocol():
    with fake_worker({"ok": True, "input_fingerprint": "f"}, {"ok": True, "input_fingerprint": ["f"]}) as worker:
        reply, _ = worker.request(RunRequest(workload=WORKLOAD, seed=1, dataset_root=ROOT), timeout_s=30)
        assert isinstance(reply, RunReply) and reply.input_fingerprint == "f"
        with pytest.raises(WorkerCrashed, match="the worker broke the protocol: malformed run reply: "
                                                "input_fingerprint: Input should be a valid string"):
            worker.request(RunRequest(workload=WORKLOAD, seed=2, dataset_root=ROOT), timeout_s=30)
        assert not worker.alive


@pytest.mark.parametrize("first, words", [
    ({"ok": True, "input_fingerprint": "f", "_forged": True}, "a reply the worker's loop did not write"),
    # the second frame is found by the sync the harness sends after every reply (runner.WorkerProcess._confirm)
    ({"ok": True, "input_fingerprint": "f", "_twice": True}, "a reply the worker's loop did not write"),
    ({"ok": True, "input_fingerprint": "f", "_late": True}, "channel held bytes before a request was sent"),
])
def test_a_frame_the_workers_loop_did_not_write_ends_the_worker(first, words):
    """Candidate code shares the worker's process and descriptors: a frame it writes (ahead of the worker's reply,
    or after it) lacks its request's nonce or arrives unasked, and is never taken as the worker's reply."""
    with fake_worker(first, {"ok": True, "input_fingerprint": "g"}) as worker:
        with pytest.raises(WorkerCrashed, match=f"the worker broke the protocol: .*{words}.*harness.s channel"):
            for seed in (1, 2):
                reply, _ = worker.request(RunRequest(workload=WORKLOAD, seed=seed, dataset_root=ROOT), timeout_s=30)
                assert reply.input_fingerprint == "f"  # the first reply is the worker's own where it was twice
        assert not worker.alive


class _Session(WorkloadEvaluation, SessionAudits):
    """What the per-workload evaluation and the recheck read of a Session, and nothing more."""

    def __init__(self):
        self.dataset = DATASET
        self._secret = b"s" * 16
        self._rng = random.Random(1)
        self.has_gpu = True
        self.options = SimpleNamespace(timing=True)
        self.audit_config = AuditConfig()
        self.baselines = SimpleNamespace(ahead=SimpleNamespace(pending=False))  # no baseline started ahead

    def _phase(self, name):
        return contextlib.nullcontext()

    def reference_outputs(self, definition, workload, seed, keep=True):
        return "f", {}


PRESET = DATASET.preset(KV8_PS1)


def _evaluated(*replies) -> WorkloadResult:
    with fake_worker(*replies) as worker:
        return _Session()._evaluate_workload(worker, DEFINITION, WORKLOAD, "w", PRESET, TOL, 60)


@pytest.mark.parametrize("replies, words", [
    ([{"status": "RUNTIME_ERROR", "error": "x"}], "malformed run reply: ok: Field required"),
    ([{"ok": True, "input_fingerprint": "f", "elapsed_s": "fast"}],
     "malformed run reply: elapsed_s: Input should be a valid number"),
])
def test_a_malformed_run_reply_is_a_runtime_error(replies, words):
    wr = _evaluated(*replies)
    assert wr.status == EvaluationStatus.RUNTIME_ERROR.value and "the worker broke the protocol" in wr.message
    assert words in wr.message


def test_a_malformed_timing_reply_is_a_runtime_error():
    wr = WorkloadResult(WORKLOAD.uuid, "w", EvaluationStatus.PASSED.value)
    with fake_worker({"ok": True, "trials": [{**TRIAL, "median_ms": "fast"}]}) as worker:
        _Session()._time(worker, DEFINITION, WORKLOAD, [1], PRESET, wr, time.monotonic() + 60)
    assert wr.status == EvaluationStatus.RUNTIME_ERROR.value and wr.latency_ms is None
    assert wr.message.startswith("timing: the worker broke the protocol: malformed time reply: "
                                 "trials.0.median_ms: Input should be a valid number")


@pytest.mark.parametrize("reply, words", [
    ({"ok": True, "wall_ms": [1.0], "input_fingerprints": ["f"], "threads_before": 1, "threads_after": "many"},
     "malformed recheck reply: threads_after: Input should be a valid integer"),
    ({"ok": True, "wall_ms": [1.0], "input_fingerprints": ["f"], "threads_before": 1, "threads_after": 1},
     "the worker broke the protocol: its reply covers 1 of "),
])
def test_a_malformed_recheck_reply_is_a_runtime_error(reply, words):
    wr = WorkloadResult(WORKLOAD.uuid, "w", EvaluationStatus.PASSED.value)
    with fake_worker(reply) as worker:
        _Session()._recheck(worker, DEFINITION, WORKLOAD, PRESET, TOL, wr, time.monotonic() + 60)
        assert not worker.alive
    assert wr.status == EvaluationStatus.RUNTIME_ERROR.value and words in wr.message
    assert not any(a["name"] == "fresh_input_recheck" for a in wr.audits)


class _JudgedSession(_Session):
    """The recheck's judging passes every call: what is tested is the replay audit's timed pair."""

    def reference_outputs(self, definition, workload, seed, keep=True):
        return "f", {n: None for n in definition.outputs}

    def _judge(self, *args):
        from harness.measure.correctness import CheckResult

        return CheckResult(EvaluationStatus.PASSED)


def test_reuse_calls_take_never_seen_content_where_they_are_timed():
    from harness.audits.verdicts import plan_recheck

    steps = plan_recheck([11, 12, 13], 2, random.Random(3), reuse_seeds=[21, 22])
    assert [s["seed"] for s in steps if s["kind"] == "reuse"] == [21, 22]
    assert sorted(s["seed"] for s in steps if s["kind"] == "fresh") == [11, 12, 13]
    for s in plan_recheck([11, 12, 13], 2, random.Random(3)):  # without: another fresh step's content
        if s["kind"] == "reuse":
            assert s["seed"] in {11, 12, 13} - {steps[s["buffers_of"]]["seed"]}
    with pytest.raises(ValueError, match="one reuse seed per reused call"):
        plan_recheck([11, 12], 1, random.Random(3), reuse_seeds=[21, 22])


@pytest.mark.parametrize("baseline", [True, False])
def test_a_dataset_baseline_is_checked_on_one_input_set_and_timed_on_all_without_clock_truth(baseline):
    """Trusted library code: one correctness call proves its figure is of a correct call (a candidate gets every
    trial); its official timing draws every trial's inputs, and it gets no clock-truth calls (no audit reads them)."""
    run = {"ok": True, "input_fingerprint": "f", "elapsed_s": 0.001}
    timed = {"ok": True, "trials": [TRIAL] * 3}
    replies = [run, timed] if baseline else [run] * PRESET.num_trials + [timed]
    sent = []
    with fake_worker(*replies) as worker:
        request = worker.request
        worker.request = lambda message, **kw: (sent.append(message), request(message, **kw))[1]
        session = _JudgedSession()
        session.options = SimpleNamespace(timing=True)
        wr = session._evaluate_workload(worker, DEFINITION, WORKLOAD, "w", PRESET, TOL, 60, run_audits=False,
                                        baseline=baseline)
    assert wr.status == EvaluationStatus.PASSED.value and wr.latency_ms == 0.5, wr.message
    runs = [m for m in sent if m.op == "run"]
    [time_request] = [m for m in sent if m.op == "time"]
    assert len(runs) == (1 if baseline else PRESET.num_trials) and len(time_request.seeds) == PRESET.num_trials
    assert time_request.clock_truth_calls == (0 if baseline else CLOCK_TRUTH_CALLS)


class _SeedRecorder(_JudgedSession):
    def __init__(self):
        super().__init__()
        self.asked = []

    def reference_outputs(self, definition, workload, seed, keep=True):
        self.asked.append((seed, keep))
        return super().reference_outputs(definition, workload, seed, keep)


def test_recheck_content_is_drawn_per_submission_and_the_timed_content_comes_last():
    from harness.data.inputs import trial_seed

    runs = []
    for _ in range(2):  # two submissions to the same archive (the same secret)
        session = _SeedRecorder()
        reply = {"ok": True, "wall_ms": [0.1] * 4, "repeat_wall_ms": [0.1] * 4, "input_fingerprints": ["f"] * 4,
                 "threads_before": 1, "threads_after": 1}
        wr = WorkloadResult(WORKLOAD.uuid, "w", EvaluationStatus.PASSED.value)
        with fake_worker(reply) as worker:
            session._recheck(worker, DEFINITION, WORKLOAD, PRESET, TOL, wr, time.monotonic() + 60)
        runs.append(session.asked)
    timed = trial_seed(b"s" * 16, WORKLOAD, PRESET.num_trials - 1)  # the trial whose clock-truth calls the timer made
    secret_seeds = {trial_seed(b"s" * 16, WORKLOAD, t) for t in range(4000)}
    for asked in runs:
        assert asked[-1] == (timed, True)  # the known step: the trial the timer timed, its reference kept
        fresh, reuse = asked[:2], asked[2:3]
        assert all(keep and seed in secret_seeds for seed, keep in fresh)  # the archive's: cached, re-read later
        assert all(not keep and seed not in secret_seeds for seed, keep in reuse)  # one-off, never stored
    assert runs[0][2][0] != runs[1][2][0]  # nothing learnt from one submission answers the next


def test_the_known_step_refills_an_earlier_steps_buffers_last_and_only_where_buffers_are_reused():
    from harness.audits.verdicts import plan_recheck

    steps = plan_recheck([11, 12], 1, random.Random(3), reuse_seeds=[21], known_seed=99)
    assert [s["kind"] for s in steps] == ["fresh", "fresh", "reuse", "known"]
    assert steps[-1]["seed"] == 99 and steps[-1]["buffers_of"] in (0, 1)
    assert all(s["kind"] != "known" for s in plan_recheck([11, 12], 0, random.Random(3), known_seed=99))


def test_the_harness_reference_time_is_not_taken_from_the_candidates_deadline():
    class SlowReference(_JudgedSession):
        def reference_outputs(self, definition, workload, seed, keep=True):
            time.sleep(1.2)  # the reference (or its float64 oracle) at full scale: minutes, here a second
            return super().reference_outputs(definition, workload, seed, keep)

    run = {"ok": True, "input_fingerprint": "f", "elapsed_s": 0.01, "mutated_inputs": [], "aliased_outputs": []}
    given = []
    with fake_worker(run, run, run) as worker:
        request = worker.request

        def spy(message, timeout_s, *args, **kwargs):
            given.append(timeout_s)
            return request(message, timeout_s, *args, **kwargs)

        worker.request = spy
        session = SlowReference()
        session.options = SimpleNamespace(timing=False)
        wr = session._evaluate_workload(worker, DEFINITION, WORKLOAD, "w", PRESET, TOL, 1.0, run_audits=False)
    assert wr.status == EvaluationStatus.PASSED.value, wr.message
    assert len(given) == 3 and min(given) > 0.8  # each call still has about its whole second
