"""The pipeline end to end on CPU: build in a worker, judge against the reference, archive; and every
way a candidate can misbehave ends as a recorded status while the harness carries on."""

from __future__ import annotations

import json

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.sandbox.runner import network_isolation
from harness.data.schema import Solution

from support import KV8_PS1, KV8_PS64, TORCH_CANDIDATE, solution_dict, triton_example

PS1_WORKLOADS = ["tiny_b2_t40", "tiny_b3_t96"]


@pytest.fixture(scope="module")
def session(tiny_dataset_root, tmp_path_factory):
    archive = Archive(tmp_path_factory.mktemp("archive"))
    with Session(Dataset(tiny_dataset_root), archive, SubmitOptions(workloads=PS1_WORKLOADS, timeout_s=60)) as s:
        yield s


def submit(session, source: str | dict, **kw):
    data = source if isinstance(source, dict) else solution_dict(source, **kw)
    return session.submit(Solution.model_validate(data))


def statuses(result):
    return [w.status for w in result.workloads]


def test_honest_python_candidate_passes_and_is_archived(session):
    result = submit(session, TORCH_CANDIDATE)
    assert statuses(result) == ["PASSED", "PASSED"]
    assert result.all_passed and result.status == "PASSED"
    w = result.workloads[0]
    assert w.max_absolute_error is not None and w.max_absolute_error < 1e-2
    assert w.latency_ms is None and "no GPU" in w.timing_note
    row = session.archive.submission(result.submission_id)
    assert row["status"] == "PASSED" and len(row["evaluations"]) == 2
    assert row["environment"]["torch"] and row["environment"]["hardware"]
    # where each workload's time went, within the submission's own accounting
    for phase in ("correctness", "audits"):
        per_workload = [w.phases_s[phase] for w in result.workloads]
        assert all(t > 0 for t in per_workload) and sum(per_workload) <= result.phases_s[phase] + 0.01
    assert result.to_json()["workloads"][1]["phases_s"] == result.workloads[1].phases_s
    assert [e["extra"]["phases_s"] for e in row["evaluations"]] == [w.phases_s for w in result.workloads]  # `show`
    # ...and inside the workers: the candidate's 3 trials x 2 workloads of input drawing and calls, each step
    # within the harness phase that waited for it
    steps = result.worker_steps_s
    assert {"candidate.run.inputs", "candidate.run.call", "candidate.run.fingerprint",
            "candidate.run.transfer"} <= set(steps), steps
    run_steps = sum(v for k, v in steps.items() if k.startswith("candidate.run."))
    assert 0 < run_steps <= result.phases_s["correctness"] + 0.01
    assert list(steps.values()) == sorted(steps.values(), reverse=True)
    assert result.to_json()["worker_steps_s"] == steps


def test_example_triton_solution_passes_in_the_interpreter(session):
    result = submit(session, triton_example(KV8_PS1))
    assert statuses(result) == ["PASSED", "PASSED"], [w.message for w in result.workloads]


def test_example_triton_solution_passes_page_size_64(tiny_dataset_root, archive):
    with Session(Dataset(tiny_dataset_root), archive, SubmitOptions()) as s:
        result = s.submit(Solution.model_validate(triton_example(KV8_PS64)))
    assert statuses(result) == ["PASSED"]


def test_wrong_numbers_are_incorrect_numerical_with_errors(session):
    wrong = TORCH_CANDIDATE.replace("* sm_scale", "* sm_scale * 1.5")
    result = submit(session, wrong)
    assert statuses(result) == ["INCORRECT_NUMERICAL"] * 2
    assert result.workloads[0].max_absolute_error > 1e-2
    assert "outside atol" in result.workloads[0].message


VALUE_RETURNING = '''
import torch
def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    out = torch.zeros(q.shape, dtype={out_dtype})
    lse = torch.zeros(q.shape[:2], dtype=torch.float32)
    return {ret}
'''


