"""The DSA family (op_type dsa_paged): the official data, the inputs drawn for absent blobs, the packed FP8 key
cache, the official correctness rules of the sparse attention and the top-k indexer, cost and regimes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from harness.measure.correctness import Tolerance
from harness.data.dataset import Dataset
from harness.families import family_for
from harness.families.dsa_inputs import (dequantize_key_cache, draw_packed_key_cache, pack_fp8_key_cache,
                                         unpack_fp8_key_cache)
from harness.families.dsa_paged import DsaPagedFamily, indexer_scores_at
from harness.data.inputs import absent_blob_inputs, generate_inputs
from harness.data.schema import Trace, Workload, dump_json, load_jsonl

from dsa_support import (ATTENTION, DATASET, INDEXER, OFFICIAL, TINY_ATTENTION_TOPK, TINY_INDEXER_TOPK,
                         tiny_definition)

TOL = Tolerance()
FAMILY = family_for("dsa_paged")


def reference(definition, inputs):
    namespace: dict = {}
    exec(compile(definition.reference, definition.name, "exec"), namespace)  # noqa: S102 (trusted reference)
    out = namespace["run"](*inputs.values())
    return dict(zip(definition.outputs, out))


def workload(axes, inputs=None, uuid="w"):
    return Workload.model_validate({"uuid": uuid, "axes": axes, "inputs": inputs or {}})


# ---------------------------------------------------------------------------------------------
# Data


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None or k == "shape"}
    return [_without_nulls(v) for v in value] if isinstance(value, list) else value


@pytest.mark.parametrize("name,count", [(ATTENTION, 23), (INDEXER, 128)])
def test_definitions_and_workloads_are_the_official_files(name, count):
    ours_def = DATASET / "definitions" / "dsa_paged" / f"{name}.json"
    ours_wl = DATASET / "workloads" / "dsa_paged" / f"{name}.jsonl"
    if OFFICIAL.is_dir():
        assert ours_def.read_bytes() == (OFFICIAL / "definitions" / f"{name}.json").read_bytes()
        assert ours_wl.read_bytes() == (OFFICIAL / "workloads" / f"{name}.jsonl").read_bytes()
    dataset = Dataset(DATASET)
    definition = dataset.definition(name)
    assert definition.op_type == "dsa_paged" and isinstance(FAMILY, DsaPagedFamily)
    # what `harness export` writes, but for the null descriptions it keeps (the official files omit them)
    assert _without_nulls(dump_json(definition)) == json.loads(ours_def.read_text())
    assert len(dataset.workloads_for(name)) == count == len(load_jsonl(Trace, ours_wl))
    assert dataset.resolve("dsa") == [ATTENTION, INDEXER]
    preset = dataset.preset(name)
    assert (preset.atol, preset.rtol, preset.required_matched_ratio) == (0.01, 0.01, 1.0)
    assert (preset.warmup, preset.iterations, preset.num_trials, preset.timeout_s) == (10, 50, 3, 300)


def test_the_official_trace_set_loader_reads_the_folder():
    fib = pytest.importorskip("flashinfer_bench")
    ts = fib.TraceSet.from_path(str(DATASET))
    assert len(ts.workloads[ATTENTION]) == 23 and len(ts.workloads[INDEXER]) == 128
    assert ts.definitions[INDEXER].axes["head_dim_with_scale"].value == 132


def test_every_official_workload_lacks_only_blobs_the_family_draws():
    dataset = Dataset(DATASET)
    for name, drawn in ((ATTENTION, ["sparse_indices"]), (INDEXER, ["seq_lens", "block_table"])):
        for w in dataset.workloads_for(name):
            assert absent_blob_inputs(dataset.definition(name), w, dataset.root) == drawn


# ---------------------------------------------------------------------------------------------
# Inputs


def test_full_size_sparse_indices_are_valid_requests_with_tail_padding():
    definition = Dataset(DATASET).definition(ATTENTION)
    w = workload({"num_tokens": 8, "num_pages": 8462})
    gens = {}
    drawn = FAMILY.special_inputs(definition, w, {}, lambda n: gens.setdefault(n, torch.Generator().manual_seed(7)),
                                  torch.device("cpu"))["sparse_indices"]
    assert drawn.shape == (8, 2048) and drawn.dtype == torch.int32
    counts = (drawn >= 0).sum(dim=1)
    assert bool((counts >= 1).all()) and bool((counts < 2048).any()) and bool((counts == 2048).any())
    owners: dict[int, int] = {}
    for t in range(8):
        row = drawn[t]
        n = int(counts[t])
        assert bool((row[:n] >= 0).all()) and bool((row[n:] == -1).all())  # padding only at the tail
        assert row[:n].unique().numel() == n and int(row.max()) < 8462 * 64
        for page in (row[:n] // 64).unique().tolist():  # each request reads its own pages only
            assert owners.setdefault(page, t) == t


def test_indexer_tables_are_consistent_and_draws_are_deterministic():
    definition = tiny_definition("indexer")
    w = workload({"batch_size": 5, "max_num_pages": 4, "num_pages": 40})
    first = generate_inputs(definition, w, seed=3)
    again = generate_inputs(definition, w, seed=3)
    other = generate_inputs(definition, w, seed=4)
    assert all(torch.equal(first[n], again[n]) for n in ("seq_lens", "block_table", "k_index_cache_fp8"))
    assert not torch.equal(first["k_index_cache_fp8"], other["k_index_cache_fp8"])
    lens, table = first["seq_lens"], first["block_table"]
    assert table.shape == (5, 4) and table.dtype == torch.int32 and lens.dtype == torch.int32
    assert int(lens.min()) >= 1 and int(lens.max()) <= 4 * 64 and -(-int(lens.max()) // 64) == 4
    used = [table[b, : -(-int(n) // 64)] for b, n in enumerate(lens.tolist())]
    pages = torch.cat(used)
    assert pages.unique().numel() == pages.numel() and int(pages.max()) < 40  # scattered, owned by one request


def test_packed_key_cache_layout_is_deepgemm_pages():
    keys = torch.zeros(2, 64, 1, 128, dtype=torch.bfloat16)
    keys[1, 3, 0, :] = 2.0
    keys[1, 3, 0, 5] = -1.0
    packed = pack_fp8_key_cache(keys)
    assert packed.shape == (2, 64, 1, 132) and packed.dtype == torch.int8
    page = packed[1].view(torch.uint8).reshape(-1)  # one page: 64 x 128 FP8 bytes, then 64 fp32 scales
    assert int(page[3 * 128]) == 0x7E  # 2.0 / (2.0 / 448) = 448, the largest e4m3fn value
    assert int(page[3 * 128 + 5]) == 0xF6  # -224 in e4m3fn
    scale = page[64 * 128 + 4 * 3: 64 * 128 + 4 * 4].view(torch.float32)
    assert float(scale) == pytest.approx(2.0 / 448)
    zero_scale = page[64 * 128: 64 * 128 + 4].view(torch.float32)
    assert float(zero_scale) == pytest.approx(1e-4 / 448)  # all-zero token: the clamped scale
    fp8, scales = unpack_fp8_key_cache(packed)
    assert fp8.shape == (2, 64, 128) and scales.shape == (2, 64)
    assert torch.equal(dequantize_key_cache(packed)[1, 3], keys[1, 3, 0].float())


def test_drawn_key_cache_is_a_packed_bf16_draw_not_an_int8_fill():
    packed = draw_packed_key_cache(6, 64, 128, torch.Generator().manual_seed(1), torch.device("cpu"))
    keys = torch.randn((6, 64, 1, 128), generator=torch.Generator().manual_seed(1), dtype=torch.bfloat16)
    assert torch.equal(packed, pack_fp8_key_cache(keys))
    _, scales = unpack_fp8_key_cache(packed)
    assert bool(torch.isfinite(scales).all()) and float(scales.min()) > 0
    err = (dequantize_key_cache(packed) - keys[:, :, 0].float()).abs()
    assert float((err / keys[:, :, 0].float().abs().amax(-1, keepdim=True)).max()) < 1 / 16 + 1e-6


def test_present_blobs_are_used_as_is_and_the_cache_is_still_packed(tmp_path):
    definition = tiny_definition("indexer")
    blob = "blob/w.safetensors"
    (tmp_path / "blob").mkdir()
    lens, table = torch.tensor([70, 5], dtype=torch.int32), torch.tensor([[9, 2], [4, 0]], dtype=torch.int32)
    save_file({"seq_lens": lens, "block_table": table}, str(tmp_path / blob))
    src = {n: {"type": "safetensors", "path": blob, "tensor_key": n} for n in ("seq_lens", "block_table")}
    got = generate_inputs(definition, workload({"batch_size": 2, "max_num_pages": 2, "num_pages": 10},
                                               {**src, "k_index_cache_fp8": {"type": "random"}}), 0, root=tmp_path)
    assert torch.equal(got["seq_lens"], lens) and torch.equal(got["block_table"], table)
    assert float(unpack_fp8_key_cache(got["k_index_cache_fp8"])[1].min()) > 0


# ---------------------------------------------------------------------------------------------
# The sparse attention rule


@pytest.fixture(scope="module")
def attention_case():
    definition = tiny_definition("attention")
    inputs = generate_inputs(definition, workload({"num_tokens": 3, "num_pages": 8}), seed=11)
    return definition, inputs, reference(definition, inputs)


def _lse_minus_inf(ref):
    lse = ref["lse"].clone()
    lse[0, 0] = -math.inf
    return lse


ATTENTION_CASES = [
    ("both outputs", lambda r: {"output": r["output"], "lse": r["lse"]}, "PASSED"),
    ("output only: lse not checked", lambda r: {"output": r["output"]}, "PASSED"),
    ("wrong lse returned", lambda r: {"output": r["output"], "lse": r["lse"] + 0.5}, "INCORRECT_NUMERICAL"),
    ("-inf lse returned", lambda r: {"output": r["output"], "lse": _lse_minus_inf(r)}, "INCORRECT_NUMERICAL"),
    ("wrong output", lambda r: {"output": (r["output"].float() * 1.1).bfloat16()}, "INCORRECT_NUMERICAL"),
    ("output dtype", lambda r: {"output": r["output"].float(), "lse": r["lse"]}, "INCORRECT_DTYPE"),
    ("output shape", lambda r: {"output": r["output"][:, :8]}, "INCORRECT_SHAPE"),
    ("no output", lambda r: {"lse": r["lse"]}, "RUNTIME_ERROR"),
]


@pytest.mark.parametrize("case,make,status", ATTENTION_CASES, ids=[c[0] for c in ATTENTION_CASES])
def test_sparse_attention_rule(attention_case, case, make, status):
    definition, _, ref = attention_case
    assert FAMILY.compare(definition, make(ref), ref, TOL).status.value == status


def test_sparse_attention_reference_pads_and_gathers(attention_case):
    definition, inputs, ref = attention_case
    idx = inputs["sparse_indices"]
    assert bool((idx == -1).any()), "the tiny draw must include padded rows"
    t = 0
    valid = idx[t][idx[t] >= 0].long()
    kc = inputs["ckv_cache"].reshape(-1, 512).float()[valid]
    kp = inputs["kpe_cache"].reshape(-1, 64).float()[valid]
    logits = (inputs["q_nope"][t].float() @ kc.T + inputs["q_pe"][t].float() @ kp.T) * inputs["sm_scale"]
    assert torch.allclose(ref["lse"][t], torch.logsumexp(logits, -1) / math.log(2), atol=1e-4)


# ---------------------------------------------------------------------------------------------
# The top-k indexer rule


@pytest.fixture(scope="module")
def indexer_case():
    """Tiny indexer inputs where row 0 needs a real selection (192 tokens, top 96) and has an exact tie
    across the selection boundary and a near tie (within tolerance), and row 1 is shorter than top-k."""
    definition = tiny_definition("indexer")
    inputs = generate_inputs(definition, workload({"batch_size": 2, "max_num_pages": 3, "num_pages": 12}), seed=5)
    inputs["seq_lens"] = torch.tensor([192, 50], dtype=torch.int32)
    ref = reference(definition, inputs)["topk_indices"]
    keys = dequantize_key_cache(inputs["k_index_cache_fp8"])
    q = inputs["q_index_fp8"].float()
    row_tokens = torch.cat([inputs["block_table"][0, p] * 64 + torch.arange(64) for p in range(3)]).int()
    scores = indexer_scores_at(row_tokens[None], keys, q[:1], inputs["weights"][:1], 64)[0]
    order = scores.argsort(descending=True)
    last_in, first_out = int(row_tokens[order[TINY_INDEXER_TOPK - 1]]), int(row_tokens[order[TINY_INDEXER_TOPK]])
    # Make the best unselected token an exact copy of the last selected one: a tie at the boundary.
    packed = inputs["k_index_cache_fp8"].view(torch.uint8).reshape(12, -1)
    for part, width in ((slice(0, 64 * 128), 128), (slice(64 * 128, None), 4)):
        src = packed[last_in // 64, part].view(64, width)[last_in % 64].clone()
        packed[first_out // 64, part].view(64, width)[first_out % 64] = src
    ref = reference(definition, inputs)["topk_indices"]
    worst_out = int(row_tokens[order[-1]])
    return definition, inputs, ref, (last_in, first_out, worst_out)


def _swap(ref, old, new):
    out = ref.clone()
    out[out == old] = new
    return out


def _indexer_cases():
    def same(ref, pair):
        return ref.clone()

    def reversed_order(ref, pair):
        out = ref.clone()
        out[0] = out[0].flip(0)
        return out

    def tie_swap(ref, pair):  # whichever of the tied pair the reference chose, choose the other
        a, b = pair[0], pair[1]
        return _swap(ref, a, b) if bool((ref[0] == a).any()) else _swap(ref, b, a)

    def worse_swap(ref, pair):
        chosen = ref[0][ref[0] >= 0]
        return _swap(ref, int(chosen[-1]) if int(chosen[-1]) not in pair[:2] else int(chosen[0]), pair[2])

    def duplicate(ref, pair):
        out = ref.clone()
        out[0, 1] = out[0, 0]
        return out

    def outside_request(ref, pair):  # a token of another request's page
        out = ref.clone()
        out[1, 0] = int(ref[0, 0])
        return out

    def past_seq_len(ref, pair):  # row 1 holds 50 tokens: slot 60 of its page is past its end
        out = ref.clone()
        out[1, 0] = int(ref[1, 0]) // 64 * 64 + 60
        return out

    def wrong_count(ref, pair):
        out = ref.clone()
        out[1, 49] = -1
        return out

    return [("identical", same, "PASSED"), ("order not checked", reversed_order, "PASSED"),
            ("near tie: either choice passes", tie_swap, "PASSED"),
            ("a clearly worse token", worse_swap, "INCORRECT_NUMERICAL"),
            ("duplicate index", duplicate, "INCORRECT_NUMERICAL"),
            ("index outside the request", outside_request, "INCORRECT_NUMERICAL"),
            ("index past seq_len", past_seq_len, "INCORRECT_NUMERICAL"),
            ("wrong count", wrong_count, "INCORRECT_NUMERICAL"),
            ("dtype", lambda r, p: r.long(), "INCORRECT_DTYPE"),
            ("shape", lambda r, p: r[:, :10], "INCORRECT_SHAPE")]


@pytest.mark.parametrize("case,make,status", _indexer_cases(), ids=[c[0] for c in _indexer_cases()])
def test_topk_indexer_rule(indexer_case, case, make, status):
    definition, inputs, ref, pair = indexer_case
    assert int((ref[0] >= 0).sum()) == TINY_INDEXER_TOPK and int((ref[1] >= 0).sum()) == 50
    got = make(ref, pair)
    result = FAMILY.compare(definition, {"topk_indices": got}, {"topk_indices": ref}, TOL, inputs=inputs)
    assert result.status.value == status, result.message
    if status == "PASSED" and case.startswith("near tie"):
        assert not torch.equal(got, ref)


def test_topk_near_tie_within_tolerance_passes_and_outside_fails(indexer_case):
    definition, inputs, ref, (last_in, first_out, _) = indexer_case
    chosen, other = (last_in, first_out) if bool((ref[0] == last_in).any()) else (first_out, last_in)
    for factor, status in ((1 + 1e-5, "PASSED"), (0.5, "INCORRECT_NUMERICAL")):
        scaled = {**inputs, "k_index_cache_fp8": inputs["k_index_cache_fp8"].clone()}
        page = scaled["k_index_cache_fp8"].view(torch.uint8).reshape(12, -1)[other // 64]
        scales = page[64 * 128:].view(torch.float32)
        scales[other % 64] *= factor  # the unchosen token now scores a hair above / far below the chosen one
        got = _swap(ref, chosen, other)
        result = FAMILY.compare(definition, {"topk_indices": got}, {"topk_indices": ref}, TOL, inputs=scaled)
        assert result.status.value == status, (factor, result.message)


def test_topk_without_inputs_compares_index_sets(indexer_case):
    definition, _, ref, (last_in, first_out, _) = indexer_case
    check = FAMILY.compare
    assert check(definition, {"topk_indices": ref.flip(1)}, {"topk_indices": ref}, TOL).passed
    swapped = _swap(ref, last_in, first_out) if bool((ref[0] == last_in).any()) else _swap(ref, first_out, last_in)
    result = check(definition, {"topk_indices": swapped}, {"topk_indices": ref}, TOL)
    assert result.status.value == "INCORRECT_NUMERICAL" and "as sets" in result.message


# ---------------------------------------------------------------------------------------------
# Cost, lengths, regimes


def test_attention_cost_counts_gathered_rows(tmp_path):
    definition = Dataset(DATASET).definition(ATTENTION)
    blob = "blob/i.safetensors"
    (tmp_path / "blob").mkdir()
    idx = torch.full((2, 2048), -1, dtype=torch.int32)
    idx[0, :100] = torch.arange(100)
    idx[1, :50] = torch.arange(50, 100)  # half shared with token 0: read once
    save_file({"sparse_indices": idx}, str(tmp_path / blob))
    w = workload({"num_tokens": 2, "num_pages": 8462},
                 {"sparse_indices": {"type": "safetensors", "path": blob, "tensor_key": "sparse_indices"}})
    exact = FAMILY.workload_cost(definition, w, root=tmp_path)
    io = 2 * 16 * 576 * 2 + 2 * 2048 * 4 + 2 * 16 * 512 * 2 + 2 * 16 * 4
    assert exact.exact and exact.bytes_moved == 100 * 576 * 2 + io
    assert exact.flops == 150 * 2 * 16 * (576 + 512)
    assert FAMILY.request_lengths(definition, w, tmp_path) == [100, 50]
    bound = FAMILY.workload_cost(definition, w, root=tmp_path / "elsewhere")
    assert not bound.exact and bound.bytes_moved > exact.bytes_moved
    full = FAMILY.workload_cost(definition, workload({"num_tokens": 8, "num_pages": 8462}))
    assert 8 * 2048 * 576 * 2 == 18_874_368 and full.flops == 8 * 2048 * 2 * 16 * 1088  # fact sheet: 71.3 MFLOP/token


def test_indexer_cost_counts_reachable_keys(tmp_path):
    definition = Dataset(DATASET).definition(INDEXER)
    blob = "blob/s.safetensors"
    (tmp_path / "blob").mkdir()
    save_file({"seq_lens": torch.tensor([100, 3000], dtype=torch.int32),
               "block_table": torch.zeros(2, 47, dtype=torch.int32)}, str(tmp_path / blob))
    src = {n: {"type": "safetensors", "path": blob, "tensor_key": n} for n in ("seq_lens", "block_table")}
    w = workload({"batch_size": 2, "max_num_pages": 47, "num_pages": 11923}, src)
    cost = FAMILY.workload_cost(definition, w, root=tmp_path)
    io = 2 * 64 * 128 + 2 * 64 * 4 + 2 * 4 + 2 * 2048 * 4
    assert cost.exact and cost.bytes_moved == 3100 * 132 + (2 + 47) * 4 + io
    assert cost.flops == cost.fp8_flops == 3100 * 2 * 64 * 128  # all FP8: the floor takes them at the FP8 rate
    assert FAMILY.request_lengths(definition, w, tmp_path) == [100, 3000]
    assert not FAMILY.workload_cost(definition, w).exact


@pytest.mark.parametrize("axes,regime", [
    ({"num_tokens": 8, "num_qo_heads": 16}, "latency-bound"),
    ({"num_tokens": 4096, "num_qo_heads": 16}, "memory-bound"),
    ({"batch_size": 8, "max_num_pages": 32, "page_size": 64, "topk": 2048}, "select-all"),
    ({"batch_size": 8, "max_num_pages": 91, "page_size": 64, "topk": 2048}, "top-k select"),
])
def test_regimes(axes, regime):
    assert FAMILY.regime(axes) == regime


def test_regime_rules_split_measured_workloads():
    from harness.families.regimes import RegimeFacts, assign_regime

    rules = FAMILY.rules()
    assert assign_regime(RegimeFacts(axes={"num_tokens": 8}), rules) == "attention latency-bound"
    assert assign_regime(RegimeFacts(axes={"max_num_pages": 91}), rules) == "indexer top-k select"
    assert assign_regime(RegimeFacts(axes={"max_num_pages": 12}), rules) == "indexer select-all"
    assert TINY_ATTENTION_TOPK < 2048
