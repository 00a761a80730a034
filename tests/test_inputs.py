"""Workload + seed -> inputs: reproducible, valid page tables, FlashInfer-Bench's random ranges, blobs
checked against the definition, and a fingerprint that tells inputs apart cheaply."""

from __future__ import annotations

import hashlib
import types

import pytest
import torch
from safetensors.torch import save_file

import harness.data.inputs as inputs_mod
from harness.data.dataset import Dataset
from harness.data.inputs import allocate_outputs, fingerprint, generate_inputs
from harness.data.schema import Definition, SchemaError, Workload, parse_model

from support import DEFINITIONS, KV8_PS1, KV8_PS64

UNIFORM_B1_KV512_PS1 = "2eced51a-2429-5a5e-ba49-5afcdcd9c071"
SKEWED_B64_PS64 = "2a17f200-3349-57f5-b2c1-44a588beceec"
_REAL_SHA256 = hashlib.sha256


@pytest.fixture(scope="module")
def shipped() -> Dataset:
    return Dataset(DEFINITIONS)


def shipped_workload(ds: Dataset, definition: str, uuid: str) -> Workload:
    return next(w for w in ds.workloads_for(definition) if w.uuid == uuid)


def index_only(definition: Definition) -> Definition:
    """The definition without its big float inputs: page tables of every shipped workload stay cheap."""
    keep = {k: v for k, v in definition.inputs.items() if k not in ("q", "k_cache", "v_cache")}
    return definition.model_copy(update={"inputs": keep})


def tiny_workload(batch: int, n_idx: int, pages: int, **inputs) -> Workload:
    return Workload(uuid=f"w-{batch}-{n_idx}-{pages}",
                    axes={"batch_size": batch, "num_pages": pages, "len_indptr": batch + 1, "num_kv_indices": n_idx},
                    inputs={"sm_scale": {"type": "scalar", "value": 0.125}, **inputs})


# -- reproducibility ------------------------------------------------------------------------------------


def test_same_workload_and_seed_give_identical_tensors(tiny_dataset):
    d = tiny_dataset.definition(KV8_PS64)
    w = tiny_dataset.workloads_for(KV8_PS64)[0]
    a = generate_inputs(d, w, seed=7)
    b = generate_inputs(d, w, seed=7)
    assert list(a) == list(d.inputs)  # the definition's order
    for name in d.inputs:
        if isinstance(a[name], torch.Tensor):
            assert torch.equal(a[name], b[name]), name
            assert a[name].data_ptr() != b[name].data_ptr()
        else:
            assert a[name] == b[name]
    assert fingerprint(a) == fingerprint(b)


def test_different_seeds_give_different_tensors(tiny_dataset):
    d = tiny_dataset.definition(KV8_PS1)
    w = tiny_dataset.workloads_for(KV8_PS1, ["tiny_b2_t40"])[0]
    a = generate_inputs(d, w, seed=0)
    b = generate_inputs(d, w, seed=1)
    for name in ("q", "k_cache", "v_cache", "kv_indices"):
        assert not torch.equal(a[name], b[name]), name
    assert torch.equal(a["kv_indptr"], b["kv_indptr"])  # structure, not randomness
    assert fingerprint(a) != fingerprint(b)


def test_each_input_has_its_own_generator(tiny_dataset):
    # k_cache and v_cache have equal shapes and dtypes: a shared stream would still differ, the same
    # seed per name would not. They must differ.
    d = tiny_dataset.definition(KV8_PS1)
    w = tiny_dataset.workloads_for(KV8_PS1, ["tiny_b2_t40"])[0]
    x = generate_inputs(d, w, seed=3)
    assert not torch.equal(x["k_cache"], x["v_cache"])


# -- page tables -------------------------------------------------------------------------------------


