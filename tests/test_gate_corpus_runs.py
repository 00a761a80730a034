"""Honest corpus solutions (tests/gate_corpus/honest/) through the whole harness on CPU (Triton interpreter): each
passes every workload, every audit, and is promotable, or waits only for a GPU's attribution where it really uses
PyTorch. Those here once were false alarms or exercise what only a run shows: a NamedTuple field named `topk`
read as torch.topk, `torch.compiler.disable` read as torch compute, a custom op that mutates its outputs, a setup
plan that depends on cu_seqlens' content, a package whose entry point is its `__init__`, own files named like
standard modules (types.py, select.py, platform.py) reached relatively; and round three's libdevice switched off
without a GPU, block pointers advanced per token, and autotune pruned by capability with heuristics."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions

from dsa_support import TINY_ATTENTION, TINY_INDEXER, make_tiny_dsa_dataset
from gdn_support import DECODE, PREFILL, make_gdn_dataset

pytest.importorskip("triton")

CORPUS = Path(__file__).resolve().parent / "gate_corpus" / "honest"


def corpus_solution(name: str, definition: str, entry_point: str, setup: str | None = None) -> Solution:
    folder = CORPUS / name
    sources = [{"path": p.relative_to(folder).as_posix(), "content": p.read_text()}
               for p in sorted(folder.rglob("*")) if p.is_file()]
    spec = {"language": "triton", "target_hardware": ["H200"], "entry_point": entry_point,
            "destination_passing_style": True}
    if setup:
        spec["setup"] = setup
    return Solution.model_validate({"name": name, "definition": definition, "author": "corpus", "spec": spec,
                                    "sources": sources})


@pytest.fixture(scope="module")
def gdn_session(tmp_path_factory):
    root = make_gdn_dataset(tmp_path_factory.mktemp("gdn_dataset"), {DECODE: ["b1_0"], PREFILL: ["t6_n1", "t28_n2"]})
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("gdn_archive")),
                 SubmitOptions(timeout_s=300, baselines=False)) as s:
        yield s


@pytest.fixture(scope="module")
def dsa_session(tmp_path_factory):
    root = make_tiny_dsa_dataset(tmp_path_factory.mktemp("dsa_dataset"))
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("dsa_archive")),
                 SubmitOptions(timeout_s=300, baselines=False)) as s:
        yield s


def verdict(result) -> str:
    return "; ".join([f"{w.label}: {w.status} {w.message[:300]}" for w in result.workloads]
                     + result.promotion_blockers[:6])


@pytest.mark.parametrize("name, session_name, definition, entry_point, setup", [
    ("triton_indexer_threshold_select", "dsa_session", TINY_INDEXER, "indexer.py::run", None),
    ("triton_custom_op_mutates", "dsa_session", TINY_ATTENTION, "sparse_mla.py::run", None),
    ("triton_host_knobs", "gdn_session", DECODE, "gdn_decode.py::run", None),
    ("triton_fla_device_lib", "gdn_session", DECODE, "main.py::run", None),  # FLA's utils: device module by name
    ("triton_setup_schedule", "gdn_session", PREFILL, "prefill.py::run", "schedule.py::plan"),
    ("triton_pkg_init_entry", "gdn_session", PREFILL, "gdn_scan/__init__.py::run", None),
    ("triton_stdlib_named_files", "dsa_session", TINY_INDEXER, "main.py::run", None),
    ("triton_libdevice_cpu_switch", "gdn_session", DECODE, "gdn_decode.py::run", None),
    ("triton_block_ptr_advance", "gdn_session", PREFILL, "prefill.py::run", None),
    ("triton_autotune_prune_dsa", "dsa_session", TINY_ATTENTION, "sparse_mla.py::run", None),
])
def test_the_honest_corpus_solution_is_promotable(request, name, session_name, definition, entry_point, setup):
    result = request.getfixturevalue(session_name).submit(corpus_solution(name, definition, entry_point, setup))
    assert result.workloads and all(w.status == "PASSED" for w in result.workloads), verdict(result)
    failed = [(w.label, a.name, a.detail) for w in result.workloads for a in w.audits if not a.passed]
    assert not failed, failed
    assert not [f for f in result.static_findings if f["severity"] == "error"], result.static_findings
    assert result.promotion_blockers == [], verdict(result)
