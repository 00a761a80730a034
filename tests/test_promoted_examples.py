"""The loop's promoted solutions kept as examples (examples/gqa_decode_promoted): what `controller loop --provider
offline` promoted on the H200 from the skill's naive kernel (kv8 page 1: benchmarks/results/2026-12-03_h200_run12/,
the fused kernel alone; kv8 page 64: 2026-12-04_h200_run15/, kv4 pages 1 and 64: 2026-12-04_h200_run16/, the skill's
dispatch by regime). On CPU they pass the harness on the interpreter's workloads with every fast audit clean and
promotable, and each is the skill's own code with the configuration it records, so a reader can find the design it
came from: a single kernel is its template rendered as it is now (a placeholder added since takes its default, which
keeps the promoted kernel's behaviour); a dispatching solution is the offline provider's round-1 dispatch of the
skill's starting points and regime rule as they were then (kv8 page 64 before run 16: batches split below one
program per SM, no wave plan). The run's own source is its record's `promoted_solution.json`."""

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


ADDED_SINCE_RUN15 = {"WAVE_SLOTS_PER_SM": 0}  # at its default the plan is the one the runs had
# Dispatching examples promoted before run 16, when the skill's regime function split a batch only below one
# program per (request, KV head) per SM and the latency-bound starting point sized chunks without the wave plan.
BEFORE_RUN16 = {"gqa_paged_decode_h32_kv8_d128_ps64"}
RUN16_RULE = ("UNSPLIT_PROGRAMS_PER_SM = 2\n", "UNSPLIT_PROGRAMS_PER_SM = 1\n")


def is_dispatch(example) -> bool:
    return example.spec.entry_point == "dispatch.py::run"


def test_there_is_a_promoted_example_per_recorded_definition():
    assert [p.stem for p in PROMOTED] == ["gqa_paged_decode_h32_kv4_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps64",
                                          "gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv8_d128_ps64"]
    assert [is_dispatch(solution(p)) for p in PROMOTED] == [True, True, False, True]


def rebuild_as_run(example):
    """(the recorded variants, the solution's sources): the offline provider's round-1 dispatch from the naive
    incumbent, with the skill's starting points and regime rule as the run had them."""
    from controller.providers.offline import OfflineProvider, naive_incumbent, slug
    from controller.skills import load_skills

    skills = load_skills(ROOT / "skills")
    generator = OfflineProvider(skills).generator_for(example.definition)
    origin = generator.seed_dispatch([], naive_incumbent(skills, example.definition).origin)
    fused = generator.templates["triton-split-kv-fused"].defaults
    added = {}  # placeholders the template gained after the run: not in its record
    if example.definition in BEFORE_RUN16:
        origin["params"]["variants"]["latency-bound"]["params"]["WAVE_SLOTS_PER_SM"] = 0
        assert {k: fused[k] for k in ADDED_SINCE_RUN15} == ADDED_SINCE_RUN15  # the default keeps its behaviour
        added = ADDED_SINCE_RUN15
    recorded = {r: slug({**v, "params": {k: x for k, x in v["params"].items() if k not in added}})
                for r, v in origin["params"]["variants"].items()}
    rebuilt = generator.render_dispatch(origin, example.definition, example.name, example.author, "H200")
    if example.definition in BEFORE_RUN16:
        for source in rebuilt["sources"]:
            if source["path"] == "regime.py":
                assert RUN16_RULE[0] in source["content"]
                source["content"] = source["content"].replace(*RUN16_RULE)
    return recorded, rebuilt


@pytest.mark.parametrize("path", [p for p in PROMOTED if is_dispatch(solution(p))], ids=lambda p: p.stem)
def test_dispatching_example_is_the_skills_round_one_dispatch(path):
    """Rebuilt by the offline provider from the naive incumbent, with the starting points the run had: the same
    files, byte for byte (kernels, the skill's regime module, the dispatcher) and the same variant per regime."""
    example = solution(path)
    recorded, rebuilt = rebuild_as_run(example)
    assert json.loads(example.description.removeprefix("dispatch by regime: ")) == recorded
    assert set(recorded) == {"latency-bound", "memory-bound", "skewed"}
    assert [(s.path, s.content) for s in example.sources] == \
        [(s["path"], s["content"]) for s in rebuilt["sources"]]


@pytest.mark.parametrize("path", [p for p in PROMOTED if not is_dispatch(solution(p))], ids=lambda p: p.stem)
def test_example_is_the_skill_template_it_names(path):
    from controller.skills import kernel_templates, load_skill, render_skill_template

    example = solution(path)
    assert example.definition == path.stem and example.author == "controller/offline"
    template_name, params = example.description.split(" ", 1)
    skill = load_skill(ROOT / "skills" / "gqa-decode")
    template = kernel_templates(skill)[template_name]
    # Placeholders added to the template since the run take their defaults, which keep the promoted behaviour.
    params = {**template.defaults, **json.loads(params), "PAGE_SIZE": 1 if path.stem.endswith("ps1") else 64}
    rendered = render_skill_template(skill, template, params)
    assert [s.content for s in example.sources] == [rendered]


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