def test_real_workload_inputs(shipped):
    d = shipped.definition(KV8_PS1)
    w = shipped_workload(shipped, KV8_PS1, UNIFORM_B1_KV512_PS1)
    x = generate_inputs(d, w, seed=0, root=shipped.root)
    assert x["q"].shape == (1, 32, 128) and x["q"].dtype == torch.bfloat16
    assert x["k_cache"].shape == (512, 1, 8, 128) and x["v_cache"].dtype == torch.bfloat16
    assert x["sm_scale"] == pytest.approx(0.08838834764831843) and isinstance(x["sm_scale"], float)
    assert x["kv_indptr"].tolist() == [0, 512]
    idx = x["kv_indices"]
    assert idx.dtype == torch.int32 and idx.shape == (512,)
    assert torch.equal(idx.sort().values, torch.arange(512, dtype=torch.int32))  # a permutation of the pool
    assert not torch.equal(idx, torch.arange(512, dtype=torch.int32))  # scattered, not contiguous
    assert (idx[1:] - idx[:-1] == 1).float().mean() < 0.1  # hardly any neighbours in order


SHIPPED = [(d, w.uuid) for d, definition in sorted(Dataset(DEFINITIONS).definitions.items())
           if definition.op_type == "gqa_paged" for w in Dataset(DEFINITIONS).workloads_for(d)]


@pytest.mark.parametrize("definition, uuid", SHIPPED, ids=[f"{d[-9:]}-{u[:8]}" for d, u in SHIPPED])
def test_shipped_page_tables_are_valid(shipped, definition, uuid):
    full = shipped.definition(definition)
    d = index_only(full)
    w = shipped_workload(shipped, definition, uuid)
    x = generate_inputs(d, w, seed=0, root=shipped.root)
    axes = w.axes
    indptr, idx = x["kv_indptr"], x["kv_indices"]
    assert indptr.dtype == torch.int32 and indptr.shape == (axes["len_indptr"],)
    assert int(indptr[0]) == 0 and int(indptr[-1]) == axes["num_kv_indices"]
    assert bool((indptr[1:] >= indptr[:-1]).all())
    assert idx.shape == (axes["num_kv_indices"],)
    assert int(idx.min()) >= 0 and int(idx.max()) < axes["num_pages"]
    assert torch.unique(idx).numel() == idx.numel()
    page_size = full.const_axes["page_size"]
    if page_size > 1:
        last = x["kv_last_page_len"]
        assert last.shape == (axes["batch_size"],) and last.dtype == torch.int32
        assert int(last.min()) >= 1 and int(last.max()) <= page_size
    # and the definition's own constraints hold
    scope = {**full.const_axes, **axes, **x}
    for c in full.constraints:
        assert eval(c, {}, scope), c  # noqa: S307 - the shipped definition's own expressions


def test_skewed_ps64_last_page_lengths_come_from_the_blob(shipped):
    d = index_only(shipped.definition(KV8_PS64))
    x = generate_inputs(d, shipped_workload(shipped, KV8_PS64, SKEWED_B64_PS64), seed=0, root=shipped.root)
    last = x["kv_last_page_len"]
    assert last[:5].tolist() == [14, 8, 21, 19, 42]  # not the "every page full" rule for random ones
    assert x["kv_indptr"][:4].tolist() == [0, 5, 52, 56]


def test_blob_tensors_are_copies(shipped):
    d = index_only(shipped.definition(KV8_PS64))
    w = shipped_workload(shipped, KV8_PS64, SKEWED_B64_PS64)
    first = generate_inputs(d, w, seed=0, root=shipped.root)
    first["kv_indptr"].fill_(-1)
    again = generate_inputs(d, w, seed=0, root=shipped.root)
    assert again["kv_indptr"][:3].tolist() == [0, 5, 52]


