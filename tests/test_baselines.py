"""Which FlashInfer figure a workload is scored against (harness.pipeline.baselines.best_of): the faster passing
baseline
per figure, and the failures named, never hidden."""

import contextlib

import pytest

from harness.pipeline.baselines import best_of


def run(name, status="PASSED", official=None, kernel=None, message=None, busy=None):
    return {"solution": name, "status": status, "official_ms": official, "kernel_ms": kernel, "message": message,
            "busy_ms": busy}


@pytest.mark.parametrize("runs, official, official_from, kernel, kernel_from, failures", [
    # each figure from whichever baseline is faster at it
    ([run("tc", official=0.020, kernel=0.012), run("cc", official=0.018, kernel=0.015)],
     0.018, "cc", 0.012, "tc", []),
    # a baseline without a separate kernel figure competes with its official one
    ([run("tc", official=0.020), run("cc", official=0.030, kernel=0.010)], 0.020, "tc", 0.010, "cc", []),
    # a failed baseline does not count, and says why
    ([run("tc", "RUNTIME_ERROR", message="CUDA out of memory"), run("cc", official=0.03, kernel=0.02)],
     0.03, "cc", 0.02, "cc", ["tc: RUNTIME_ERROR CUDA out of memory"]),
    # none passed: no figure at all, never a number from a failure
    ([run("tc", "COMPILE_ERROR", message="build: nvcc"), run("cc", "TIMEOUT")], None, None, None, None,
     ["tc: COMPILE_ERROR build: nvcc", "cc: TIMEOUT"]),
])
def test_best_of(runs, official, official_from, kernel, kernel_from, failures):
    got = best_of(runs)
    assert got["official_ms"] == official and got["kernel_ms"] == kernel and got["failures"] == failures
    assert got.get("official_solution") == official_from and got.get("kernel_solution") == kernel_from
    assert got["runs"] == runs


def test_the_busy_time_comes_from_the_baseline_whose_official_figure_is_used():
    got = best_of([run("tc", official=0.020, kernel=0.012, busy=0.011), run("cc", official=0.018, busy=0.004)])
    assert got["official_solution"] == "cc" and got["official_busy_ms"] == 0.004


class _Keys:
    """The trusted side's keys: which card and toolchain a figure comes from."""

    def __init__(self, uuid):
        self.gpu_key, self.gpu_model, self.toolchain_key = f"NVIDIA H200|{uuid}", "NVIDIA H200", "torch 2.11"


class _Worker:
    alive = True

    def stop(self):
        self.alive = False


def test_figures_are_measured_once_per_card_and_carried_to_its_twin_after_a_spot_check(tmp_path):
    from harness.archive.database import Archive
    from harness.pipeline.baselines import Baselines
    from harness.measure.correctness import Tolerance
    from harness.data.dataset import Dataset
    from harness.data.results import WorkloadResult
    from harness.data.schema import Solution

    from support import KV8_PS1, solution_dict

    shipped = Dataset()
    definition, preset = shipped.definition(KV8_PS1), shipped.preset(KV8_PS1)
    workload = shipped.workloads_for(KV8_PS1)[0]
    baseline = Solution.model_validate(solution_dict("def run(*a):\n    pass\n", name="fi_like"))
    dataset = type("D", (), {"baselines": lambda self, name: [baseline], "label": lambda self, w: "w0",
                             "workloads_for": lambda self, name, selection=None: [workload]})()
    archive, trust, calls = Archive(tmp_path / "a"), {}, []

    def evaluate(worker, definition, workload, label, preset, tol, timeout_s):
        calls.append(label)
        wr = WorkloadResult(workload.uuid, label, "PASSED")
        wr.latency_ms, wr.kernel_latency_ms = 0.220, 0.200 + 0.01 * (len(calls) - 1)  # device time: may travel
        wr.gpu_busy_ms = 0.009
        return wr

    def on(uuid):
        return Baselines(dataset, archive, _Keys(uuid), trust, lambda *a: (_Worker(), None), evaluate)

    first = on("GPU-1").figures(definition, workload, preset, Tolerance(), 60)
    assert first["official_ms"] == 0.220 and first["kernel_ms"] == 0.200 and calls == ["w0"]
    assert on("GPU-1").figures(definition, workload, preset, Tolerance(), 60)["kernel_ms"] == 0.200
    assert calls == ["w0"]  # the same card: read back from the archive
    assert on("GPU-1").figures(definition, workload, preset, Tolerance(), 60)["official_busy_ms"] == 0.009
    twin = on("GPU-2").figures(definition, workload, preset, Tolerance(), 60)  # another H200: one spot check
    assert len(calls) == 2 and twin["kernel_ms"] == pytest.approx(0.210)
    assert trust[("baseline", baseline.content_hash)] is True
    rows = list(archive.db["baseline_runs"].rows)
    assert [r["gpu_key"] for r in rows] == ["NVIDIA H200|GPU-1", "NVIDIA H200|GPU-2"]


