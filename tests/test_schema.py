"""The FlashInfer data model: shipped files load, and every malformed file is reported with its path
and the path of the offending field."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from harness.data.schema import (Correctness, Definition, Evaluation, SchemaError, Solution, Trace, Workload, dump_json,
                            load_jsonl, load_model, parse_model)

from support import DEFINITIONS, KV8_PS1, TORCH_CANDIDATE, solution_dict

SHIPPED_DEFINITIONS = sorted((DEFINITIONS / "definitions").rglob("*.json"))
SHIPPED_WORKLOADS = sorted((DEFINITIONS / "workloads").rglob("*.jsonl"))
# the contest's definitions beside GQA decode, with their official workload counts
CONTEST = {"moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048": ("moe", 19),
           "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64": ("dsa_paged", 23),
           "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64": ("dsa_paged", 128),
           "gdn_decode_qk4_v8_d128_k_last": ("gdn", 54),
           "gdn_prefill_qk4_v8_d128_k_last": ("gdn", 100)}


def write(tmp_path: Path, data, name: str = "solution.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def shipped_definition_dict(name: str = KV8_PS1) -> dict:
    return json.loads((DEFINITIONS / "definitions" / "gqa_paged" / f"{name}.json").read_text())


# -- shipped data ----------------------------------------------------------------------------------


def test_the_shipped_set_is_not_empty():
    assert len(SHIPPED_DEFINITIONS) == 4 + len(CONTEST) and len(SHIPPED_WORKLOADS) == 4 + len(CONTEST)


@pytest.mark.parametrize("path", SHIPPED_DEFINITIONS, ids=lambda p: p.stem)
def test_every_shipped_definition_loads(path):
    d = load_model(Definition, path)
    assert d.name == path.stem
    if d.name in CONTEST:
        assert d.op_type == CONTEST[d.name][0] and path.parent.name == d.op_type
        return
    assert d.op_type == "gqa_paged"
    assert "batch_size" in d.var_axes and d.const_axes["head_dim"] == 128


@pytest.mark.parametrize("path", SHIPPED_WORKLOADS, ids=lambda p: p.stem)
def test_every_shipped_workload_loads(path):
    traces = load_jsonl(Trace, path)
    assert len(traces) == (CONTEST[path.stem][1] if path.stem in CONTEST else 14)
    assert {t.definition for t in traces} == {path.stem}
    assert len({t.workload.uuid for t in traces}) == len(traces)
    assert all(t.solution is None and t.evaluation is None for t in traces)


# -- Solution: errors name the file and the field -------------------------------------------------------


def _pop(key):
    return lambda d: d.pop(key)


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def mutate(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return mutate


def _add_source(path):
    return lambda d: d["sources"].append({"path": path, "content": "x = 1\n"})


SOLUTION_ERRORS = [
    # (id, mutation, field path in the message, words in the message)
    ("missing_author", _pop("author"), "author", "Field required"),
    ("missing_spec", _pop("spec"), "spec", "Field required"),
    ("missing_entry_point", lambda d: d["spec"].pop("entry_point"), "spec.entry_point", "Field required"),
    ("extra_top_level", _set("sorces", []), "sorces", "Extra inputs are not permitted"),
    ("extra_in_spec", _set("spec", "entrypoint", "a.py::run"), "spec.entrypoint", "Extra inputs are not permitted"),
    ("entry_single_colon", _set("spec", "entry_point", "kernel.py:run"), "spec.entry_point", "exactly one '::'"),
    ("entry_no_colons", _set("spec", "entry_point", "kernel.py"), "spec.entry_point", "exactly one '::'"),
    ("entry_two_separators", _set("spec", "entry_point", "kernel.py::a::run"), "spec.entry_point", "exactly one '::'"),
    ("entry_no_symbol", _set("spec", "entry_point", "kernel.py::"), "spec.entry_point", "both a file and a symbol"),
    ("entry_file_not_a_source", _set("spec", "entry_point", "other.py::run"), "(top level)",
     "entry file 'other.py' is not among the sources"),
    ("duplicate_paths", _add_source("kernel.py"), "(top level)", "duplicate source paths: ['kernel.py']"),
    ("dotdot", _add_source("../evil.py"), "sources.1.path", "must be relative and stay inside"),
    ("dotdot_inside", _add_source("sub/../../evil.py"), "sources.1.path", "must be relative and stay inside"),
    ("absolute", _add_source("/etc/evil.py"), "sources.1.path", "must be relative and stay inside"),
    ("backslash", _add_source("..\\evil.py"), "sources.1.path", "must be relative and stay inside"),
    ("empty_path", _add_source(""), "sources.1.path", "must be relative and stay inside"),
    ("empty_sources", _set("sources", []), "sources", "at least 1 item"),
    ("unknown_language", _set("spec", "language", "rust"), "spec.language", "Input should be"),
    ("empty_target_hardware", _set("spec", "target_hardware", []), "spec.target_hardware", "at least 1 item"),
    ("empty_name", _set("name", ""), "name", "at least 1 character"),
]


@pytest.mark.parametrize("mutate, field, words", [c[1:] for c in SOLUTION_ERRORS], ids=[c[0] for c in SOLUTION_ERRORS])
def test_solution_errors_name_the_file_and_the_field(tmp_path, mutate, field, words):
    data = solution_dict("def run(*args):\n    pass\n")
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(SchemaError) as err:
        load_model(Solution, path)
    message = str(err.value)
    assert message.startswith(f"{path}: ")
    assert f"{field}: " in message
    assert words in message


def test_a_valid_solution_file_loads(tmp_path):
    path = write(tmp_path, solution_dict(TORCH_CANDIDATE, extra_sources={"sub/helper.py": "X = 1\n"}))
    s = load_model(Solution, path)
    assert s.spec.entry_file == "kernel.py" and s.spec.entry_symbol == "run"
    assert [src.path for src in s.sources] == ["kernel.py", "sub/helper.py"]


@pytest.mark.parametrize("text, line, column", [
    ('{"name": "x",\n  "author": }', 2, 13),
    ('{"name": "x"', 1, 13),
    ("", 1, 1),
])
def test_malformed_json_gives_line_and_column(tmp_path, text, line, column):
    path = write(tmp_path, text)
    with pytest.raises(SchemaError) as err:
        load_model(Solution, path)
    assert str(err.value).startswith(f"{path}: not valid JSON: line {line} column {column}")


def test_missing_file_and_folder_are_schema_errors(tmp_path):
    with pytest.raises(SchemaError, match="no such file"):
        load_model(Solution, tmp_path / "nope.json")
    with pytest.raises(SchemaError, match="is a folder"):
        load_model(Solution, tmp_path)


def test_several_errors_are_all_reported(tmp_path):
    data = solution_dict("x = 1\n")
    del data["author"]
    data["bogus"] = 1
    message = str(pytest.raises(SchemaError, load_model, Solution, write(tmp_path, data)).value)
    assert "author: Field required" in message and "bogus: Extra inputs are not permitted" in message


def test_duplicate_paths_are_detected_after_normalisation():
    data = solution_dict("def run(*a):\n    pass\n")
    data["sources"].append({"path": "./kernel.py", "content": "raise SystemExit\n"})
    with pytest.raises(SchemaError, match="duplicate source paths"):
        parse_model(Solution, data, "solution.json")


# -- Definition validators ---------------------------------------------------------------------------


def _def_set(key, value):
    return lambda d: d.__setitem__(key, value)


DEFINITION_ERRORS = [
    ("reference_without_run", _def_set("reference", "import torch\n\ndef other(q):\n    return q\n"),
     "reference", "must define a top-level function `run`"),
    ("run_only_nested", _def_set("reference", "class K:\n    def run(self):\n        pass\n"),
     "reference", "must define a top-level function `run`"),
    ("reference_syntax_error", _def_set("reference", "import torch\n\ndef run(q:\n    pass\n"),
     "reference", "reference does not parse: line 3"),
    ("constraint_statement", _def_set("constraints", ["len_indptr == batch_size + 1", "x = 1"]),
     "constraints", "constraint 1 ('x = 1') is not a Python expression"),
    ("constraint_broken", _def_set("constraints", ["batch_size >"]),
     "constraints", "constraint 0 ('batch_size >') is not a Python expression"),
    ("shape_axis_missing", lambda d: d["inputs"]["q"].__setitem__("shape", ["batch_size", "num_heads", "head_dim"]),
     "(top level)", "inputs.q.shape uses axis 'num_heads', which is not in axes"),
    ("output_axis_missing", lambda d: d["outputs"]["lse"].__setitem__("shape", ["batch", "num_qo_heads"]),
     "(top level)", "outputs.lse.shape uses axis 'batch', which is not in axes"),
    ("input_output_clash", lambda d: d["outputs"].__setitem__("q", d["inputs"]["q"]),
     "(top level)", "names used as both input and output: ['q']"),
    ("negative_const_axis", lambda d: d["axes"].__setitem__("head_dim", {"type": "const", "value": -1}),
     "axes.head_dim.const.value", "greater than or equal to 0"),
    ("unknown_axis_type", lambda d: d["axes"].__setitem__("head_dim", {"type": "fixed", "value": 1}),
     "axes.head_dim", "tag 'fixed'"),
    ("unknown_dtype", lambda d: d["inputs"]["q"].__setitem__("dtype", "bfloat8"), "inputs.q.dtype", "Input should be"),
]


@pytest.mark.parametrize("mutate, field, words", [c[1:] for c in DEFINITION_ERRORS],
                         ids=[c[0] for c in DEFINITION_ERRORS])
def test_definition_validators(tmp_path, mutate, field, words):
    data = shipped_definition_dict()
    mutate(data)
    path = write(tmp_path, data, "definition.json")
    with pytest.raises(SchemaError) as err:
        load_model(Definition, path)
    message = str(err.value)
    assert message.startswith(f"{path}: ")
    assert f"{field}: " in message and words in message


def test_definition_shape_helpers():
    d = parse_model(Definition, shipped_definition_dict(), "d.json")
    assert d.shape_of(d.inputs["q"], {"batch_size": 3}) == (3, 32, 128)
    assert d.shape_of(d.inputs["sm_scale"], {}) == ()
    assert set(d.var_axes) == {"batch_size", "num_pages", "len_indptr", "num_kv_indices"}


# -- Evaluation: which fields each status carries -----------------------------------------------------

CORRECTNESS = {"max_relative_error": 0.1, "max_absolute_error": 0.2}
PERFORMANCE = {"latency_ms": 1.0, "reference_latency_ms": 2.0, "speedup_factor": 2.0}
STATUSES = ["PASSED", "INCORRECT_NUMERICAL", "INCORRECT_SHAPE", "INCORRECT_DTYPE", "RUNTIME_ERROR",
            "COMPILE_ERROR", "TIMEOUT"]
ALLOWED = {"PASSED": (True, True), "INCORRECT_NUMERICAL": (True, False)}  # the rest: (False, False)


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("with_correctness", [False, True])
@pytest.mark.parametrize("with_performance", [False, True])
def test_evaluation_fields_follow_the_status(status, with_correctness, with_performance):
    data = {"status": status, "environment": {"hardware": "cpu"}, "timestamp": "2025-01-01T00:00:00Z"}
    if with_correctness:
        data["correctness"] = CORRECTNESS
    if with_performance:
        data["performance"] = PERFORMANCE
    valid = (with_correctness, with_performance) == ALLOWED.get(status, (False, False))
    if valid:
        ev = parse_model(Evaluation, data, "trace.json")
        assert ev.status.value == status
    else:
        with pytest.raises(SchemaError, match=r"^trace\.json: \(top level\): (a|an) "):
            parse_model(Evaluation, data, "trace.json")


# -- Correctness: inf/nan on the wire -----------------------------------------------------------------


def _evaluation(rel: float, abs_: float) -> Evaluation:
    return Evaluation(status="INCORRECT_NUMERICAL", environment={"hardware": "cpu"}, timestamp="t",
                      correctness=Correctness(max_relative_error=rel, max_absolute_error=abs_))


@pytest.mark.parametrize("rel, abs_, wire_rel, wire_abs", [
    (math.inf, math.nan, "inf", "nan"),
    (-math.inf, 1.5, "-inf", 1.5),
    (0.25, math.inf, 0.25, "inf"),
])
@pytest.mark.parametrize("wrap", ["evaluation", "trace"])
def test_non_finite_errors_are_strings_on_the_wire(rel, abs_, wire_rel, wire_abs, wrap):
    ev = _evaluation(rel, abs_)
    model = ev if wrap == "evaluation" else Trace(definition=KV8_PS1, workload=Workload(uuid="u", axes={}, inputs={}),
                                                  solution="s", evaluation=ev)
    data = dump_json(model)
    text = json.dumps(data, allow_nan=False)  # strict JSON: would raise on a bare inf/nan
    corr = (data if wrap == "evaluation" else data["evaluation"])["correctness"]
    assert corr["max_relative_error"] == wire_rel and corr["max_absolute_error"] == wire_abs
    back = parse_model(type(model), json.loads(text), "wire")
    c = (back if wrap == "evaluation" else back.evaluation).correctness
    for got, want in ((c.max_relative_error, rel), (c.max_absolute_error, abs_)):
        assert (math.isnan(got) and math.isnan(want)) or got == want


def test_correctness_accepts_the_official_string_forms():
    c = parse_model(Correctness, {"max_relative_error": "Infinity", "max_absolute_error": "-inf"}, "x")
    assert c.max_relative_error == math.inf and c.max_absolute_error == -math.inf


# -- content hash and round trips ---------------------------------------------------------------------


def _solution(**kw) -> Solution:
    return Solution.model_validate(solution_dict(TORCH_CANDIDATE, extra_sources={"util.py": "A = 1\n"}, **kw))


def test_content_hash_ignores_the_name_and_author():
    a = _solution(name="one")
    b = _solution(name="two")
    data = dump_json(b)
    data["author"] = "someone else"
    data["description"] = "different words"
    assert a.content_hash == b.content_hash == Solution.model_validate(data).content_hash


@pytest.mark.parametrize("change", ["source_content", "source_path", "entry_point", "language", "dps", "definition"])
def test_content_hash_changes_with_what_is_built(change):
    base = dump_json(_solution())
    data = copy.deepcopy(base)
    if change == "source_content":
        data["sources"][1]["content"] = "A = 2\n"
    elif change == "source_path":
        data["sources"][1]["path"] = "util2.py"
    elif change == "entry_point":
        data["spec"]["entry_point"] = "util.py::A"
    elif change == "language":
        data["spec"]["language"] = "triton"
    elif change == "dps":
        data["spec"]["destination_passing_style"] = False
    else:
        data["definition"] = "other_definition"
    assert Solution.model_validate(data).content_hash != Solution.model_validate(base).content_hash


def test_content_hash_does_not_depend_on_source_order():
    data = dump_json(_solution())
    swapped = copy.deepcopy(data)
    swapped["sources"].reverse()
    assert Solution.model_validate(data).content_hash == Solution.model_validate(swapped).content_hash


def _passed_trace() -> Trace:
    return Trace(definition=KV8_PS1, workload=Workload(uuid="u-1", axes={"batch_size": 2},
                                                       inputs={"sm_scale": {"type": "scalar", "value": 0.5},
                                                               "kv_indptr": {"type": "safetensors", "path": "blob/x",
                                                                             "tensor_key": "kv_indptr"}}),
                 solution="s",
                 evaluation=Evaluation(status="PASSED", environment={"hardware": "H200", "libs": {"torch": "2"}},
                                       timestamp="t", log="ok", correctness=Correctness(max_absolute_error=1e-3),
                                       performance=PERFORMANCE))


@pytest.mark.parametrize("model", [
    pytest.param(lambda: _solution(), id="solution"),
    pytest.param(lambda: load_model(Definition, SHIPPED_DEFINITIONS[0]), id="definition"),
    pytest.param(_passed_trace, id="trace"),
])
def test_dump_json_round_trips(model, tmp_path):
    original = model()
    path = write(tmp_path, dump_json(original), "model.json")
    again = load_model(type(original), path)
    assert again == original
    assert dump_json(again) == dump_json(original)


# -- jsonl --------------------------------------------------------------------------------------------


def test_load_jsonl_reports_file_and_line(tmp_path):
    good = json.dumps({"definition": "d", "workload": {"uuid": "u", "axes": {}, "inputs": {}}})
    bad = json.dumps({"definition": "d", "workload": {"uuid": "u", "axes": {"n": -1}, "inputs": {}}})
    path = write(tmp_path, "\n".join([good, "", good, bad]) + "\n", "w.jsonl")
    with pytest.raises(SchemaError) as err:
        load_jsonl(Trace, path)
    assert str(err.value).startswith(f"{path}:4: workload.axes.n: ")


def test_load_jsonl_reports_invalid_json_line(tmp_path):
    good = json.dumps({"definition": "d", "workload": {"uuid": "u", "axes": {}, "inputs": {}}})
    path = write(tmp_path, f"{good}\n{{not json\n", "w.jsonl")
    with pytest.raises(SchemaError, match=rf"^{path}:2: not valid JSON"):
        load_jsonl(Trace, path)


def test_load_jsonl_skips_blank_lines(tmp_path):
    good = json.dumps({"definition": "d", "workload": {"uuid": "u", "axes": {}, "inputs": {}}})
    path = write(tmp_path, f"\n{good}\n   \n{good}\n", "w.jsonl")
    assert len(load_jsonl(Trace, path)) == 2


@pytest.mark.parametrize("path, ok", [
    ("blob/workloads/gqa_paged/w.safetensors", True),
    ("./blob/workloads/moe/w.safetensors", True),  # the contest's MoE and GDN workloads write it so
    ("../artifacts/seal.key", False),  # a trace set handed over must never make the harness read (or export) that
    ("/etc/passwd", False),
    ("blob/../../artifacts/archive.db", False),
    ("blob", False),  # the folder itself
    ("workloads/w.safetensors", False),
    ("blob\\..\\x", False),
])
def test_a_workloads_blob_path_stays_inside_the_blob_folder(path, ok):
    from harness.data.schema import SafetensorsInput

    if ok:
        assert SafetensorsInput(type="safetensors", path=path, tensor_key="k").path == path
    else:
        with pytest.raises(ValueError, match="inside the dataset's blob/ folder"):
            SafetensorsInput(type="safetensors", path=path, tensor_key="k")


def test_unreadable_json_is_one_clear_error(tmp_path):
    from harness.data.schema import SchemaError, load_json

    cases = {"deep.json": ("[" * 200_000, "nested too deeply"), "latin.json": (b'{"name": "\xe9"}', "not UTF-8 text")}
    for name, (content, words) in cases.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(SchemaError, match=words):
            load_json(path)
    (tmp_path / "broken.json").symlink_to(tmp_path / "nowhere")
    with pytest.raises(SchemaError, match="a link to nothing"):
        load_json(tmp_path / "broken.json")
