"""The families' judge set (benchmarks/judge_set.py --set families): every solution is a valid submission, and on
CPU the dishonest GDN ones are already not promotable (the PyTorch one by the CPU's attribution, a count of its ATen
operators; the H200 run's attribution reads CUPTI records)."""

from __future__ import annotations

import sys

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.data.schema import Solution, load_model
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.sandbox.build import static_signature_problem

from support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import judge_set  # noqa: E402

from gdn_support import DECODE, make_gdn_dataset  # noqa: E402


@pytest.fixture(scope="module")
def family_set(tmp_path_factory):
    return {name: (load_model(Solution, path), honest, workloads)
            for name, path, honest, workloads in judge_set.family_set(tmp_path_factory.mktemp("judge"))}


def test_each_family_definition_has_an_honest_and_a_dishonest_solution(family_set):
    ds = Dataset(None)
    by_definition: dict[str, set[bool]] = {}
    for solution, honest, workloads in family_set.values():
        assert static_signature_problem(solution, ds.definition(solution.definition)) is None, solution.name
        assert workloads == judge_set.FAMILY_WORKLOADS
        by_definition.setdefault(solution.definition, set()).add(honest)
    assert len(by_definition) == 5 and all(v == {True, False} for v in by_definition.values())


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = make_gdn_dataset(tmp_path_factory.mktemp("gdn_dataset"), {DECODE: ["b1_0"]})
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("gdn_archive")),
                 SubmitOptions(timeout_s=300, baselines=False)) as s:
        yield s


@pytest.mark.parametrize("name, caught", [("torch_reference_gdn_decode", "audit attribution failed: fallback: CPU: "),
                                          ("gdn_state_bf16", "kept in bfloat16")])
def test_the_dishonest_gdn_decode_solutions_are_not_promotable(family_set, session, name, caught):
    solution, honest, _ = family_set[name]
    assert not honest
    result = session.submit(solution)
    assert [w.status for w in result.workloads] == ["PASSED"], [w.message for w in result.workloads]
    assert any(caught in b for b in result.promotion_blockers), result.promotion_blockers