def test_a_twin_reuses_device_bound_figures_after_a_spot_check_and_measures_launch_bound_ones(tmp_path):
    """Carried to another card of the model: the first device-bound workload is the spot check, later
    device-bound ones are reused; a launch-bound one (a kernel figure of microseconds, launch gaps and the Python
    call as much as device time) is measured on every host and never decides the spot check."""
    from harness.archive.database import Archive
    from harness.pipeline.baselines import Baselines
    from harness.measure.correctness import Tolerance
    from harness.data.dataset import Dataset
    from harness.data.results import WorkloadResult
    from harness.data.schema import Solution

    from support import KV8_PS1, solution_dict

    shipped = Dataset()
    definition, preset = shipped.definition(KV8_PS1), shipped.preset(KV8_PS1)
    small, large, larger = shipped.workloads_for(KV8_PS1)[:3]
    names = {small.uuid: "small", large.uuid: "large", larger.uuid: "larger"}
    baseline = Solution.model_validate(solution_dict("def run(*a):\n    pass\n", name="fi_like"))
    dataset = type("D", (), {"baselines": lambda self, name: [baseline],
                             "label": lambda self, w: names[w.uuid],
                             "workloads_for": lambda self, name, selection=None: [small, large, larger]})()
    archive, trust, calls = Archive(tmp_path / "a"), {}, []
    figures = {"small": (0.17, 0.011), "large": (2.2, 2.0), "larger": (8.3, 8.0)}  # (official, kernel) ms
    slower_host = {"small": 1.2, "large": 1.02, "larger": 1.01}  # launch gaps grow, device time does not

    def evaluate_on(factor):
        def evaluate(worker, definition, workload, label, preset, tol, timeout_s):
            calls.append(label)
            wr = WorkloadResult(workload.uuid, label, "PASSED")
            official, kernel = figures[label]
            wr.latency_ms, wr.kernel_latency_ms = official * factor(label), kernel * factor(label)
            return wr
        return evaluate

    made = []

    def figures_on(uuid, factor, workload):
        made.append(Baselines(dataset, archive, _Keys(uuid), trust, lambda *a: (_Worker(), None),
                              evaluate_on(factor)))
        return made[-1].figures(definition, workload, preset, Tolerance(), 60)

    def notices():
        found = [n for b in made for n in b.spot_checks]
        made.clear()
        return found

    for w in (small, large, larger):
        figures_on("GPU-1", lambda label: 1.0, w)
    calls.clear()
    twin = [figures_on("GPU-2", slower_host.get, w) for w in (small, large, larger)]
    assert calls == ["small", "large"]  # small: this host's to measure; large: the spot check; larger: reused
    (notice,) = notices()  # the user is told what the check found
    assert "fi_like: spot check on large" in notice and "official 2.244 ms here vs 2.2 carried" in notice
    assert "held" in notice and "did not hold" not in notice
    assert trust[("baseline", baseline.content_hash)] is True
    assert twin[0]["kernel_ms"] == pytest.approx(0.0132)  # this host's own figure, not the carried 0.011
    assert twin[1]["kernel_ms"] == pytest.approx(2.04) and twin[2]["kernel_ms"] == 8.0
    # a later session on that card (a warm `harness submit`): the spot check it made is read from the archive, so
    # nothing is measured again and no baseline worker needs to start at all
    calls.clear()
    trust.clear()
    later = Baselines(dataset, archive, _Keys("GPU-2"), trust, lambda *a: (_Worker(), None),
                      evaluate_on(slower_host.get))
    assert later.to_run(definition, [small, large, larger]) == []
    assert later.figures(definition, larger, preset, Tolerance(), 60)["kernel_ms"] == 8.0
    assert calls == [] and later.spot_checks == [] and trust[("baseline", baseline.content_hash)] is True
    # a card whose device-bound figures differ: the spot check fails and everything is measured there
    calls.clear()
    trust.clear()
    [figures_on("GPU-3", lambda label: 1.3, w) for w in (small, large, larger)]
    assert calls == ["small", "large", "larger"] and trust[("baseline", baseline.content_hash)] is False
    (notice,) = notices()
    assert "spot check on large" in notice and "did not hold (tolerance 10%)" in notice
    # ...and stays failed in its later sessions: read from the archive, never a carried figure there
    trust.clear()
    later = Baselines(dataset, archive, _Keys("GPU-3"), trust, lambda *a: (_Worker(), None), evaluate_on(lambda l: 1.3))
    assert later.trust(baseline, definition) is False
    # a fourth card with nothing of its own: not checked yet, so its first device-bound workload is measured
    trust.clear()
    fresh = Baselines(dataset, archive, _Keys("GPU-4"), trust, lambda *a: (_Worker(), None), evaluate_on(lambda l: 1.0))
    assert fresh.trust(baseline, definition) is None and fresh.to_run(definition, [larger]) == [baseline]