@pytest.mark.parametrize("out_dtype, ret, expected", [
    ("torch.bfloat16", "out, lse", "INCORRECT_NUMERICAL"),
    ("torch.float16", "out, lse", "INCORRECT_DTYPE"),
    ("torch.bfloat16", "out[:, :1], lse", "INCORRECT_SHAPE"),
    ("torch.bfloat16", "out", "RUNTIME_ERROR"),  # one tensor where two are due
    ("torch.bfloat16", "out, lse.fill_(float('nan'))", "INCORRECT_NUMERICAL"),
])
def test_value_returning_outputs_are_checked_shape_then_dtype_then_values(session, out_dtype, ret, expected):
    source = VALUE_RETURNING.format(out_dtype=out_dtype, ret=ret)
    result = submit(session, source, dps=False)
    assert result.workloads[0].status == expected, result.workloads[0].message


CRASH_ON_BATCH_2 = '''
import os, sys, ctypes, signal
def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    if q.shape[0] == 2:
        {crash}
    output.zero_(); lse.zero_()
'''


@pytest.mark.parametrize("crash, expect_in_message", [
    ("ctypes.string_at(0)", "SIGSEGV"),
    ("os.abort()", "SIGABRT"),
    ("sys.exit(3)", "SystemExit"),
    ("os._exit(7)", "exit code 7"),
    ("raise MemoryError('out of memory')", "MemoryError"),
    ("os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
])
def test_crashes_are_runtime_errors_and_the_next_workload_still_runs(session, crash, expect_in_message):
    result = submit(session, CRASH_ON_BATCH_2.format(crash=crash))
    first, second = result.workloads
    assert first.status == "RUNTIME_ERROR" and expect_in_message in first.message + first.log
    # The second workload ran in a fresh worker: the candidate returned zeros, so it is judged, not crashed.
    assert second.status == "INCORRECT_NUMERICAL"


def test_a_hang_is_a_timeout_and_the_harness_carries_on(tiny_dataset_root, archive):
    source = CRASH_ON_BATCH_2.format(crash="import time\n        while True: time.sleep(0.05)")
    with Session(Dataset(tiny_dataset_root), archive, SubmitOptions(workloads=PS1_WORKLOADS, timeout_s=6)) as s:
        result = s.submit(Solution.model_validate(solution_dict(source)))
        assert [w.status for w in result.workloads] == ["TIMEOUT", "INCORRECT_NUMERICAL"]
        again = s.submit(Solution.model_validate(solution_dict(TORCH_CANDIDATE)))
        assert again.status == "PASSED"


def test_output_floods_are_truncated_in_the_log(session):
    flood = CRASH_ON_BATCH_2.format(crash="print('x' * (12 << 20)); raise RuntimeError('after the flood')")
    result = submit(session, flood)
    log = result.workloads[0].log
    assert result.workloads[0].status == "RUNTIME_ERROR"
    assert len(log.encode()) <= (5 << 20) + 200 and "bytes of log cut" in log


PROBE = '''
import os
def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    raise RuntimeError("PROBE " + {expr})
'''


def test_worker_environment_is_scrubbed_and_private(session, monkeypatch):
    expr = "repr(os.environ.get('ANTHROPIC_API_KEY')) + ' ' + os.getcwd() + ' ' + os.environ.get('HOME', '')"
    result = submit(session, PROBE.format(expr=expr))
    message = result.workloads[0].message
    assert "PROBE None" in message  # the parent's key (set by conftest) did not reach the worker
    cwd = message.split("PROBE None ")[1].split()[0]
    from harness.sandbox.isolation import WORK_INSIDE, probe

    # the private folder: the sandbox's own /tmp/work, or a crucible-candidate-* folder without namespaces
    assert (cwd == WORK_INSIDE if probe()[0] else "crucible-candidate-" in cwd) and f" {cwd}" in message
    assert f" {cwd}" in message  # HOME is the private folder too


def test_worker_has_no_network_where_the_host_allows_it(session):
    prefix, note = network_isolation()
    if not prefix:
        pytest.skip(note)
    expr = ("(lambda s: (s.settimeout(3), str(s.connect_ex(('1.1.1.1', 53)))))(__import__('socket').socket())[1]")
    result = submit(session, PROBE.format(expr=expr))
    code = int(result.workloads[0].message.split("PROBE ")[1].split()[0])
    assert code != 0  # ENETUNREACH: the namespace has no route anywhere


def test_input_mutation_and_output_aliasing_are_flagged(session):
    mutate = TORCH_CANDIDATE.replace("    batch, heads, dim = q.shape",
                                     "    batch, heads, dim = q.shape\n    q.add_(1.0)")
    result = submit(session, mutate)
    audits = {a.name: a for a in result.workloads[0].audits}
    assert audits["input_mutation"].passed is False and "q" in audits["input_mutation"].detail
    alias = "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):\n    return q, q[:, :, 0].float()\n"
    result = submit(session, alias, dps=False)
    audits = {a.name: a for a in result.workloads[0].audits}
    assert audits["output_aliasing"].passed is False


def test_signature_mismatch_is_a_compile_error_before_any_call(session):
    source = "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output):\n    pass\n"
    result = submit(session, source)
    assert statuses(result) == ["COMPILE_ERROR"] * 2
    assert "must take 8 positional parameters" in result.workloads[0].message


def test_signature_of_a_non_function_entry_is_checked_in_the_worker(session):
    source = "class Runner:\n    def __call__(self, a, b):\n        pass\nrun = Runner()\n"
    result = submit(session, source)
    assert statuses(result) == ["COMPILE_ERROR"] * 2 and "positional parameters" in result.workloads[0].message


def test_import_failure_is_a_compile_error_with_the_traceback(session):
    result = submit(session, "import no_such_module_anywhere\n\ndef run(*args):\n    pass\n")
    assert statuses(result) == ["COMPILE_ERROR"] * 2
    assert "no_such_module_anywhere" in result.workloads[0].log


def test_archive_rows_are_complete_and_readable(session):
    result = submit(session, TORCH_CANDIDATE)
    db = session.archive.db
    rows = list(db["evaluations"].rows_where("submission_id = ?", [result.submission_id]))
    assert [r["status"] for r in rows] == ["PASSED", "PASSED"]
    assert all(json.loads(r["extra"])["audits"] for r in rows)
    assert db.execute("pragma journal_mode").fetchone()[0] == "wal"


def test_audit_level_can_be_overridden_for_one_submission(tiny_dataset_root, tmp_path):
    """The controller's paired timing runs ask for "off"; the session's own level is back afterwards."""
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions
    from harness.data.schema import Solution

    from support import triton_example

    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], audit_level="fast")) as s:
        solution = Solution.model_validate(triton_example())
        off = s.submit(solution, audit_level="off")
        fast = s.submit(solution)
    off_audits = {a.name for a in off.workloads[0].audits}  # mutation and aliasing come with every call
    assert "fresh_input_recheck" not in off_audits and off.promotion_blockers  # never promotable unaudited
    assert {"fresh_input_recheck", "precision"} <= {a.name for a in fast.workloads[0].audits}
    assert fast.promotion_blockers == [] and s.audit_config.level == "fast"


