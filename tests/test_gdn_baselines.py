"""The FlashInfer baselines of the two GDN definitions, checked on CPU.

FlashInfer's GDN kernels need an SM90+ GPU, so they cannot run here. What is checked: the packed JSON files
are valid Solutions, labelled as they must be (prefill's is a Hopper stand-in), with sources byte-identical
to definitions/baselines_src and signatures the definitions accept; the wrappers import without FlashInfer;
and each wrapper, run against a CPU model of the FlashInfer API it calls, reproduces the definition's own
reference. The models are written from FlashInfer 0.6.18's source and docstrings, in FlashInfer's
conventions (state [.., V, K], linear decay alpha, v head h reading q/k head h // (HV // H), the decode's
qk L2 norm on unless switched off), independently of the reference's [K, V] loop; whether the real kernels
keep those conventions is what only a GPU run can show (the harness checks every baseline against the
reference before it uses its time).
"""

from __future__ import annotations

import json
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from harness.sandbox.build import static_signature_problem
from harness.data.schema import Definition, Solution, load_model
from support import DEFINITIONS, ROOT

SRC = DEFINITIONS / "baselines_src"
DECODE, PREFILL = "gdn_decode_qk4_v8_d128_k_last", "gdn_prefill_qk4_v8_d128_k_last"
DECODE_JSON = DEFINITIONS / "solutions" / "baseline" / "gdn" / DECODE / "flashinfer_gdn_decode_pretranspose.json"
DECODE_PREALLOCATED_JSON = DECODE_JSON.with_name("flashinfer_gdn_decode_pretranspose_preallocated.json")
PREFILL_JSON = (DEFINITIONS / "solutions" / "baseline" / "gdn" / PREFILL
                / "flashinfer_chunk_gdn_sm90_hopper_standin.json")
H, HV, D = 4, 8, 128


def definition(name: str) -> Definition:
    path = DEFINITIONS / "definitions" / "gdn" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    return load_model(Definition, path)


def reference(name: str):
    namespace: dict = {}
    exec(compile(definition(name).reference, f"<reference {name}>", "exec"), namespace)
    return namespace["run"]


def load_source(filename: str) -> dict:
    namespace: dict = {"__name__": filename}
    exec(compile((SRC / filename).read_text(), filename, "exec"), namespace)
    return namespace


# ---------------------------------------------------------------------------------------------
# The packed solutions


@pytest.mark.parametrize("path,source,entry", [
    (DECODE_JSON, "flashinfer_gdn_decode.py", "run"),
    (DECODE_PREALLOCATED_JSON, "flashinfer_gdn_decode.py", "run_preallocated"),
    (PREFILL_JSON, "flashinfer_gdn_prefill_sm90.py", "run")])
def test_packed_solution_is_valid_and_embeds_the_source(path, source, entry):
    solution = load_model(Solution, path)
    assert solution.author == "baseline" and solution.spec.dependencies == ["flashinfer"]
    assert not solution.spec.destination_passing_style  # value-returning, as the contest's baselines
    assert [(s.path, s.content) for s in solution.sources] == [(source, (SRC / source).read_text())]
    assert solution.spec.entry_point == f"{source}::{entry}"
    assert static_signature_problem(solution, definition(solution.definition)) is None


def test_packing_script_is_up_to_date():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import pack_examples
    finally:
        sys.path.pop(0)
    outputs = dict(pack_examples.all_outputs())
    for path in (DECODE_JSON, DECODE_PREALLOCATED_JSON, PREFILL_JSON):
        assert outputs[path] == path.read_text(), f"run scripts/pack_examples.py ({path.name} is stale)"


def test_labels():
    decode, prefill = load_model(Solution, DECODE_JSON), load_model(Solution, PREFILL_JSON)
    assert decode.definition == DECODE and "flashinfer_wrapper_9b7f1e" in decode.description
    assert "standin" not in decode.name and "H200" in decode.spec.target_hardware
    preallocated = load_model(Solution, DECODE_PREALLOCATED_JSON)
    assert "Not the contest's wrapper" in preallocated.description and preallocated.name != decode.name
    # the prefill one is a stand-in everywhere it is shown: name, description, source docstring, hardware
    assert prefill.definition == PREFILL and "hopper_standin" in prefill.name
    assert prefill.description.startswith("Hopper stand-in, NOT the contest's baseline")
    assert "NOT the contest's baseline" in prefill.sources[0].content.split('"""')[1]
    assert prefill.spec.target_hardware == ["H200"]
    assert json.loads(PREFILL_JSON.read_text())["name"] == prefill.name


