"""The submission's bookkeeping as pure functions (harness.pipeline.submission_summary): no workers, no archive."""

from __future__ import annotations

from types import SimpleNamespace

from harness.data.results import SubmissionResult, WorkloadResult
from harness.data.statuses import SubmissionStatus
from harness.measure.memory import evaluation_processes
from harness.pipeline.submission_summary import (
    archived_scores,
    cpu_skip_message,
    cut_short,
    opened_result,
    overall_status,
    settle,
    unrun_result,
)

PASSED, INCORRECT = "PASSED", "INCORRECT_NUMERICAL"
SKIPPED, HARNESS_ERROR, INTERRUPTED = (SubmissionStatus.SKIPPED, SubmissionStatus.HARNESS_ERROR,
                                       SubmissionStatus.INTERRUPTED)
WORKLOAD = SimpleNamespace(uuid="w-1")


def _wr(label: str, status: str = PASSED, **fields) -> WorkloadResult:
    return WorkloadResult(f"uuid-{label}", label, status, **fields)


def test_the_first_failure_decides_and_skips_never_pass():
    assert overall_status([]) == SKIPPED
    assert overall_status([_wr("a", SKIPPED)]) == SKIPPED
    assert overall_status([_wr("a"), _wr("b", SKIPPED)]) == PASSED
    assert overall_status([_wr("a"), _wr("b", INCORRECT), _wr("c", "RUNTIME_ERROR")]) == INCORRECT


def test_a_workload_not_run_says_why_in_order():
    assert cpu_skip_message(1 << 20, 1.0) is None  # at the limit it runs
    message = cpu_skip_message(3 << 20, 1.0)
    assert message == ("skipped on CPU: 3 MiB of inputs > 1 MiB, too slow to check without a GPU "
                       "(--all-workloads runs it)")
    assert unrun_result(WORKLOAD, "w", None, None, None) is None
    skipped = unrun_result(WORKLOAD, "w", message, "bad signature", None)
    assert (skipped.status, skipped.message) == (SKIPPED, message)
    static = unrun_result(WORKLOAD, "w", None, "bad signature", _wr("x", "COMPILE_ERROR", message="nvcc"))
    assert (static.status, static.message, static.log) == ("COMPILE_ERROR", "bad signature", "bad signature")
    built = unrun_result(WORKLOAD, "w", None, None, _wr("x", "COMPILE_ERROR", message="nvcc", log="log"))
    assert (built.workload, built.status, built.message, built.log) == ("w-1", "COMPILE_ERROR", "nvcc", "log")


def test_opened_result_notes_the_sandbox_and_missing_timing():
    full = opened_result(7, "sol", "def", [], "full", True, True)
    assert (full.status, full.notices, full.timing_unavailable_reason) == ("RUNNING", [], None)
    reduced = opened_result(7, "sol", "def", [], "reduced (no user namespace)", False, True)
    assert reduced.notices == ["sandbox: reduced (no user namespace)"]
    assert reduced.timing_unavailable_reason.startswith("no GPU on this host")
    assert opened_result(7, "s", "d", [], "full", True, False).timing_unavailable_reason.startswith("timing switched")


def test_settle_fills_status_scores_notices_and_blockers():
    result = SubmissionResult(1, "sol", "def", "RUNNING", [
        _wr("a", speedup_factor=2.0, baseline_failures=["fi_x: RUNTIME_ERROR boom"],
            memory={"within_budget": False}),
        _wr("b", SKIPPED, message="skipped on CPU"),
    ], notices=["sandbox: reduced"])
    settle(result, "off", reference_is_the_yardstick=True)
    assert result.status == PASSED
    notices = result.notices
    assert notices[0] == "sandbox: reduced"  # the opening notices stay first
    assert notices[1].startswith("FlashInfer baseline(s) fi_x failed on 1 workload(s): fi_x: RUNTIME_ERROR boom")
    assert notices[2].startswith("no library baseline for def on this GPU")
    assert notices[3] == "GPU memory over budget on a (harness show: memory)"
    assert notices[4] == "1 of 2 workloads skipped: skipped on CPU"
    assert result.promotion_blockers and result.promotion_blockers[0] == "audits were switched off"
    archived = archived_scores(result)
    assert archived["promotable"] is False and archived["promotion_blockers"] == result.promotion_blockers
    assert set(result.scores) <= set(archived)


def test_cut_short_tells_a_harness_failure_from_an_interruption():
    assert cut_short(RuntimeError("x")) == (HARNESS_ERROR, "the harness failed: RuntimeError: x")
    assert len(cut_short(RuntimeError("y" * 3000))[1]) == 2000
    status, message = cut_short(KeyboardInterrupt())
    assert status == INTERRUPTED and message.startswith("stopped (KeyboardInterrupt)")


def test_evaluation_processes_count_this_definitions_live_baselines():
    def worker(peak: int, alive: bool = True) -> SimpleNamespace:
        return SimpleNamespace(peak_bytes=peak, resident_bytes=1, alive=alive)

    baselines = {"h1": worker(30), "h2": worker(40, alive=False), "h3": worker(50), "h4": None}
    processes = evaluation_processes(worker(10), None, baselines, {"h1": "fi_a", "h2": "fi_b", "h4": "fi_d"})
    assert processes == {"candidate": (10, 1), "baseline fi_a": (30, 1)}
    assert evaluation_processes(worker(10), worker(20), {}, {})["reference"] == (20, 1)


def test_a_long_recurrence_is_skipped_on_cpu_however_small_its_inputs():
    """GDN prefill updates a 128 x 128 state per token and head: under the Triton interpreter the family's own
    recurrent example ran out of its 300 s on t1377_n1 (3 MiB of inputs; 257 s on t294_n3), a TIMEOUT that made an
    honest submission unpromotable on CPU. Such a workload is skipped there, as large inputs are."""
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.families import family_for
    from harness.pipeline.evaluate import input_bytes

    assert cpu_skip_message(1 << 20, 12.0, 201, 200) == (
        "skipped on CPU: a recurrence of 201 steps (tokens) > 200, too slow to check without a GPU "
        "(--all-workloads runs it)")
    assert cpu_skip_message(1 << 20, 12.0, 200, 200) is None and cpu_skip_message(1 << 20, 12.0, 10 ** 6) is None
    options, ds = SubmitOptions(), Dataset()
    for name, runs, skipped in [("gdn_prefill_qk4_v8_d128_k_last", {"t134_n1_0", "t185_n2", "t6_n1"},
                                 {"t1377_n1", "t294_n3", "t983_n2_0"}),
                                ("gdn_decode_qk4_v8_d128_k_last", {"b1_0", "b16_0"}, set())]:
        definition = ds.definition(name)
        family = family_for(definition.op_type)
        by_label = {ds.label(w): w for w in ds.workloads[name]}
        for label in runs | skipped:
            workload = by_label[label]
            message = cpu_skip_message(input_bytes(definition, workload), options.cpu_max_input_mib,
                                       family.serial_steps(definition, workload), options.cpu_max_serial_steps)
            assert (message is not None) == (label in skipped), (label, message)
            assert message is None or "recurrence" in message