@pytest.mark.parametrize("batch, n_idx, expected", [
    (2, 40, [0, 20, 40]),
    (3, 96, [0, 32, 64, 96]),
    (3, 40, [0, 14, 27, 40]),  # the remainder goes to the first requests
    (4, 2, [0, 1, 2, 2, 2]),   # fewer pages than requests: some requests are empty
    (1, 0, [0, 0]),
])
def test_random_indptr_splits_the_indices_evenly(tiny_dataset, batch, n_idx, expected):
    d = index_only(tiny_dataset.definition(KV8_PS1))
    x = generate_inputs(d, tiny_workload(batch, n_idx, max(n_idx, 1)), seed=5)
    assert x["kv_indptr"].tolist() == expected
    assert x["kv_indptr"].dtype == torch.int32
    assert x["kv_indices"].shape == (n_idx,)


def test_random_last_page_len_marks_every_page_full(tiny_dataset):
    d = index_only(tiny_dataset.definition(KV8_PS64))
    x = generate_inputs(d, tiny_workload(3, 5, 9), seed=0)
    assert x["kv_last_page_len"].tolist() == [64, 64, 64]


def test_random_indices_are_a_slice_of_a_permutation(tiny_dataset):
    d = index_only(tiny_dataset.definition(KV8_PS1))
    x = generate_inputs(d, tiny_workload(2, 40, 1000), seed=0)
    idx = x["kv_indices"]
    assert torch.unique(idx).numel() == 40 and int(idx.min()) >= 0 and int(idx.max()) < 1000
    assert int(idx.max()) >= 40  # drawn from the whole pool, not the first 40 pages


def test_more_indices_than_pages_is_an_error(tiny_dataset):
    d = index_only(tiny_dataset.definition(KV8_PS1))
    with pytest.raises(SchemaError, match="kv_indices needs 50 pages but num_pages is 10"):
        generate_inputs(d, tiny_workload(2, 50, 10), seed=0)


def test_a_missing_var_axis_is_an_error(tiny_dataset):
    d = tiny_dataset.definition(KV8_PS1)
    w = Workload(uuid="w", axes={"batch_size": 1}, inputs={})
    with pytest.raises(SchemaError, match=r"var axes \['num_pages', 'len_indptr', 'num_kv_indices'\] have no value"):
        generate_inputs(d, w, seed=0)


# -- scalars and random ranges ------------------------------------------------------------------------

ALL_DTYPES = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32", "int16", "int8",
              "bool"]


@pytest.fixture(scope="module")
def dtype_definition() -> Definition:
    data = {"name": "all_dtypes", "op_type": "test", "axes": {"n": {"type": "var"}},
            "inputs": {**{f"x_{t}": {"shape": ["n"], "dtype": t} for t in ALL_DTYPES},
                       "random_scalar": {"shape": None, "dtype": "float32"},
                       "given_scalar": {"shape": None, "dtype": "int32"},
                       "filled": {"shape": ["n"], "dtype": "int32"}},
            "outputs": {"out": {"shape": ["n"], "dtype": "float32"}},
            "reference": "def run(**kw):\n    pass\n"}
    return parse_model(Definition, data, "dtypes.json")


N = 20000


@pytest.fixture(scope="module")
def dtype_inputs(dtype_definition):
    w = Workload(uuid="dtypes", axes={"n": N}, inputs={"given_scalar": {"type": "scalar", "value": 3},
                                                       "filled": {"type": "scalar", "value": -5}})
    return generate_inputs(dtype_definition, w, seed=11)


