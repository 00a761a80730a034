"""The CPU variant of the `attribution` audit: the worker counts the ATen operators a Triton solution's checked calls
dispatch under the interpreter (harness.sandbox.library_ops) and harness.audits.cpu_attribution judges the float
elements they read against the inputs'.

Found by the red team (hostile E2): on a CPU a solution computed attention with PyTorch operators the static gate
does not list (``(q * k).sum_to_size``, ``s.max(dim=2)``, ``math.e ** (s - m)``, ``l.log()``) and launched one Triton
kernel that only copied the result; its one launch passed `own_kernel`, and it was PASSED promotable with no finding.
And honest code whose flagged PyTorch lines never run (a self-test called only under ``__main__``) stayed blocked as
"unconfirmed" on every CPU.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.audits.cpu_attribution import (MAX_SHARE, SCALAR_READS, call_verdict, cpu_attribution_verdict,
                                           is_cpu_variant, settles)
from harness.audits.model import Audit
from harness.audits.verdicts import is_fallback, unconfirmed_library_use
from harness.sandbox import library_ops, triton_interp
from harness.sandbox.library_ops import Counter, LibraryOps

from support import KV8_PS1, solution_dict, triton_example

# float elements of a paged decode's q + k_cache + v_cache: 32 heads x 128, and 8 KV heads x 128 x 512 tokens each
GQA_INPUTS = 32 * 128 + 2 * 8 * 128 * 512
# MoE: hidden states [T=16, 7168] and the experts' weights [32, 3 x 2048, 7168] (fp8: float elements too)
MOE_INPUTS = 16 * 7168 + 32 * 3 * 2048 * 7168


@pytest.mark.parametrize("inputs, ops, aten_glue, rank, words", [
    # the red team's attack: attention by sum_to_size and max, Triton only copies (508% of the inputs)
    (GQA_INPUTS, {"aten::sum": ("reduction", 4 * GQA_INPUTS), "aten::mul": ("pointwise", GQA_INPUTS),
                  "aten::max": ("reduction", 4096)}, False, 2, "fallback: CPU: library ops read 5"),
    # half the operator in PyTorch (QK^T by a batched matmul over K): still a fallback
    (GQA_INPUTS, {"aten::bmm": ("matmul", GQA_INPUTS // 2)}, False, 2, "fallback"),
    # a dequantisation of the whole KV cache by pointwise maps reads it all: no glue hides that
    (GQA_INPUTS, {"aten::mul": ("pointwise", GQA_INPUTS)}, False, 2, "fallback"),
    # honest planning reads integer page tables only (nothing counted), or nothing at all
    (GQA_INPUTS, {}, False, 0, "CPU: no library compute outside the solution's own Triton kernels"),
    # q * sm_scale on the host: under 1%
    (GQA_INPUTS, {"aten::mul": ("pointwise", 4096)}, False, 0, "CPU: library ops read 0.389%"),
    # MoE routing in PyTorch: sigmoid, top-k and softmax over [T, E] logits, an ATen glue family
    (MOE_INPUTS, {"aten::sigmoid": ("pointwise", 16 * 32), "aten::topk": ("reduction", 2 * 16 * 32),
                  "aten::_softmax": ("reduction", 16 * 8)}, True, 0, "ATen glue allowed"),
    # ...and a vLLM-style sum over the top-k of [T, 8, H]
    (MOE_INPUTS, {"aten::sum": ("reduction", 16 * 8 * 7168)}, True, 0, "CPU: library ops read"),
    # a top-k where the family has no ATen glue (the DSA indexer's selection): a small share, but unsettled
    (GQA_INPUTS, {"aten::topk": ("reduction", 2048)}, False, 1, "unsettled: CPU: library ops read"),
    # values taken out of PyTorch (numpy, lists): what is computed on them no count sees
    (GQA_INPUTS, {"host: Tensor.numpy": ("host", 4096)}, True, 1, "values taken out of PyTorch (numpy, lists)"),
    # Python scalars of a plan (`int(counts.max())`, `.item()`): glue, a few of them (red team round 11)...
    (MOE_INPUTS, {"host: Tensor.__int__": ("host", 3), "host: Tensor.item": ("host", 32)}, True, 0,
     "CPU: library ops read"),
    (GQA_INPUTS, {"host: Tensor.__bool__": ("host", 1), "aten::mul": ("pointwise", 4096)}, False, 0, "glue: under"),
    # ...but not thousands of them, nor more than 1% of the inputs: what Python computes on them no count sees
    (MOE_INPUTS, {"host: Tensor.item": ("host", SCALAR_READS + 1)}, True, 1, "values taken out of PyTorch"),
    (GQA_INPUTS // 10, {"host: Tensor.__float__": ("host", GQA_INPUTS // 500)}, False, 1,
     "values taken out of PyTorch"),
    # a few scalars beside values taken out whole: the whole ones keep it unsettled
    (GQA_INPUTS, {"host: Tensor.item": ("host", 1), "host: Tensor.tolist": ("host", 64)}, False, 1,
     "(host: Tensor.tolist)"),
    # a matrix product is never glue, not even in MoE's family
    (MOE_INPUTS, {"aten::mm": ("matmul", 16 * 7168)}, True, 1, "matrix products (aten::mm) are not glue"),
    # library compute where the inputs hold no float element: all of it is the library's
    (0, {"aten::mul": ("pointwise", 10)}, False, 2, "fallback"),
])
def test_who_did_the_work_on_a_cpu(inputs, ops, aten_glue, rank, words):
    got_rank, share, audit = call_verdict((inputs, ops), aten_glue)
    assert (got_rank, audit.passed) == (rank, rank == 0), audit.detail
    assert words in audit.detail, audit.detail
    assert is_fallback([audit]) is (rank == 2)
    assert is_cpu_variant(audit)


def test_the_bound_is_a_quarter_of_the_inputs():
    below = {"aten::mul": ("pointwise", int(GQA_INPUTS * MAX_SHARE) - 1)}
    at = {"aten::mul": ("pointwise", math.ceil(GQA_INPUTS * MAX_SHARE))}
    assert call_verdict((GQA_INPUTS, below))[2].passed
    assert not call_verdict((GQA_INPUTS, at))[2].passed
    assert call_verdict((GQA_INPUTS, at), max_share=0.5)[2].passed  # a policy's attribution_cpu_max_share


def test_a_workload_takes_its_worst_call():
    fine = (GQA_INPUTS, {"aten::mul": ("pointwise", 4096)})
    more = (GQA_INPUTS, {"aten::mul": ("pointwise", 8192)})
    unsettled = (GQA_INPUTS, {"aten::topk": ("reduction", 64)})
    fallback = (GQA_INPUTS, {"aten::sum": ("reduction", GQA_INPUTS)})
    assert cpu_attribution_verdict([]) is None
    assert "0.778%" in cpu_attribution_verdict([fine, more, fine]).detail  # the larger share
    assert cpu_attribution_verdict([fine, unsettled, fine]).detail.startswith("unsettled")
    assert cpu_attribution_verdict([unsettled, fallback, fine]).detail.startswith("fallback")
    assert cpu_attribution_verdict([fallback], library_is_own=True).passed  # the dataset's own baselines


TORCH = {"rule": "torch_compute", "severity": "warning", "path": "kernel.py", "line": 7, "message": "torch.einsum"}
GPU_LIBRARY = {**TORCH, "rule": "library_fallback", "message": "cublasGemmEx"}
FLASHINFER = {**TORCH, "message": "calls `flashinfer.BatchDecodeWithPagedKVCacheWrapper` (the flashinfer library "
                                  "compute, not one of the constant/allocation/view/metadata/device-query helpers)"}
NUMPY = {**TORCH, "message": "calls `numpy.einsum` (the numpy library's compute: float math or linear algebra on "
                             "arrays, on the host)"}
NUMPY_AXIS = {**TORCH, "message": "calls `numpy.sum` along an axis (numpy compute on an array)"}
CPU_PASS = Audit(name="attribution", passed=True, detail="CPU: no library compute outside the solution's kernels")
GPU_PASS = Audit(name="attribution", passed=True, detail="100.0% of compute time in the candidate's kernels")


@pytest.mark.parametrize("audit, finding, blocked", [
    (CPU_PASS, TORCH, False),  # PyTorch code the gate saw that never ran (a __main__ self-test): cleared
    (CPU_PASS, GPU_LIBRARY, True),  # a GPU library no CPU runs: still unconfirmed
    (CPU_PASS, FLASHINFER, True),  # FlashInfer where it imports, the solution's own kernel elsewhere (a CPU)
    (GPU_PASS, GPU_LIBRARY, False),
    (None, TORCH, True),
    # numpy on the host: no attribution sees it (a reinterpreting view, `q.view(torch.int16).numpy()`, leaves a
    # CPU's count of values taken out of PyTorch at zero float elements; CUPTI records GPU kernels only)
    (CPU_PASS, NUMPY, True),
    (GPU_PASS, NUMPY, True),
    (CPU_PASS, NUMPY_AXIS, True),
])
def test_a_cpu_pass_settles_pytorch_findings_only(audit, finding, blocked):
    workloads = [{"label": "b1", "status": "PASSED", "audits": [audit] if audit else []}]
    reasons = unconfirmed_library_use(workloads, [finding])
    assert bool(reasons) is blocked, reasons


# -- the worker's counter -------------------------------------------------------------------------------------


def _counted(fn, index_budget=0):
    ops = LibraryOps(index_budget)
    with ops:
        result = fn()
    assert torch._C._len_torch_dispatch_stack() == 0  # popped: the worker's integrity check finds no mode left
    return ops.ops, result


def test_data_movement_views_and_index_arithmetic_are_not_compute():
    k = torch.randn(40, 1, 8, 16, dtype=torch.bfloat16)
    indptr = torch.tensor([0, 15, 40], dtype=torch.int32)
    indices = library_ops.mark_inputs({"k": k, "indptr": indptr})  # as the worker's counter does with the inputs

    def moves():
        lengths = (indptr[1:] - indptr[:-1]).cumsum(0)  # arithmetic on the definition's indices: bookkeeping
        order = torch.argsort(lengths, descending=True)
        rows = k[indptr[:1].long()].float().permute(0, 2, 1, 3).contiguous().reshape(-1)
        out = torch.zeros(64)
        out.index_put_((torch.arange(4),), rows[:4])
        out[4:8].copy_(rows[4:8])
        out.fill_(0.5)
        return torch.cat([out, torch.gather(rows, 0, order.long())]).clone().to(torch.bfloat16)

    ops, _ = _counted(moves, library_ops.INDEX_ARITHMETIC_BUDGET * indices)
    assert ops == {}, ops


def test_compute_is_counted_by_kind_and_elements_read_and_results_do_not_change():
    q = torch.randn(8, 4, 16)
    k = torch.randn(8, 40, 16)

    def attention():
        s = (q[:, :, None, :] * k[:, None, :, :]).sum(-1) * 0.25  # the attack's kind: a product, then a sum
        m = s.max(dim=2, keepdim=True).values
        p = math.e ** (s - m)
        scores = torch.bmm(q, k.transpose(1, 2))
        acc = torch.zeros(4).index_put_((torch.tensor([0, 1]),), torch.ones(2), accumulate=True)  # a scatter-add
        return p.sum(-1).log(), scores, acc

    ops, got = _counted(attention)
    want = attention()
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert ops["aten::mul"] == ("pointwise", q.numel() + k.numel() + 8 * 4 * 40)  # the product, then the scale
    assert ops["aten::sum"] == ("reduction", 8 * 4 * 40 * 16 + 8 * 4 * 40)
    assert ops["aten::max"] == ("reduction", 8 * 4 * 40)
    assert ops["aten::pow"][0] == ops["aten::log"][0] == "pointwise"
    assert ops["aten::bmm"] == ("matmul", q.numel() + k.numel())
    assert ops["aten::index_put_"][0] == "reduction"


def test_a_custom_operators_insides_are_seen(tmp_path):
    @torch.library.custom_op("crucible_test::attn", mutates_args=("out",))
    def attn(q: torch.Tensor, k: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_((q * k).sum(-1))

    q, k, out = torch.randn(4, 8), torch.randn(4, 8), torch.empty(4)
    ops, _ = _counted(lambda: attn(q, k, out))
    assert torch.equal(out, (q * k).sum(-1))
    assert set(ops) == {"aten::mul", "aten::sum"}, ops  # never the custom operator itself: the solution's own code


def test_the_mode_is_popped_when_the_call_raises():
    with pytest.raises(ZeroDivisionError):
        with LibraryOps():
            torch.ones(2).mul(2)
            raise ZeroDivisionError
    assert torch._C._len_torch_dispatch_stack() == 0


def test_the_gates_findings_a_cpu_pass_settles():
    """On the static gate's own messages: PyTorch's compute, never numpy's (the host's, which no count sees) nor
    another library's."""
    from harness.audits.static_gate import load_policy, scan_sources

    source = """
import flashinfer
import numpy as np
import torch


def run(q, k, out):
    a = torch.einsum("ij,kj->ik", q, k)
    b = q @ k.T
    c = q.softmax(-1)
    d = np.exp(q.numpy())
    e = flashinfer.single_decode_with_kv_cache(q, k, k)
"""
    found = {f.line: f.model_dump() for f in scan_sources({"kernel.py": source}, "triton", load_policy())
             if f.rule == "torch_compute"}
    assert {line: settles(f) for line, f in found.items()} == {8: True, 9: True, 10: True, 11: False, 12: False}, found


