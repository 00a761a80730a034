"""The static gate on whole solutions: honest solutions of the contest's definitions (GQA paged decode, and MoE,
DSA and GDN ones) written the way contestants write them (tests/gate_corpus/honest/, one directory per solution)
pass it, and the known reward hacks of tests/adversarial/ still fail it, except the library/PyTorch-compute ones
that run-time attribution judges."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.audits.static_gate import (
    LIBRARY_RULES,
    Finding,
    awaits_attribution,
    builtin_policy,
    gate_passed,
    load_policy,
    scan_sources,
)

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "gate_corpus" / "honest"
SOLUTIONS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())

# solution -> its spec language, and the warnings it earns: (rule, text of the flagged line). Only real torch
# compute may warn; nothing may be an error.
CORPUS_TABLE: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "triton_split_kv": ("triton", []),
    "triton_autotune": ("triton", []),
    "triton_lru_cache": ("triton", []),
    "triton_value_returning": ("triton", []),
    "triton_persistent": ("triton", [("torch_compute", "torch.diff(kv_indptr)"),
                                     ("torch_compute", "torch.argsort(lengths")]),
    "triton_fp8_kv": ("triton", []),
    "triton_tma_descriptors": ("triton", []),  # tl.make_tensor_descriptor with triton.set_allocator at import
    "cuda_load_inline": ("python", []),
    "cuda_load_sources": ("python", []),
    # globbed sources, a tempfile build folder, error messages naming the environment, a main-guard self-test
    "cuda_load_glob": ("python", []),
    "cuda_torch_library": ("python", []),
    # GDN prefill as an FLA-style sub-package: relative imports, an input_guard decorator, heuristics over an
    # autotune list built by comprehension, libdevice's fast exp aliased in a helper module
    "triton_fla_package": ("triton", []),
    # GDN prefill through load_inline into a build folder next to the module that it makes first
    "cuda_load_inline_build_dir": ("python", []),
    # the DSA indexer with a setup plan (a dataclass of scratch and typed views of the packed FP8 cache)
    "triton_setup_plan": ("triton", []),
    # GQA decode as a torch.library.triton_op over a host-made work list (numpy) from its setup plan
    "triton_custom_op_plan": ("triton", []),
    # DSA sparse attention, value-returning through a launcher class and a NamedTuple
    "triton_value_namedtuple": ("triton", []),
    # MoE as a package: vLLM-style routing and expert sort in PyTorch (the routing glue MoE's attribution budgets),
    # Triton grouped GEMMs autotuned with heuristics, a workspace dict keyed by shape, dtype and device
    "triton_moe_package": ("triton", [("torch_compute", "out.index_add_("), ("torch_compute", "torch.sigmoid("),
                                      ("torch_compute", ".values.sum(dim=-1)"),
                                      ("torch_compute", "group_idx = torch.topk("),
                                      ("torch_compute", "group_mask.scatter_("), ("torch_compute", ".masked_fill("),
                                      ("torch_compute", "topk_ids = torch.topk("),
                                      ("torch_compute", "topk_w.sum(dim=-1"), ("torch_compute", "torch.sort("),
                                      ("torch_compute", "torch.div("), ("torch_compute", "torch.bincount("),
                                      ("torch_compute", "torch.cumsum(")]),
    # GQA decode at page size 64 through block pointers (tl.make_block_ptr, boundary checks), tl.range(num_stages=),
    # autotune pruned by early_config_prune with a perf_model and top_k, a heuristic, constexpr globals
    "triton_block_ptr_pages": ("triton", []),
    # GDN decode with a research codebase's host habits: logging, warnings, print, debug knobs read by name (env_read
    # blocks nothing), enum, a frozen dataclass, itertools, lru_cache on scalars, torch.empty_like scratch, a device
    # context, and the launcher kept out of torch.compile graphs (torch.compiler.disable: no compute)
    "triton_host_knobs": ("triton", [("env_read", "GDN_DECODE_VERBOSE"), ("env_read", "TRITON_PRINT_AUTOTUNING")]),
    # GDN prefill as a package whose entry point is its __init__ (`from .api import gdn_prefill as run`)
    "triton_pkg_init_entry": ("triton", []),
    # DSA sparse attention as a torch.library.custom_op that mutates its outputs, with a register_fake
    "triton_custom_op_mutates": ("triton", []),
    # the DSA indexer with its own top-k (a threshold search in Triton) and a NamedTuple whose field is `topk`
    "triton_indexer_threshold_select": ("triton", []),
    # MoE: routing in PyTorch into a shape-keyed workspace (out= and in-place ops), block-pointer GEMVs, atomic adds
    "triton_moe_block_ptr_atomic": ("triton", [
        ("torch_compute", "torch.sigmoid("), ("torch_compute", "torch.add("),
        ("torch_compute", "group_scores = grouped.topk("), ("torch_compute", "group_idx = group_scores.topk("),
        ("torch_compute", "mask.scatter_("), ("torch_compute", "s_bias.masked_fill("),
        ("torch_compute", "topk_idx = pruned.topk("), ("torch_compute", "w_sum = w.sum("),
        ("torch_compute", "w.div_("), ("torch_compute", "w.mul_("), ("torch_compute", "torch.nonzero(")]),
    # split-KV GQA decode as a nested package: star re-exports, `from . import kernels as K`, `from ..common import`
    "triton_nested_package": ("triton", []),
    # GDN decode whose gate math is a torch.compile'd function (mode="max-autotune-no-cudagraphs") beside a Triton
    # kernel: the pointwise glue attribution budgets on a GPU
    "triton_compiled_gates": ("triton", [("torch_compute", "@torch.compile("), ("torch_compute", "decay = torch.exp("),
                                         ("torch_compute", "F.softplus("), ("torch_compute", "g = torch.exp("),
                                         ("torch_compute", "torch.sigmoid(")]),
    # GDN prefill with a setup plan that depends on cu_seqlens' content: a longest-first schedule made with numpy
    "triton_setup_schedule": ("triton", []),
    # the DSA indexer as a package whose own files are named like standard modules (types.py, platform.py,
    # select.py), reached by relative imports, and a NamedTuple of types.py whose field `topk` is read in api.py
    "triton_stdlib_named_files": ("triton", []),
    # GQA decode in CUDA through load_inline with CUB's BlockReduce (max and sum), cuda_bf16 and a device guard
    "cuda_cub_block_reduce": ("python", []),
    # GDN decode with an FLA-style utils module: the device's torch module looked up by name (`getattr(torch, device)`)
    # for device contexts and queries, inspect.signature in an input guard, Triton driver queries behind a broad
    # except, lru_cache/cache on scalars, packaging version checks, FLA_* knobs read by name
    "triton_fla_device_lib": ("triton", [("env_read", "FLA_GDN_DEBUG"), ("env_read", "FLA_USE_CUDA_GRAPH")]),
    # GDN decode: libdevice math on a GPU, tl math without one (picked by torch.cuda.is_available at import),
    # triton.cdiv, __all__, logger.debug
    "triton_libdevice_cpu_switch": ("triton", []),
    # GQA decode: TYPE_CHECKING imports, an Enum of GPU generations picking config sets, a NamedTuple plan from an
    # lru_cache planner annotated with that Enum, a shape-keyed plan dict, triton's driver device properties
    "triton_typed_planner": ("triton", []),
    # DSA sparse attention: autotune keyed on (topk, heads) pruned by shared memory per capability, heuristics
    "triton_autotune_prune_dsa": ("triton", []),
    # GDN prefill: block pointers over tokens moved by tl.advance, a heuristic block size
    "triton_block_ptr_advance": ("triton", []),
    # the DSA indexer: scores and token mapping as torch.library.triton_op/wrap_triton, the top-k by torch.topk
    "triton_op_indexer": ("triton", [("torch_compute", "torch.topk(scores")]),
    # GQA decode ps64 in CUDA: cp.async inline PTX double buffering in dynamic shared memory, __launch_bounds__,
    # templates, if constexpr, -gencode sm_90a and -lineinfo, sources next to the module
    "cuda_cp_async_pages": ("python", []),
    # MoE FP8 in CUDA: cuda_fp8.h's __nv_fp8_e4m3, ops by TORCH_LIBRARY/TORCH_LIBRARY_IMPL built with pathlib
    # (is_python_module=False), routing and the expert sort (argsort, bincount, cumsum) in PyTorch
    "cuda_fp8_moe_torch_library": ("python", [
        ("torch_compute", ".sigmoid()"), ("torch_compute", "group_scores = grouped.topk("),
        ("torch_compute", "best_groups = group_scores.topk("), ("torch_compute", "keep = torch.zeros_like"),
        ("torch_compute", "masked = biased.masked_fill("), ("torch_compute", "topk_ids = masked.topk("),
        ("torch_compute", "w = w / (w.sum("), ("torch_compute", "torch.where(local"),
        ("torch_compute", "torch.argsort("), ("torch_compute", "torch.bincount("), ("torch_compute", "torch.cumsum(")]),
    # GDN decode in CUDA: the .cu next to the module read in a with-statement for load_inline, and the module's folder
    # (a Path kept in a name, converted with str()) put on sys.path for an absolute import of its launch table
    "cuda_gdn_read_text_sys_path": ("python", []),
    # MoE FP8 as a package: routing and a block-padded expert sort in PyTorch (a frozen slotted dataclass, Final
    # constants), Triton grouped GEMMs with per-K-block scales, an IntEnum of tile sizes, fp8 views
    "triton_moe_sorted_blocks": ("triton", [
        ("torch_compute", "sig = torch.sigmoid("), ("torch_compute", "top2 = torch.topk("),
        ("torch_compute", "group_score = top2.sum("), ("torch_compute", "chosen_groups = torch.topk("),
        ("torch_compute", "candidates = torch.where("), ("torch_compute", "topk_ids = torch.topk("),
        ("torch_compute", "torch.gather(sig"), ("torch_compute", "w.sum(dim=-1"),
        ("torch_compute", "local.masked_fill("), ("torch_compute", "torch.argsort(local"),
        ("torch_compute", "torch.bincount(local"), ("torch_compute", "starts = torch.cumsum(counts"),
        ("torch_compute", "padded_starts = torch.cumsum("), ("torch_compute", "int(padded.sum()"),
        ("torch_compute", "torch.repeat_interleave("), ("torch_compute", "functional.pad("),
        ("file_read", "with open(path")]),  # vLLM-style tuned configs/*.json shipped beside it, asked after first
}
# Warnings that block nothing and await nothing (a debug flag read by its literal name, a shipped config file read).
NOT_LIBRARY = {"env_read", "file_read"}

# Solutions whose honest calls are allowed by the shipped policy's lists (torch_calls: torch.library.triton_op,
# wrap_triton, torch.from_numpy, torch.arange), not by the gate's own catalogue.
NEEDS_THE_POLICY = {"triton_custom_op_plan", "triton_moe_package", "triton_custom_op_mutates", "triton_setup_schedule",
                    "triton_op_indexer", "triton_moe_sorted_blocks"}

POLICIES = {
    "shipped": lambda: load_policy(),
    "shipped_gqa": lambda: load_policy(op_type="gqa_paged", definition="gqa_paged_decode_h32_kv8_d128_ps1"),
    "catalogue": builtin_policy,  # empty allow-lists: what the gate itself knows
}


def _sources(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file()}


def _describe(findings: list[Finding]) -> str:
    return "\n".join(f"{f.path}:{f.line}:{f.col} {f.rule} [{f.severity}] {f.message}" for f in findings)


def test_the_corpus_is_the_table():
    assert SOLUTIONS == sorted(CORPUS_TABLE) and len(SOLUTIONS) >= 8
    texts = {name: "\n".join(_sources(CORPUS / name).values()) for name in SOLUTIONS}
    assert sum("load_inline(" in t for t in texts.values()) >= 2
    assert any("cpp_extension.load(" in t for t in texts.values())


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@pytest.mark.parametrize("name", SOLUTIONS)
def test_honest_solution_passes_the_gate(name, policy_name):
    if policy_name == "catalogue" and name in NEEDS_THE_POLICY:
        pytest.skip("its calls are on the shipped policy's allow-lists")
    language, expected = CORPUS_TABLE[name]
    findings = scan_sources(_sources(CORPUS / name), language, POLICIES[policy_name]())
    assert gate_passed(findings), _describe(findings)
    warnings = sorted((f.rule, text) for f in findings for rule, text in expected
                      if f.rule == rule and text in f.snippet)
    assert len(findings) == len(expected) and warnings == sorted(expected), _describe(findings)
    assert all(awaits_attribution(f) or f.rule in NOT_LIBRARY for f in findings)


def _attacks():
    spec = importlib.util.spec_from_file_location("gate_corpus_attacks", HERE / "adversarial" / "attacks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ATTACKS = _attacks()
# attack -> the static gate's error rules under the shipped gqa_paged policy. The empty ones are caught at
# run time (correctness, the mutation and precision audits, the fresh-input recheck); those in
# LEFT_TO_ATTRIBUTION carry library-compute warnings for the run-time attribution to confirm.
ATTACK_ERRORS = {
    "torch_fallback": set(),
    "library_fallback": set(),
    "replay_by_pointer": {"output_cache"},
    "call_counting": set(),
    "side_stream": {"stream_event_graph"},
    "deferred_host_write": {"concurrency"},
    "skip_if_written": {"output_cache"},
    "read_reference_outputs": {"harness_internals"},
    "timer_monkeypatch": {"timer_tampering"},
    "input_mutation": set(),
    "precision_downcast": set(),
    "partial_work": set(),
    "disk_cache": {"file_cache"},
    "probe_checking": {"env_probe"},
}
LEFT_TO_ATTRIBUTION = {"torch_fallback", "library_fallback", "input_mutation"}


@pytest.mark.parametrize("name", sorted(ATTACK_ERRORS))
def test_known_hacks_fail_the_gate_or_await_attribution(name):
    assert set(ATTACK_ERRORS) == set(ATTACKS.ATTACKS)
    solution = ATTACKS.attack_solution(name)
    policy = load_policy(op_type="gqa_paged", definition=solution["definition"])
    sources = {s["path"]: s["content"] for s in solution["sources"]}
    findings = scan_sources(sources, solution["spec"]["language"], policy)
    assert {f.rule for f in findings if f.severity == "error"} == ATTACK_ERRORS[name], _describe(findings)
    library = [f for f in findings if f.rule in LIBRARY_RULES]
    assert bool(library) == (name in LEFT_TO_ATTRIBUTION), _describe(findings)
    assert all(awaits_attribution(f) for f in library)


def test_in_kernel_tma_descriptors_pass_the_harness(tmp_path):
    """The device-side descriptor idiom (an allocator set at import, `tl.make_tensor_descriptor` in the kernel) is
    honest Hopper code: it runs in the sandboxed worker and passes every fast audit, promotable, on CPU."""
    pytest.importorskip("triton")
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session, SubmitOptions

    solution = Solution.model_validate({
        "name": "triton_tma_descriptors", "definition": "gqa_paged_decode_h32_kv4_d128_ps64", "author": "corpus",
        "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "main.py::run",
                 "destination_passing_style": False},
        "sources": [{"path": p, "content": c} for p, c in _sources(CORPUS / "triton_tma_descriptors").items()]})
    options = SubmitOptions(workloads=["uniform_b1_kv512"], timeout_s=300, baselines=False)
    with Session(Dataset(), Archive(tmp_path / "archive"), options) as session:
        result = session.submit(solution, audit_level="fast")
    assert [w.status for w in result.workloads] == ["PASSED"], [w.message for w in result.workloads]
    assert result.promotion_blockers == []
