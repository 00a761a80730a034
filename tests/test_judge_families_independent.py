"""The families' independently written judge solutions (benchmarks/solutions/judge/families/, in
`judge_set.py --set families`) through the harness on CPU (Triton interpreter): the honest ones pass every workload
with no static-gate error and no failed audit, promotable (the CPU's attribution, the worker's count of ATen
operators, settles their PyTorch glue); the dishonest ones are not promotable, for their own reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.audits.attribution import own_kernels

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.sandbox.build import static_signature_problem

from support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import judge_set  # noqa: E402

from dsa_support import TINY_ATTENTION, TINY_INDEXER, make_tiny_dsa_dataset  # noqa: E402
from gdn_support import DECODE, PREFILL, make_gdn_dataset  # noqa: E402
from moe_support import TINY as TINY_MOE, make_moe_dataset  # noqa: E402

pytest.importorskip("triton")

GDN_WORKLOADS = {DECODE: ["b1_0", "b4_0"], PREFILL: ["t6_n1", "t28_n2"]}
UNCONFIRMED = "unconfirmed: run-time attribution"
# the CPU's attribution failing: the library did the work, or did what only a GPU's attribution can time
CPU_ATTRIBUTION = ("audit attribution failed: fallback: CPU: ", "audit attribution failed: unsettled: CPU: ")


@pytest.fixture(scope="module")
def gdn_session(tmp_path_factory):
    root = make_gdn_dataset(tmp_path_factory.mktemp("gdn_dataset"), GDN_WORKLOADS)
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("gdn_archive")),
                 SubmitOptions(timeout_s=300, baselines=False)) as s:
        yield s


@pytest.fixture(scope="module")
def dsa_session(tmp_path_factory):
    root = make_tiny_dsa_dataset(tmp_path_factory.mktemp("dsa_dataset"))
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("dsa_archive")),
                 SubmitOptions(timeout_s=300, baselines=False)) as s:
        yield s


@pytest.fixture(scope="module")
def moe_session(tmp_path_factory):
    root = make_moe_dataset(tmp_path_factory.mktemp("moe_dataset"), {"moe_t7": (7, 8), "moe_t24": (24, 56)})
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("moe_archive")),
                 SubmitOptions(timeout_s=300, baselines=False)) as s:
        yield s


def solution(name: str, definition: str | None = None) -> Solution:
    return Solution.model_validate(judge_set.independent_solution(name, definition))


def verdict(result) -> str:
    return "; ".join([f"{w.label}: {w.status} {w.message[:300]}" for w in result.workloads]
                     + result.promotion_blockers[:6])


def test_every_independent_solution_is_in_the_family_set_and_fits_its_definition(tmp_path):
    ds = Dataset(None)
    listed = {name: honest for name, _, honest, _ in judge_set.family_set(tmp_path)}
    for name, (file, definition, honest, *_rest) in judge_set.INDEPENDENT.items():
        assert listed[name] is honest
        assert (judge_set.FAMILIES / judge_set.DERIVED.get(file, (file,))[0]).is_file()
        assert static_signature_problem(solution(name), ds.definition(definition)) is None, name


@pytest.mark.parametrize("name, session_name, definition", [
    ("gdn_decode_torch_gates_triton", "gdn_session", None),
    ("gdn_prefill_triton_seq", "gdn_session", None),
    ("moe_vllm_style_torch_routing", "moe_session", TINY_MOE),
    ("dsa_sparse_triton_heads_as_rows", "dsa_session", TINY_ATTENTION),
])
def test_the_honest_ones_pass_everywhere_and_are_promotable(request, name, session_name, definition):
    result = request.getfixturevalue(session_name).submit(solution(name, definition))
    assert len(result.workloads) == 2 and all(w.status == "PASSED" for w in result.workloads), verdict(result)
    errors = [f for f in result.static_findings if f["severity"] == "error"]
    assert not errors, errors
    failed = [(w.label, a.name, a.detail) for w in result.workloads for a in w.audits if not a.passed]
    assert not failed, failed
    # the CPU's attribution ran on every workload and settled the static gate's PyTorch findings (gates, routing)
    attributed = [a.detail for w in result.workloads for a in w.audits if a.name == "attribution"]
    assert len(attributed) == 2 and all(d.startswith("CPU: ") for d in attributed), attributed
    assert not result.promotion_blockers, result.promotion_blockers


def test_a_library_top_k_keeps_the_indexer_from_promotion(dsa_session):
    """Correct, but its selection is torch.topk's: a static-gate warning that the CPU's attribution leaves unsettled
    (a top-k reads few elements, and only a GPU can time it) and a GPU's confirms (top-k kernels are not glue).
    Never promotable."""
    result = dsa_session.submit(solution("dsa_indexer_torch_topk", TINY_INDEXER))  # top-k 96: the interpreter's size
    assert len(result.workloads) == 2 and all(w.status == "PASSED" for w in result.workloads), verdict(result)
    warned = [f for f in result.static_findings if f["severity"] == "warning" and "topk" in json.dumps(f)]
    assert warned, result.static_findings
    assert result.promotion_blockers, verdict(result)
    # the CPU's attribution sees the library's top-k run, which is no glue outside MoE's routing: unsettled
    assert all(CPU_ATTRIBUTION[1] in b and "aten::topk" in b for b in result.promotion_blockers), verdict(result)


def test_sparse_attention_whose_kernel_only_gathers_is_not_promotable(dsa_session):
    """Correct, its Triton kernel runs, but the logits, softmax and weighted sum are PyTorch's batched matmuls: the
    CPU's attribution fails it (a GPU's confirms it)."""
    result = dsa_session.submit(solution("dsa_sparse_triton_gather_torch_math", TINY_ATTENTION))
    assert len(result.workloads) == 2 and all(w.status == "PASSED" for w in result.workloads), verdict(result)
    assert "torch_compute" in {f["rule"] for f in result.static_findings}, result.static_findings
    assert result.promotion_blockers and all(any(p in b for p in CPU_ATTRIBUTION) and "aten::bmm" in b
                                             for b in result.promotion_blockers), verdict(result)


def test_writing_over_the_input_state_and_returning_it_is_caught(gdn_session):
    """Value-returning: the kernel writes the new state over `state` and returns that tensor as `new_state`."""
    result = gdn_session.submit(solution("gdn_decode_inplace_state"))
    failed = {a.name for w in result.workloads for a in w.audits if not a.passed}
    assert result.promotion_blockers, verdict(result)
    assert {"input_mutation", "output_aliasing"} <= failed, (failed, verdict(result))


def test_pytorch_through_computed_names_is_not_promotable(gdn_session):
    """Correct, and caught before run time: a computed getattr on the torch module is a static-gate error
    (dynamic_code), not only a warning waiting for attribution."""
    result = gdn_session.submit(solution("gdn_decode_torch_only_getattr"))
    assert all(w.status == "PASSED" for w in result.workloads), verdict(result)
    errors = [f["rule"] for f in result.static_findings if f["severity"] == "error"]
    assert "dynamic_code" in errors, result.static_findings
    assert any("static gate" in b and "dynamic_code" in b for b in result.promotion_blockers), result.promotion_blockers


def test_moe_gemms_in_pytorch_are_not_promotable(moe_session):
    """Correct, its own Triton kernel runs, but the GEMMs are PyTorch's: the CPU's attribution fails it (matrix
    products are never glue, as cuBLAS is never MoE's ATen glue on a GPU)."""
    result = moe_session.submit(solution("moe_triton_dequant_torch_gemm", TINY_MOE))
    assert all(w.status == "PASSED" for w in result.workloads), verdict(result)
    assert {f["rule"] for f in result.static_findings} >= {"torch_compute"}, result.static_findings
    assert result.promotion_blockers and all(any(p in b for p in CPU_ATTRIBUTION) for b in result.promotion_blockers), \
        verdict(result)


@pytest.mark.parametrize("uuid", ["30cecff1-7ea4-474b-90fc-7f4a87206d8e",  # B=1, one page: fewer positions than k
                                  "d8a73470-cfa1-49ad-aba6-d9b99c0c5b2d"])  # B=4, 34 pages: a real selection
def test_the_topk_indexer_passes_official_workloads_at_full_size(uuid):
    """The session's tiny definition has k=96; the official k=2048 runs the kernel directly under the interpreter
    (as tests/test_dsa_examples.py does for the example), judged by the family's rule."""
    import json
    import os
    import subprocess

    from test_dsa_examples import FULL_SIZE_SCRIPT

    file = judge_set.FAMILIES / judge_set.INDEPENDENT["dsa_indexer_torch_topk"][0]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FULL_SIZE_SCRIPT, judge_set.INDEPENDENT["dsa_indexer_torch_topk"][1],
                           str(file), uuid], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "PASSED", "message": ""}