def test_wrappers_import_without_flashinfer(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # any import of it would raise
    for filename in ("flashinfer_gdn_decode.py", "flashinfer_gdn_prefill_sm90.py"):
        assert callable(load_source(filename)["run"])


# ---------------------------------------------------------------------------------------------
# CPU models of the FlashInfer APIs, in FlashInfer's conventions


def step_vk(S, q, k, v, alpha, beta, scale):
    """One token of the gated delta rule on a [V, K] state: S <- alpha S + beta (v - alpha S k) k^T, o = scale S q."""
    S = alpha * S
    S = S + beta * torch.outer(v - S @ k, k)
    return S, scale * (S @ q)


def fake_decode_pretranspose(calls):
    def gated_delta_rule_decode_pretranspose(q, k, v, state, A_log, a, dt_bias, b, scale=None, output=None,
                                             use_qk_l2norm=True, initial_state=None,
                                             initial_state_indices=None, output_state_indices=None):
        calls.append({"scale": scale, "use_qk_l2norm": use_qk_l2norm, "output_given": output is not None})
        batch, _, heads, dim = q.shape
        hv = v.shape[2]
        scale = dim ** -0.5 if scale is None else scale
        qf, kf = q.float(), k.float()
        if use_qk_l2norm:
            qf, kf = F.normalize(qf, dim=-1), F.normalize(kf, dim=-1)
        # the fp32-state path zero-fills an output only when none is given, and writes into it
        out = torch.zeros(batch, 1, hv, v.shape[3], dtype=torch.bfloat16) if output is None else output
        for n in range(batch):
            for h in range(hv):
                x = float(a[n, 0, h]) + float(dt_bias[h])
                softplus = x if x > 20.0 else math.log1p(math.exp(x))
                alpha = math.exp(-math.exp(float(A_log[h])) * softplus)
                beta = 1.0 / (1.0 + math.exp(-float(b[n, 0, h])))
                i = h // (hv // heads)
                S, o = step_vk(state[n, h], qf[n, 0, i], kf[n, 0, i], v[n, 0, h].float(), alpha, beta, scale)
                state[n, h] = S  # in place, as documented
                out[n, 0, h] = o.to(torch.bfloat16)
        return out, state
    return gated_delta_rule_decode_pretranspose


def fake_chunk_gated_delta_rule(calls):
    def chunk_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                               output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=False,
                               output=None, output_state=None, **rest):
        calls.append({"g": g, "beta": beta, "initial_state": initial_state, "scale": scale})
        assert g.dtype == beta.dtype == torch.float32 and g.is_contiguous() and beta.is_contiguous()
        total, heads, dim = q.shape
        hv = v.shape[1]
        scale = 1.0 / math.sqrt(dim) if scale is None or scale == 0.0 else scale
        seqs = cu_seqlens.numel() - 1
        out = torch.empty(total, max(heads, hv), dim, dtype=q.dtype)
        final = torch.empty(seqs, hv, dim, dim, dtype=torch.float32)
        for n in range(seqs):
            for h in range(hv):
                i = h * heads // hv
                S = initial_state[n, h].clone() if initial_state is not None else torch.zeros(dim, dim)
                for t in range(int(cu_seqlens[n]), int(cu_seqlens[n + 1])):
                    S, o = step_vk(S, q[t, i].float(), k[t, i].float(), v[t, h].float(), g[t, h], beta[t, h],
                                   scale)
                    out[t, h] = o.to(q.dtype)
                final[n, h] = S
        return (out, final) if output_final_state else out
    return chunk_gated_delta_rule


def install(monkeypatch, submodule: str, **functions):
    package = types.ModuleType("flashinfer")
    module = types.ModuleType(f"flashinfer.{submodule}")
    for name, fn in functions.items():
        setattr(module, name, fn)
    setattr(package, submodule, module)
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, f"flashinfer.{submodule}", module)


