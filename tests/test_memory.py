"""GPU memory bookkeeping and scores over partial baselines: pure functions (harness.measure.memory,
harness.measure.scores),
the recheck's buffer retention, and baseline runs in the archive."""

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import pytest

from harness.archive.database import Archive
from harness.audits.verdicts import plan_recheck
from harness.data.dataset import Dataset
from harness.measure.memory import GIB, budget_bytes, describe, io_bytes, memory_record, together_bytes
from harness.measure.scores import (baseline_spot_check_holds, carried_baseline_reusable, definition_scores,
                                   partial_notice, spot_check_holds)
from harness.sandbox.messages import RecheckStep
from harness.sandbox.worker_calls import last_reuse

KV8_PS1 = "gqa_paged_decode_h32_kv8_d128_ps1"


@pytest.mark.parametrize("processes, together", [
    ({}, 0),
    ({"candidate": (5 * GIB, 0)}, 5 * GIB),
    # one at its peak while the others hold their resident memory; the worst such moment
    ({"candidate": (8 * GIB, 0), "reference": (6 * GIB, GIB // 2), "baseline": (3 * GIB, GIB // 4)},
     8 * GIB + GIB // 2 + GIB // 4),
    ({"candidate": (GIB, 0), "reference": (10 * GIB, 0)}, 10 * GIB),
])
def test_together(processes, together):
    assert together_bytes(processes) == together


def test_io_bytes_and_budget_of_the_largest_workload():
    ds = Dataset()
    definition = ds.definition(KV8_PS1)
    [largest] = ds.workloads_for(KV8_PS1, ["uniform_b256_kv8192"])
    io = io_bytes(definition, largest)
    # K and V caches: 256 x 8192 tokens x 8 heads x 128 x bf16, each; q, indices and outputs are small
    assert 2 * 256 * 8192 * 8 * 128 * 2 < io < 2 * 256 * 8192 * 8 * 128 * 2 * 1.01
    assert budget_bytes(io) == 3 * io + 2 * GIB
    record = memory_record(definition, largest, {"candidate": (17 * GIB, 0), "reference": (12 * GIB, GIB // 8)})
    assert record["within_budget"] and record["together_bytes"] == 17 * GIB + GIB // 8
    over = memory_record(definition, largest, {"reference": (72 * GIB, 0)})
    assert not over["within_budget"] and "OVER BUDGET" in describe(over)


@pytest.mark.parametrize("fresh, reused", [(2, 1), (4, 2), (3, 0)])
def test_the_recheck_keeps_only_buffers_it_reuses(fresh, reused):
    import random

    steps = plan_recheck(list(range(fresh)), reused, random.Random(fresh * 10 + reused))
    last = last_reuse([RecheckStep.model_validate(s) for s in steps])
    assert set(last) == {s["buffers_of"] for s in steps if s["kind"] == "reuse"}
    for index, j in last.items():
        assert steps[index]["kind"] == "fresh" and j > index
        assert all(s.get("buffers_of") != index for s in steps[j + 1:])  # nothing needs them after j
    # at most the reused sets plus the step being generated are alive at once
    assert len(last) <= min(fresh, reused)


@dataclass
class W:
    label: str
    status: str
    speedup_factor: Optional[float] = None
    speedup_vs_fi_official: Optional[float] = None
    speedup_vs_fi_kernel: Optional[float] = None

    @property
    def evaluated(self) -> bool:
        return self.status != "SKIPPED"


@pytest.mark.parametrize("workloads, scores, partial", [
    ([W("a", "PASSED", None, 2.0, 1.0), W("b", "PASSED", None, 4.0, 3.0)],
     {"vs_reference": None, "vs_flashinfer_official": 3.0, "vs_flashinfer_kernel": 2.0}, {}),
    # FlashInfer failed on b: the score is over a alone and lists b, never a silent null
    ([W("a", "PASSED", None, 2.0, 1.0), W("b", "PASSED")],
     {"vs_reference": None, "vs_flashinfer_official": 2.0, "vs_flashinfer_kernel": 1.0},
     {"vs_flashinfer_official": ["b"], "vs_flashinfer_kernel": ["b"]}),
    ([W("a", "PASSED", 1.0, 2.0, 1.0), W("b", "INCORRECT_NUMERICAL")],
     {"vs_reference": 0.0, "vs_flashinfer_official": 0.0, "vs_flashinfer_kernel": 0.0}, {}),
    ([W("a", "SKIPPED")], {"vs_reference": None, "vs_flashinfer_official": None, "vs_flashinfer_kernel": None}, {}),
])
def test_scores_over_the_workloads_a_baseline_covers(workloads, scores, partial):
    assert definition_scores(workloads) == (scores, partial)


def test_partial_notice_names_the_workloads_and_why():
    [notice] = partial_notice({"vs_flashinfer_kernel": ["uniform_b256_kv8192"]},
                              {"uniform_b256_kv8192": "flashinfer_decode: RUNTIME_ERROR CUDA out of memory"})
    assert "partial" in notice and "uniform_b256_kv8192" in notice and "out of memory" in notice


@pytest.mark.parametrize("carried, measured, holds", [(1.0, 1.05, True), (1.0, 1.2, False), (0.0, 1.0, False)])
def test_spot_check(carried, measured, holds):
    assert spot_check_holds(carried, measured) is holds


@pytest.mark.parametrize("status, official, kernel, reusable", [
    ("PASSED", 2.2, 2.0, True),  # device time
    ("PASSED", 0.7, 0.5, True),
    ("PASSED", 0.17, 0.011, False),  # batch 1: launch gaps and the Python call
    ("PASSED", 0.45, 0.14, False),  # over 0.1 ms of kernel time, but under half the official figure
    ("PASSED", 0.09, 0.09, False),  # under 0.1 ms
    ("PASSED", 2.2, None, False),  # no kernel figure: nothing says what is device time
    ("RUNTIME_ERROR", 2.2, 2.0, False),
])
def test_which_carried_baseline_figures_may_travel(status, official, kernel, reusable):
    assert carried_baseline_reusable({"status": status, "official_ms": official, "kernel_ms": kernel}) is reusable


@pytest.mark.parametrize("measured, holds", [
    ({"official_ms": 2.25, "kernel_ms": 2.05}, True),
    ({"official_ms": 2.6, "kernel_ms": 2.05}, False),  # the official figure moved (the host's part of it)
    ({"official_ms": 2.25, "kernel_ms": 2.4}, False),
    ({"official_ms": 2.25, "kernel_ms": None}, False),
])
def test_a_baseline_spot_check_needs_both_figures(measured, holds):
    assert baseline_spot_check_holds({"official_ms": 2.2, "kernel_ms": 2.0}, measured) is holds


def test_baseline_runs_keep_failures_with_their_message_but_reuse_only_passes(tmp_path):
    archive = Archive(tmp_path)
    row = {"gpu_key": "H200|GPU-1", "gpu_model": "NVIDIA H200", "toolchain": "t", "definition": KV8_PS1,
           "workload_uuid": "w", "solution_hash": "h", "solution_name": "fi"}
    log = archive.put_blob("Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory", "log")
    archive.add_baseline_run({**row, "status": "RUNTIME_ERROR", "official_ms": None, "kernel_ms": None,
                              "message": "timing: CUDA out of memory", "log_blob": log})
    assert archive.baseline_run("H200|GPU-1", "t", KV8_PS1, "w", "h") is None  # a failure is never reused
    failed = next(archive.db["baseline_runs"].rows)
    assert failed["message"] == "timing: CUDA out of memory"
    assert b"OutOfMemoryError" in archive.get_blob(failed["log_blob"])
    archive.add_baseline_run({**row, "status": "PASSED", "official_ms": 0.2, "kernel_ms": 0.01})
    assert archive.baseline_run("H200|GPU-1", "t", KV8_PS1, "w", "h")["kernel_ms"] == 0.01
    # another card of the same model: found by model, for a spot check before it is trusted
    assert archive.baseline_run("H200|GPU-2", "t", KV8_PS1, "w", "h") is None
    assert archive.baseline_run("H200|GPU-2", "t", KV8_PS1, "w", "h", gpu_model="NVIDIA H200")["kernel_ms"] == 0.01


def test_the_reference_is_timed_only_when_asked_or_to_spot_check_carried_figures(tiny_dataset_root, tmp_path,
                                                                                   monkeypatch):
    from harness.pipeline.evaluate import Session, SubmitOptions

    ds = Dataset(tiny_dataset_root)
    definition, preset = ds.definition(KV8_PS1), ds.preset(KV8_PS1)
    [workload] = ds.workloads_for(KV8_PS1, ["tiny_b2_t40"])
    timed: list[str] = []

    def fake_time(self, definition, workload, seeds, warmup, iterations):
        timed.append(self.gpu_key)
        return 1.04

    from harness.pipeline.trusted import TrustedReference

    monkeypatch.setattr(TrustedReference, "_time", fake_time)
    monkeypatch.setattr(TrustedReference, "worker", lambda self: None)
    monkeypatch.setattr(Dataset, "baselines", lambda self, name: ["a library baseline"])  # a yardstick but it
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions()) as s:
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        assert s.reference_latency(definition, workload, [1], preset) is None and not timed  # not asked: not timed
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions(reference_timing=True)) as s:
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        assert s.reference_latency(definition, workload, [1], preset) == 1.04 and timed == ["NVIDIA H200|GPU-1"]
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions()) as s:  # the same card: from the archive
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        assert s.reference_latency(definition, workload, [1], preset) == 1.04 and len(timed) == 1
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions()) as s:  # another H200: one spot check, then trusted
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-2"}
        assert s.reference_latency(definition, workload, [1], preset) == 1.04
        assert timed[-1] == "NVIDIA H200|GPU-2" and s._carried_trust[("reference", KV8_PS1)] is True


def _reference_timed_on_a_card(root, monkeypatch):
    """The tiny dataset's kv8 ps1 definition, its preset and one workload; the reference's timing faked (2.5 ms),
    each timed workload's uuid appended to the returned list."""
    from harness.pipeline.trusted import TrustedReference

    ds = Dataset(root)
    definition, preset = ds.definition(KV8_PS1), ds.preset(KV8_PS1)
    [workload] = ds.workloads_for(KV8_PS1, ["tiny_b2_t40"])
    timed: list[str] = []
    monkeypatch.setattr(TrustedReference, "_time", lambda self, *a: timed.append(a[1].uuid) or 2.5)
    monkeypatch.setattr(TrustedReference, "worker", lambda self: None)
    return ds, definition, preset, workload, timed


def test_without_a_library_baseline_the_reference_is_timed_as_the_yardstick(tiny_dataset_root, tmp_path, monkeypatch):
    """DSA on sm_90 has no library baseline: its score is against the reference, so the reference is timed without
    --time-reference; with --no-baselines (no score asked for) it is not."""
    from harness.pipeline.evaluate import Session, SubmitOptions

    ds, definition, preset, workload, timed = _reference_timed_on_a_card(tiny_dataset_root, monkeypatch)
    monkeypatch.setattr(Dataset, "baselines", lambda self, name: ["a library baseline"])  # timing waits for the flag
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions()) as s:
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        assert s.reference_latency(definition, workload, [1], preset) is None and not timed
    monkeypatch.setattr(Dataset, "baselines", lambda self, name: [])
    with Session(ds, Archive(tmp_path / "b"), SubmitOptions(baselines=False)) as s:
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        assert s.reference_latency(definition, workload, [1], preset) is None and not timed
    with Session(ds, Archive(tmp_path / "c"), SubmitOptions()) as s:
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        assert s.reference_latency(definition, workload, [1], preset) == 2.5 and timed == [workload.uuid]


@pytest.mark.parametrize("baseline_ms, timed_expected", [(None, True), (0.5, False)])
def test_a_baseline_that_gave_no_figure_leaves_the_reference_as_the_yardstick(tiny_dataset_root, tmp_path, monkeypatch,
                                                                              baseline_ms, timed_expected):
    """MoE's Hopper stand-in fails at import where its module is not built on the host: the workload then has no
    baseline figure, so the reference is timed there (a score against something, and said so); where a baseline
    gave its figure the reference is not timed."""
    from harness.data.results import SubmissionResult, WorkloadResult
    from harness.measure.correctness import Tolerance
    from harness.measure.roofline import Ceilings
    from harness.pipeline.evaluate import Session, SubmitOptions
    from harness.pipeline.submission_summary import closing_notices

    ds, definition, preset, workload, timed = _reference_timed_on_a_card(tiny_dataset_root, monkeypatch)
    monkeypatch.setattr(Dataset, "baselines", lambda self, name: ["a library baseline"])
    failure = [] if baseline_ms else ["standin: COMPILE_ERROR build: module not built on this host"]
    figures = {"runs": [], "official_ms": baseline_ms, "kernel_ms": baseline_ms, "failures": failure}
    monkeypatch.setattr(Session, "baseline", lambda self, *a: figures)
    ceilings = Ceilings(gpu_name="H200", copy_bytes_per_s=4e12, read_bytes_per_s=4.5e12, bf16_flops_per_s=9e14,
                        measured_at="now", method="test")
    monkeypatch.setattr(Session, "ceilings", lambda self: ceilings)
    wr = WorkloadResult(workload.uuid, "tiny", "PASSED", latency_ms=0.25)
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions()) as s:
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        s._compare(definition, workload, preset, Tolerance(preset.atol, preset.rtol), 60.0, wr)
    assert bool(timed) is timed_expected
    assert wr.speedup_factor == (10.0 if timed_expected else None)
    notices = closing_notices(SubmissionResult(1, "sol", KV8_PS1, "PASSED", [wr]), reference_is_the_yardstick=False)
    stood_in = [n for n in notices if n.startswith("no baseline figure on 1 workload(s) (tiny)")]
    assert len(stood_in) == int(timed_expected)


