"""The GQA paged-decode family shipped under definitions/ (CPU only, a few seconds).

Checks that the trace set loads with the official flashinfer_bench data models, that the blobs
describe valid page tables, that the workload set has the promised shapes, that the shipped files
are exactly what scripts/make_gqa_workloads.py produces, and that each definition's vectorised
reference agrees with a plain per-request fp64 loop written here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch
import yaml
from flashinfer_bench.data import Definition, Trace, TraceSet, Workload
from safetensors.torch import load_file

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACE_SET_ROOT = REPO_ROOT / "definitions"
OP_TYPE = "gqa_paged"
OFFICIAL_KV8_PS1 = Path(
    "/work/shared/background/official-definitions/gqa_paged_decode_h32_kv8_d128_ps1.json"
)

# (name, num_kv_heads, page_size)
GQA_DEFINITIONS: List[Tuple[str, int, int]] = [
    ("gqa_paged_decode_h32_kv8_d128_ps1", 8, 1),
    ("gqa_paged_decode_h32_kv8_d128_ps64", 8, 64),
    ("gqa_paged_decode_h32_kv4_d128_ps1", 4, 1),
    ("gqa_paged_decode_h32_kv4_d128_ps64", 4, 64),
]
DEFINITION_IDS = [name for name, _, _ in GQA_DEFINITIONS]
NUM_QO_HEADS, HEAD_DIM = 32, 128
SM_SCALE = 1.0 / math.sqrt(HEAD_DIM)
VAR_AXES = ["batch_size", "num_pages", "len_indptr", "num_kv_indices"]


def expected_input_names(page_size: int) -> List[str]:
    names = ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices"]
    if page_size > 1:
        names.append("kv_last_page_len")
    return names + ["sm_scale"]


def definition_path(name: str) -> Path:
    return TRACE_SET_ROOT / "definitions" / OP_TYPE / f"{name}.json"


def workloads_path(name: str) -> Path:
    return TRACE_SET_ROOT / "workloads" / OP_TYPE / f"{name}.jsonl"


def load_definition(name: str) -> Definition:
    return Definition.model_validate_json(definition_path(name).read_text())


def load_workload_traces(name: str) -> List[Trace]:
    lines = workloads_path(name).read_text().splitlines()
    return [Trace.model_validate_json(line) for line in lines if line.strip()]


def labels() -> Dict[str, str]:
    return json.loads((TRACE_SET_ROOT / "workloads" / OP_TYPE / "labels.json").read_text())


def load_reference(name: str) -> dict:
    namespace: dict = {}
    exec(compile(load_definition(name).reference, f"<reference {name}>", "exec"), namespace)
    return namespace


# ---------------------------------------------------------------------------------------------
# Schema: definitions, workload lines, TraceSet
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,num_kv_heads,page_size", GQA_DEFINITIONS, ids=DEFINITION_IDS)
def test_definition_parses_and_has_the_promised_layout(name, num_kv_heads, page_size):
    definition = load_definition(name)
    assert definition.name == name
    assert definition.op_type == OP_TYPE
    assert list(definition.inputs) == expected_input_names(page_size)
    assert list(definition.outputs) == ["output", "lse"]
    assert definition.const_axes == {
        "num_qo_heads": NUM_QO_HEADS,
        "num_kv_heads": num_kv_heads,
        "head_dim": HEAD_DIM,
        "page_size": page_size,
    }
    assert definition.var_axes == VAR_AXES
    assert definition.inputs["sm_scale"].shape is None
    assert definition.inputs["k_cache"].shape == [
        "num_pages",
        "page_size",
        "num_kv_heads",
        "head_dim",
    ]
    assert definition.outputs["lse"].dtype.value == "float32"
    assert definition.outputs["output"].dtype.value == "bfloat16"
    assert "len_indptr == batch_size + 1" in definition.constraints
    assert "num_kv_indices == kv_indptr[-1].item()" in definition.constraints
    if page_size > 1:
        assert definition.inputs["kv_last_page_len"].shape == ["batch_size"]
        assert definition.inputs["kv_last_page_len"].dtype.value == "int32"
        assert any("kv_last_page_len" in c for c in definition.constraints)
    # the reference's run() takes the inputs in definition order (the official calling convention)
    assert re.search(r"def run\(" + re.escape(", ".join(definition.inputs)) + r"\)", definition.reference)


def test_ps1_kv8_keeps_the_official_field_layout():
    if not OFFICIAL_KV8_PS1.exists():
        pytest.skip("official definition copy not present on this machine")
    official = json.loads(OFFICIAL_KV8_PS1.read_text())
    ours = json.loads(definition_path("gqa_paged_decode_h32_kv8_d128_ps1").read_text())
    assert list(ours) == list(official)
    for field in ("name", "op_type", "axes", "constraints", "inputs", "outputs"):
        assert ours[field] == official[field], field


@pytest.mark.parametrize("name,num_kv_heads,page_size", GQA_DEFINITIONS, ids=DEFINITION_IDS)
def test_workload_lines_parse_as_official_workload_traces(name, num_kv_heads, page_size):
    traces = load_workload_traces(name)
    assert len(traces) >= 14
    input_names = expected_input_names(page_size)
    for trace in traces:
        assert trace.is_workload_trace() and trace.definition == name
        workload = Workload.model_validate(trace.workload.model_dump())
        assert list(workload.axes) == VAR_AXES
        assert list(workload.inputs) == input_names
        for random_input in ("q", "k_cache", "v_cache", "kv_indices"):
            assert workload.inputs[random_input].type == "random"
        assert workload.inputs["sm_scale"].type == "scalar"
        assert workload.inputs["sm_scale"].value == pytest.approx(SM_SCALE, rel=1e-12)
        blob_inputs = ["kv_indptr"] + (["kv_last_page_len"] if page_size > 1 else [])
        expected_blob = (
            f"blob/workloads/{OP_TYPE}/{name}/{name}_{workload.uuid}.safetensors"
        )
        for blob_input in blob_inputs:
            spec = workload.inputs[blob_input]
            assert spec.type == "safetensors"
            assert spec.path == expected_blob
            assert spec.tensor_key == blob_input
    uuids = [t.workload.uuid for t in traces]
    assert len(set(uuids)) == len(uuids)


def test_traceset_loads_the_family():
    trace_set = TraceSet.from_path(str(TRACE_SET_ROOT))
    gqa_names = {n for n, d in trace_set.definitions.items() if d.op_type == OP_TYPE}
    assert gqa_names == set(DEFINITION_IDS)
    for name in DEFINITION_IDS:
        assert len(trace_set.workloads.get(name, [])) >= 14


def test_aliases_and_eval_config_are_data():
    aliases = yaml.safe_load((TRACE_SET_ROOT / "aliases.yaml").read_text())
    assert aliases["gqa_decode"] == DEFINITION_IDS
    config = yaml.safe_load((TRACE_SET_ROOT / "eval_config.yaml").read_text())
    assert config["default"] == {
        "atol": 0.01,
        "rtol": 0.01,
        "required_matched_ratio": 1.0,
        "num_trials": 3,
        "warmup": 10,
        "iterations": 50,
        "timeout_s": 300,
        "reference_warmup": 3,
        "reference_iterations": 10,
        "reference_trials": 1,
    }
    assert config["op_type"]["moe"] == {"atol": 1, "rtol": 0.3, "required_matched_ratio": 0.9}
    assert config["definition"]["gdn_prefill_qk4_v8_d128_k_last"] == {
        "warmup": 1,
        "iterations": 5,
        "num_trials": 3,
        "reference_trials": 3,
    }
    # every overriding layer may only use keys the default layer defines
    for layer in list(config["op_type"].values()) + list(config["definition"].values()):
        assert set(layer) <= set(config["default"])


# ---------------------------------------------------------------------------------------------
# Blobs and the workload set
# ---------------------------------------------------------------------------------------------


def request_lengths(trace: Trace, page_size: int) -> List[int]:
    """KV tokens per request, decoded from the blob; asserts the blob is a valid page table."""
    workload = trace.workload
    blob = load_file(str(TRACE_SET_ROOT / workload.inputs["kv_indptr"].path))
    assert "kv_indices" not in blob  # kv_indices are drawn by the harness, never stored
    kv_indptr = blob["kv_indptr"]
    axes = workload.axes
    assert kv_indptr.dtype == torch.int32
    assert kv_indptr.shape == (axes["batch_size"] + 1,)
    assert axes["len_indptr"] == axes["batch_size"] + 1
    assert int(kv_indptr[0]) == 0
    assert int(kv_indptr[-1]) == axes["num_kv_indices"] == axes["num_pages"]
    pages = (kv_indptr[1:] - kv_indptr[:-1]).tolist()
    assert min(pages) >= 0
    if page_size == 1:
        assert set(blob) == {"kv_indptr"}
        return pages
    assert set(blob) == {"kv_indptr", "kv_last_page_len"}
    last_page_len = blob["kv_last_page_len"]
    assert last_page_len.dtype == torch.int32
    assert last_page_len.shape == (axes["batch_size"],)
    assert int(last_page_len.min()) >= 1 and int(last_page_len.max()) <= page_size
    return [(n - 1) * page_size + int(last) if n else 0 for n, last in zip(pages, last_page_len)]


@pytest.mark.parametrize("name,num_kv_heads,page_size", GQA_DEFINITIONS, ids=DEFINITION_IDS)
def test_workload_set_has_the_required_batches(name, num_kv_heads, page_size):
    traces = load_workload_traces(name)
    label_of = labels()
    lengths_by_label = {label_of[t.workload.uuid]: request_lengths(t, page_size) for t in traces}
    expected_order = [
        f"uniform_b{batch}_kv{kv_len}" for batch in (1, 16, 64, 256) for kv_len in (512, 2048, 8192)
    ] + ["skewed_b64", "one_long_32k_31x256"]
    assert [label_of[t.workload.uuid] for t in traces][: len(expected_order)] == expected_order

    for batch in (1, 16, 64, 256):
        for kv_len in (512, 2048, 8192):
            assert lengths_by_label[f"uniform_b{batch}_kv{kv_len}"] == [kv_len] * batch

    skewed = lengths_by_label["skewed_b64"]
    assert len(skewed) == 64
    assert all(64 <= n <= 16384 for n in skewed)
    # log-uniform over 8 octaves: the spread is wide and the lower half is mostly short
    assert max(skewed) / min(skewed) > 64
    assert sorted(skewed)[32] < 2048

    assert lengths_by_label["one_long_32k_31x256"] == [32768] + [256] * 31

    if page_size > 1:
        # the skewed batch exercises partial last pages
        assert any(n % page_size for n in skewed)


def test_labels_cover_every_workload_exactly():
    all_uuids = [t.workload.uuid for name in DEFINITION_IDS for t in load_workload_traces(name)]
    assert sorted(labels()) == sorted(all_uuids)


def load_generator_module():
    path = REPO_ROOT / "scripts" / "make_gqa_workloads.py"
    spec = importlib.util.spec_from_file_location("make_gqa_workloads", path)
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve annotations through sys.modules, so register before executing
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_shipped_files_are_what_the_generator_writes(tmp_path):
    generator = load_generator_module()
    written = generator.generate(tmp_path)
    relative = sorted(str(p.relative_to(tmp_path)) for p in written)
    shipped = sorted(
        str(p.relative_to(TRACE_SET_ROOT))
        for sub in ("definitions/" + OP_TYPE, "workloads/" + OP_TYPE, "blob/workloads/" + OP_TYPE)
        for p in (TRACE_SET_ROOT / sub).rglob("*")
        if p.is_file()
    )
    assert relative == shipped
    for rel in relative:
        assert (tmp_path / rel).read_bytes() == (TRACE_SET_ROOT / rel).read_bytes(), rel


# ---------------------------------------------------------------------------------------------
# Reference vs a per-request fp64 loop
# ---------------------------------------------------------------------------------------------


def make_paged_case(
    num_kv_heads: int, page_size: int, seq_lens: List[int], seed: int, spare_pages: int = 5
) -> dict:
    """Random inputs whose pages are scattered over a larger pool by a random permutation.

    Every cache slot no request owns (spare pages, tail of a partial last page) holds NaN, so a
    reference that reads outside the requests' tokens produces NaN.
    """
    generator = torch.Generator().manual_seed(seed)
    pages_per_request = [-(-n // page_size) for n in seq_lens]
    num_used = sum(pages_per_request)
    num_pages = num_used + spare_pages
    kv_indices = torch.randperm(num_pages, generator=generator)[:num_used].to(torch.int32)
    kv_indptr = torch.tensor([0] + pages_per_request, dtype=torch.int64).cumsum(0).to(torch.int32)
    # an empty request's last_page_len is irrelevant; 1 satisfies the constraint
    last_page_len = torch.tensor(
        [n - (p - 1) * page_size if p else 1 for n, p in zip(seq_lens, pages_per_request)],
        dtype=torch.int32,
    )

    cache_shape = (num_pages, page_size, num_kv_heads, HEAD_DIM)
    k_cache = torch.randn(cache_shape, generator=generator).to(torch.bfloat16)
    v_cache = torch.randn(cache_shape, generator=generator).to(torch.bfloat16)
    owned = torch.zeros(num_pages, page_size, dtype=torch.bool)
    for b, n in enumerate(seq_lens):
        for t in range(n):
            owned[kv_indices[int(kv_indptr[b]) + t // page_size], t % page_size] = True
    k_cache[~owned] = float("nan")
    v_cache[~owned] = float("nan")

    # x2 sharpens the softmax so wrong keys move the answer well past tolerance
    q = (2.0 * torch.randn(len(seq_lens), NUM_QO_HEADS, HEAD_DIM, generator=generator)).to(
        torch.bfloat16
    )
    return dict(
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        kv_last_page_len=last_page_len,
        sm_scale=SM_SCALE,
    )


def loop_oracle(case: dict, seq_lens: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Straightforward fp64 attention, one request and one head at a time."""
    q, k_cache, v_cache = case["q"], case["k_cache"], case["v_cache"]
    kv_indptr, kv_indices = case["kv_indptr"], case["kv_indices"]
    batch_size = q.shape[0]
    page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = NUM_QO_HEADS // num_kv_heads
    output = torch.zeros(batch_size, NUM_QO_HEADS, HEAD_DIM, dtype=torch.float64)
    lse = torch.full((batch_size, NUM_QO_HEADS), -math.inf, dtype=torch.float64)
    for b in range(batch_size):
        n = seq_lens[b]
        if n == 0:
            continue
        first = int(kv_indptr[b])
        token_pages = [int(kv_indices[first + t // page_size]) for t in range(n)]
        keys = torch.stack([k_cache[p, t % page_size] for t, p in enumerate(token_pages)]).double()
        values = torch.stack([v_cache[p, t % page_size] for t, p in enumerate(token_pages)]).double()
        for h in range(NUM_QO_HEADS):
            kv_head = h // group
            logits = (keys[:, kv_head, :] @ q[b, h].double()) * case["sm_scale"]
            peak = logits.max()
            weights = torch.exp(logits - peak)
            total = weights.sum()
            lse[b, h] = (peak + torch.log(total)) / math.log(2.0)
            output[b, h] = (weights / total) @ values[:, kv_head, :]
    return output, lse


def call_reference(reference: dict, case: dict, page_size: int):
    args = [case[n] for n in expected_input_names(page_size)]
    return reference["run"](*args)


# Lengths include empty requests at both ends (an empty last request has kv_indptr[b] equal to
# the table length) and, for ps64, partial last pages and a request of exactly one full page.
SEQ_LENS_BY_PAGE_SIZE = {
    1: [0, 1, 17, 40, 0, 5, 0],
    64: [0, 1, 64, 130, 200, 0, 63, 0],
}


@pytest.mark.parametrize("padded_token_budget", [1 << 20, 256, 1], ids=["one_chunk", "few_chunks", "per_request"])
@pytest.mark.parametrize("name,num_kv_heads,page_size", GQA_DEFINITIONS, ids=DEFINITION_IDS)
def test_reference_matches_per_request_loop(name, num_kv_heads, page_size, padded_token_budget):
    seq_lens = SEQ_LENS_BY_PAGE_SIZE[page_size]
    case = make_paged_case(num_kv_heads, page_size, seq_lens, seed=100 + DEFINITION_IDS.index(name))
    reference = load_reference(name)
    # a small budget forces several chunks, including chunks made only of empty requests
    reference["MAX_PADDED_TOKENS_PER_CHUNK"] = padded_token_budget
    output, lse = call_reference(reference, case, page_size)
    expected_output, expected_lse = loop_oracle(case, seq_lens)

    assert output.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert output.shape == (len(seq_lens), NUM_QO_HEADS, HEAD_DIM)
    assert lse.shape == (len(seq_lens), NUM_QO_HEADS)
    assert not torch.isnan(output).any() and not torch.isnan(lse).any()
    empty = torch.tensor([n == 0 for n in seq_lens])
    assert (output[empty] == 0).all()
    assert torch.isneginf(lse[empty]).all()
    assert torch.isfinite(lse[~empty]).all()
    torch.testing.assert_close(output.double(), expected_output, atol=1e-3, rtol=1e-2)
    torch.testing.assert_close(lse.double(), expected_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("name,num_kv_heads,page_size", GQA_DEFINITIONS, ids=DEFINITION_IDS)
def test_reference_on_an_all_empty_batch(name, num_kv_heads, page_size):
    case = make_paged_case(num_kv_heads, page_size, [0, 0, 0], seed=3)
    output, lse = call_reference(load_reference(name), case, page_size)
    assert (output == 0).all()
    assert torch.isneginf(lse).all()


@pytest.mark.parametrize("name,num_kv_heads,page_size", GQA_DEFINITIONS, ids=DEFINITION_IDS)
def test_reference_asserts_its_constants(name, num_kv_heads, page_size):
    other_kv_heads = 4 if num_kv_heads == 8 else 8
    case = make_paged_case(other_kv_heads, page_size, [3], seed=5)
    with pytest.raises(AssertionError):
        call_reference(load_reference(name), case, page_size)


def test_comparison_detects_a_wrong_page_table():
    """The tolerances above are tight enough to catch a reference that reads the wrong pages."""
    name, num_kv_heads, page_size = GQA_DEFINITIONS[1]
    seq_lens = [130, 200, 63]
    case = make_paged_case(num_kv_heads, page_size, seq_lens, seed=11, spare_pages=0)
    expected_output, _ = loop_oracle(case, seq_lens)
    case["kv_indices"] = case["kv_indices"].flip(0)  # same pages, wrong order
    output, _ = call_reference(load_reference(name), case, page_size)
    finite = torch.isfinite(output.double())
    assert not (finite.all() and torch.allclose(output.double(), expected_output, atol=1e-3, rtol=1e-2))


def test_comparison_detects_ignoring_the_last_page_length():
    name, num_kv_heads, page_size = GQA_DEFINITIONS[3]
    seq_lens = [130, 70]
    case = make_paged_case(num_kv_heads, page_size, seq_lens, seed=13)
    # fill the unowned tail slots with finite values so a full-page read gives numbers, not NaN
    case["k_cache"] = torch.nan_to_num(case["k_cache"], nan=0.5)
    case["v_cache"] = torch.nan_to_num(case["v_cache"], nan=3.0)
    expected_output, _ = loop_oracle(case, seq_lens)
    case["kv_last_page_len"] = torch.full_like(case["kv_last_page_len"], page_size)
    output, _ = call_reference(load_reference(name), case, page_size)
    assert not torch.allclose(output.double(), expected_output, atol=1e-3, rtol=1e-2)