def test_each_candidate_gets_a_fresh_process_started_ahead_of_time(tiny_dataset_root, tmp_path):
    """The spare launched during one submission serves the next one, and is then used up, never reused."""
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions
    from harness.data.schema import Solution

    from support import triton_example

    solution = Solution.model_validate(triton_example())
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "one-off"),
                 SubmitOptions(workloads=["tiny_b2_t40"], audit_level="off")) as s:
        assert s.submit(solution).all_passed and s._spare is None  # not asked for: no process wasted
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], audit_level="off", spare_worker=True)) as s:
        assert s.submit(solution).all_passed
        spare = s._spare
        assert spare is not None and spare.alive  # launched while the first candidate ran
        assert s.submit(solution).all_passed
        assert not spare.alive and spare.workdir is None  # it served the second candidate and was stopped
        assert s._spare is not None and s._spare is not spare and s._spare.alive
        last = s._spare
    assert not last.alive and last.workdir is None  # closing the session removes the unused spare


def test_a_definitions_policy_thresholds_reach_its_audits(tiny_dataset_root, tmp_path):
    """audit_policy.yaml `thresholds:` for one definition: a precision multiple of 1e-6 makes the honest
    example's ordinary bf16 error a failure there, and only there."""
    import shutil

    import yaml

    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions
    from harness.data.schema import Solution
    from harness.audits.static_gate import DEFAULT_POLICY_PATH

    from support import KV8_PS1, triton_example

    root = tmp_path / "ds"
    shutil.copytree(tiny_dataset_root, root)
    policy = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    policy["definition"] = {KV8_PS1: {"thresholds": {"precision_error_multiple": 1e-6, "precision_error_floor": 1e-12,
                                                  "precision_relative_floor": 1e-12}}}
    (root / "audit_policy.yaml").write_text(yaml.safe_dump(policy))
    with Session(Dataset(root), Archive(tmp_path / "a"), SubmitOptions(workloads=["tiny_b2_t40"])) as s:
        result = s.submit(Solution.model_validate(triton_example()))
    precision = next(a for a in result.workloads[0].audits if a.name == "precision")
    assert not precision.passed and "1e-06x" in precision.detail
    assert s.audit_config.precision_error_multiple == 4.0  # the session's own config is back afterwards


