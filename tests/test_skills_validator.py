"""The skill format validator (front matter, names, descriptions, body length, references, yaml blocks) and
the loading of promotion thresholds, on skills written to tmp folders."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from controller.skills import (
    SkillError,
    load_skill,
    load_skills,
    machine_blocks,
    promotion_thresholds,
    validate_skill,
)


# ------------------------------------------------------------------------------ the validator


def write_skill(root: Path, folder: str, front: str, body: str = "# Body\n", files: dict | None = None) -> Path:
    skill_dir = root / folder
    skill_dir.mkdir(parents=True)
    (skill_dir / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    for relative, text in (files or {}).items():
        target = skill_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return skill_dir


GOOD_FRONT = "name: {name}\ndescription: Says what it is. Use it when testing.\n"


def problems_of(skill_dir: Path) -> list[str]:
    return validate_skill(load_skill(skill_dir))


def test_a_minimal_good_skill_is_clean(tmp_path):
    skill_dir = write_skill(
        tmp_path, "good-one", GOOD_FRONT.format(name="good-one"), "See [notes](references/notes.md).\n",
        {"references/notes.md": "plain notes, [a site](https://example.com), [anchor](#x)\n"},
    )
    assert problems_of(skill_dir) == []


def test_validator_catches_name_mismatch(tmp_path):
    skill_dir = write_skill(tmp_path, "folder-name", GOOD_FRONT.format(name="other-name"))
    (problem,) = problems_of(skill_dir)
    assert "SKILL.md" in problem and "does not match its folder name 'folder-name'" in problem


@pytest.mark.parametrize("bad_name", ["Upper-Case", "-leading", "double--hyphen", "under_score", "x" * 65])
def test_validator_catches_bad_name_format(tmp_path, bad_name):
    skill_dir = write_skill(tmp_path, bad_name, GOOD_FRONT.format(name=bad_name))
    problems = problems_of(skill_dir)
    assert problems and all("'name'" in problem for problem in problems)
    assert not any("does not match" in problem for problem in problems)


def test_validator_catches_long_and_missing_description(tmp_path):
    long_dir = write_skill(tmp_path, "long-desc", f"name: long-desc\ndescription: {'w' * 1025}\n")
    (problem,) = problems_of(long_dir)
    assert "long-desc" in problem and "1025 characters, at most 1024" in problem
    missing_dir = write_skill(tmp_path, "no-desc", "name: no-desc\n")
    (problem,) = problems_of(missing_dir)
    assert "no-desc" in problem and "no 'description'" in problem


def test_validator_catches_body_of_500_lines(tmp_path):
    skill_dir = write_skill(tmp_path, "long-body", GOOD_FRONT.format(name="long-body"), "line\n" * 500)
    (problem,) = problems_of(skill_dir)
    assert "long-body" in problem and "500 lines" in problem
    fine_dir = write_skill(tmp_path, "fine-body", GOOD_FRONT.format(name="fine-body"), "line\n" * 499)
    assert problems_of(fine_dir) == []


def test_validator_catches_missing_reference(tmp_path):
    skill_dir = write_skill(tmp_path, "missing-ref", GOOD_FRONT.format(name="missing-ref"),
                            "Read [this](references/gone.md).\n")
    (problem,) = problems_of(skill_dir)
    assert "missing-ref" in problem and "'references/gone.md'" in problem and "does not exist" in problem


def test_validator_catches_reference_of_a_reference(tmp_path):
    skill_dir = write_skill(
        tmp_path, "deep-ref", GOOD_FRONT.format(name="deep-ref"), "Read [a](references/a.md).\n",
        {"references/a.md": "Also read [b](b.md).\n", "references/b.md": "the end\n"},
    )
    (problem,) = problems_of(skill_dir)
    assert "references/a.md" in problem and "'b.md'" in problem and "one level deep" in problem


def test_validator_catches_link_outside_the_skill(tmp_path):
    (tmp_path / "elsewhere.md").write_text("x", encoding="utf-8")
    skill_dir = write_skill(tmp_path, "escapes", GOOD_FRONT.format(name="escapes"), "[x](../elsewhere.md)\n")
    (problem,) = problems_of(skill_dir)
    assert "outside the skill folder" in problem


def test_links_inside_code_blocks_are_not_references(tmp_path):
    body = "```python\nx = table[i](arg)\n```\n```md\n[not a link](nowhere.md)\n```\n"
    skill_dir = write_skill(tmp_path, "code-only", GOOD_FRONT.format(name="code-only"), body)
    assert problems_of(skill_dir) == []


def test_validator_catches_unparseable_front_matter_and_yaml_block(tmp_path):
    broken = write_skill(tmp_path, "broken-front", "name: [unclosed\ndescription: x\n")
    (problem,) = problems_of(broken)
    assert "broken-front" in problem and "front matter is not valid YAML" in problem

    no_front = tmp_path / "no-front"
    no_front.mkdir()
    (no_front / "SKILL.md").write_text("# just a body\n", encoding="utf-8")
    (problem,) = problems_of(no_front)
    assert "no front matter" in problem

    bad_block = write_skill(tmp_path, "bad-block", GOOD_FRONT.format(name="bad-block"),
                            "text\n\n```yaml\nkey: [1, 2\n```\n")
    (problem,) = problems_of(bad_block)
    assert "yaml block 1" in problem and "does not parse" in problem
    with pytest.raises(SkillError, match="yaml block 1"):
        machine_blocks(load_skill(bad_block))


def test_validator_catches_unknown_front_matter_key_and_bad_metadata(tmp_path):
    skill_dir = write_skill(tmp_path, "extra-key",
                            "name: extra-key\ndescription: d, use when x\nversion: 2\nmetadata:\n  n: 3\n")
    problems = problems_of(skill_dir)
    assert any("'version' is not in the spec" in problem for problem in problems)
    assert any("'metadata' maps strings to strings" in problem for problem in problems)


def test_validator_reports_every_problem_at_once(tmp_path):
    skill_dir = write_skill(tmp_path, "many-wrongs", f"name: Wrong\ndescription: {'d' * 2000}\n",
                            "[gone](references/gone.md)\n" + "line\n" * 600)
    assert len(problems_of(skill_dir)) >= 4


# --------------------------------------------------------------------------- promotion loading


def promotion_skills(tmp_path: Path, block: str) -> dict:
    write_skill(tmp_path, "promotion-rules", GOOD_FRONT.format(name="promotion-rules"), f"```yaml\n{block}```\n")
    return load_skills(tmp_path)


GOOD_BLOCK = textwrap.dedent("""\
    require_all_workloads_passed: true
    require_clean_audits: true
    require_full_audit: true
    min_repeats: 2
    noise_floor_rel: 0.02
    paired_order: ABBA
    max_regime_regression_rel: 0.05
    max_workload_regression_rel: 0.05
    stop_no_improvement_rounds: 3
    stop_at_fraction_of_floor: 0.9
    """)


@pytest.mark.parametrize("line, expected", [
    ("min_repeats: 1", "min_repeats: must be at least 2"),
    ("min_repeats: '2'", "min_repeats: Input should be a valid integer"),
    ("noise_floor_rel: 1.5", "noise_floor_rel: is a relative fraction"),
    ("paired_order: ABB", "paired_order: must run A and B equally often"),
    ("paired_order: ACCA", "paired_order: must be a sequence of A"),
    ("require_clean_audits: false", "require_clean_audits: must be true"),
    ("require_all_workloads_passed: false", "require_all_workloads_passed: must be true"),
    ("stop_at_fraction_of_floor: 0", "stop_at_fraction_of_floor: is the fraction"),
    ("stop_no_improvement_rounds: 0", "stop_no_improvement_rounds: must be at least 1"),
    ("noise_floor: 0.02", "noise_floor: unknown key"),
    ("require_full_audit: false", "require_full_audit: must be true"),
    ("max_workload_regression_rel: 1.0", "max_workload_regression_rel: is a relative fraction"),
    ("max_workload_regression_rel: -0.05", "max_workload_regression_rel: is a relative fraction"),
    ("max_workload_regression_rel: '5%'", "max_workload_regression_rel: Input should be a valid number"),
    ("max_workload_regresion_rel: 0.05", "max_workload_regresion_rel: unknown key"),
])
def test_promotion_threshold_errors_say_what_is_wrong(tmp_path, line, expected):
    key = line.split(":")[0]
    lines = [existing for existing in GOOD_BLOCK.splitlines() if not existing.startswith(key + ":")]
    skills = promotion_skills(tmp_path, "\n".join(lines + [line]) + "\n")
    with pytest.raises(SkillError) as caught:
        promotion_thresholds(skills)
    assert expected in str(caught.value)
    assert "promotion-rules" in str(caught.value)


def test_promotion_missing_key_and_missing_skill(tmp_path):
    block = "\n".join(line for line in GOOD_BLOCK.splitlines() if not line.startswith("min_repeats")) + "\n"
    with pytest.raises(SkillError, match="min_repeats: missing"):
        promotion_thresholds(promotion_skills(tmp_path, block))
    block = "\n".join(line for line in GOOD_BLOCK.splitlines() if not line.startswith("max_workload")) + "\n"
    with pytest.raises(SkillError, match="max_workload_regression_rel: missing"):
        promotion_thresholds(promotion_skills(tmp_path / "b", block))
    with pytest.raises(SkillError, match="no 'promotion-rules' skill"):
        promotion_thresholds({})
