"""The GDN examples (examples/gdn, the gdn skill's templates rendered with their defaults): they pass the harness on
the official definitions' small workloads under the Triton interpreter, match the exec'd official references where
the workloads do not reach (no state, zero scale, an empty sequence), the chunked prefill template too on ragged
lengths, while classic slips fail, and the skill validates with every allowed configuration (of every template a
definition names) rendering a destination-passing `run`."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from gdn_support import DECODE, EXAMPLES, PREFILL, SKILL, make_gdn_dataset
from support import DEFINITIONS, ROOT

pytest.importorskip("triton")

FILES = {DECODE: ("triton-gdn-decode", "gdn_decode.py"), PREFILL: ("triton-gdn-prefill", "gdn_prefill.py")}


def example(definition: str):
    from harness.data.schema import Solution

    data = json.loads((EXAMPLES / "solutions" / f"{definition}.json").read_text())
    assert data["definition"] == definition
    return Solution.model_validate(data)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions

    # prefill on its shortest workload only: the interpreter walks every token of every program
    root = make_gdn_dataset(tmp_path_factory.mktemp("gdn_dataset"), {DECODE: ["b1_0", "b4_0"], PREFILL: ["t6_n1"]})
    with Session(Dataset(root), Archive(tmp_path_factory.mktemp("gdn_archive")), SubmitOptions(timeout_s=300)) as s:
        yield s


@pytest.mark.parametrize("definition, workloads", [(DECODE, 2), (PREFILL, 1)])
def test_example_passes_the_harness_with_clean_audits(session, definition, workloads):
    result = session.submit(example(definition), audit_level="fast")
    assert [w.status for w in result.workloads] == ["PASSED"] * workloads, [w.message for w in result.workloads]
    assert all(a.passed for w in result.workloads for a in w.audits), [w.audits for w in result.workloads]


def test_examples_are_the_templates_rendered_with_their_defaults():
    from controller.skills import kernel_templates, load_skill, render_skill_template

    skill = load_skill(SKILL)
    templates = kernel_templates(skill)
    for definition, (name, file) in FILES.items():
        rendered = render_skill_template(skill, templates[name], templates[name].defaults)
        assert rendered == (EXAMPLES / file).read_text()
        solution = example(definition)
        assert solution.spec.destination_passing_style and solution.spec.entry_point == f"{file}::run"
        assert [s.path for s in solution.sources] == [file] and solution.sources[0].content == rendered


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    """tests/gdn_interpreter_checks.py in a fresh process: TRITON_INTERPRET is read when triton is imported."""
    out = tmp_path_factory.mktemp("gdn_checks") / "checks.json"
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "gdn_interpreter_checks.py"), str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_templates_match_the_reference_where_the_workloads_do_not_reach(checks):
    """[failing output elements, failing new_state elements, state mutated] for every case and parameter set."""
    assert len(checks["honest"]) == 8
    assert all(found == [0, 0, 0] for found in checks["honest"].values()), checks["honest"]


def test_chunked_template_matches_the_reference_on_ragged_lengths(checks):
    """Two chunk sizes; lengths 1, 5, 0, 17, 33 packed: partial last chunks, single tokens, an empty sequence."""
    assert len(checks["chunked"]) == 4
    assert all(found == [0, 0, 0] for found in checks["chunked"].values()), checks["chunked"]


@pytest.mark.parametrize("slip", ["state read as [K, V]", "v head h on q/k head h % 4", "softplus dropped",
                                  "empty sequence keeps its state"])
def test_classic_slips_fail_the_element_rule(checks, slip):
    assert checks["slips"][slip] > 0


def test_skill_validates_and_every_allowed_configuration_renders_a_dps_run():
    from controller.skills import kernel_templates, load_skill, machine_blocks, render_skill_template, validate_skill
    from harness.data.dataset import Dataset

    skill = load_skill(SKILL)
    assert validate_skill(skill) == []
    assert skill.metadata["definitions"].split() == [DECODE, PREFILL]
    (block,) = machine_blocks(skill)
    templates = kernel_templates(skill)
    dataset = Dataset(DEFINITIONS)
    for definition, wanted in block["dps_signature"].items():
        official = dataset.definition(definition)
        assert wanted == [*official.inputs, *official.outputs] and official.op_type == "gdn"
        named = block["definitions"][definition]["template"]
        for name in [named] if isinstance(named, str) else named:
            template = templates[name]
            for params in template.grid():
                tree = ast.parse(render_skill_template(skill, template, params))
                (run,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
                assert [a.arg for a in run.args.args] == wanted, (template.name, params)
    for point in [*block["naive"], *block["starting_points"].values()]:
        templates[point["template"]].check({k: v for k, v in point.items() if k != "template"})
    assert block["tolerances"]["atol"] == block["tolerances"]["rtol"] == 0.01
