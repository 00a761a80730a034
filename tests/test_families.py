"""Operator families as plug-ins: the registry, the GQA family, and a toy family added as a folder of data
plus one module, then judged end to end through the harness on CPU."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from harness.families import (GENERIC, FamilyError, OperatorFamily, family_for, load_family_module, register,
                              registered, unregister, workload_cost)
from harness.families.gqa_paged import GqaPagedFamily
from harness.data.schema import Definition, Workload

from support import DEFINITIONS, KV8_PS1, KV8_PS64, solution_dict

# ---------------------------------------------------------------------------------------------
# The toy family: out = a + b over a vector of n floats

TOY_OP = "toy_vector_add"

TOY_FAMILY_MODULE = '''
from harness.families import OperatorFamily
from harness.measure.roofline import WorkloadCost


class VectorAddFamily(OperatorFamily):
    """a + b: read two vectors, write one; one flop per element."""

    op_type = "toy_vector_add"
    skill = "vector-add"
    regime_rules = """
- name: short
  all: {axis_at_most: {n: 64}}
- name: long
  all: {}
"""

    def __init__(self):
        self.compared = []  # (definition, outputs) of every check the harness asked this family for
        self.costed = []

    def compare(self, definition, outputs, reference, tolerance):
        self.compared.append((definition.name, tuple(sorted(outputs))))
        return super().compare(definition, outputs, reference, tolerance)

    def workload_cost(self, definition, workload, root=None, tokens=None):
        self.costed.append(workload.uuid)
        n = workload.axes["n"]
        return WorkloadCost(bytes_moved=3 * 4 * n, flops=n, formula=f"vector add: 3 x 4 B x {n}; {n} flops")


FAMILY = VectorAddFamily()
'''

TOY_DEFINITION = {
    "name": "vector_add",
    "op_type": TOY_OP,
    "axes": {"n": {"type": "var", "description": "Vector length."}},
    "inputs": {"a": {"shape": ["n"], "dtype": "float32"}, "b": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"out": {"shape": ["n"], "dtype": "float32"}},
    "reference": "import torch\n\n\ndef run(a, b):\n    return a + b\n",
}

TOY_WORKLOADS = {"00000000-0000-4000-9000-000000000001": 16, "00000000-0000-4000-9000-000000000002": 100}

TOY_CANDIDATE = '''
import torch


def run(a, b, out):
    torch.add(a, b, out=out)
'''


def make_toy_family(folder: Path) -> tuple[Path, Path]:
    """The family's data (a trace-set folder) and its one module, as a contributor would write them."""
    data = folder / "dataset"
    (data / "definitions" / TOY_OP).mkdir(parents=True)
    (data / "definitions" / TOY_OP / "vector_add.json").write_text(json.dumps(TOY_DEFINITION, indent=2))
    (data / "workloads" / TOY_OP).mkdir(parents=True)
    lines = [json.dumps({"definition": "vector_add", "solution": None, "evaluation": None,
                         "workload": {"uuid": uuid, "axes": {"n": n}, "inputs": {}}})
             for uuid, n in TOY_WORKLOADS.items()]
    (data / "workloads" / TOY_OP / "vector_add.jsonl").write_text("\n".join(lines) + "\n")
    (data / "workloads" / TOY_OP / "labels.json").write_text(
        json.dumps({uuid: f"n{n}" for uuid, n in TOY_WORKLOADS.items()}))
    (data / "eval_config.yaml").write_text("default:\n  timeout_s: 120\nop_type:\n  toy_vector_add:\n    atol: 0.001\n")
    module = folder / "toy_vector_add.py"
    module.write_text(TOY_FAMILY_MODULE)
    return data, module


@pytest.fixture
def toy(tmp_path):
    data, module = make_toy_family(tmp_path)
    [family] = load_family_module(module)
    yield data, family
    unregister(TOY_OP)