# -- inputs without copies: content digests instead of clones, draws in their own dtype -------------------


def test_content_digest_sees_one_changed_word_and_swapped_words():
    import torch

    from harness.data.inputs import content_digest

    t = torch.randn(3001, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(7))  # odd: bytewise
    t[10], t[11], t[1234] = 0.5, -1.25, 0.75  # two words that differ, and one that adding 1 changes
    before = content_digest(t)
    assert content_digest(t.clone()) == before
    changed, swapped = t.clone(), t.clone()
    changed[1234] += 1
    swapped[[10, 11]] = t[[11, 10]]
    assert t[10] != t[11] and content_digest(changed) != before and content_digest(swapped) != before
    assert content_digest(torch.empty(0)) == (0, 0)


@pytest.mark.parametrize("numel", [1, 7, 64, 64 * 5, 64 * 5 + 3, 64 * 8 * 3 + 63])
def test_content_digest_is_the_positional_sum_over_blocks_and_tail(monkeypatch, numel):
    """The grid's row and column sums give exactly sum(w) and sum(w * (i + 1)) mod 2**64, whatever the number of
    blocks and the tail (small grid here: 64 columns, 8 rows per block)."""
    import torch

    from harness.data import inputs

    monkeypatch.setattr(inputs, "_DIGEST_COLUMNS", 64)
    monkeypatch.setattr(inputs, "_DIGEST_ROWS", 8)
    t = torch.randint(-2**31, 2**31 - 1, (numel,), dtype=torch.int32, generator=torch.Generator().manual_seed(3))
    words = [int(x) for x in t]
    mask = 2**64 - 1
    assert inputs.content_digest(t) == (sum(words) & mask, sum(w * (i + 1) for i, w in enumerate(words)) & mask)


