"""The loop's promoted solutions kept as examples (examples/gqa_decode_promoted): what `controller loop --provider
offline` promoted on the H200 from the skill's naive kernel (kv4 pages 1 and 64:
benchmarks/results/2026-12-04_h200_run16/, kv8 page 1: 2026-12-04_h200_run17/, kv8 page 64: 2026-12-04_h200_run18/;
on all four the skill's dispatch by regime). On CPU they pass the harness
on the interpreter's workloads with every fast audit clean and promotable, and each is the skill's own code with the
configuration it records, so a reader can find the design it came from: each is the offline provider's round-1
dispatch of the skill's starting points and regime rule as they are now (a placeholder the template gained since
renders at its default, which keeps the run's behaviour: `MAX_REGISTERS` 0 passes no `maxnreg`), with the
parameters where the run's promoted variant differs from it (AS_RUN, empty today). The run's own source is its record's
`promoted_solution.json`."""

from __future__ import annotations

import json

import pytest

from support import ROOT

pytest.importorskip("triton")

EXAMPLES = ROOT / "examples" / "gqa_decode_promoted" / "solutions"
PROMOTED = sorted(EXAMPLES.glob("*.json"))


def solution(path):
    from harness.data.schema import Solution

    return Solution.model_validate(json.loads(path.read_text()))


def is_dispatch(example) -> bool:
    return example.spec.entry_point == "dispatch.py::run"


def test_there_is_a_promoted_example_per_recorded_definition():
    assert [p.stem for p in PROMOTED] == ["gqa_paged_decode_h32_kv4_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps64",
                                          "gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv8_d128_ps64"]
    assert [is_dispatch(solution(p)) for p in PROMOTED] == [True, True, True, True]


# Where a run's promoted variant differs from the skill's round-1 dispatch of today, per regime. Run 17 promoted
# kv8 page 1's latency-bound kernel at CHUNK_BLOCKS 8, its definition's own starting point since (14/14 in runs 17
# and 19); run 20 promoted kv4 page 1 and 64 and kv8 page 64 from their definitions' own starting points. Since run 22
# kv8 page 64's memory-bound starting point takes TMA boxes from 12 programs per SM; its run promoted pointer loads.
# Since run 24 the latency-bound start gives batch 1 its page and length as launch arguments (ONE_REQUEST_SCALARS 1);
# every run before promoted the descriptor load (0).
BEFORE_RUN_24 = {"latency-bound": {"ONE_REQUEST_SCALARS": 0}}
AS_RUN: dict[str, dict[str, dict]] = {
    "gqa_paged_decode_h32_kv4_d128_ps1": BEFORE_RUN_24,
    "gqa_paged_decode_h32_kv4_d128_ps64": BEFORE_RUN_24,
    "gqa_paged_decode_h32_kv8_d128_ps1": BEFORE_RUN_24,
    "gqa_paged_decode_h32_kv8_d128_ps64": {**BEFORE_RUN_24,
                                           "memory-bound": {"KV_LOAD": 0, "KV_LOAD_MIN_PROGRAMS_PER_SM": 0}},
}


def rebuild_as_run(example):
    """(the recorded variants, the solution's sources): the offline provider's round-1 dispatch from the naive
    incumbent, with the skill's starting points and regime rule, and where the run's variant differs (AS_RUN)."""
    from controller.providers.offline import OfflineProvider, naive_incumbent, slug
    from controller.skills import load_skills

    skills = load_skills(ROOT / "skills")
    generator = OfflineProvider(skills).generator_for(example.definition)
    origin = generator.seed_dispatch([], naive_incumbent(skills, example.definition).origin)
    for regime, moves in AS_RUN.get(example.definition, {}).items():
        origin["params"]["variants"][regime]["params"].update(moves)
    recorded = {r: slug(v) for r, v in origin["params"]["variants"].items()}
    rebuilt = generator.render_dispatch(origin, example.definition, example.name, example.author, "H200")
    return recorded, rebuilt


@pytest.mark.parametrize("path", [p for p in PROMOTED if is_dispatch(solution(p))], ids=lambda p: p.stem)
def test_dispatching_example_is_the_skills_round_one_dispatch(path):
    """Rebuilt by the offline provider from the naive incumbent, with the skill's starting points and where the run's
    variant differs: the same files, byte for byte (kernels, the skill's regime module, the dispatcher) and the same
    variant per regime."""
    example = solution(path)
    recorded, rebuilt = rebuild_as_run(example)
    assert json.loads(example.description.removeprefix("dispatch by regime: ")) == recorded
    assert set(recorded) == {"latency-bound", "memory-bound", "skewed"}
    assert [(s.path, s.content) for s in example.sources] == \
        [(s["path"], s["content"]) for s in rebuilt["sources"]]


@pytest.mark.parametrize("path", PROMOTED, ids=[p.stem for p in PROMOTED])
def test_example_passes_the_harness_with_every_fast_audit(tmp_path, path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions

    options = SubmitOptions(workloads=["uniform_b1_kv512"], timeout_s=300, baselines=False)
    with Session(Dataset(), Archive(tmp_path / "archive"), options) as session:
        result = session.submit(solution(path), audit_level="fast")
    assert [w.status for w in result.workloads] == ["PASSED"], [w.message for w in result.workloads]
    assert all(a.passed for w in result.workloads for a in w.audits), [w.audits for w in result.workloads]
    assert result.promotion_blockers == []  # promotable