def test_a_speedup_beyond_the_bound_runs_the_full_audit_set_on_that_workload(tiny_dataset_root, tmp_path):
    """Escalation (GPU only in a real run, where the FlashInfer speedup is known): the full level's recheck
    on other never-seen inputs, then attribution (which says why it cannot run on a CPU)."""
    from harness.archive.database import Archive
    from harness.measure.correctness import Tolerance
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions, WorkloadResult
    from harness.data.schema import Solution

    from support import KV8_PS1, triton_example

    ds = Dataset(tiny_dataset_root)
    definition, preset = ds.definition(KV8_PS1), ds.preset(KV8_PS1)
    [workload] = ds.workloads_for(KV8_PS1, ["tiny_b2_t40"])
    tol = Tolerance(preset.atol, preset.rtol, preset.required_matched_ratio, preset.allow_matching_nonfinite)
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions(workloads=["tiny_b2_t40"])) as s:
        worker, failure = s._start_candidate(Solution.model_validate(triton_example()), definition, 120)
        assert failure is None
        try:
            wr = WorkloadResult(workload.uuid, "tiny_b2_t40", "PASSED", speedup_vs_fi_kernel=9.0)
            s._escalate(worker, definition, workload, preset, tol, 120, wr)
        finally:
            worker.stop()
    names = [a.name for a in wr.audits]
    assert names[0] == "escalation" and "9x faster than FlashInfer (bound 5x)" in wr.audits[0].detail
    recheck = next(a for a in wr.audits if a.name == "fresh_input_recheck")
    assert recheck.passed and recheck.detail.startswith("6 calls")  # full: 4 fresh sets + 2 reused buffers
    assert not any(a.name == "attribution" for a in wr.audits)  # attribution runs at every level, not here
    s._attribution(Solution.model_validate(triton_example()), wr)
    assert "attribution unavailable: no timing" in wr.timing_note  # no GPU: said, not held against the candidate