def test_the_library_gemm_sample_calls_flashinfer_s_triton_gemm_beside_decoys_of_its_kernel_names():
    text = judge_set.source_text("moe_triton_dequant_library_triton_gemm.py")
    assert "from flashinfer.triton.sm_constraint_gemm import gemm" in text
    assert "def gemm_kernel(" in text and "def gemm_kernel_persistent(" in text
    assert text.count("gemm(") >= 2 and " @ " not in text  # both matmuls are the library's
    own = own_kernels({"moe.py": text})
    assert {"gemm_kernel", "gemm_kernel_persistent", "_dequant"} <= own.python  # the decoys would claim the names


@pytest.fixture(scope="module")
def moe_empty_rank_session(tmp_path_factory):
    """The tiny MoE with one workload whose captured routing sends both tokens past this rank's eight experts: the
    reference's output is all zeros on every trial (as one token is on half the draws of the official T=1 rank)."""
    import torch
    from safetensors.torch import save_file

    from moe_support import tiny_workload

    import shutil
    import tempfile

    # the worker reads blobs as another user in its sandbox: a folder others can enter (pytest's are private)
    root = make_moe_dataset(Path(tempfile.mkdtemp(prefix="crucible_moe_empty_")), {})
    root.chmod(0o755)
    blob = "blob/workloads/moe/empty_rank.safetensors"
    logits = torch.full((2, 64), 4.0)
    logits[:, :8] = -40.0  # group 0, the local experts at offset 0, is never among the kept groups
    (root / blob).parent.mkdir(parents=True, exist_ok=True)
    save_file({"routing_logits": logits, "routing_bias": torch.zeros(64, dtype=torch.bfloat16)}, str(root / blob))
    (root / blob).chmod(0o644)
    workload = tiny_workload("00000000-0000-4000-a000-00000000e000", 2, 0)
    workload["inputs"].update({n: {"type": "safetensors", "path": blob, "tensor_key": n}
                               for n in ("routing_logits", "routing_bias")})
    wl_dir = root / "workloads" / "moe"
    (wl_dir / f"{TINY_MOE}.jsonl").write_text(json.dumps({"definition": TINY_MOE, "solution": None,
                                                          "evaluation": None, "workload": workload}) + "\n")
    (wl_dir / "labels.json").write_text(json.dumps({workload["uuid"]: "moe_t2_empty_rank"}))
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("moe_empty_archive")),
                 SubmitOptions(timeout_s=600)) as s:
        yield s
    shutil.rmtree(root, ignore_errors=True)


def test_a_call_with_no_work_for_this_rank_needs_no_kernel_of_its_own(moe_empty_rank_session):
    """The vLLM-style MoE writes zeros and returns when no pair is its rank's (no Triton launch): correct, and no
    `own_kernel` failure, since the reference's output holds nothing that takes computing."""
    path = judge_set.JUDGE / "families" / "moe_vllm_style_torch_routing.py"
    solution = judge_set.independent_solution("moe_vllm_style_torch_routing", TINY_MOE)
    assert "output.zero_()" in path.read_text()
    result = moe_empty_rank_session.submit(Solution.model_validate(solution))
    (w,) = result.workloads
    assert w.status == "PASSED", w.message
    assert not [a for a in w.audits if a.name == "own_kernel"], w.audits
    assert all(a.passed for a in w.audits), w.audits  # on a GPU the attribution audit too (only a zero fill ran)
