"""The shipped skills are data the controller obeys: their machine-readable parts and the kernel templates
they ship (render every allowed combination; tests/test_skill_templates_interpreter.py runs them on the CPU)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from controller.skills import (
    PromotionThresholds,
    SkillError,
    kernel_templates,
    load_skills,
    machine_blocks,
    promotion_thresholds,
    render_skill_template,
    render_template,
    skill_excerpt,
    template_placeholders,
    validate_skills,
)


REPO = Path(__file__).resolve().parents[1]
SKILLS = REPO / "skills"
EXPECTED_SKILLS = {"gqa-decode", "ncu-profiling", "promotion-rules", "hopper-tactics", "blackwell-tactics"}
PS1_SIGNATURE = ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale", "output", "lse"]
PS64_SIGNATURE = ["q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "kv_last_page_len", "sm_scale", "output", "lse"]


@pytest.fixture(scope="module")
def skills():
    return load_skills(SKILLS)


@pytest.fixture(scope="module")
def gqa(skills):
    return skills["gqa-decode"]


# ------------------------------------------------------------------------------ shipped skills


def test_every_shipped_skill_validates_clean(skills):
    assert EXPECTED_SKILLS <= set(skills)
    assert validate_skills(skills) == []


def test_every_yaml_block_parses_to_a_mapping(skills):
    for name in ("gqa-decode", "ncu-profiling", "promotion-rules", "hopper-tactics", "blackwell-tactics"):
        blocks = machine_blocks(skills[name])
        assert blocks, f"{name} has no machine-readable yaml block"
        assert all(isinstance(block, dict) for block in blocks)


def test_promotion_thresholds_load_with_expected_values(skills):
    thresholds = promotion_thresholds(skills)
    assert thresholds == PromotionThresholds(
        require_all_workloads_passed=True,
        require_clean_audits=True,
        require_full_audit=True,
        min_repeats=2,
        noise_floor_rel=0.02,
        paired_order="ABBA",
        max_regime_regression_rel=0.05,
        max_workload_regression_rel=0.05,
        stop_no_improvement_rounds=3,
        stop_at_fraction_of_floor=0.9,
        screen_slack_rel=0.01,
        ranked_figure="kernel",
        decisive_speedup=1.5,
        futility_below=1.0,
        gap_gain_rel=0.01,
        pair_changed_only=True,
    )


def test_gqa_tolerances_and_signatures(gqa):
    (block,) = machine_blocks(gqa)
    assert block["tolerances"]["atol"] == 0.01
    assert block["tolerances"]["rtol"] == 0.01
    assert block["dps_signature"]["page_size_1"] == PS1_SIGNATURE
    assert block["dps_signature"]["page_size_64"] == PS64_SIGNATURE


def test_ncu_classification_thresholds(skills):
    (block,) = machine_blocks(skills["ncu-profiling"])
    assert block["classification"]["latency_bound_below_sol_pct"] == 60
    assert block["classification"]["at_roofline_fraction_of_floor"] == 0.9
    assert set(block["metrics"]) == {"sm_90", "sm_100"}
    # The note in the tactics skills: the hmma counter alone proves nothing on Hopper.
    assert block["metrics"]["sm_90"]["wgmma_inst"] == "sm__inst_executed_pipe_tensor_op_gmma.sum"


def test_every_tactic_names_a_known_limiter(skills):
    (ncu,) = machine_blocks(skills["ncu-profiling"])
    known = set(ncu["limiters"])
    for name in ("hopper-tactics", "blackwell-tactics"):
        (block,) = machine_blocks(skills[name])
        for tactic in block["tactics"]:
            assert tactic["limiter"] in known, f"{name}: {tactic['id']} names unknown limiter {tactic['limiter']}"
            assert tactic["verify"], f"{name}: {tactic['id']} says nothing to verify"


def test_skill_excerpt_is_bounded(skills):
    for skill in skills.values():
        for limit in (50, 400, 2000):
            excerpt = skill_excerpt(skill, limit)
            assert len(excerpt) <= limit
        assert skill.name in skill_excerpt(skill, 2000)
    small = skills["promotion-rules"]
    assert skill_excerpt(small, 100_000).endswith(small.body.strip() + "\n")
    with pytest.raises(ValueError):
        skill_excerpt(small, 0)


# ---------------------------------------------------------------------------------- templates


def test_render_template_fills_and_rejects():
    assert render_template("a={A} b={B_2} c={A} d={'k': v}", {"A": 1, "B_2": "x"}) == "a=1 b=x c=1 d={'k': v}"
    assert template_placeholders("{X} {Y} {X} {z}") == ["X", "Y"]
    with pytest.raises(SkillError, match="no value for placeholder.*B"):
        render_template("{A} {B}", {"A": 1})
    with pytest.raises(SkillError, match="unknown placeholder.*C"):
        render_template("{A}", {"A": 1, "C": 2})
    with pytest.raises(SkillError, match="must be an int, float or str"):
        render_template("{A}", {"A": [1]})


def test_template_check_rejects_values_outside_the_list(gqa):
    template = kernel_templates(gqa)["triton-per-kv-head"]
    params = {name: choices[0] for name, choices in template.placeholders.items()}
    render_skill_template(gqa, template, params)
    with pytest.raises(SkillError, match="BLOCK_N=48 not allowed"):
        render_skill_template(gqa, template, dict(params, BLOCK_N=48))
    with pytest.raises(SkillError, match="SPLIT_KV is not a placeholder"):
        render_skill_template(gqa, template, dict(params, SPLIT_KV=2))


def _module_constants(tree: ast.Module) -> dict:
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return constants


def _selected_run_signatures(tree: ast.Module) -> list[list[str]]:
    """Parameter lists of the `run` functions the module defines at import, resolving top-level
    `if` statements over module constants (the templates pick run's signature by PAGE_SIZE)."""
    constants = _module_constants(tree)
    signatures = []

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.FunctionDef) and node.name == "run":
                signatures.append([arg.arg for arg in node.args.args])
            elif isinstance(node, ast.If):
                condition = eval(compile(ast.Expression(node.test), "<template>", "eval"), {"__builtins__": {}},
                                 constants)
                visit(node.body if condition else node.orelse)

    visit(tree.body)
    return signatures