@pytest.mark.parametrize("mutate, expected", [("", []), ("    k_cache.view(-1)[7] += 1.0\n", ["k_cache"])])
def test_large_inputs_are_checked_by_digest_not_clone(tiny_dataset, tmp_path, monkeypatch, mutate, expected):
    """Above the clone limit the candidate gets the input itself; a write into it is still found."""
    import harness.sandbox.worker as worker_module
    from harness.sandbox.messages import BuildRequest, RunRequest
    from support import TORCH_CANDIDATE, solution_dict

    monkeypatch.setattr(worker_module, "_CLONE_LIMIT_BYTES", 0)  # every input takes the digest path
    monkeypatch.chdir(tmp_path)
    source = TORCH_CANDIDATE.replace("    batch, heads, dim = q.shape\n", "    batch, heads, dim = q.shape\n" + mutate)
    assert mutate == "" or source != TORCH_CANDIDATE
    definition = tiny_dataset.definition(KV8_PS1)
    [workload] = tiny_dataset.workloads_for(KV8_PS1, ["tiny_b2_t40"])
    worker = worker_module.Worker("candidate")
    header, _ = worker.build(BuildRequest(solution=solution_dict(source), definition=definition))
    assert header["ok"], header
    header, outputs = worker.run(RunRequest(workload=workload, seed=3, dataset_root=str(tiny_dataset.root)))
    assert header["mutated_inputs"] == expected and set(outputs) == set(definition.outputs)