def test_flashinfer_cache_is_the_archives_unless_the_host_names_one(tmp_path, monkeypatch):
    from harness.pipeline.baselines import FLASHINFER_CACHE_ENV, flashinfer_cache

    monkeypatch.delenv(FLASHINFER_CACHE_ENV, raising=False)
    assert flashinfer_cache(tmp_path / "a") == tmp_path / "a" / "cache" / "flashinfer"
    monkeypatch.setenv(FLASHINFER_CACHE_ENV, str(tmp_path / "host"))
    assert flashinfer_cache(tmp_path / "a") == flashinfer_cache(tmp_path / "b") == tmp_path / "host"
    monkeypatch.setenv(FLASHINFER_CACHE_ENV, "  ")
    assert flashinfer_cache(tmp_path / "b") == tmp_path / "b" / "cache" / "flashinfer"


def test_a_baseline_that_runs_out_of_time_is_not_started_again_in_the_session(tmp_path):
    """A library's JIT build on a fresh host can outlast the workload's limit: one timeout, then the later
    workloads list the baseline as not run (with the reason), unarchived, instead of each paying the limit again."""
    from harness.archive.database import Archive
    from harness.pipeline.baselines import Baselines
    from harness.measure.correctness import Tolerance
    from harness.data.dataset import Dataset
    from harness.data.results import WorkloadResult
    from harness.data.schema import Solution

    from support import KV8_PS1, solution_dict

    shipped = Dataset()
    definition, preset = shipped.definition(KV8_PS1), shipped.preset(KV8_PS1)
    first, second, third = shipped.workloads_for(KV8_PS1)[:3]
    slow = Solution.model_validate(solution_dict("def run(*a):\n    pass\n", name="jit_on_first_call"))
    fine = Solution.model_validate(solution_dict("def run(*a):\n    return None\n", name="prebuilt"))
    dataset = type("D", (), {"baselines": lambda self, name: [slow, fine],
                             "label": lambda self, w: shipped.label(w)})()
    archive, calls, starts = Archive(tmp_path / "a"), [], []

    def start(sol, definition, timeout_s):
        starts.append(sol.name)
        return _Worker(), None

    def evaluate(worker, definition, workload, label, preset, tol, timeout_s):
        calls.append(label)
        if calls == [shipped.label(first)]:  # the first baseline's first call: its JIT build outlasts the limit
            return WorkloadResult(workload.uuid, label, "TIMEOUT", message="workload timed out")
        wr = WorkloadResult(workload.uuid, label, "PASSED")
        wr.latency_ms = wr.kernel_latency_ms = 0.02
        return wr

    baselines = Baselines(dataset, archive, _Keys("GPU-1"), {}, start, evaluate)
    one = baselines.figures(definition, first, preset, Tolerance(), 60)
    assert one["failures"] == ["jit_on_first_call: TIMEOUT workload timed out"] and one["official_ms"] == 0.02
    for workload in (second, third):
        later = baselines.figures(definition, workload, preset, Tolerance(), 60)
        assert later["official_ms"] == 0.02  # the other baseline still covers it
        assert later["failures"] == [f"jit_on_first_call: SKIPPED not run: timed out on {shipped.label(first)} "
                                     "in this session (60 s limit)"]
    assert starts == ["jit_on_first_call", "prebuilt"]  # never restarted
    assert len(calls) == 4  # first workload: both; later ones: only the prebuilt baseline
    rows = list(archive.db["baseline_runs"].rows)
    assert [(r["solution_name"], r["status"]) for r in rows] == [
        ("jit_on_first_call", "TIMEOUT"), ("prebuilt", "PASSED"), ("prebuilt", "PASSED"), ("prebuilt", "PASSED")]