def test_templates_listed_match_their_files(gqa):
    templates = kernel_templates(gqa)
    assert set(templates) == {"triton-per-kv-head", "triton-split-kv", "triton-split-kv-fused",
                              "cuda-mma-split-kv-fused"}
    for template in templates.values():
        text = (gqa.folder / template.path).read_text(encoding="utf-8")
        assert set(template_placeholders(text)) == set(template.placeholders), template.name
        template.check({**{n: c[0] for n, c in template.placeholders.items()}, **template.defaults,
                        "PAGE_SIZE": 64})


def test_starting_points_are_allowed_configurations(gqa, skills):
    (block,) = machine_blocks(gqa)
    (ncu,) = machine_blocks(skills["ncu-profiling"])
    templates = kernel_templates(gqa)
    from controller.plan import HYPOTHESES

    for regime, point in block["starting_points"].items():
        # a class ncu-profiling defines, or a workload regime the loop plans for (skewed)
        assert regime in {"latency-bound", "memory-bound", "compute-bound"} | set(HYPOTHESES), regime
        if regime != "skewed":
            assert f"**{regime}**" in skills["ncu-profiling"].body
        params = {key: value for key, value in point.items() if key != "template"}
        templates[point["template"]].check({**params, "PAGE_SIZE": 64})
    assert ncu["classification"]