def test_float_inputs_are_drawn_in_their_own_dtype():
    import torch

    from harness.data.inputs import random_tensor

    gen = torch.Generator().manual_seed(1)
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn):
        t = random_tensor((64, 33), dtype, gen, torch.device("cpu"))
        assert t.dtype == dtype and t.shape == (64, 33)
        wide = t.float()
        assert 0.8 < float(wide.std()) < 1.2 and float(wide.abs().max()) <= (2.0 if dtype.itemsize == 1 else 10.0)


def test_a_familys_reference_working_set_widens_the_budget():
    """The official MoE reference dequantises every local expert's weights (three copies alive, in float64 for the
    precision oracle): that is the definition's own need, added to the budget; GQA's reference adds nothing."""
    from harness.families import family_for

    ds = Dataset()
    [moe] = ds.resolve("moe")
    definition = ds.definition(moe)
    workload = ds.workloads_for(moe)[0]
    working = family_for("moe").reference_working_bytes(definition, workload)
    assert working == 3 * 8 * 32 * (2 * 2048 * 7168 + 7168 * 2048)  # ~33.8 GB: the float64 oracle's copies
    record = memory_record(definition, workload, {"reference": (int(37.1e9), GIB)}, working)  # the H200's peak
    assert record["within_budget"] and record["budget_bytes"] == budget_bytes(io_bytes(definition, workload)) + working
    assert not memory_record(definition, workload, {"reference": (18 * GIB, GIB)})["within_budget"]
    gqa = ds.definition(KV8_PS1)
    assert family_for("gqa_paged").reference_working_bytes(gqa, ds.workloads_for(KV8_PS1)[0]) == 0