@pytest.mark.parametrize("dtype, lo, hi", [
    ("int8", -128, 127),
    ("int16", -1024, 1023),
    ("int32", -1024, 1023),
    ("int64", -1024, 1023),
    ("bool", 0, 1),
])
def test_random_integer_ranges(dtype_inputs, dtype, lo, hi):
    t = dtype_inputs[f"x_{dtype}"]
    assert t.dtype == getattr(torch, dtype) and t.shape == (N,)
    v = t.to(torch.int64)
    assert int(v.min()) >= lo and int(v.max()) <= hi
    # the whole range is used: with 20000 draws both ends are (nearly) reached
    span = hi - lo
    assert int(v.min()) <= lo + span // 50 and int(v.max()) >= hi - span // 50


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this torch has no float8")
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_random_fp8_is_clamped_to_two(dtype_inputs, dtype):
    t = dtype_inputs[f"x_{dtype}"]
    assert t.dtype == getattr(torch, dtype)
    v = t.float()
    assert float(v.abs().max()) == 2.0  # clamped, and randn exceeds 2 in 20000 draws
    assert float(v.std()) > 0.8


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_random_floats_are_standard_normal(dtype_inputs, dtype):
    t = dtype_inputs[f"x_{dtype}"]
    assert t.dtype == getattr(torch, dtype)
    v = t.float()
    assert abs(float(v.mean())) < 0.05 and abs(float(v.std()) - 1.0) < 0.05
    assert float(v.abs().max()) > 2.5


def test_scalar_inputs(dtype_inputs, dtype_definition):
    assert dtype_inputs["given_scalar"] == 3
    assert isinstance(dtype_inputs["random_scalar"], float)
    w = Workload(uuid="dtypes", axes={"n": 4}, inputs={"given_scalar": {"type": "scalar", "value": 3}})
    again = generate_inputs(dtype_definition, w, seed=11)
    assert again["random_scalar"] == dtype_inputs["random_scalar"]  # seeded by (seed, name), not by size
    assert generate_inputs(dtype_definition, w, seed=12)["random_scalar"] != dtype_inputs["random_scalar"]


def test_scalar_value_fills_a_shaped_input(dtype_inputs):
    t = dtype_inputs["filled"]
    assert t.dtype == torch.int32 and t.shape == (N,) and bool((t == -5).all())


# -- blobs ----------------------------------------------------------------------------------------------


def _blob_workload(path: str, key: str = "kv_indptr") -> Workload:
    """A workload reading ``blob/<path>`` (workload blobs live in the dataset's blob/ folder)."""
    return tiny_workload(2, 4, 8, kv_indptr={"type": "safetensors", "path": f"blob/{path}", "tensor_key": key})


def _save_blob(tensors: dict, root, name: str) -> None:
    (root / "blob").mkdir(exist_ok=True)
    save_file(tensors, str(root / "blob" / name))


@pytest.mark.parametrize("tensor, words", [
    (torch.tensor([0, 2, 3, 4, 4], dtype=torch.int32),
     "kv_indptr is (5,) torch.int32, definition wants (3,) torch.int32"),
    (torch.tensor([0, 2, 4], dtype=torch.int64), "kv_indptr is (3,) torch.int64, definition wants (3,) torch.int32"),
])
def test_a_blob_that_does_not_fit_names_the_file(tiny_dataset, tmp_path, tensor, words):
    _save_blob({"kv_indptr": tensor}, tmp_path, "bad.safetensors")
    d = index_only(tiny_dataset.definition(KV8_PS1))
    with pytest.raises(SchemaError) as err:
        generate_inputs(d, _blob_workload("bad.safetensors"), seed=0, root=tmp_path)
    message = str(err.value)
    assert message.startswith(str((tmp_path / "blob" / "bad.safetensors").resolve()))
    assert words in message


def test_a_fitting_blob_is_used(tiny_dataset, tmp_path):
    _save_blob({"kv_indptr": torch.tensor([0, 1, 4], dtype=torch.int32)}, tmp_path, "ok.safetensors")
    d = index_only(tiny_dataset.definition(KV8_PS1))
    x = generate_inputs(d, _blob_workload("ok.safetensors"), seed=0, root=tmp_path)
    assert x["kv_indptr"].tolist() == [0, 1, 4]