def test_every_allowed_value_renders_to_a_dps_run(gqa):
    """Each placeholder's value is substituted on its own, so a value that breaks the module breaks every combination
    holding it: per page size, render and parse the grid's first combination, then that combination with one
    placeholder changed to each of its other values (walking all 38 million combinations took minutes of CI and
    proves nothing more). The grids' sizes are counted."""
    combinations = parsed = 0
    for template in kernel_templates(gqa).values():
        combinations += math.prod(len(values) for values in template.placeholders.values())
        first = next(template.grid())
        covered: set = set()
        for page in template.placeholders["PAGE_SIZE"]:
            base = {**first, "PAGE_SIZE": page}
            for name, values in template.placeholders.items():
                for value in values:
                    params = {**base, name: value} if name != "PAGE_SIZE" else base
                    if (page, name, params[name]) in covered:
                        continue
                    covered |= {(page, n, v) for n, v in params.items()}
                    source = render_skill_template(gqa, template, params)
                    assert not any("{" + n + "}" in source for n in template.placeholders), (template.name, params)
                    parsed += 1
                    expected = PS1_SIGNATURE if page == 1 else PS64_SIGNATURE
                    if template.setup:  # what the setup returned comes last (the harness passes it)
                        expected = [*expected, "state"]
                    assert _selected_run_signatures(ast.parse(source)) == [expected], (template.name, params)
        every_value = {(page, name, value) for name, values in template.placeholders.items() if name != "PAGE_SIZE"
                       for value in values for page in template.placeholders["PAGE_SIZE"]}
        assert every_value <= covered, template.name
    assert parsed >= 2 * len(kernel_templates(gqa))  # both page sizes of every template
    # Triton (BLOCK_N x NUM_WARPS x USE_DOT x PAGE_SIZE, then NUM_STAGES: 3 for per-KV-head (x KV_LOAD 3 x
    # KV_LOAD_MIN_PROGRAMS_PER_SM 7) and split, 5 for fused, whose grid MAX_REGISTERS doubles, KV_LOAD triples,
    # SATURATING_PROGRAMS_PER_SM quadruples, ONE_REQUEST_SCALARS doubles and ENOUGH_PROGRAMS quadruples), then the CUDA
    # template (whose CLUSTER has 5 values and ONE_REQUEST_SCALARS 2)
    assert combinations == 4 * 4 * 4 * 2 * (3 * (3 * 7 + 7) + 5 * 7 * 4 * 2 * 4 * 4 * 4 * 4 * 4 * 2 * 5 * 2 * 3 * 4
                                            * 2 * 4) \
        + 2 * 3 * 6 * 3 * 3 * 4 * 5 * 2


def test_shared_kernel_helpers_are_identical_in_both_templates(gqa):
    def helpers(path: Path) -> str:
        text = path.read_text(encoding="utf-8")
        start = text.index("@triton.jit\ndef _sequence_length")
        end = text.index("@triton.jit\ndef _attend_tokens")
        end = text.index("\n\n\n", end)
        return text[start:end]

    templates = [t for t in kernel_templates(gqa).values() if t.language == "triton"]  # CUDA shares no Triton
    first, *others = (helpers(gqa.folder / t.path) for t in templates)
    assert len(others) == 2 and all(other == first for other in others)


def test_the_page_indices_ahead_are_the_same_text_in_both_templates_that_offer_them(gqa):
    """KV_LOAD (per-KV-head and fused split-KV): the kernel helpers from `_ahead_tile` to `_attend_tokens_ahead` and the
    host's `_tma_tile` are one text (each rendered file stands alone)."""
    def ahead(path: Path) -> tuple[str, str]:
        text = path.read_text(encoding="utf-8")
        start = text.index("@triton.jit\ndef _ahead_tile(")
        end = text.index("\n\n\n", text.index("def _attend_tokens_ahead("))
        host = text.index("def _tma_tile(")
        return text[start:end], text[host:text.index("\n\n\n", host)]

    templates = kernel_templates(gqa)
    offering = [t for t in templates.values() if "KV_LOAD" in t.placeholders]
    assert sorted(t.name for t in offering) == ["triton-per-kv-head", "triton-split-kv-fused"]
    first, second = (ahead(gqa.folder / t.path) for t in offering)
    assert first == second and "k_desc.load(" in first[0]