@pytest.mark.parametrize("definition, expected", [
    ("gqa_paged_decode_h32_kv8_d128_ps1", (3, 10, 1)),  # the yardstick's caps under the solutions' 10 / 50 / 3
    ("dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64", (3, 10, 1)),
    ("gdn_prefill_qk4_v8_d128_k_last", (1, 5, 3)),  # the contest's own speedup baseline: its 1 / 5 / 3, whole
])
def test_the_reference_is_timed_with_capped_settings_and_the_contest_s_where_it_was_the_baseline(definition, expected):
    from harness.pipeline.trusted import reference_timing_settings

    preset = Dataset().preset(definition)
    assert (preset.warmup, preset.iterations) >= expected[:2]
    assert reference_timing_settings(preset) == expected


def test_the_reference_timing_request_carries_the_capped_settings_and_its_figure_their_key(tiny_dataset_root, tmp_path,
                                                                                          monkeypatch):
    from harness.pipeline.evaluate import Session, SubmitOptions
    from harness.pipeline.trusted import TrustedReference

    ds = Dataset(tiny_dataset_root)
    definition, preset = ds.definition(KV8_PS1), ds.preset(KV8_PS1)
    [workload] = ds.workloads_for(KV8_PS1, ["tiny_b2_t40"])
    sent = []

    class Worker:
        def request(self, message, timeout_s):
            sent.append(message)
            return SimpleNamespace(ok=True, trials=[], as_dicts=lambda trials: trials), {}

    monkeypatch.setattr(TrustedReference, "worker", lambda self: Worker())
    monkeypatch.setattr("harness.pipeline.trusted.aggregate_timing", lambda trials: (0.75, None))
    with Session(ds, Archive(tmp_path / "a"), SubmitOptions(reference_timing=True)) as s:
        s.environment = {"device_name": "NVIDIA H200", "uuid": "GPU-1"}
        assert s.reference_latency(definition, workload, [11, 12, 13], preset) == 0.75
    [request] = sent
    assert (request.warmup, request.iterations, request.seeds) == (3, 10, [11])
    keys = [row["key"] for row in Archive(tmp_path / "a").db["reference_latency"].rows]
    assert keys and all(k.endswith(f"{workload.uuid}|3/10/1") for k in keys), keys


@pytest.mark.parametrize("reserved_after_free, collections", [
    ((8 << 30, 0), 0),  # the request's tensors died with it: the cache alone goes back, no collection
    ((8 << 30, 6 << 30, 0), 1),  # a cycle still held some: collected, then given back
    ((100 << 20,), 0),  # a small cache stays: nothing done
])
def test_a_request_gives_its_cache_back_and_collects_only_when_that_was_not_enough(monkeypatch, reserved_after_free,
                                                                                     collections):
    import gc

    import torch

    from harness.measure import device_measure

    reserved = list(reserved_after_free)
    calls = {"gc": 0, "empty": 0}

    def empty_cache():
        calls["empty"] += 1
        reserved.pop(0)

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 9 << 30)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: reserved[0])
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.setattr(gc, "collect", lambda: calls.__setitem__("gc", calls["gc"] + 1))
    out = device_measure.memory_release(torch.device("cuda", 0), {})
    assert calls["gc"] == collections and out == {"peak_bytes": 9 << 30, "resident_bytes": reserved[0]}
    assert calls["empty"] == len(reserved_after_free) - 1
