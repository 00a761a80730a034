"""The DSA examples and the skill's templates: judged through the harness on CPU (Triton interpreter) on tiny
definitions of the dsa_paged op_type, next to dishonest candidates the official rules must refuse."""

from __future__ import annotations

import json

import pytest

from harness.archive.database import Archive
from harness.audits.verdicts import is_fallback
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.data.schema import Solution

from dsa_support import ATTENTION, INDEXER, ROOT, TINY_ATTENTION, TINY_INDEXER, make_tiny_dsa_dataset
from support import solution_dict

pytest.importorskip("triton")

EXAMPLES = ROOT / "examples" / "dsa_sparse"
SKILL = ROOT / "skills" / "dsa-sparse"


def example(definition: str, tiny: str) -> Solution:
    data = json.loads((EXAMPLES / "solutions" / f"{definition}.json").read_text())
    assert data["definition"] == definition
    return Solution.model_validate({**data, "definition": tiny})


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = make_tiny_dsa_dataset(tmp_path_factory.mktemp("dsa_dataset"))
    archive = Archive(tmp_path_factory.mktemp("dsa_archive"))
    with Session(Dataset(root), archive, SubmitOptions(timeout_s=120)) as s:
        yield s


# Both run every fast audit; the indexer's check needs its inputs and is judged in the reference worker.
@pytest.mark.parametrize("definition,tiny,audit_level", [(ATTENTION, TINY_ATTENTION, "fast"),
                                                         (INDEXER, TINY_INDEXER, "fast")])
def test_example_passes_on_the_interpreter(session, definition, tiny, audit_level):
    result = session.submit(example(definition, tiny), audit_level=audit_level)
    assert [w.status for w in result.workloads] == ["PASSED", "PASSED"], [w.message for w in result.workloads]
    if audit_level != "off":
        assert all(a.passed for w in result.workloads for a in w.audits), [w.audits for w in result.workloads]


def test_examples_are_the_skill_templates_rendered_with_their_defaults():
    from controller.skills import kernel_templates, load_skill, render_skill_template

    skill = load_skill(SKILL)
    templates = kernel_templates(skill)
    for definition, template, file in ((ATTENTION, "triton-sparse-mla", "sparse_mla.py"),
                                       (INDEXER, "triton-topk-indexer", "topk_indexer.py")):
        t = templates[template]
        rendered = render_skill_template(skill, t, {**t.defaults, "PAGE_SIZE": 64})
        assert rendered == (EXAMPLES / file).read_text()
        solution = json.loads((EXAMPLES / "solutions" / f"{definition}.json").read_text())
        assert solution["sources"][0]["content"] == rendered


# An indexer that returns the first top-k tokens of each row: right count, reachable, unique, wrong set.
FIRST_TOKENS = '''
import torch


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    topk_indices.fill_(-1)
    page_size = k_index_cache_fp8.shape[1]
    for b in range(seq_lens.shape[0]):
        n = min(int(seq_lens[b]), topk_indices.shape[1])
        pos = torch.arange(n)
        topk_indices[b, :n] = (block_table[b, pos // page_size] * page_size + pos % page_size).to(torch.int32)
'''

# An attention that drops the rope part (q_pe . kpe) of the logits.
NO_ROPE = '''
import math
import torch


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    kc_all = ckv_cache.reshape(-1, ckv_cache.shape[-1]).float()
    for t in range(q_nope.shape[0]):
        idx = sparse_indices[t][sparse_indices[t] >= 0].long()
        logits = (q_nope[t].float() @ kc_all[idx].T) * sm_scale
        lse[t] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[t] = (torch.softmax(logits, -1) @ kc_all[idx]).to(output.dtype)
'''


@pytest.mark.parametrize("source,tiny,expected", [
    (FIRST_TOKENS, TINY_INDEXER, ["INCORRECT_NUMERICAL", "PASSED"]),  # idx_b2_m1: rows shorter than top-k
    (NO_ROPE, TINY_ATTENTION, ["INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL"]),
])
def test_dishonest_candidates_are_refused(session, source, tiny, expected):
    result = session.submit(Solution.model_validate(solution_dict(source, definition=tiny, name="dishonest")),
                            audit_level="off")
    assert [w.status for w in result.workloads] == expected, [w.message for w in result.workloads]


