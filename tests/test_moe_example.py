"""The MoE example (examples/moe_fp8, rendered from the moe-fp8 skill's template) on the tiny MoE definition:
it passes the harness under the Triton interpreter, classic slips fail the low-bit rule, it also passes on the
contest's generic input recipe, and the precision audit accepts its FP8 arithmetic but not a cheaper one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.data.schema import Solution
from moe_interpreter_checks import EXAMPLE_PARAMS, SLIPS, TEMPLATE
from moe_support import OFFICIAL, TINY, make_moe_dataset
from support import EXAMPLES, ROOT

EXAMPLE = EXAMPLES / "moe_fp8"


def test_the_example_is_the_template_rendered_and_a_valid_solution():
    from controller.skills.templates import render_template

    kernel = (EXAMPLE / "kernel.py").read_text()
    assert kernel == render_template(TEMPLATE.read_text(), EXAMPLE_PARAMS)
    data = json.loads((EXAMPLE / "solutions" / f"{OFFICIAL}.json").read_text())
    solution = Solution.model_validate(data)
    assert solution.definition == OFFICIAL and solution.spec.destination_passing_style
    assert [s.path for s in solution.sources] == ["kernel.py"] and solution.sources[0].content == kernel


def test_the_example_passes_the_harness_on_the_tiny_definition(tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions

    data = json.loads((EXAMPLE / "solutions" / f"{OFFICIAL}.json").read_text())
    solution = Solution.model_validate({**data, "definition": TINY})
    dataset = Dataset(make_moe_dataset(tmp_path / "dataset"))
    with Session(dataset, Archive(tmp_path / "archive"), SubmitOptions(timeout_s=300)) as session:
        result = session.submit(solution)
    assert [w.status for w in result.workloads] == ["PASSED"] * 3, [w.message for w in result.workloads]
    assert result.status == "PASSED"


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    """tests/moe_interpreter_checks.py in a fresh process: TRITON_INTERPRET is read when triton is imported."""
    out = tmp_path_factory.mktemp("moe_checks") / "checks.json"
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "moe_interpreter_checks.py"), str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("slip", list(SLIPS))
def test_classic_slips_fail_the_low_bit_rule(checks, slip):
    assert "INCORRECT_NUMERICAL" in checks["slips"][slip], checks["slips"][slip]


def test_the_honest_kernel_passes_where_the_slips_are_tried(checks):
    assert checks["honest"] == ["PASSED"]


def test_the_example_passes_on_the_contests_generic_recipe(checks):
    """The contest drew these inputs as plain random tensors (fp8 N(0,1) clipped to +-2, scales N(0,1) with
    negative ones, routing from randn): an honest kernel passes there too."""
    assert checks["generic"]["negative_scales"] and checks["generic"]["status"] == "PASSED", checks["generic"]


@pytest.mark.parametrize("variant,flagged", [("fp8", False), ("e5m2", True)])
def test_precision_audit_accepts_fp8_and_catches_cheaper(checks, variant, flagged):
    found = checks["precision"][variant]
    assert found["correct"] == "PASSED"  # both pass the low-bit rule: only the audit tells them apart
    assert found["verdict"]["passed"] is (not flagged), found


def test_the_skill_validates_and_every_allowed_configuration_renders():
    import ast

    from controller.skills import kernel_templates, load_skills, machine_blocks, render_skill_template, validate_skills

    skills = load_skills(ROOT / "skills")
    skill = skills["moe-fp8"]
    assert validate_skills({"moe-fp8": skill}) == []
    assert OFFICIAL in skill.metadata["definitions"].split()
    (block,) = machine_blocks(skill)
    template = kernel_templates(skill)["triton-moe-fp8"]
    signature = block["dps_signature"]["default"]
    from harness.data.dataset import Dataset

    definition = Dataset(ROOT / "definitions").definition(OFFICIAL)
    assert signature == [*definition.inputs, *definition.outputs]
    assert block["tolerances"]["required_matched_ratio"] == 0.9 and block["tolerances"]["rtol"] == 0.3
    for params in template.grid():
        tree = ast.parse(render_skill_template(skill, template, params))
        [run] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
        assert [a.arg for a in run.args.args] == signature
    points = [block["naive"], *block["starting_points"].values()]
    for point in points:
        template.check({k: v for k, v in point.items() if k != "template"})
    assert set(block["starting_points"]) >= {"weight-streaming", "grouped-gemm"}


def test_the_offline_generators_moves_stay_inside_the_template():
    """The offline provider's search (neighbours, tactic moves) over this skill only proposes allowed
    configurations, each of which renders; choosing this skill for op_type moe is the provider's part."""
    from controller.providers.offline import OfflineGenerator
    from controller.skills import load_skills, render_skill_template

    skill = load_skills(ROOT / "skills")["moe-fp8"]
    generator = OfflineGenerator(skill)
    template = generator.templates["triton-moe-fp8"]
    for regime in ("weight-streaming", "grouped-gemm"):
        start = generator.starting_point(regime)
        options = generator.neighbours(start, regime, rotation=0)
        options += [o for limiter in generator.tactic_moves for o in generator.tactic_options(start, limiter)]
        assert len(options) > 5
        for origin in options:
            render_skill_template(skill, generator.templates[origin["template"]], origin["params"])
    assert generator.tactic_options(generator.starting_point("weight-streaming"), "dependent-loads") == [
        {"template": "triton-moe-fp8", "params": {**template.defaults, "NUM_STAGES": 4}}]
