"""Red team round 10 (benchmarks/results/2026-12-07_cpu_redteam_round10/): the CPU attribution's index marks and its
count of elements, and the tensors the harness reads after a call.

- Value bits a kernel stored into a buffer allocated like the page table (`kv_indices.new_empty(...)`), or gathered
  by it (`bits[kv_indices]`), took the index mark: attention in int64 on them was free ("0.8% glue").
- A method set on a tensor itself (`q.numel = f`) ran the candidate's code in the count's report, after the count;
  one returning 0 hid every operator it read from the count.
"""

from __future__ import annotations

import pytest
import torch

from harness.sandbox import library_ops
from harness.sandbox.worker_calls import require_plain, shadowed_methods

PAGES = torch.arange(512, dtype=torch.int32)
INDPTR = torch.tensor([0, 512], dtype=torch.int32)
K = torch.randn(512, 8, 128)
INPUTS = {"k_cache": K, "kv_indptr": INDPTR, "kv_indices": PAGES}


def _integer_ops(fn) -> dict:
    with library_ops.Counter(INPUTS) as counter:
        fn()
    return {k: v for k, v in counter.aten.ops.items() if v[0] == "integer"}


def _bits_in(buffer: torch.Tensor) -> torch.Tensor:
    """What a kernel of the candidate's does unseen (the interpreter writes a launch's results back below the mode)."""
    with torch._C._DisableTorchDispatch():
        buffer.copy_(K.view(torch.int32).reshape(buffer.shape).to(buffer.dtype))
    return buffer


@pytest.mark.parametrize("name,fn,counted", [
    ("a page table's own arithmetic", lambda: ((PAGES * 64 + 3) // 2).cumsum(0), False),
    ("a gather of the page table by the lengths", lambda: PAGES[INDPTR[:-1].long()] + 1, False),
    ("bits in a buffer allocated like the page table",
     lambda: (_bits_in(PAGES.new_empty(K.numel())).view(512, -1) * 3).sum(-1), True),
    ("bits in a plain buffer, gathered by the page table",
     lambda: (_bits_in(torch.empty(K.numel(), dtype=torch.int32)).view(512, -1)[PAGES.long()] >> 2).sum(), True),
])
def test_only_what_is_computed_from_indices_alone_is_an_index(name, fn, counted):
    ops = _integer_ops(fn)
    assert bool(ops) is counted, (name, ops)
    if counted:  # at least every element of the bits once: the attention's own reads
        assert sum(n for _, n in ops.values()) >= K.numel(), ops


def test_arithmetic_on_indices_past_the_budget_counts_toward_the_share():
    rounds = library_ops.INDEX_ARITHMETIC_BUDGET + 8

    def many():
        x = PAGES
        for _ in range(rounds):
            x = x + 1  # an index computed from an index, each time
        return x

    ops = _integer_ops(many)
    past = ops.pop(f"aten::add (indices past {library_ops.INDEX_ARITHMETIC_BUDGET}x the inputs')")
    budget = library_ops.INDEX_ARITHMETIC_BUDGET * (PAGES.numel() + INDPTR.numel())  # times the index inputs
    assert past == ("integer", rounds * PAGES.numel() - budget), past
    assert ops == {}


def test_a_method_set_on_a_tensor_counts_nothing_different():
    q = torch.randn(32, 128)
    q.numel = lambda: 0  # the candidate's, read by the count
    q.is_floating_point = lambda: False
    with library_ops.Counter({"q": q}) as counter:
        torch.exp(q)
    assert counter.aten.ops == {"aten::exp": ("pointwise", 32 * 128)}
    assert counter.report({"q": q})["input_elements"] == 32 * 128


def test_tensors_with_methods_of_their_own_are_refused_before_the_harness_reads_them():
    out = torch.empty(4)
    assert shadowed_methods(out) == []
    out.detach = lambda: torch.zeros(4)
    out.numel = lambda: 4
    out.my_plan = "kept"  # a name of the candidate's own is no method of the harness's
    assert shadowed_methods(out) == ["detach", "numel"]
    with pytest.raises(TypeError, match=r"outputs must keep torch.Tensor's own methods.*output\.detach, numel"):
        require_plain({"output": out, "lse": torch.empty(2)}, "outputs")
    plain = torch.empty(4)
    plain.my_plan = "kept"
    require_plain({"output": plain}, "outputs")


_CACHED = '''
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

_CACHE = {}


def run(q, k_cache, output):
    key = (k_cache.data_ptr(), tuple(k_cache.shape))
    desc = _CACHE.get(key)
    if desc is None:
        desc = _CACHE[key] = VALUE
    return desc


def run_paged(q, k_cache, output):  # stored by name, as an honest cache does (round 10's g16)
    key = (k_cache.data_ptr(), k_cache.dtype)
    made = _CACHE.get(key)
    if made is None:
        made = VALUE
        _CACHE[key] = made
    return made
'''


@pytest.mark.parametrize("value,blocked", [
    ("TensorDescriptor.from_tensor(k_cache, [64, 128])", False),  # a view of the memory its address keys
    ("TensorDescriptor(k_cache, list(k_cache.shape), list(k_cache.stride()), [64, 128])", False),
    ("output.clone()", True),  # the answer, kept by the inputs' address: output_cache as before
    ("_CACHE.get(key) or TensorDescriptor.from_tensor(k_cache, [64, 128])", True),  # what `or` gives: not followed
    ("(TensorDescriptor.from_tensor(k_cache, [64, 128]), output.clone())", True),
])
def test_a_cache_of_tma_descriptors_keyed_by_address_is_no_output_cache(value, blocked, policy):
    from harness.audits.static_gate import scan_sources

    found = [f.rule for f in scan_sources({"main.py": _CACHED.replace("VALUE", value)}, "triton", policy)
             if f.severity == "error"]
    assert ("output_cache" in found) is blocked, (value, found)


def test_a_dict_subclass_put_as_a_tensor_s_dict_hides_nothing():
    """Round 10b: `output.__dict__ = Quiet(numel=f)`, a dict whose iteration and length say it is empty."""
    class Quiet(dict):
        def __iter__(self):
            return iter(())

        def __len__(self):
            return 0

    out = torch.empty(4)
    out.__dict__ = Quiet(numel=lambda: 99)
    assert out.numel() == 99  # attribute lookup still finds it
    assert shadowed_methods(out) == ["__dict__"]
    with pytest.raises(TypeError, match="own methods"):
        require_plain({"output": out}, "outputs")


@pytest.mark.parametrize("name,fn,counted", [
    ("bit planes of codes, summed as booleans (10b)", lambda: ((CODES & 1).bool() & (CODES & 2).bool()).sum(), True),
    ("products of codes looked up in a table of integers (10b)", lambda: TABLE[CODES.long()], True),
    ("the same by gather", lambda: TABLE.gather(0, CODES.long().flatten()), True),
    ("the cache gathered by the page table", lambda: K[PAGES.long()], False),
    # round 11: lookups by positions not the definition's count, whatever the table: here 4 positions, a plan's few
    ("values gathered by positions top-k found (MoE's routing)", lambda: K[torch.topk(K[:, 0, 0], 4).indices], True),
    ("a mask of the page table", lambda: (PAGES >= 0).all(), False),  # booleans of indices are indices
])
def test_booleans_and_tables_of_integers_count_toward_the_share(name, fn, counted):
    ops = _integer_ops(fn)
    assert bool(ops) is counted, (name, ops)


CODES = torch.randint(0, 256, (512, 8, 16), dtype=torch.int32)  # what a candidate's kernel stored, unmarked
TABLE = torch.arange(256 * 256, dtype=torch.int32)