def test_only_interpreted_triton_or_python_solutions_on_a_cpu_are_counted(monkeypatch):
    monkeypatch.setattr(triton_interp, "_INTERPRETING", True)  # what the worker's start sets (apply())
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # candidate code can remove the variable: counted still
    cpu = torch.device("cpu")
    assert isinstance(library_ops.counter("triton", cpu), Counter)
    assert isinstance(library_ops.counter("python", cpu), Counter)
    assert library_ops.counter("cuda", cpu) is None
    assert library_ops.counter("triton", torch.device("cuda")) is None
    monkeypatch.setattr(triton_interp, "_INTERPRETING", False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # nor does setting it later start a count
    assert library_ops.counter("triton", cpu) is None
    report = Counter().report({"q": torch.ones(2, 3), "indptr": torch.arange(3), "sm_scale": 0.1})
    assert report == {"input_elements": 6, "ops": {}}


def test_values_taken_out_of_pytorch_are_host_reads_inside_launches_too():
    k = torch.randn(40, 16)
    indptr = torch.tensor([0, 15, 40])
    counter = Counter()
    with counter:
        lengths = indptr.tolist()  # integers: planning, counted toward the share only (round 9)
        s = (k.numpy() * 2.0).sum(-1)  # numpy's compute on the inputs' values: no ATen operator sees it
        rows = k[:2].tolist()
        triton_interp.IN_LAUNCH[0] += 1  # while a launch runs, only the interpreter's own copies are exempt
        try:  # (tests/test_redteam_round9.py): this read is the caller's, as a grid function's would be
            k.numpy()
        finally:
            triton_interp.IN_LAUNCH[0] -= 1
    assert torch._C._len_torch_dispatch_stack() == 0 and torch._C._len_torch_function_stack() == 0
    assert lengths == [0, 15, 40] and s.shape == (40,) and len(rows) == 2
    assert counter.report({"k": k})["ops"] == {"host: Tensor.numpy": {"kind": "host", "elements": 2 * 640},
                                                "host: Tensor.tolist": {"kind": "host", "elements": 32},
                                                "host: Tensor.tolist (integers)": {"kind": "host_integers",
                                                                                   "elements": 3}}


# -- end to end, through the harness's workers on this CPU -------------------------------------------------------

# The red team's a02: attention in PyTorch operators the static gate does not list; Triton only copies the result.
TORCH_OPS_ATTACK = '''
import math
import torch
import triton
import triton.language as tl


@triton.jit
def _store_kernel(src_ptr, out_ptr, lse_src_ptr, lse_ptr, N: tl.constexpr, H: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, N)
    x = tl.load(src_ptr + pid * N + offs)
    tl.store(out_ptr + pid * N + offs, x.to(out_ptr.dtype.element_ty))
    hoffs = tl.arange(0, H)
    tl.store(lse_ptr + pid * H + hoffs, tl.load(lse_src_ptr + pid * H + hoffs))


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    B, H, D = q.shape
    KVH = k_cache.shape[2]
    G = H // KVH
    out = torch.zeros((B, H, D), dtype=torch.float32, device=q.device)
    ls = torch.full((B, H), float("-inf"), dtype=torch.float32, device=q.device)
    ptr = kv_indptr.tolist()
    for b in range(B):
        T = ptr[b + 1] - ptr[b]
        if T == 0:
            continue
        idx = kv_indices[ptr[b]:ptr[b + 1]].long()
        k = k_cache[idx][:, 0].float()
        v = v_cache[idx][:, 0].float()
        qq = q[b].float().reshape(KVH, G, 1, D)
        kk = k.permute(1, 0, 2).reshape(KVH, 1, T, D)
        s = (qq * kk).sum_to_size(KVH, G, T, 1).reshape(KVH, G, T) * float(sm_scale)
        m = s.max(dim=2, keepdim=True).values
        p = math.e ** (s - m)
        l = p.sum_to_size(KVH, G, 1)
        vv = v.permute(1, 0, 2).reshape(KVH, 1, T, D)
        o = (p.reshape(KVH, G, T, 1) * vv).sum_to_size(KVH, G, 1, D).reshape(KVH, G, D) / l
        out[b] = o.reshape(H, D)
        ls[b] = ((m + l.log()) / math.log(2)).reshape(H)
    if B:
        _store_kernel[(B,)](out, output, ls, lse, N=H * D, H=H)
'''

# The same attack in numpy's arithmetic on the tensors' values (the same Triton kernel copies the result).
NUMPY_RUN = '''def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    B, H, D = q.shape
    KVH = k_cache.shape[2]
    G = H // KVH
    out = torch.zeros((B, H, D), dtype=torch.float32)
    ls = torch.full((B, H), float("-inf"), dtype=torch.float32)
    on, lsn = out.numpy(), ls.numpy()
    kn, vn, qn = k_cache.float().numpy(), v_cache.float().numpy(), q.float().numpy()
    ptr, rows = kv_indptr.tolist(), kv_indices.tolist()
    for b in range(B):
        pages = rows[ptr[b]:ptr[b + 1]]
        if not pages:
            continue
        k = kn[pages][:, 0].transpose(1, 0, 2)[:, None]
        v = vn[pages][:, 0].transpose(1, 0, 2)[:, None]
        s = (qn[b].reshape(KVH, G, 1, D) * k).sum(-1) * sm_scale
        m = s.max(-1, keepdims=True)
        p = math.e ** (s - m)
        l = p.sum(-1, keepdims=True)
        on[b] = ((p[..., None] * v).sum(-2) / l).reshape(H, D)
        lsn[b] = ((m + torch.from_numpy(l).log().numpy()) / math.log(2)).reshape(H)
    if B:
        _store_kernel[(B,)](out, output, ls, lse, N=H * D, H=H)
'''
NUMPY_ATTACK = TORCH_OPS_ATTACK[:TORCH_OPS_ATTACK.index("def run(")] + NUMPY_RUN

# The red team's s07: the honest kernel with a PyTorch self-test that runs only as a script.
SELF_TEST = '''

def _reference(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    """Plain PyTorch reference, used only by the self-test below."""
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    group = q.shape[1] // k_cache.shape[2]
    for b in range(q.shape[0]):
        pages = kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        k = k_cache[pages, 0].float().repeat_interleave(group, dim=1)
        v = v_cache[pages, 0].float().repeat_interleave(group, dim=1)
        s = torch.einsum("hd,lhd->hl", q[b].float(), k) * sm_scale
        lse[b] = torch.logsumexp(s, -1) / math.log(2.0)
        out[b] = torch.einsum("hl,lhd->hd", torch.softmax(s, -1), v).to(q.dtype)
    return out, lse


if __name__ == "__main__":
    print(_reference)
'''


@pytest.fixture(scope="module")
def session(tiny_dataset_root, tmp_path_factory):
    if torch.cuda.is_available():
        pytest.skip("the CPU's attribution: a GPU host times and attributes with CUPTI instead")
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions

    with Session(Dataset(tiny_dataset_root), Archive(tmp_path_factory.mktemp("cpu_attribution")),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300, baselines=False)) as s:
        yield s