@pytest.mark.parametrize("messages, evaluated", [
    # FlashInfer's GDN kernels without CuTe-DSL: the same error on every call; two in a row, then not run again
    (["trial 0: RuntimeError: CuTe-DSL is not available"] * 4, 2),
    # failures that differ (the largest workloads out of memory, one by one) are each still tried
    (["trial 0: OutOfMemoryError: 40 GiB", "trial 0: OutOfMemoryError: 80 GiB", "trial 0: x", "trial 0: y"], 4),
])
def test_a_baseline_failing_the_same_way_twice_in_a_row_is_not_run_again(tmp_path, messages, evaluated):
    from harness.archive.database import Archive
    from harness.pipeline.baselines import Baselines
    from harness.measure.correctness import Tolerance
    from harness.data.dataset import Dataset
    from harness.data.results import WorkloadResult
    from harness.data.schema import Solution

    from support import KV8_PS1, solution_dict

    shipped = Dataset()
    definition, preset = shipped.definition(KV8_PS1), shipped.preset(KV8_PS1)
    workloads = shipped.workloads_for(KV8_PS1)[:4]
    broken = Solution.model_validate(solution_dict("def run(*a):\n    pass\n", name="needs_cute_dsl"))
    dataset = type("D", (), {"baselines": lambda self, name: [broken], "label": lambda self, w: shipped.label(w)})()
    calls, starts = [], []

    def start(sol, definition, timeout_s):
        starts.append(sol.name)
        return _Worker(), None

    def evaluate(worker, definition, workload, label, preset, tol, timeout_s):
        calls.append(label)
        return WorkloadResult(workload.uuid, label, "RUNTIME_ERROR", message=messages[len(calls) - 1])

    baselines = Baselines(dataset, Archive(tmp_path / "a"), _Keys("GPU-1"), {}, start, evaluate)
    runs = [baselines.figures(definition, w, preset, Tolerance(), 60) for w in workloads]
    assert len(calls) == len(starts) == evaluated
    if evaluated == 2:
        assert runs[2]["failures"] == runs[3]["failures"] == [
            "needs_cute_dsl: SKIPPED not run: failed the same way on two workloads in a row, the last "
            f"{shipped.label(workloads[1])}: RUNTIME_ERROR trial 0: RuntimeError: CuTe-DSL is not available"]
    assert all(r["official_ms"] is None for r in runs)