def test_skill_validates_and_every_allowed_combination_renders_a_dps_run():
    import ast

    from controller.skills import kernel_templates, load_skill, machine_blocks, render_skill_template, validate_skill

    skill = load_skill(SKILL)
    assert validate_skill(skill) == []
    (block,) = machine_blocks(skill)
    templates = kernel_templates(skill)
    for definition, wanted in block["dps_signature"].items():
        template = templates[block["definitions"][definition]["template"]]
        for params in template.grid():
            tree = ast.parse(render_skill_template(skill, template, params))
            (run,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
            assert [a.arg for a in run.args.args] == wanted, (template.name, params)
    for point in block["starting_points"].values():
        params = {k: v for k, v in point.items() if k != "template"}
        templates[point["template"]].check({**params, "PAGE_SIZE": 64})


@pytest.mark.parametrize("template,params,tiny", [
    ("triton-sparse-mla", {"BLOCK_N": 16, "SPLIT": 1, "NUM_WARPS": 4, "NUM_STAGES": 1}, TINY_ATTENTION),
    ("triton-topk-indexer", {"BLOCK_N": 32, "NUM_WARPS": 8, "SELECT_WARPS": 4}, TINY_INDEXER),
    ("triton-topk-indexer", {"BLOCK_N": 32, "NUM_WARPS": 4, "SELECT_WARPS": 4}, TINY_INDEXER),  # the naive entry
])
def test_other_template_configurations_pass(session, template, params, tiny):
    from controller.skills import kernel_templates, load_skill, render_skill_template

    skill = load_skill(SKILL)
    source = render_skill_template(skill, kernel_templates(skill)[template], {**params, "PAGE_SIZE": 64})
    solution = Solution.model_validate(solution_dict(source, definition=tiny, name=template, language="triton"))
    result = session.submit(solution, audit_level="off")
    assert [w.status for w in result.workloads] == ["PASSED", "PASSED"], [w.message for w in result.workloads]


FULL_SIZE_SCRIPT = '''
import importlib.util, json, sys
from harness.sandbox.triton_interp import apply
apply()
from harness.measure.correctness import Tolerance
from harness.data.dataset import Dataset
from harness.families import family_for
from harness.data.inputs import allocate_outputs, generate_inputs

name, file, uuid = sys.argv[1:4]
dataset = Dataset("definitions")
definition = dataset.definition(name)
[workload] = dataset.workloads_for(name, [uuid])
spec = importlib.util.spec_from_file_location("kernel", file)
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)
inputs = generate_inputs(definition, workload, seed=2, root=dataset.root)
outputs = allocate_outputs(definition, workload)
kernel.run(*inputs.values(), *outputs.values())
namespace = {}
exec(definition.reference, namespace)
reference = dict(zip(definition.outputs, namespace["run"](*inputs.values())))
result = family_for("dsa_paged").compare(definition, outputs, reference, Tolerance(), inputs=inputs)
print(json.dumps({"status": result.status.value, "message": result.message}))
'''


@pytest.mark.parametrize("definition,file,pick", [
    (ATTENTION, "sparse_mla.py", lambda w: (w.axes["num_tokens"] != 2, w.uuid)),
    # the smallest workload that needs a real selection (max_num_pages x 64 > 2048)
    (INDEXER, "topk_indexer.py",
     lambda w: (w.axes["max_num_pages"] <= 32, w.axes["batch_size"] * w.axes["max_num_pages"])),
])
def test_examples_pass_a_full_size_workload_on_the_interpreter(definition, file, pick):
    """Full-size inputs exceed the session's CPU limit, so the kernel runs directly under the interpreter in a
    subprocess (the interpreter must be on before Triton is imported) and is judged by the family's rule."""
    import os
    import subprocess
    import sys

    workload = min(Dataset(ROOT / "definitions").workloads_for(definition), key=pick)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FULL_SIZE_SCRIPT, definition, str(EXAMPLES / file), workload.uuid],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "PASSED", "message": ""}


# Value-returning, as the official evaluator allows: `output` alone (lse left out) or `(output, lse)`.
OUTPUT_ONLY = '''
import torch


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    kc = ckv_cache.reshape(-1, ckv_cache.shape[-1]).float()
    kp = kpe_cache.reshape(-1, kpe_cache.shape[-1]).float()
    out = torch.zeros(q_nope.shape[0], q_nope.shape[1], kc.shape[-1], dtype=torch.bfloat16)
    for t in range(q_nope.shape[0]):
        idx = sparse_indices[t][sparse_indices[t] >= 0].long()
        if idx.numel():
            logits = (q_nope[t].float() @ kc[idx].T + q_pe[t].float() @ kp[idx].T) * sm_scale
            out[t] = (torch.softmax(logits, -1) @ kc[idx]).to(torch.bfloat16)
    return out
'''


@pytest.mark.parametrize("returned, expected", [
    ("out", "PASSED"),
    ("out, out", "INCORRECT_SHAPE"),  # an lse returned is judged: here of the output's shape
    ("out, out, out", "RUNTIME_ERROR"),  # more tensors than the definition has outputs
    ("out[0]", "INCORRECT_SHAPE"),
])
def test_the_sparse_attention_may_return_its_output_alone(session, returned, expected):
    source = OUTPUT_ONLY.replace("    return out\n", f"    return {returned}\n")
    solution = Solution.model_validate(solution_dict(source, definition=TINY_ATTENTION, name="output_only",
                                                     dps=False))
    result = session.submit(solution, audit_level="fast")
    assert [w.status for w in result.workloads] == [expected] * 2, [w.message for w in result.workloads]
    if expected == "PASSED":  # PyTorch does the work here: the CPU's attribution says so, every other audit passes
        assert all(a.passed for w in result.workloads for a in w.audits if a.name != "attribution"), \
            [w.audits for w in result.workloads]
        assert all(is_fallback(w.audits) for w in result.workloads), [w.audits for w in result.workloads]