def _submit(session, solution: dict):
    from harness.data.schema import Solution

    result = session.submit(Solution.model_validate(solution))
    return result, {a.name: a for a in result.workloads[0].audits}


def test_attention_in_unlisted_pytorch_operators_is_a_fallback(session):
    result, audits = _submit(session, solution_dict(TORCH_OPS_ATTACK, name="torch_ops", language="triton"))
    assert result.workloads[0].status == "PASSED" and "own_kernel" not in audits  # its one launch satisfied it
    assert not [f for f in result.static_findings if f["rule"] == "torch_compute"]  # the gate saw nothing
    attribution = audits["attribution"]
    assert not attribution.passed and is_fallback([attribution]), attribution.detail
    assert "aten::sum" in attribution.detail and "aten::mul" in attribution.detail
    assert any("audit attribution failed: fallback: CPU: " in b for b in result.promotion_blockers), \
        result.promotion_blockers


def test_numpy_doing_the_work_beside_a_token_launch_is_a_fallback(session):
    """The same attack in numpy's arithmetic: invisible to a count of ATen operators (it would pass, and its pass
    would clear the gate's findings on `.sum()`), but the values had to leave PyTorch, and those reads count."""
    result, audits = _submit(session, solution_dict(NUMPY_ATTACK, name="numpy_ops", language="triton"))
    attribution = audits["attribution"]
    assert result.workloads[0].status == "PASSED" and not attribution.passed, attribution.detail
    assert "host: Tensor.numpy" in attribution.detail and result.promotion_blockers


def test_the_honest_example_stays_promotable(session):
    result, audits = _submit(session, triton_example(KV8_PS1))
    assert result.status == "PASSED" and not result.promotion_blockers, result.promotion_blockers
    assert audits["attribution"].passed and audits["attribution"].detail.startswith("CPU: no library compute")


def test_pytorch_the_gate_saw_that_never_runs_no_longer_blocks(session):
    honest = triton_example(KV8_PS1)
    source = honest["sources"][0]["content"]
    solution = solution_dict(source + SELF_TEST, name="self_test_main", language="triton")
    result, audits = _submit(session, solution)
    assert {f["rule"] for f in result.static_findings} == {"torch_compute"}, result.static_findings
    assert audits["attribution"].passed, audits["attribution"].detail
    assert result.status == "PASSED" and not result.promotion_blockers, result.promotion_blockers