def gdn_inputs(tokens_shape, states: int, seed: int):
    """Small inputs of the definitions' shapes: unit q/k heads, gates of a trained layer, a modest state."""
    gen = torch.Generator().manual_seed(seed)

    def unit(*shape):
        x = torch.randn(*shape, generator=gen)
        return (x / x.norm(dim=-1, keepdim=True)).to(torch.bfloat16)

    return {"q": unit(*tokens_shape, H, D), "k": unit(*tokens_shape, H, D),
            "v": torch.randn(*tokens_shape, HV, D, generator=gen).to(torch.bfloat16),
            "state": 0.1 * torch.randn(states, HV, D, D, generator=gen),
            "A_log": torch.log(1 + 15 * torch.rand(HV, generator=gen)),
            "a": torch.randn(*tokens_shape, HV, generator=gen).to(torch.bfloat16),
            "dt_bias": -4 * torch.rand(HV, generator=gen),
            "b": (1.5 * torch.randn(*tokens_shape, HV, generator=gen)).to(torch.bfloat16)}


def assert_matches(got, want):
    (out, state), (want_out, want_state) = got, want
    assert out.dtype == torch.bfloat16 and out.shape == want_out.shape
    assert state.dtype == torch.float32 and state.shape == want_state.shape
    torch.testing.assert_close(state, want_state, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.float(), want_out.float(), atol=1e-2, rtol=1e-2)


# ---------------------------------------------------------------------------------------------
# Decode: no conversion, use_qk_l2norm off, state updated in place and returned


@pytest.mark.parametrize("entry, output_given", [("run", False), ("run_preallocated", True)])
def test_decode_wrapper_reproduces_the_reference(monkeypatch, entry, output_given):
    calls: list = []
    install(monkeypatch, "gdn_decode", gated_delta_rule_decode_pretranspose=fake_decode_pretranspose(calls))
    run = load_source("flashinfer_gdn_decode.py")[entry]
    inputs = gdn_inputs((3, 1), 3, seed=1)
    want = reference(DECODE)(**{k: v.clone() for k, v in inputs.items()}, scale=1 / math.sqrt(D))
    args = {k: v.clone() for k, v in inputs.items()}
    out, new_state = run(**args, scale=1 / math.sqrt(D))
    assert calls == [{"scale": 1 / math.sqrt(D), "use_qk_l2norm": False, "output_given": output_given}]
    assert new_state is args["state"]  # FlashInfer's in-place update, returned as is (see the wrapper)
    assert_matches((out, new_state), want)


def test_decode_scale_zero_means_the_default(monkeypatch):
    calls: list = []
    install(monkeypatch, "gdn_decode", gated_delta_rule_decode_pretranspose=fake_decode_pretranspose(calls))
    run = load_source("flashinfer_gdn_decode.py")["run"]
    inputs = gdn_inputs((2, 1), 2, seed=2)
    want = reference(DECODE)(**{k: v.clone() for k, v in inputs.items()}, scale=0.0)
    got = run(**inputs, scale=0.0)
    assert calls[0]["scale"] is None  # a literal 0.0 would reach FlashInfer's kernel as 0
    assert_matches(got, want)


def test_the_decode_model_tells_l2_norm_apart():
    """The model is sharp enough to catch a wrapper that left FlashInfer's default (use_qk_l2norm=True) on."""
    inputs = gdn_inputs((2, 1), 2, seed=3)
    inputs["k"] = (inputs["k"].float() * 3).to(torch.bfloat16)  # keys not of unit norm
    want = reference(DECODE)(**{k: v.clone() for k, v in inputs.items()}, scale=1 / math.sqrt(D))
    fake = fake_decode_pretranspose([])
    args = {k: v.clone() for k, v in inputs.items()}
    _, state = fake(args["q"], args["k"], args["v"], args["state"], args["A_log"], args["a"], args["dt_bias"],
                    args["b"], scale=1 / math.sqrt(D), use_qk_l2norm=True)
    assert not torch.allclose(state, want[1], atol=1e-2, rtol=1e-2)


# ---------------------------------------------------------------------------------------------
# Prefill: gates to linear alpha and beta; state, heads and cu_seqlens as given


def prefill_inputs(lengths, seed):
    inputs = gdn_inputs((sum(lengths),), len(lengths), seed)
    inputs["cu_seqlens"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)
    return inputs


def run_prefill(monkeypatch, inputs, scale, capability=(9, 0)):
    calls: list = []
    install(monkeypatch, "gdn_prefill", chunk_gated_delta_rule=fake_chunk_gated_delta_rule(calls))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    run = load_source("flashinfer_gdn_prefill_sm90.py")["run"]
    args = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    return run(**args, scale=scale), calls


