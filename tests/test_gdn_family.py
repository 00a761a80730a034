"""The GDN family (op_type gdn): the official data, the stand-ins drawn for the absent captured blobs (and the
official blobs used unchanged where present), cost, regimes, and the mutation and aliasing audits catching a
solution that updates the recurrent state in place or hands it back as ``new_state``."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.families import family_for
from harness.families.gdn import GdnFamily
from harness.families.gdn_inputs import draw_cu_seqlens, gates
from harness.data.inputs import absent_blob_inputs, generate_inputs, torch_dtype
from harness.data.schema import Solution, Trace, Workload, dump_json, load_jsonl

from dsa_support import DATASET, OFFICIAL
from support import solution_dict

DECODE = "gdn_decode_qk4_v8_d128_k_last"
PREFILL = "gdn_prefill_qk4_v8_d128_k_last"
FAMILY = family_for("gdn")


@pytest.fixture(scope="module")
def dataset():
    return Dataset(DATASET)


def run_reference(definition, inputs):
    namespace: dict = {}
    exec(compile(definition.reference, definition.name, "exec"), namespace)  # noqa: S102 (trusted reference)
    return dict(zip(definition.outputs, namespace["run"](*inputs.values())))


def one(dataset, name, label):
    [w] = dataset.workloads_for(name, [label])
    return w


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None or k == "shape"}
    return [_without_nulls(v) for v in value] if isinstance(value, list) else value


# ---------------------------------------------------------------------------------------------
# Data


@pytest.mark.parametrize("name,count,timing", [(DECODE, 54, (10, 50, 3)), (PREFILL, 100, (1, 5, 3))])
def test_definitions_and_workloads_are_the_official_files(dataset, name, count, timing):
    ours_def = DATASET / "definitions" / "gdn" / f"{name}.json"
    ours_wl = DATASET / "workloads" / "gdn" / f"{name}.jsonl"
    if OFFICIAL.is_dir():
        assert ours_def.read_bytes() == (OFFICIAL / "definitions" / f"{name}.json").read_bytes()
        assert ours_wl.read_bytes() == (OFFICIAL / "workloads" / f"{name}.jsonl").read_bytes()
    definition = dataset.definition(name)
    assert definition.op_type == "gdn" and isinstance(FAMILY, GdnFamily) and FAMILY.skill == "gdn"
    assert definition.inputs["state"].optional is True
    # what `harness export` writes, but for the null descriptions it keeps (the official files omit them)
    assert _without_nulls(dump_json(definition)) == json.loads(ours_def.read_text())
    assert len(dataset.workloads_for(name)) == count == len(load_jsonl(Trace, ours_wl))
    assert dataset.resolve("gdn") == [DECODE, PREFILL]
    preset = dataset.preset(name)
    assert (preset.atol, preset.rtol, preset.required_matched_ratio) == (0.01, 0.01, 1.0)
    assert (preset.warmup, preset.iterations, preset.num_trials) == timing


def test_other_definitions_export_without_the_optional_flag(dataset):
    for name in dataset.resolve("dsa"):
        assert all("optional" not in spec for spec in dump_json(dataset.definition(name))["inputs"].values())


def test_the_official_trace_set_loader_reads_the_folder():
    fib = pytest.importorskip("flashinfer_bench")
    ts = fib.TraceSet.from_path(str(DATASET))
    assert len(ts.workloads[DECODE]) == 54 and len(ts.workloads[PREFILL]) == 100


def test_every_official_input_but_scale_is_an_absent_blob_and_labels_are_readable(dataset):
    for name in (DECODE, PREFILL):
        definition = dataset.definition(name)
        wanted = [n for n in definition.inputs if n != "scale"]
        for w in dataset.workloads_for(name):
            assert absent_blob_inputs(definition, w, dataset.root) == wanted
            assert w.inputs["scale"].value == pytest.approx(1 / math.sqrt(128))
    labels = [dataset.label(w) for n in (DECODE, PREFILL) for w in dataset.workloads_for(n)]
    assert len(set(labels)) == 154 and "b64_0" in labels and "t8192_n57" in labels


# ---------------------------------------------------------------------------------------------
# Inputs


@pytest.mark.parametrize("name,label", [(DECODE, "b4_0"), (PREFILL, "t82_n3")])
def test_inputs_follow_the_definition_and_the_seed(dataset, name, label):
    definition, w = dataset.definition(name), one(dataset, name, label)
    first = generate_inputs(definition, w, 5, root=dataset.root)
    again = generate_inputs(definition, w, 5, root=dataset.root)
    other = generate_inputs(definition, w, 6, root=dataset.root)
    assert list(first) == list(definition.inputs)
    for n, spec in definition.inputs.items():
        if spec.shape is None:
            assert first[n] == pytest.approx(1 / math.sqrt(128))
            continue
        assert tuple(first[n].shape) == tuple(definition.shape_of(spec, w.axes)), n
        assert first[n].dtype == torch_dtype(spec.dtype), n
        assert torch.equal(first[n], again[n]), n
        if n not in ("cu_seqlens",) or w.axes.get("num_seqs", 1) > 1:
            assert not torch.equal(first[n], other[n]), n
    for n in ("q", "k"):
        norms = first[n].float().norm(dim=-1)
        assert torch.allclose(norms, torch.ones_like(norms), atol=1e-2), n


def test_gates_look_trained(dataset):
    definition, w = dataset.definition(DECODE), one(dataset, DECODE, "b64_0")
    x = generate_inputs(definition, w, 0, root=dataset.root)
    a_exp = x["A_log"].exp()
    assert float(a_exp.min()) >= 1.0 and float(a_exp.max()) <= 16.0
    assert float(x["dt_bias"].abs().max()) <= 4.0
    g, beta = gates(x["a"], x["b"], x["A_log"], x["dt_bias"])
    assert 0 < float(g.min()) and float(g.max()) < 1 and float(g.max()) > 0.9  # some heads keep a long memory
    assert 0.01 < float(beta.min()) and float(beta.max()) < 0.99


@pytest.mark.parametrize("total,seqs", [(6, 1), (28, 2), (8192, 57), (8192, 20), (57, 57), (3999, 13)])
def test_cu_seqlens_split_the_tokens_into_non_empty_sequences(total, seqs):
    cu = draw_cu_seqlens(total, seqs, torch.Generator().manual_seed(total * 100 + seqs), torch.device("cpu"))
    lengths = cu[1:] - cu[:-1]
    assert cu.dtype == torch.int64 and cu.shape == (seqs + 1,) and int(cu[0]) == 0 and int(cu[-1]) == total
    assert int(lengths.min()) >= 1
    if seqs >= 20 and total > 4 * seqs:
        assert float(lengths.max()) > 2 * float(lengths.float().mean())  # a spread, not an even split


def test_cu_seqlens_of_official_workloads_are_consistent(dataset):
    definition = dataset.definition(PREFILL)
    for label in ("t6_n1", "t82_n3", "t8192_n57"):
        w = one(dataset, PREFILL, label)
        cu = generate_inputs(definition, w, 2, root=dataset.root)["cu_seqlens"]
        assert cu.shape == (w.axes["len_cu_seqlens"],) and int(cu[-1]) == w.axes["total_seq_len"]
        assert int((cu[1:] - cu[:-1]).min()) >= 1


def test_state_is_bounded_and_the_reference_stays_finite_over_a_prefill(dataset):
    definition, w = dataset.definition(PREFILL), one(dataset, PREFILL, "t82_n3")
    x = generate_inputs(definition, w, 3, root=dataset.root)
    state = x["state"]
    # a decayed history of unit-key outer products: entries well under 1, not N(0, 1) draws (max ~4.5 of 393k)
    assert float(state.abs().max()) < 2.0 and float(state.std()) < 0.2
    assert float(torch.linalg.matrix_norm(state, ord=2).max()) < 64
    out = run_reference(definition, x)
    assert torch.isfinite(out["output"].float()).all() and torch.isfinite(out["new_state"]).all()
    assert float(out["new_state"].abs().max()) < 4.0
    assert float(out["output"].float().abs().max()) > 1e-3  # not a vanishing answer every kernel would match


# ---------------------------------------------------------------------------------------------
# Official blobs where present


def test_present_official_blobs_are_used_unchanged(dataset, tmp_path):
    definition = dataset.definition(PREFILL)
    axes = {"total_seq_len": 5, "num_seqs": 2, "len_cu_seqlens": 3}
    g = torch.Generator().manual_seed(9)
    captured = {"q": torch.randn(5, 4, 128, generator=g).bfloat16(),
                "k": torch.randn(5, 4, 128, generator=g).bfloat16(),
                "v": torch.randn(5, 8, 128, generator=g).bfloat16(), "state": torch.randn(2, 8, 128, 128, generator=g),
                "A_log": torch.randn(8, generator=g), "a": torch.randn(5, 8, generator=g).bfloat16(),
                "dt_bias": torch.randn(8, generator=g), "b": torch.randn(5, 8, generator=g).bfloat16(),
                "cu_seqlens": torch.tensor([0, 4, 5])}
    (tmp_path / "blob").mkdir()
    save_file(captured, str(tmp_path / "blob" / "w.safetensors"))
    src = {n: {"type": "safetensors", "path": "./blob/w.safetensors", "tensor_key": n} for n in captured}
    w = Workload.model_validate({"uuid": "w", "axes": axes,
                                 "inputs": {**src, "scale": {"type": "scalar", "value": 0.25}}})
    got = generate_inputs(definition, w, 0, root=tmp_path)
    for n, t in captured.items():
        assert torch.equal(got[n], t), n  # raw N(0, 1) q, k and state included: the official tensor wins
    assert got["scale"] == 0.25
    assert FAMILY.request_lengths(definition, w, tmp_path) == [4, 1]
    # only cu_seqlens held: it is kept, the rest drawn around it
    (tmp_path / "blob" / "w.safetensors").unlink()
    save_file({"cu_seqlens": captured["cu_seqlens"]}, str(tmp_path / "blob" / "cu.safetensors"))
    w2 = Workload.model_validate({"uuid": "w2", "axes": axes, "inputs": {
        **src, "cu_seqlens": {"type": "safetensors", "path": "./blob/cu.safetensors", "tensor_key": "cu_seqlens"}}})
    got = generate_inputs(definition, w2, 0, root=tmp_path)
    assert torch.equal(got["cu_seqlens"], captured["cu_seqlens"]) and not torch.equal(got["q"], captured["q"])
    assert FAMILY.request_lengths(definition, w, tmp_path) is None  # its blob is gone


# ---------------------------------------------------------------------------------------------
# Cost and regimes


def test_cost_of_a_decode_and_a_prefill_workload_by_hand(dataset):
    decode = FAMILY.workload_cost(dataset.definition(DECODE), one(dataset, DECODE, "b64_0"))
    b = 64
    state = 2 * b * 8 * 128 * 128 * 4
    qkv_out = b * 4 * 128 * 2 * 2 + b * 8 * 128 * 2 + b * 8 * 128 * 2  # q, k; v; output
    assert decode.bytes_moved == state + qkv_out + b * 8 * 2 * 2 + 2 * 8 * 4  # a, b; A_log, dt_bias
    assert decode.flops == b * 8 * 4 * 128 * 128 and decode.exact
    prefill = FAMILY.workload_cost(dataset.definition(PREFILL), one(dataset, PREFILL, "t8192_n57"))
    t, n = 8192, 57
    expected = (2 * n * 8 * 128 * 128 * 4 + t * 4 * 128 * 2 * 2 + t * 8 * 128 * 2 * 2 + t * 8 * 2 * 2 + 2 * 8 * 4
                + (n + 1) * 8)
    assert prefill.bytes_moved == expected and prefill.flops == t * 8 * 4 * 128 * 128 and prefill.exact


@pytest.mark.parametrize("axes,regime", [
    ({"batch_size": 1}, "decode latency-bound"), ({"batch_size": 8}, "decode latency-bound"),
    ({"batch_size": 16}, "decode memory-bound"), ({"batch_size": 64}, "decode memory-bound"),
    ({"total_seq_len": 6, "num_seqs": 1}, "prefill short"), ({"total_seq_len": 255, "num_seqs": 4}, "prefill short"),
    ({"total_seq_len": 2107, "num_seqs": 1}, "prefill few long sequences"),
    ({"total_seq_len": 959, "num_seqs": 4}, "prefill few long sequences"),
    ({"total_seq_len": 8192, "num_seqs": 57}, "prefill many sequences"),
])
def test_regimes(axes, regime):
    assert FAMILY.regime(axes) == regime


def test_official_workloads_fall_into_every_regime(dataset):
    seen = {FAMILY.regime({**dataset.definition(n).const_axes, **w.axes})
            for n in (DECODE, PREFILL) for w in dataset.workloads_for(n)}
    assert seen == {"decode latency-bound", "decode memory-bound", "prefill short", "prefill few long sequences",
                    "prefill many sequences"}


# ---------------------------------------------------------------------------------------------
# The state must not be updated in place nor handed back: judged through the harness on CPU


DECODE_STEP = '''
import torch
import torch.nn.functional as F


def step(q, k, v, state, A_log, a, dt_bias, b, scale):
    g = torch.exp(-torch.exp(A_log) * F.softplus(a[:, 0].float() + dt_bias))[..., None, None]
    beta = torch.sigmoid(b[:, 0].float())[..., None]
    qf = q[:, 0].float().repeat_interleave(2, dim=1)
    kf = k[:, 0].float().repeat_interleave(2, dim=1)
    s = state.float() * g
    ks = (s @ kf[..., None])[..., 0]
    s = s + ((beta * v[:, 0].float() + (1 - beta) * ks) - ks)[..., None] * kf[..., None, :]
    return (scale * (s @ qf[..., None])[..., 0]).unsqueeze(1).to(torch.bfloat16), s
'''
HONEST = DECODE_STEP + '''

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    return step(q, k, v, state, A_log, a, dt_bias, b, scale)
'''
IN_PLACE = DECODE_STEP + '''

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    output, new_state = step(q, k, v, state, A_log, a, dt_bias, b, scale)
    state.copy_(new_state)  # the state advanced in the caller's buffer, a fresh copy returned
    return output, new_state.clone()
'''
ALIASED = DECODE_STEP + '''

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    output, new_state = step(q, k, v, state, A_log, a, dt_bias, b, scale)
    state.copy_(new_state)
    return output, state  # new_state is the input's own memory
'''

STATE_IN_BF16 = DECODE_STEP + '''

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    output, new_state = step(q, k, v, state, A_log, a, dt_bias, b, scale)
    return output, new_state.to(torch.bfloat16).float()  # the state kept in bf16 between steps, handed back as fp32
'''


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    options = SubmitOptions(workloads=["b1_0"], timeout_s=120, baselines=False)
    with Session(Dataset(DATASET), Archive(tmp_path_factory.mktemp("gdn_archive")), options) as s:
        yield s


def _failed_audits(workload):
    return {a.name: a.detail for a in workload.audits if not a.passed}


def test_an_honest_torch_decode_passes_clean(session):
    result = session.submit(Solution.model_validate(solution_dict(HONEST, definition=DECODE, name="honest",
                                                                  dps=False)))
    [w] = result.workloads
    assert w.status == "PASSED", w.message
    failed = _failed_audits(w)
    assert "input_mutation" not in failed and "output_aliasing" not in failed, failed
    assert "precision" not in failed, failed  # fp32 arithmetic in another order than the reference's


@pytest.mark.parametrize("source,caught", [(IN_PLACE, {"input_mutation"}),
                                           (ALIASED, {"input_mutation", "output_aliasing"})],
                         ids=["state-updated-in-place", "new_state-aliases-state"])
def test_a_state_updated_in_place_or_returned_is_caught(session, source, caught):
    result = session.submit(Solution.model_validate(solution_dict(source, definition=DECODE, name="hostile",
                                                                  dps=False)))
    [w] = result.workloads
    failed = _failed_audits(w)
    assert caught <= set(failed), (w.status, w.audits)
    assert "state" in failed["input_mutation"]
    if "output_aliasing" in caught:
        assert "new_state" in failed["output_aliasing"] and "input state" in failed["output_aliasing"]
    assert result.to_json()["promotable"] is False


def test_a_state_kept_in_bf16_between_steps_is_caught(session):
    """Its error (0.2-0.4% of the state's magnitude) is under the family's 1% precision floor; its values are not."""
    result = session.submit(Solution.model_validate(solution_dict(STATE_IN_BF16, definition=DECODE, name="narrow",
                                                                  dps=False)))
    [w] = result.workloads
    assert w.status == "PASSED", w.message  # within the correctness tolerance
    failed = _failed_audits(w)
    assert "new_state" in failed.get("precision", "") and "kept in bfloat16" in failed["precision"], w.audits
    assert result.to_json()["promotable"] is False


def test_the_precision_floor_lets_bf16_tensor_core_operands_through():
    import yaml

    from harness.audits.thresholds import policy_thresholds

    policy = yaml.safe_load((DATASET / "audit_policy.yaml").read_text())
    for name in (DECODE, PREFILL):
        assert policy_thresholds(policy, name, "gdn") == {"precision_relative_floor": 0.01,
                                                          "attribution_cpu_reduction_share": 0.02}
