"""The trace-set folder: aliases, presets in layers, workload selection and the errors for bad data."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from harness.data.dataset import Dataset, EvalPreset
from harness.data.dtypes import torch_dtype
from harness.data.schema import SchemaError

from support import DEFINITIONS, KV8_PS1, KV8_PS64, TINY_WORKLOADS

GQA_DECODE = [
    "gqa_paged_decode_h32_kv8_d128_ps1",
    "gqa_paged_decode_h32_kv8_d128_ps64",
    "gqa_paged_decode_h32_kv4_d128_ps1",
    "gqa_paged_decode_h32_kv4_d128_ps64",
]


@pytest.fixture(scope="module")
def shipped() -> Dataset:
    return Dataset(DEFINITIONS)


def copy_dataset(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# -- names ------------------------------------------------------------------------------------------


def test_alias_resolves_to_the_four_definitions(shipped):
    assert shipped.resolve("gqa_decode") == GQA_DECODE
    assert sorted(n for n, d in shipped.definitions.items() if d.op_type == "gqa_paged") == sorted(GQA_DECODE)
    # the contest's other tracks sit beside them, each behind its alias
    assert set(shipped.resolve("moe")) | set(shipped.resolve("dsa")) <= set(shipped.definitions)


def test_a_definition_name_resolves_to_itself(shipped):
    assert shipped.resolve(KV8_PS64) == [KV8_PS64]
    assert shipped.definition(KV8_PS64).name == KV8_PS64


@pytest.mark.parametrize("call", ["resolve", "definition"])
def test_unknown_name_lists_the_known_ones(shipped, call):
    with pytest.raises(SchemaError) as err:
        getattr(shipped, call)("gqa_decod")
    message = str(err.value)
    assert "unknown definition 'gqa_decod'" in message
    for name in GQA_DECODE + ["gqa_decode"]:
        assert name in message


def test_alias_naming_an_unknown_definition(tiny_dataset_root, tmp_path):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    (root / "aliases.yaml").write_text(yaml.safe_dump({"fam": [KV8_PS1, "no_such_definition"]}))
    with pytest.raises(SchemaError, match=r"alias 'fam' names unknown definitions: \['no_such_definition'\]"):
        Dataset(root).resolve("fam")


def test_aliases_must_map_to_lists(tiny_dataset_root, tmp_path):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    (root / "aliases.yaml").write_text("fam: just_one_name\n")
    with pytest.raises(SchemaError, match="aliases.yaml: expected a mapping"):
        Dataset(root).aliases


# -- presets --------------------------------------------------------------------------------------------


def test_shipped_defaults_mirror_flashinfer_bench(shipped):
    p = shipped.preset(KV8_PS1)
    assert (p.atol, p.rtol, p.required_matched_ratio, p.num_trials, p.warmup, p.iterations, p.timeout_s) == \
        (0.01, 0.01, 1.0, 3, 10, 50, 300)
    assert p.allow_matching_nonfinite is False


def test_without_eval_config_the_model_defaults_apply(tiny_dataset_root, tmp_path):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    (root / "eval_config.yaml").unlink()
    assert Dataset(root).preset(KV8_PS1) == EvalPreset()


LAYERED_CONFIG = {
    "default": {"atol": 0.5, "rtol": 0.5, "warmup": 7, "iterations": 11},
    "op_type": {"gqa_paged": {"rtol": 0.25, "warmup": 3}, "moe": {"atol": 9}},
    "definition": {KV8_PS64: {"warmup": 1, "allow_matching_nonfinite": True}, "other_def": {"atol": 99}},
}


@pytest.mark.parametrize("definition, expected", [
    # default layer only for atol/iterations, op_type overrides rtol/warmup
    (KV8_PS1, {"atol": 0.5, "rtol": 0.25, "warmup": 3, "iterations": 11, "allow_matching_nonfinite": False,
               "num_trials": 3}),
    # the definition layer overrides the op_type layer, and only the keys it sets
    (KV8_PS64, {"atol": 0.5, "rtol": 0.25, "warmup": 1, "iterations": 11, "allow_matching_nonfinite": True,
                "num_trials": 3}),
])
def test_presets_layer_default_op_type_definition(tiny_dataset_root, tmp_path, definition, expected):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    (root / "eval_config.yaml").write_text(yaml.safe_dump(LAYERED_CONFIG))
    preset = Dataset(root).preset(definition)
    assert {k: getattr(preset, k) for k in expected} == expected


@pytest.mark.parametrize("config, words", [
    ({"default": {"atoll": 0.1}}, "atoll"),
    ({"definition": {KV8_PS1: {"required_matched_ratio": 0}}}, "required_matched_ratio"),
    ({"op_type": {"gqa_paged": {"num_trials": 0}}}, "num_trials"),
])
def test_a_bad_preset_names_the_config_file(tiny_dataset_root, tmp_path, config, words):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    (root / "eval_config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SchemaError) as err:
        Dataset(root).preset(KV8_PS1)
    message = str(err.value)
    assert str(root / "eval_config.yaml") in message and f"preset for {KV8_PS1}" in message and words in message


# -- workloads ------------------------------------------------------------------------------------------

TINY_UUIDS = {label: f"00000000-0000-4000-8000-{i:012d}" for i, label in enumerate(TINY_WORKLOADS)}


def test_workloads_are_grouped_by_definition(tiny_dataset):
    assert [w.uuid for w in tiny_dataset.workloads_for(KV8_PS1)] == [TINY_UUIDS["tiny_b2_t40"],
                                                                      TINY_UUIDS["tiny_b3_t96"]]
    assert [w.uuid for w in tiny_dataset.workloads_for(KV8_PS64)] == [TINY_UUIDS["tiny_ps64_b2_p3"]]
    assert tiny_dataset.workloads_for("no_such_definition") == []


@pytest.mark.parametrize("selection, labels", [
    (["tiny_b3_t96"], ["tiny_b3_t96"]),                                 # label
    ([TINY_UUIDS["tiny_b2_t40"]], ["tiny_b2_t40"]),                     # full uuid
    (["1"], ["tiny_b3_t96"]),                                           # index
    (["0", "tiny_b3_t96"], ["tiny_b2_t40", "tiny_b3_t96"]),             # several, in selection order
    (["tiny_b3_t96", "0"], ["tiny_b3_t96", "tiny_b2_t40"]),
    (["tiny_b2_t40", "0", TINY_UUIDS["tiny_b2_t40"]], ["tiny_b2_t40"]),  # the same one thrice: once
    (["00000000-0000-4000-8000"], ["tiny_b2_t40", "tiny_b3_t96"]),      # a prefix shared by both
    ([], ["tiny_b2_t40", "tiny_b3_t96"]),                               # nothing selected: all
])
def test_workload_selection(tiny_dataset, selection, labels):
    chosen = tiny_dataset.workloads_for(KV8_PS1, selection)
    assert [tiny_dataset.label(w) for w in chosen] == labels


def test_uuid_prefix_selects_a_shipped_workload(shipped):
    # 2eced51a-... is uniform_b1_kv512 of the kv8 ps1 definition
    chosen = shipped.workloads_for(KV8_PS1, ["2eced51a"])
    assert [w.uuid for w in chosen] == ["2eced51a-2429-5a5e-ba49-5afcdcd9c071"]
    assert shipped.label(chosen[0]) == "uniform_b1_kv512"
    assert chosen[0].axes == {"batch_size": 1, "num_pages": 512, "len_indptr": 2, "num_kv_indices": 512}


@pytest.mark.parametrize("definition, largest, smallest", [
    (KV8_PS1, "uniform_b256_kv8192", "uniform_b1_kv512"),
    ("moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048", None, None),
    ("gdn_prefill_qk4_v8_d128_k_last", None, None),
])
def test_largest_and_smallest_select_by_input_and_output_bytes(shipped, definition, largest, smallest):
    d = shipped.definition(definition)
    wls = shipped.workloads_for(definition)

    def size(w):
        return sum(math.prod(d.shape_of(s, w.axes)) * torch_dtype(s.dtype).itemsize
                   for s in [*d.inputs.values(), *d.outputs.values()] if s.shape is not None)

    (big,), (small,) = shipped.workloads_for(definition, ["largest"]), shipped.workloads_for(definition, ["smallest"])
    assert size(big) == max(map(size, wls)) > size(small) == min(map(size, wls))
    if largest:
        assert (shipped.label(big), shipped.label(small)) == (largest, smallest)
    # with other selectors, once each
    assert shipped.workloads_for(definition, ["largest", "0", "largest"]) == [big, *[w for w in wls[:1] if w != big]]


@pytest.mark.parametrize("key", ["nope", "2", "00000", "tiny_ps64_b2_p3"])
def test_unknown_selector_is_an_error(tiny_dataset, key):
    # "00000" is a prefix of both uuids but too short to count as one; tiny_ps64_b2_p3 is another definition's
    expected = rf"no workload '{key}' for {KV8_PS1}; use a uuid, a label, an index, largest or smallest"
    with pytest.raises(SchemaError, match=expected):
        tiny_dataset.workloads_for(KV8_PS1, [key])


def test_label_falls_back_to_a_short_uuid(tiny_dataset):
    w = tiny_dataset.workloads_for(KV8_PS64)[0]
    assert tiny_dataset.label(w) == "tiny_ps64_b2_p3"
    unlabelled = w.model_copy(update={"uuid": "abcdef12-3456-7890"})
    assert tiny_dataset.label(unlabelled) == "abcdef12"


def test_every_shipped_workload_has_a_label(shipped):
    workloads = [w for d in GQA_DECODE for w in shipped.workloads_for(d)]
    assert len(workloads) == 56
    assert all(w.uuid in shipped.labels for w in workloads)
    labels = {shipped.label(w) for w in workloads}
    assert {"skewed_b64", "one_long_32k_31x256", "uniform_b256_kv8192"} <= labels


# -- malformed folders ------------------------------------------------------------------------------


def test_a_nonexistent_root_is_an_error(tmp_path):
    with pytest.raises(SchemaError, match=rf"^{tmp_path / 'missing'}: dataset folder does not exist"):
        Dataset(tmp_path / "missing")


def test_a_file_as_root_is_an_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SchemaError, match="not a folder"):
        Dataset(tmp_path / "file")


def test_environment_variable_picks_the_default_root(tiny_dataset_root, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_DATASET", str(tiny_dataset_root))
    assert Dataset().root == tiny_dataset_root
    assert sorted(Dataset().definitions) == sorted([KV8_PS1, KV8_PS64])


def test_a_definition_defined_twice_is_an_error(tiny_dataset_root, tmp_path):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    twin = root / "definitions" / "other_op" / "copy.json"
    twin.parent.mkdir()
    shutil.copy(root / "definitions" / "gqa_paged" / f"{KV8_PS1}.json", twin)
    with pytest.raises(SchemaError, match=f"definition '{KV8_PS1}' is defined twice") as err:
        Dataset(root).definitions
    assert str(err.value).startswith(str(root / "definitions"))


def test_a_bad_definition_file_is_named(tiny_dataset_root, tmp_path):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    path = root / "definitions" / "gqa_paged" / f"{KV8_PS64}.json"
    data = json.loads(path.read_text())
    data["reference"] = "def not_run():\n    pass\n"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=rf"^{path}: reference: "):
        Dataset(root).definitions


def test_a_bad_workload_line_is_named(tiny_dataset_root, tmp_path):
    root = copy_dataset(tiny_dataset_root, tmp_path / "ds")
    path = root / "workloads" / "gqa_paged" / f"{KV8_PS1}.jsonl"
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["workload"]["inputs"]["q"] = {"type": "randn"}
    path.write_text("\n".join([lines[0], json.dumps(bad)]) + "\n")
    with pytest.raises(SchemaError, match=rf"^{path}:2: workload\.inputs\.q"):
        Dataset(root).workloads


# -- baselines ----------------------------------------------------------------------------------------


def test_only_the_shipped_baseline_itself_is_a_baseline(shipped):
    baselines = shipped.baselines(KV8_PS1)
    assert {b.name for b in baselines} >= {"flashinfer_decode_tensor_cores_h32_kv8_d128_ps1",
                                          "flashinfer_decode_cuda_cores_h32_kv8_d128_ps1"}
    original = baselines[0]
    assert shipped.is_baseline(original)
    # Claiming the author proves nothing: one changed byte of source, and it is a candidate like any other.
    edited = original.model_copy(update={"sources": [s.model_copy(update={"content": s.content + "\n# tweak\n"})
                                                     for s in original.sources]})
    assert not shipped.is_baseline(edited)
    assert not shipped.is_baseline(original.model_copy(update={"author": "agent"}))
