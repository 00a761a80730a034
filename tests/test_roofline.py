"""Roofline costs, floors and verdicts (CPU), and the ceilings measurement (GPU only)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness.data.dataset import Dataset
from harness.families import FamilyError, OperatorFamily, register, unregister, workload_cost
from harness.families.gqa_paged import paged_token_count
from harness.measure.roofline import (Ceilings, CeilingsCache, RooflineResult, WorkloadCost, floor_ms,
                                      measure_ceilings, roofline)
from harness.data.schema import Definition, SchemaError, Workload

from support import DEFINITIONS, KV8_PS1, KV8_PS64

# Round numbers, so expected floors are easy to write down: 1 TB/s memory, 100 TFLOP/s bf16.
CEILINGS = Ceilings(gpu_name="Test GPU", copy_bytes_per_s=0.8e12, read_bytes_per_s=1e12, bf16_flops_per_s=1e14,
                    measured_at="2025-01-01T00:00:00+00:00", method="made up for tests")


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return Dataset(DEFINITIONS)


def shipped(dataset: Dataset, definition: str, label: str) -> tuple[Definition, Workload]:
    return dataset.definition(definition), dataset.workloads_for(definition, [label])[0]


# ---------------------------------------------------------------------------------------------
# Costs of the shipped workloads


def test_uniform_b1_kv512_kv8_ps1_by_hand(dataset):
    d, w = shipped(dataset, KV8_PS1, "uniform_b1_kv512")
    cost = workload_cost(d, w)
    kv = 512 * 8 * 128 * 2 * 2
    assert kv == 2_097_152
    q = out = 32 * 128 * 2
    lse = 32 * 4
    indptr, indices = 2 * 4, 512 * 4
    assert cost.bytes_moved == kv + q + out + lse + indptr + indices == 2_115_720
    assert cost.flops == 4 * 512 * 32 * 128
    assert cost.exact
    assert cost.formula.startswith("gqa_paged decode")


# (definition, label, tokens, num_kv_heads, batch, has_last_page_len, exact)
SHIPPED_CASES = [
    ("gqa_paged_decode_h32_kv8_d128_ps1", "uniform_b1_kv8192", 8192, 8, 1, False, True),
    ("gqa_paged_decode_h32_kv8_d128_ps1", "uniform_b256_kv2048", 256 * 2048, 8, 256, False, True),
    ("gqa_paged_decode_h32_kv4_d128_ps1", "uniform_b64_kv512", 64 * 512, 4, 64, False, True),
    ("gqa_paged_decode_h32_kv4_d128_ps1", "skewed_b64", None, 4, 64, False, True),
    ("gqa_paged_decode_h32_kv8_d128_ps64", "uniform_b16_kv2048", 16 * 2048, 8, 16, True, False),
    ("gqa_paged_decode_h32_kv4_d128_ps64", "uniform_b256_kv8192", 256 * 8192, 4, 256, True, False),
]


@pytest.mark.parametrize("definition,label,tokens,kv_heads,batch,has_last,exact", SHIPPED_CASES)
def test_shipped_gqa_costs(dataset, definition, label, tokens, kv_heads, batch, has_last, exact):
    d, w = shipped(dataset, definition, label)
    page_size = d.const_axes["page_size"]
    if tokens is None:  # skewed: page_size 1, so tokens are the referenced pages
        tokens = w.axes["num_kv_indices"]
    assert w.axes["num_kv_indices"] * page_size == tokens
    cost = workload_cost(d, w)
    index_bytes = 4 * (w.axes["len_indptr"] + w.axes["num_kv_indices"] + (batch if has_last else 0))
    expected = tokens * kv_heads * 128 * 2 * 2 + batch * 32 * 128 * 2 * 2 + batch * 32 * 4 + index_bytes
    assert cost.bytes_moved == expected
    assert cost.flops == 4 * tokens * 32 * 128
    assert cost.exact is exact
    assert ("upper bound" in cost.formula) is (not exact)


def test_every_shipped_workload_has_a_gqa_cost(dataset):
    for name, d in dataset.definitions.items():
        if d.op_type != "gqa_paged":
            continue  # the other families' costs are tested with their families
        for w in dataset.workloads_for(name):
            cost = workload_cost(d, w)
            assert cost.formula.startswith("gqa_paged decode"), name
            assert cost.bytes_moved > 0 and cost.flops > 0


def test_paged_tokens_override_makes_cost_exact_and_smaller(dataset):
    d, w = shipped(dataset, KV8_PS64, "skewed_b64")
    upper = workload_cost(d, w)
    # Made-up last-page lengths over the workload's own split: all pages full but the last ones.
    pages = w.axes["num_kv_indices"]
    tokens = pages * 64 - 1000
    exact = workload_cost(d, w, tokens=tokens)
    assert exact.exact and not upper.exact
    assert upper.bytes_moved - exact.bytes_moved == 1000 * 8 * 128 * 2 * 2
    assert upper.flops - exact.flops == 4 * 1000 * 32 * 128


@pytest.mark.parametrize("tokens", [7, 8 * 64 + 1])
def test_paged_tokens_override_outside_possible_range(dataset, tokens):
    d, w = shipped(dataset, KV8_PS64, "uniform_b1_kv512")  # 8 pages of 64
    with pytest.raises(ValueError, match="impossible"):
        workload_cost(d, w, tokens=tokens)


@pytest.mark.parametrize("indptr,last,page_size,expected", [
    ([0, 8], [64], 64, 512),
    ([0, 8], [1], 64, 7 * 64 + 1),
    ([0, 2, 2, 5], [10, 64, 3], 64, (64 + 10) + 0 + (2 * 64 + 3)),  # the empty request counts nothing
    ([0, 3, 4], [1, 1], 1, 4),
    (torch.tensor([0, 1, 3], dtype=torch.int32), torch.tensor([5, 7], dtype=torch.int32), 16, 5 + 16 + 7),
])
def test_paged_token_count(indptr, last, page_size, expected):
    assert paged_token_count(indptr, last, page_size) == expected


def test_paged_token_count_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="entries"):
        paged_token_count([0, 1, 2], [1], 16)


# ---------------------------------------------------------------------------------------------
# Generic formula

MADE_UP = {
    "name": "made_up_scale_add",
    "op_type": "made_up_op",
    "axes": {"n": {"type": "var"}, "d": {"type": "const", "value": 64}},
    "inputs": {"x": {"shape": ["n", "d"], "dtype": "bfloat16"},
               "idx": {"shape": ["n"], "dtype": "int64"},
               "mask": {"shape": ["d"], "dtype": "bool"},
               "alpha": {"shape": None, "dtype": "float32"}},
    "outputs": {"y": {"shape": ["n", "d"], "dtype": "float32"}},
    "reference": "def run(x, idx, mask, alpha):\n    return x\n",
}


@pytest.mark.parametrize("n,expected", [
    (10, 10 * 64 * 2 + 10 * 8 + 64 * 1 + 0 + 10 * 64 * 4),
    (0, 64),
])
def test_generic_cost_counts_every_tensor_and_no_scalars(n, expected):
    d = Definition.model_validate(MADE_UP)
    w = Workload(uuid="w", axes={"n": n}, inputs={})
    cost = workload_cost(d, w)
    assert cost == WorkloadCost(bytes_moved=expected, flops=0, formula=cost.formula, exact=True)
    assert cost.formula.startswith("generic")


def test_gqa_op_type_but_not_decode_falls_back_to_generic(dataset):
    d, w = shipped(dataset, KV8_PS1, "uniform_b1_kv512")
    prefill = d.model_copy(update={"name": "gqa_paged_prefill_made_up"})
    cost = workload_cost(prefill, w)
    assert cost.formula.startswith("generic")
    # The generic count reads the whole page pool (here all 512 pages are referenced, so K+V are whole).
    assert cost.bytes_moved == 2 * 512 * 8 * 128 * 2 + 2 * 32 * 128 * 2 + 32 * 4 + 2 * 4 + 512 * 4


def test_a_family_adds_a_cost_formula_and_a_second_one_is_refused():
    class MadeUp(OperatorFamily):
        op_type = "made_up_op"

        def workload_cost(self, definition, workload, root=None, tokens=None):
            return WorkloadCost(bytes_moved=workload.axes["n"], flops=7, formula="made up")

    register(MadeUp())
    try:
        d = Definition.model_validate(MADE_UP)
        assert workload_cost(d, Workload(uuid="w", axes={"n": 3}, inputs={})) == WorkloadCost(3, 7, "made up")
        with pytest.raises(FamilyError, match="already has a family"):
            register(MadeUp())
    finally:
        unregister("made_up_op")


# ---------------------------------------------------------------------------------------------
# Floor, fraction, verdict


def test_memory_ceiling_is_the_faster_of_copy_and_read():
    assert CEILINGS.memory_bytes_per_s == 1e12
    faster_copy = CEILINGS.model_copy(update={"copy_bytes_per_s": 2e12})
    assert faster_copy.memory_bytes_per_s == 2e12


# (bytes, flops, floor_ms, bound)
FLOOR_CASES = [
    (1_000_000_000, 1_000_000_000, 1.0, "memory"),       # 1 GB at 1 TB/s = 1 ms; 1 GFLOP = 0.01 ms
    (1_000_000, 1_000_000_000_000, 10.0, "compute"),     # 1 TFLOP at 100 TFLOP/s = 10 ms
    (0, 0, 0.0, "memory"),
    (2_000_000, 200_000_000, 0.002, "memory"),            # exactly balanced: memory wins the tie
]


@pytest.mark.parametrize("bytes_moved,flops,expected_ms,bound", FLOOR_CASES)
def test_floor_and_bound(bytes_moved, flops, expected_ms, bound):
    cost = WorkloadCost(bytes_moved, flops, "test")
    assert floor_ms(cost, CEILINGS) == pytest.approx(expected_ms)
    result = roofline(cost, CEILINGS, latency_ms=100.0)
    assert result.floor_ms == pytest.approx(expected_ms)
    assert result.bound == bound


@pytest.mark.parametrize("latency_ms,fraction", [(1.0, 1.0), (2.0, 0.5), (4.0, 0.25), (0.5, 2.0)])
def test_fraction_of_floor(latency_ms, fraction):
    result = roofline(WorkloadCost(1_000_000_000, 0, "test"), CEILINGS, latency_ms, margin=0.6)
    assert result.fraction_of_floor == pytest.approx(fraction)


# floor is 1 ms; margin 5% -> a latency below 0.95 ms is impossible
@pytest.mark.parametrize("latency_ms,impossible", [
    (1.2, False), (1.0, False), (0.96, False), (0.95, False), (0.9499, True), (0.5, True), (0.0, True),
])
def test_impossible_at_and_beyond_margin(latency_ms, impossible):
    result = roofline(WorkloadCost(1_000_000_000, 0, "test"), CEILINGS, latency_ms)
    assert result.impossible is impossible
    assert ("impossible" in result.detail) is impossible


def test_margin_is_a_parameter():
    cost = WorkloadCost(1_000_000_000, 0, "test")
    assert not roofline(cost, CEILINGS, 0.85, margin=0.2).impossible
    assert roofline(cost, CEILINGS, 0.85, margin=0.1).impossible


def test_inexact_cost_never_convicts():
    cost = WorkloadCost(1_000_000_000, 0, "upper bound", exact=False)
    result = roofline(cost, CEILINGS, 0.5)
    assert not result.impossible
    assert "no verdict" in result.detail


def test_zero_latency_serialises_and_bad_inputs_raise():
    result = roofline(WorkloadCost(1000, 0, "test"), CEILINGS, 0.0)
    assert math.isinf(result.fraction_of_floor)
    back = RooflineResult.model_validate_json(result.model_dump_json())
    assert math.isinf(back.fraction_of_floor) and back.impossible
    with pytest.raises(ValueError):
        roofline(WorkloadCost(1000, 0, "test"), CEILINGS, -1.0)
    with pytest.raises(ValueError):
        roofline(WorkloadCost(1000, 0, "test"), CEILINGS, 1.0, margin=1.5)


def test_shipped_decode_on_h200_like_ceilings_is_memory_bound(dataset):
    h200 = Ceilings(gpu_name="NVIDIA H200", copy_bytes_per_s=4.263e12, read_bytes_per_s=4.4e12,
                    bf16_flops_per_s=7.9e14, measured_at="notes", method="reference figures from NOTES.md")
    d, w = shipped(dataset, KV8_PS1, "uniform_b256_kv8192")
    result = roofline(workload_cost(d, w), h200, latency_ms=1.0)
    assert result.bound == "memory"
    # ~8.6 GB of KV at 4.4 TB/s: about 2 ms
    assert 1.5 < result.floor_ms < 2.5


# ---------------------------------------------------------------------------------------------
# Ceilings cache


def test_ceilings_cache_round_trip(tmp_path):
    path = tmp_path / "sub" / "ceilings.json"
    cache = CeilingsCache(path)
    assert cache.get("Test GPU", "GPU-1") is None
    cache.put(CEILINGS, "GPU-1")
    other = CEILINGS.model_copy(update={"copy_bytes_per_s": 1.5e12})
    cache.put(other, "GPU-2")
    again = CeilingsCache(path)
    assert again.get("Test GPU", "GPU-1") == CEILINGS
    assert again.get("Test GPU", "GPU-2") == other
    assert again.get("Other GPU", "GPU-1") is None
    data = json.loads(path.read_text())
    assert set(data) == {"Test GPU|GPU-1", "Test GPU|GPU-2"}
    assert Ceilings.model_validate_json(CEILINGS.model_dump_json()) == CEILINGS
    assert list(path.parent.iterdir()) == [path]  # no temporary files left behind


def test_ceilings_cache_refuses_a_corrupt_file(tmp_path):
    path = tmp_path / "ceilings.json"
    path.write_text("{not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        CeilingsCache(path).get("Test GPU", "GPU-1")
    path.write_text(json.dumps({"Test GPU|GPU-1": {"gpu_name": "Test GPU"}}))
    with pytest.raises(SchemaError, match="Test GPU|GPU-1"):
        CeilingsCache(path).get("Test GPU", "GPU-1")


def test_ceilings_reject_non_positive_rates():
    with pytest.raises(ValueError):
        CEILINGS.model_validate({**CEILINGS.model_dump(), "bf16_flops_per_s": 0})


# ---------------------------------------------------------------------------------------------
# Measurement


def test_measure_ceilings_raises_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA"):
        measure_ceilings()
    with pytest.raises(RuntimeError, match="CUDA|GPU"):
        CeilingsCache("unused.json").get_or_measure()


@pytest.mark.gpu
def test_measured_ceilings_are_sane(dataset, tmp_path):
    cache = CeilingsCache(tmp_path / "ceilings.json")
    ceilings = cache.get_or_measure()
    assert 1e11 <= ceilings.copy_bytes_per_s <= 1e13
    assert 1e11 <= ceilings.read_bytes_per_s <= 1e13
    assert 1e13 <= ceilings.bf16_flops_per_s <= 5e15
    major = __import__("torch").cuda.get_device_capability()[0]
    if major >= 9:  # FP8 tensor cores: measured, and faster than bf16 (about 2x on an H200)
        assert ceilings.fp8_flops_per_s and 1.2 * ceilings.bf16_flops_per_s <= ceilings.fp8_flops_per_s <= 1e16
    assert cache.get_or_measure() == ceilings  # second call is a lookup
    d, w = shipped(dataset, KV8_PS1, "uniform_b64_kv8192")
    assert floor_ms(workload_cost(d, w), ceilings) > 0


@pytest.mark.parametrize("fp8_rate, flops, fp8_flops, compute_ms, words", [
    # bf16 work only: the bf16 rate (1e14 flop/s)
    (None, 10**11, 0, 1.0, "1e+11 flop"),
    # FP8 work at a measured FP8 rate
    (4e14, 10**11, 10**11, 0.25, "of them FP8 at 400 TFLOP/s, measured"),
    # FP8 work without a measured rate: twice the bf16 one, said so
    (None, 10**11, 10**11, 0.5, "assumed 2x bf16"),
    # half and half
    (4e14, 2 * 10**11, 10**11, 1.25, "1e+11 of them FP8"),
])
def test_fp8_work_is_floored_at_the_fp8_rate(fp8_rate, flops, fp8_flops, compute_ms, words):
    ceilings = CEILINGS.model_copy(update={"fp8_flops_per_s": fp8_rate})
    cost = WorkloadCost(bytes_moved=1, flops=flops, formula="t", fp8_flops=fp8_flops)
    result = roofline(cost, ceilings, latency_ms=10.0)
    assert result.bound == "compute" and result.floor_ms == pytest.approx(compute_ms)
    assert words.replace("1e+11", str(10**11)) in result.detail


def test_ceilings_cached_before_fp8_was_measured_still_load():
    entry = {k: v for k, v in CEILINGS.model_dump(mode="json").items() if k != "fp8_flops_per_s"}
    assert Ceilings.model_validate(entry).fp8_rate == 2 * CEILINGS.bf16_flops_per_s


@pytest.mark.parametrize("fraction_of_floor, impossible", [
    (1.03, False),  # the GQA example on kv8 ps64 b256_kv8192, H200 (its floor on the achieved torch.sum rate)
    (1.12, False),  # the data sheet's 4.8 TB/s against an achieved 4.27 TB/s: an honest kernel may get this close
    (1.24, False),
    (1.30, True),  # past what any memory system gives
    (10.0, True),  # replay
])
def test_an_honest_kernel_near_or_past_the_achieved_bandwidth_is_no_verdict(fraction_of_floor, impossible):
    from harness.audits.verdicts import AuditConfig
    from harness.data.results import WorkloadResult
    from harness.pipeline.comparison import place_in_context

    cost = WorkloadCost(1_000_000_000, 0, "test")
    floor = roofline(cost, CEILINGS, 1.0).floor_ms
    wr = WorkloadResult("w", "w", "PASSED")
    wr.latency_ms = floor / fraction_of_floor
    place_in_context(wr, None, None, cost, CEILINGS, AuditConfig().roofline_margin)
    [audit] = [a for a in wr.audits if a.name == "roofline_plausibility"]
    assert audit.passed is not impossible, audit.detail
    assert wr.fraction_of_floor == pytest.approx(fraction_of_floor)