@pytest.mark.parametrize("error, status, words", [
    (RuntimeError("boom"), "HARNESS_ERROR", "the harness failed: RuntimeError: boom"),
    (KeyboardInterrupt(), "INTERRUPTED", "stopped (KeyboardInterrupt) before it finished"),
])
def test_a_submission_the_harness_cannot_finish_is_archived_as_such(tiny_dataset_root, tmp_path, monkeypatch,
                                                                    error, status, words):
    """Never left RUNNING: the finished workloads stay, and the submission says why it stopped."""
    def fail(*_args, **_kwargs):
        raise error

    monkeypatch.setattr(Session, "_instruction_proof", fail)  # after every workload was evaluated
    archive = Archive(tmp_path / "a")
    with Session(Dataset(tiny_dataset_root), archive, SubmitOptions(workloads=["tiny_b2_t40"])) as s:
        with pytest.raises(type(error)):
            s.submit(Solution.model_validate(solution_dict(TORCH_CANDIDATE)))
    (row,) = archive.submissions()
    assert row["status"] == status and words in row["message"]
    assert [e["status"] for e in archive.submission(row["id"])["evaluations"]] == ["PASSED"]


def test_stack_dumps_of_a_slow_worker_reach_its_log(tiny_dataset_root, tmp_path, monkeypatch):
    """CRUCIBLE_DUMP_STACKS_AFTER_S: where a slow candidate call spends its time is in the workload's log."""
    monkeypatch.setenv("CRUCIBLE_DUMP_STACKS_AFTER_S", "0.5")
    slow = TORCH_CANDIDATE.replace("    batch, heads, dim = q.shape",
                                   "    import time\n    time.sleep(1.5)\n    batch, heads, dim = q.shape")
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=PS1_WORKLOADS[:1], timeout_s=60)) as s:
        result = submit(s, slow)
    assert statuses(result) == ["PASSED"], (result.workloads[0].message, result.workloads[0].log[-3000:])
    assert "most recent call first" in result.workloads[0].log and "in run" in result.workloads[0].log


def test_the_datasets_own_baseline_submitted_as_a_candidate_runs_as_a_baseline_worker(tmp_path):
    """Byte for byte the dataset's baseline: its worker gets the baseline role (the session's FlashInfer JIT cache),
    so submitting it does not compile FlashInfer's modules again in a private folder; any change makes it a
    candidate like any other."""
    from harness.data.results import WorkloadResult

    shipped = Dataset()
    baseline = shipped.baselines(KV8_PS1)[0]
    edited = baseline.model_copy(update={"name": "edited", "sources": [
        src.model_copy(update={"content": src.content + "\n# one line more\n"}) for src in baseline.sources]})
    roles = []
    with Session(shipped, Archive(tmp_path / "a"), SubmitOptions(workloads=["uniform_b1_kv512"], timing=False,
                                                                 baselines=False)) as s:
        def start(solution, definition, timeout_s, role="candidate", deadline=None, result=None):
            roles.append((solution.name, role))
            return None, WorkloadResult("", "", "COMPILE_ERROR", message="not built in this test")

        s._start_candidate = start
        for solution in (baseline, edited):
            assert s.submit(solution).workloads[0].status == "COMPILE_ERROR"
    assert roles == [(baseline.name, "baseline"), ("edited", "candidate")]


def test_a_solution_that_runs_out_of_time_twice_in_a_row_is_not_run_on_the_rest(tmp_path):
    """Each timeout costs the whole limit in a fresh process: after two in a row the remaining workloads are
    SKIPPED with the reason (a hanging solution on GDN prefill's 100 workloads would otherwise take hours)."""
    hang = "import time\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n" \
           "    while True:\n        time.sleep(0.05)\n"
    workloads = ["uniform_b1_kv512", "uniform_b1_kv2048", "uniform_b64_kv512"]
    with Session(Dataset(), Archive(tmp_path / "a"), SubmitOptions(workloads=workloads, timeout_s=4)) as s:
        result = s.submit(Solution.model_validate(solution_dict(hang)))
    assert [w.status for w in result.workloads] == ["TIMEOUT", "TIMEOUT", "SKIPPED"]
    assert result.workloads[2].message == ("not run: the solution ran out of time on uniform_b1_kv512 and "
                                           "uniform_b1_kv2048 in a row (each in a fresh process, 4 s limit)")
    assert result.status == "TIMEOUT" and result.promotion_blockers