def test_blob_errors(tiny_dataset, tmp_path):
    _save_blob({"other": torch.zeros(3, dtype=torch.int32)}, tmp_path, "k.safetensors")
    d = index_only(tiny_dataset.definition(KV8_PS1))
    with pytest.raises(SchemaError, match=r"no tensor 'kv_indptr' \(has \['other'\]\)"):
        generate_inputs(d, _blob_workload("k.safetensors"), seed=0, root=tmp_path)
    with pytest.raises(SchemaError, match="missing.safetensors does not exist"):
        generate_inputs(d, _blob_workload("missing.safetensors"), seed=0, root=tmp_path)
    with pytest.raises(SchemaError, match="no dataset root is known"):
        generate_inputs(d, _blob_workload("k.safetensors"), seed=0)


# -- outputs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("definition, batch", [(KV8_PS1, 2), (KV8_PS64, 5)])
def test_allocate_outputs(tiny_dataset, definition, batch):
    d = tiny_dataset.definition(definition)
    out = allocate_outputs(d, tiny_workload(batch, 4, 8))
    assert list(out) == ["output", "lse"]
    assert out["output"].shape == (batch, 32, 128) and out["output"].dtype == torch.bfloat16
    assert out["lse"].shape == (batch, 32) and out["lse"].dtype == torch.float32


# -- fingerprint --------------------------------------------------------------------------------------


def test_fingerprint_tells_inputs_apart():
    base = {"a": torch.arange(1000, dtype=torch.float32), "s": 0.5, "b": torch.ones(3, 4, dtype=torch.bfloat16)}
    same = {"a": torch.arange(1000, dtype=torch.float32), "s": 0.5, "b": torch.ones(3, 4, dtype=torch.bfloat16)}
    assert fingerprint(base) == fingerprint(same)
    variants = []
    for mutate in (
        lambda d: d["a"].__setitem__(517, -1.0),               # one element
        lambda d: d["b"].__setitem__((2, 3), 2.0),             # one bf16 element
        lambda d: d.__setitem__("s", 0.25),                    # a scalar
        lambda d: d.__setitem__("a", d["a"].to(torch.float64)),  # same values, other dtype
        lambda d: d.__setitem__("b", d["b"].to(torch.float16)),
    ):
        v = {k: (t.clone() if isinstance(t, torch.Tensor) else t) for k, t in base.items()}
        mutate(v)
        variants.append(fingerprint(v))
    assert fingerprint(base) not in variants
    assert len(set(variants)) == len(variants)


def test_fingerprint_of_non_contiguous_views():
    t = torch.arange(64, dtype=torch.int32).reshape(8, 8)
    assert fingerprint({"t": t.t()}) == fingerprint({"t": t.t().contiguous()})
    assert fingerprint({"t": t.t()}) != fingerprint({"t": t})


class _CountingSha:
    def __init__(self, counter):
        self._h = _REAL_SHA256()
        self._counter = counter

    def update(self, data):
        self._counter.append(len(data))
        self._h.update(data)

    def hexdigest(self):
        return self._h.hexdigest()


def test_fingerprint_samples_large_tensors(monkeypatch):
    n = 8 * (1 << 20) + 3  # 8M float32 = 32 MiB
    big = torch.zeros(n, dtype=torch.float32)
    fed: list[int] = []
    monkeypatch.setattr(inputs_mod, "hashlib", types.SimpleNamespace(sha256=lambda: _CountingSha(fed)))
    before = fingerprint({"big": big})
    assert sum(fed) <= 4 * (1 << 20) + 100  # about a million sampled elements, not 32 MiB
    monkeypatch.undo()
    # the sampling path still sees elements it samples (index 0) ...
    changed = big.clone()
    changed[0] = 1.0
    assert fingerprint({"big": changed}) != before
    # ... and a tensor of the full-hash size is hashed whole
    small = torch.zeros(1 << 20)
    small2 = small.clone()
    small2[12345] = 1.0
    assert fingerprint({"s": small}) != fingerprint({"s": small2})
