"""A definition's own starting points (`definitions: NAME: {starting_points: ...}` in a skill) laid over the
skill's per-regime ones: what a measured shape wants, changed where named, the rest kept."""

from __future__ import annotations

import shutil

import pytest

from controller.providers.offered import definition_starting_points
from controller.providers.offline import offline_generator
from controller.skills import SkillError, kernel_templates, load_skills

from support import ROOT

FUSED = "triton-split-kv-fused"
PER_HEAD = "triton-per-kv-head"
SKILL_POINTS = {"latency-bound": {"template": FUSED, "CHUNK_BLOCKS": 16, "MERGE_STAGES": 3},
                "memory-bound": {"template": PER_HEAD, "BLOCK_N": 64, "KV_LOAD": 0}}


@pytest.fixture(scope="module")
def templates():
    return kernel_templates(load_skills(ROOT / "skills")["gqa-decode"])


@pytest.mark.parametrize("own, regime, expected", [
    (None, "latency-bound", SKILL_POINTS["latency-bound"]),
    ({}, "memory-bound", SKILL_POINTS["memory-bound"]),
    ({"latency-bound": {"CHUNK_BLOCKS": 32}}, "latency-bound",
     {"template": FUSED, "CHUNK_BLOCKS": 32, "MERGE_STAGES": 3}),
    ({"latency-bound": {"CHUNK_BLOCKS": 32}}, "memory-bound", SKILL_POINTS["memory-bound"]),  # untouched
    ({"memory-bound": {"KV_LOAD": 2}}, "memory-bound", {"template": PER_HEAD, "BLOCK_N": 64, "KV_LOAD": 2}),
    # another template replaces the regime's start: no placeholder of the old one carried over
    ({"memory-bound": {"template": FUSED, "CHUNK_BLOCKS": 8}}, "memory-bound", {"template": FUSED, "CHUNK_BLOCKS": 8}),
    # a regime the skill has no start for gets the definition's
    ({"skewed": {"template": FUSED, "CHUNK_BLOCKS": 8}}, "skewed", {"template": FUSED, "CHUNK_BLOCKS": 8}),
])
def test_the_definitions_entry_changes_only_what_it_names(templates, own, regime, expected):
    data = {} if own is None else {"starting_points": own}
    merged = definition_starting_points(SKILL_POINTS, data, "here", templates)
    assert merged[regime] == expected
    assert SKILL_POINTS["latency-bound"]["CHUNK_BLOCKS"] == 16  # the skill's own mapping is not changed


@pytest.mark.parametrize("own, said", [
    ({"latency-bound": {"NOT_A_PARAM": 1}}, "NOT_A_PARAM"),
    ({"latency-bound": {"template": "no-such-template"}}, "no-such-template"),
    ({"skewed": {"CHUNK_BLOCKS": 8}}, "names template None"),  # no skill start, no template named
    ({"latency-bound": 3}, "must map regimes"),
    (["latency-bound"], "must map regimes"),
])
def test_a_bad_entry_is_refused_on_one_line_naming_the_definition(templates, own, said):
    with pytest.raises(SkillError) as err:
        definition_starting_points(SKILL_POINTS, {"starting_points": own}, "skill 'gqa-decode', definition 'd'",
                                   templates)
    assert said in str(err.value) and "definition 'd'" in str(err.value) and "\n" not in str(err.value)


def test_the_generator_for_a_definition_starts_from_its_own_entry(tmp_path):
    """Through the skill file: the generator built for a definition whose entry names a starting point uses it;
    another definition of the same skill keeps the skill's."""
    src = (ROOT / "skills" / "gqa-decode").resolve()
    dst = tmp_path / "skills" / "gqa-decode"
    shutil.copytree(src, dst)
    text = (dst / "SKILL.md").read_text()
    # kv8 page 1's entry names CHUNK_BLOCKS 8: make it 64
    line = next(ln for ln in text.splitlines() if ln.startswith("  gqa_paged_decode_h32_kv8_d128_ps1:"))
    assert "starting_points: {latency-bound: {CHUNK_BLOCKS: 8}}" in line
    text = text.replace(line, line.replace("{CHUNK_BLOCKS: 8}", "{CHUNK_BLOCKS: 64}"))
    (dst / "SKILL.md").write_text(text)
    mine = offline_generator(load_skills(tmp_path / "skills"), "gqa_paged_decode_h32_kv8_d128_ps1")
    mine = mine.starting_point("latency-bound")
    other = offline_generator(load_skills(ROOT / "skills"), "gqa_paged_decode_h32_kv8_d128_ps1")
    other = other.starting_point("latency-bound")
    assert (mine["params"]["CHUNK_BLOCKS"], other["params"]["CHUNK_BLOCKS"]) == (64, 8)
    assert {k: v for k, v in mine["params"].items() if k != "CHUNK_BLOCKS"} == \
        {k: v for k, v in other["params"].items() if k != "CHUNK_BLOCKS"}