def test_toy_family_is_judged_through_the_session_on_cpu(toy, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions
    from harness.data.schema import Solution

    data, family = toy
    dataset = Dataset(data)
    assert dataset.preset("vector_add").atol == 0.001  # the family's presets are data, layered by op_type
    solution = Solution.model_validate(solution_dict(TOY_CANDIDATE, definition="vector_add", name="toy_add"))
    with Session(dataset, Archive(tmp_path / "archive"), SubmitOptions(timeout_s=120)) as session:
        result = session.submit(solution)
    assert [w.status for w in result.workloads] == ["PASSED", "PASSED"], [w.message for w in result.workloads]
    assert result.status == "PASSED"
    # Every trial of both workloads was judged by the family's comparator.
    assert len(family.compared) >= 2 * dataset.preset("vector_add").num_trials
    assert set(family.compared) == {("vector_add", ("out",))}
    # No GPU: nothing was timed, so the roofline was not asked; asked directly, the family's cost answers.
    definition = dataset.definition("vector_add")
    small, large = dataset.workloads_for("vector_add")
    assert workload_cost(definition, large).bytes_moved == 3 * 4 * 100
    assert family.costed[-1] == large.uuid
    assert [family.regime({**definition.const_axes, **w.axes}) for w in (small, large)] == ["short", "long"]


def test_toy_family_regimes_reach_the_evidence(toy):
    from controller.evidence import workload_stats

    results = [{"workload_uuid": "s", "workload_label": "n16", "status": "PASSED", "latency_ms": 0.1},
               {"workload_uuid": "l", "workload_label": "n100", "status": "PASSED", "latency_ms": 0.2}]
    stats = workload_stats(results, {"s": {"n": 16}, "l": {"n": 100}}, definition="vector_add", op_type=TOY_OP)
    assert [w.regime for w in stats] == ["short", "long"]


def test_wrong_toy_candidate_is_incorrect_by_the_family_check(toy, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions
    from harness.data.schema import Solution

    data, family = toy
    wrong = TOY_CANDIDATE.replace("torch.add(a, b, out=out)", "torch.sub(a, b, out=out)")
    solution = Solution.model_validate(solution_dict(wrong, definition="vector_add", name="toy_sub"))
    with Session(Dataset(data), Archive(tmp_path / "archive"), SubmitOptions(workloads=["n16"], timeout_s=120)) as s:
        result = s.submit(solution)
    assert [w.status for w in result.workloads] == ["INCORRECT_NUMERICAL"]
    assert family.compared


# ---------------------------------------------------------------------------------------------
# Special inputs


class DoubledB(OperatorFamily):
    """Draws ``b`` itself (from the seeded generator it is given), as an FP8-scale family would."""

    op_type = "toy_doubled_b"

    def special_inputs(self, definition, workload, inputs, generator, device):
        return {"b": 2 * torch.rand(inputs["b"].shape, generator=generator("b"), device=device)}


def test_special_inputs_replace_the_generic_draw_deterministically():
    from harness.data.inputs import generate_inputs

    definition = Definition.model_validate({**TOY_DEFINITION, "op_type": "toy_doubled_b"})
    workload = Workload(uuid="w", axes={"n": 1000}, inputs={})
    plain = generate_inputs(Definition.model_validate(TOY_DEFINITION), workload, seed=3)
    register(DoubledB())
    try:
        first = generate_inputs(definition, workload, seed=3)
        again = generate_inputs(definition, workload, seed=3)
    finally:
        unregister("toy_doubled_b")
    assert torch.equal(first["a"], plain["a"])  # untouched inputs keep the generic draw
    assert float(first["b"].min()) >= 0 and float(first["b"].max()) <= 2 and not torch.equal(first["b"], plain["b"])
    assert torch.equal(first["b"], again["b"])  # the reference's and the candidate's workers agree


def test_special_inputs_must_name_inputs_of_the_definition():
    from harness.data.inputs import generate_inputs
    from harness.data.schema import SchemaError

    class Stray(OperatorFamily):
        op_type = "toy_stray"

        def special_inputs(self, definition, workload, inputs, generator, device):
            return {"c": torch.zeros(1)}

    register(Stray())
    try:
        with pytest.raises(SchemaError, match=r"special inputs \['c'\]"):
            generate_inputs(Definition.model_validate({**TOY_DEFINITION, "op_type": "toy_stray"}),
                            Workload(uuid="w", axes={"n": 4}, inputs={}), seed=0)
    finally:
        unregister("toy_stray")


class CapturedB(OperatorFamily):
    """``b`` comes from a captured blob in the official workloads; where it is absent a stand-in is drawn."""

    op_type = "toy_captured_b"
    synthesizes_absent_blobs = True

    def special_inputs(self, definition, workload, inputs, generator, device):
        if "b" in inputs:  # the official blob was there: keep it
            return None
        return {"b": torch.arange(workload.axes["n"], dtype=torch.float32) / 7}


@pytest.mark.parametrize("family_draws", [True, False])
def test_absent_blobs_are_drawn_by_the_family_or_refused(tmp_path, family_draws):
    from safetensors.torch import save_file

    from harness.data.inputs import absent_blob_inputs, generate_inputs
    from harness.data.schema import SchemaError

    class Refuses(CapturedB):
        op_type = "toy_captured_b"
        synthesizes_absent_blobs = False

    definition = Definition.model_validate({**TOY_DEFINITION, "op_type": "toy_captured_b"})
    source = {"type": "safetensors", "path": "blob/w.safetensors", "tensor_key": "b"}
    workload = Workload.model_validate({"uuid": "w", "axes": {"n": 5}, "inputs": {"b": source}})
    assert absent_blob_inputs(definition, workload, tmp_path) == ["b"]
    register(CapturedB() if family_draws else Refuses())
    try:
        if family_draws:
            drawn = generate_inputs(definition, workload, seed=1, root=tmp_path)
            assert list(drawn) == list(definition.inputs)  # definition order, the stand-in in its place
            assert torch.equal(drawn["b"], torch.arange(5, dtype=torch.float32) / 7)
        else:
            with pytest.raises(SchemaError, match="does not exist"):
                generate_inputs(definition, workload, seed=1, root=tmp_path)
        # the official blob, once present, wins over any stand-in
        (tmp_path / "blob").mkdir()
        save_file({"b": torch.full((5,), 3.0)}, str(tmp_path / "blob" / "w.safetensors"))
        assert absent_blob_inputs(definition, workload, tmp_path) == []
        assert torch.equal(generate_inputs(definition, workload, seed=1, root=tmp_path)["b"], torch.full((5,), 3.0))
    finally:
        unregister("toy_captured_b")


# ---------------------------------------------------------------------------------------------
# The registry


def _module(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


BROKEN_MODULES = [
    ("raises", "raise RuntimeError('no CUDA toolkit here')\n", "failed to import: RuntimeError: no CUDA toolkit here"),
    ("syntax", "def broken(:\n", "failed to import: SyntaxError"),
    ("missing_dependency", "import crucible_no_such_package\n", "failed to import: ModuleNotFoundError"),
    ("declares_nothing", "X = 1\n", "declares neither FAMILY nor FAMILIES"),
    ("no_op_type", "from harness.families import OperatorFamily\nFAMILY = OperatorFamily()\n", "has no op_type"),
    ("not_a_family", "FAMILY = object()\n", "is not an OperatorFamily"),
]


@pytest.mark.parametrize("name,source,message", BROKEN_MODULES, ids=[b[0] for b in BROKEN_MODULES])
def test_a_broken_family_module_gives_a_clear_error(tmp_path, name, source, message):
    path = _module(tmp_path, name, source)
    with pytest.raises(FamilyError, match=message) as err:
        load_family_module(path)
    assert name in str(err.value) or "OperatorFamily" in str(err.value)


@pytest.mark.parametrize("spec,message", [
    ("/nonexistent/family_module.py", "no such file"),
    ("harness.families.crucible_no_such_family", "failed to import: ModuleNotFoundError"),
])
def test_a_missing_family_module_gives_a_clear_error(spec, message):
    with pytest.raises(FamilyError, match=message):
        load_family_module(spec)


@pytest.mark.parametrize("op_type", ["made_up_op", "moe_not_written_yet", "", "../gqa_paged", "_private"])
def test_unknown_op_types_get_the_generic_family(op_type):
    family = family_for(op_type)
    assert family is GENERIC and family.op_type == ""
    assert family.special_inputs(None, None, {}, None, None) is None
    assert family.regime({"n": 3}) == "all" and family.skill == ""


def test_gqa_paged_is_discovered_in_the_families_folder():
    family = family_for("gqa_paged")
    assert isinstance(family, GqaPagedFamily) and family.skill == "gqa-decode"
    assert registered()["gqa_paged"] is family
    assert load_family_module("harness.families.gqa_paged") == [family]  # loading again changes nothing


def test_a_second_family_for_an_op_type_is_refused_unless_replacing():
    class One(OperatorFamily):
        op_type = "toy_twice"

    first, second = One(), One()
    register(first)
    try:
        register(first)  # the same family again: nothing to decide
        with pytest.raises(FamilyError, match="already has a family"):
            register(second)
        assert family_for("toy_twice") is first
        register(second, replace=True)
        assert family_for("toy_twice") is second
    finally:
        unregister("toy_twice")
    assert family_for("toy_twice") is GENERIC


def test_the_same_file_loaded_twice_is_one_family(tmp_path):
    path = _module(tmp_path, "toy_vector_add", TOY_FAMILY_MODULE)
    try:
        assert load_family_module(path) == load_family_module(path)
    finally:
        unregister(TOY_OP)


def test_broken_regime_rules_are_refused_at_registration():
    class BadRules(OperatorFamily):
        op_type = "toy_bad_rules"
        regime_rules = "- name: a\n  all: {batch_above: 3}\n"

    with pytest.raises(ValueError, match="unknown conditions"):
        register(BadRules())
    assert "toy_bad_rules" not in registered()


# ---------------------------------------------------------------------------------------------
# GQA through the family


@pytest.fixture(scope="module")
def gqa_dataset():
    from harness.data.dataset import Dataset

    return Dataset(DEFINITIONS)


@pytest.mark.parametrize("definition", [KV8_PS1, KV8_PS64])
def test_gqa_cost_with_the_dataset_root_counts_exact_tokens(gqa_dataset, definition):
    from harness.families.gqa_paged import exact_tokens

    d = gqa_dataset.definition(definition)
    for w in gqa_dataset.workloads_for(definition)[:4]:
        with_blobs = workload_cost(d, w, root=gqa_dataset.root)
        assert with_blobs.exact
        tokens = exact_tokens(d, w, gqa_dataset.root)  # None where a page holds one token: the axes say it all
        assert with_blobs == (workload_cost(d, w) if tokens is None else workload_cost(d, w, tokens=tokens))
        lengths = family_for("gqa_paged").request_lengths(d, w, gqa_dataset.root)
        assert lengths is not None and len(lengths) == w.axes["batch_size"]
        if tokens is not None:
            assert sum(lengths) == tokens


@pytest.mark.parametrize("axes,label,lengths,regime", [
    ({"batch_size": 1, "num_kv_heads": 8}, "uniform_b1_kv8192", [8192], "latency-bound"),
    ({"batch_size": 64, "num_kv_heads": 8}, "uniform_b64_kv2048", None, "memory-bound"),
    ({"batch_size": 64, "num_kv_heads": 8}, "skewed_b64", None, "skewed"),
    ({"num_kv_heads": 8}, "mystery", None, "all"),
])
def test_gqa_regime_before_measurement(axes, label, lengths, regime):
    assert family_for("gqa_paged").regime(axes, label=label, lengths=lengths) == regime