@pytest.mark.parametrize("lengths", [[5], [3, 1, 7]])
def test_prefill_wrapper_reproduces_the_reference(monkeypatch, lengths):
    inputs = prefill_inputs(lengths, seed=4)
    want = reference(PREFILL)(**{k: v.clone() for k, v in inputs.items()}, scale=1 / math.sqrt(D))
    got, calls = run_prefill(monkeypatch, inputs, 1 / math.sqrt(D))
    assert_matches(got, want)
    assert calls[0]["scale"] == 1 / math.sqrt(D)
    assert got[1] is not calls[0]["initial_state"]  # FlashInfer writes the final state to a fresh tensor


def test_prefill_gates_are_linear_alpha_and_beta():
    gates = load_source("flashinfer_gdn_prefill_sm90.py")["gates"]
    inputs = prefill_inputs([4, 2], seed=5)
    alpha, beta = gates(inputs["A_log"], inputs["a"], inputs["dt_bias"], inputs["b"])
    assert alpha.shape == beta.shape == (6, HV) and alpha.dtype == beta.dtype == torch.float32
    assert ((alpha > 0) & (alpha <= 1)).all() and ((beta > 0) & (beta < 1)).all()
    # the definition's g, computed in float64 from the same inputs
    x = inputs["a"].double() + inputs["dt_bias"].double()
    g = torch.exp(-torch.exp(inputs["A_log"].double()) * torch.log1p(torch.exp(x)))
    torch.testing.assert_close(alpha.double(), g, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(beta.double(), torch.sigmoid(inputs["b"].double()), atol=1e-6, rtol=1e-6)
    # round trip through the log space the SM90 kernel works in (AlphaProcessor: log2(alpha + 1e-10))
    torch.testing.assert_close(torch.exp2(torch.log2(alpha + 1e-10)), alpha, atol=1e-9, rtol=1e-5)


def test_the_prefill_model_tells_conventions_apart(monkeypatch):
    """Log-space gates, a [K, V] state or other q/k heads give other answers: the match above is not luck."""
    inputs = prefill_inputs([4, 3], seed=6)
    want = reference(PREFILL)(**{k: v.clone() for k, v in inputs.items()}, scale=1 / math.sqrt(D))
    gates = load_source("flashinfer_gdn_prefill_sm90.py")["gates"]
    alpha, beta = gates(inputs["A_log"], inputs["a"], inputs["dt_bias"], inputs["b"])
    model = fake_chunk_gated_delta_rule([])
    common = dict(beta=beta, scale=1 / math.sqrt(D), output_final_state=True, cu_seqlens=inputs["cu_seqlens"])
    q, k, v, state = inputs["q"], inputs["k"], inputs["v"], inputs["state"]
    right = model(q, k, v, g=alpha, initial_state=state, **common)
    assert_matches(right, want)
    wrong = {"log-space gate": model(q, k, v, g=torch.log(alpha).contiguous(), initial_state=state, **common),
             "[K, V] state": model(q, k, v, g=alpha, initial_state=state.transpose(-1, -2).contiguous(), **common),
             "q/k heads swapped": model(q[:, [1, 0, 3, 2]].contiguous(), k[:, [1, 0, 3, 2]].contiguous(), v,
                                        g=alpha, initial_state=state, **common)}
    for what, (out, final) in wrong.items():
        assert not torch.allclose(final, want[1], atol=1e-2, rtol=1e-2), what


def test_prefill_default_scale_and_no_state(monkeypatch):
    inputs = prefill_inputs([3], seed=7)
    inputs["state"] = None  # optional in the definition: zeros
    want = reference(PREFILL)(**inputs, scale=0.0)
    got, calls = run_prefill(monkeypatch, inputs, 0.0)
    assert calls[0]["scale"] is None and calls[0]["initial_state"] is None
    assert_matches(got, want)


def test_prefill_stand_in_refuses_blackwell(monkeypatch):
    with pytest.raises(RuntimeError, match="for Hopper"):
        run_prefill(monkeypatch, prefill_inputs([2], seed=8), 0.0, capability=(10, 0))


def test_decode_says_when_the_cute_dsl_kernel_is_missing(monkeypatch):
    install(monkeypatch, "gdn_decode", gated_delta_rule_decode_pretranspose=fake_decode_pretranspose([]),
            _PRETRANSPOSE_AVAILABLE=False)
    with pytest.raises(RuntimeError, match="nvidia-cutlass-dsl"):
        load_source("flashinfer_gdn_decode.py")["run"](**gdn_inputs((1, 1), 1, seed=9), scale=0.0)