def test_only_baselines_without_a_figure_on_this_card_are_to_run(tmp_path):
    from harness.archive.database import Archive
    from harness.pipeline.baselines import Baselines
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution

    from support import KV8_PS1, solution_dict

    shipped = Dataset()
    definition = shipped.definition(KV8_PS1)
    first, second = shipped.workloads_for(KV8_PS1)[:2]
    measured, new = (Solution.model_validate(solution_dict(f"def run(*a):\n    pass  # {n}\n", name=n))
                     for n in ("measured", "new"))
    dataset = type("D", (), {"baselines": lambda self, name: [measured, new], "label": lambda self, w: "w"})()
    archive, keys = Archive(tmp_path / "a"), _Keys("GPU-1")
    for w in (first, second):
        archive.add_baseline_run({
            "gpu_key": keys.gpu_key, "gpu_model": keys.gpu_model, "toolchain": keys.toolchain_key,
            "definition": KV8_PS1, "workload_uuid": w.uuid, "solution_hash": measured.content_hash,
            "solution_name": "measured", "status": "PASSED", "official_ms": 0.02, "kernel_ms": 0.01, "busy_ms": None,
            "message": None, "log_blob": None})
    baselines = Baselines(dataset, archive, keys, {}, lambda *a: (None, None), lambda *a: None)
    assert [s.name for s in baselines.to_run(definition, [first, second])] == ["new"]
    assert [s.name for s in Baselines(dataset, archive, _Keys("GPU-2"), {}, lambda *a: (None, None),
                                      lambda *a: None).to_run(definition, [first])] == ["measured", "new"]
    baselines.given_up[new.content_hash] = "timed out"
    assert baselines.to_run(definition, [first, second]) == []


def test_a_baseline_process_launched_ahead_is_the_one_its_start_uses(monkeypatch):
    """Its imports overlap the candidate's first workload; one never used is stopped with the session."""
    from harness.pipeline import candidate_workers
    from harness.data.options import SubmitOptions
    from harness.data.schema import Solution
    from support import solution_dict

    class FakeProcess:
        launched: list = []

        def __init__(self, options):
            self.options, self.alive, self.stopped = options, True, False
            FakeProcess.launched.append(self)

        def launch(self):
            pass

        def wait_ready(self):
            return {}

        def request(self, message, timeout_s):
            return type("R", (), {"ok": True, "compile_only": False, "note": "", "log": ""})(), {}

        def stop(self, graceful=True):
            self.alive, self.stopped = False, True

    monkeypatch.setattr(candidate_workers, "WorkerProcess", FakeProcess)
    workers = candidate_workers.CandidateWorkers(SubmitOptions(), lambda role, cpu_only=None: ("options", role),
                                                 contextlib.nullcontext)
    used, unused = (Solution.model_validate(solution_dict(f"def run(*a):\n    pass  # {n}\n", name=n))
                    for n in ("used", "unused"))
    for sol in (used, unused):
        workers.launch_ahead(sol.content_hash, "baseline")
    workers.launch_ahead(used.content_hash, "baseline")  # once per solution
    assert len(FakeProcess.launched) == 2
    from harness.data.dataset import Dataset
    from support import KV8_PS1

    worker, failure = workers.start(used, Dataset().definition(KV8_PS1), 60, role="baseline")
    assert failure is None and worker is FakeProcess.launched[0] and len(FakeProcess.launched) == 2
    workers.close()
    assert FakeProcess.launched[1].stopped and not worker.stopped
