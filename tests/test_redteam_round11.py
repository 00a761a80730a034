"""Red team round 11 (benchmarks/results/2026-12-07_cpu_redteam_round11/): the CPU attribution's lookups and index
marks, the count's switch, and honest plans it misjudged.

- Attention in lookups of float tables (sums and products of digit codes of the bf16 bits) read "0.00019%": only
  integer tables counted their lookups.
- `triton.knobs.setenv("TRITON_INTERPRET", None)` after an honest first call: the count read the variable at every
  call, and every later call, attention in PyTorch, went uncounted.
- Honest: a plan's `ceil(pages.float() / chunk).to(int64)` made its lengths values, and their cumsum "reductions";
  GDN's scan of its gates in PyTorch; `int(counts.max())` sizing a MoE grid (tests/test_cpu_attribution.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from harness.audits.cpu_attribution import call_verdict
from harness.audits.static_gate import scan_sources
from harness.audits.static_gate.policy import load_policy
from harness.audits.thresholds import policy_thresholds
from harness.audits.verdicts import AuditConfig, cpu_attribution_audit
from harness.sandbox import library_ops
from harness.sandbox.messages import LibraryCompute

ROOT = Path(__file__).resolve().parents[1]
T = 4096  # GDN prefill tokens: q, k (4 heads) and v (8 heads) of 128: T x 2048 input elements
PAGES = torch.arange(512, dtype=torch.int32)
INDPTR = torch.tensor([0, 200, 512], dtype=torch.int32)
K = torch.randn(512, 8, 128)
INPUTS = {"k_cache": K, "kv_indptr": INDPTR, "kv_indices": PAGES}


def _count(fn) -> dict:
    with library_ops.Counter(INPUTS) as counter:
        fn()
    return dict(counter.aten.ops)


def _digit_sums() -> torch.Tensor:
    """a01's core: digits of the values' bits, summed by a float table of sums (no arithmetic operator at all)."""
    codes = (K.view(torch.int32) >> 16).bitwise_and(63).long()  # values, as integers
    add = torch.arange(64, dtype=torch.float32)[:, None] + torch.arange(64, dtype=torch.float32)  # made before
    with library_ops.Counter(INPUTS) as counter:
        add[codes, codes.flip(0)]
        torch.gather(add.flatten(), 0, codes.flatten())
    return counter


def test_lookups_in_float_tables_by_computed_positions_count_toward_the_share():
    ops = _digit_sums().aten.ops
    looked_up = sum(n for name, (_, n) in ops.items() if "lookups by computed positions" in name)
    assert looked_up == 3 * K.numel(), ops  # two position tensors for the first lookup, one for the gather
    assert not call_verdict((K.numel(), ops))[2].passed  # a fallback: 300% of the inputs


@pytest.mark.parametrize("name, fn, counted", [
    ("the cache gathered by the page table", lambda: K[PAGES.long()], 0),
    ("by positions computed from the page table", lambda: K[(PAGES.long() * 2) % 512], 0),
    ("a plan's gather of rows by a top-k's positions: its positions only",
     lambda: K[torch.topk(K[:, 0, 0], 4).indices], 4),
    ("a table of values of its own by value positions", lambda: K.flatten()[K.view(torch.int32).flatten() & 1023],
     K.numel()),
])
def test_what_a_lookup_counts(name, fn, counted):
    ops = _count(fn)
    assert sum(n for key, (_, n) in ops.items() if "lookups" in key) == counted, (name, ops)


def _plan() -> None:
    """A split-KV plan in floats (q5 of round 11's honest solutions): chunks per request by a float ceil."""
    pages = INDPTR[1:] - INDPTR[:-1]
    splits = torch.ceil(pages.float() / 64).clamp(min=1).to(torch.int64)
    offsets = torch.cumsum(splits, 0)
    int(splits.max())
    torch.repeat_interleave(torch.arange(2), splits)
    return offsets


def test_floats_computed_from_indices_alone_stay_indices():
    ops = _count(_plan)
    assert ops == {}, ops  # index arithmetic, within its budget: nothing counted


@pytest.mark.parametrize("name, fn", [
    ("a value entered the float arithmetic", lambda: torch.cumsum((PAGES.float() * K[0, 0, 0]).to(torch.int64), 0)),
    ("integers a kernel stored, made floats", lambda: torch.cumsum(torch.randint(0, 9, (512,)).float(), 0)),
    ("the values' bits, made floats", lambda: torch.cumsum(K.view(torch.int32).float(), 0)),
    ("an index float overwritten with values", lambda: torch.cumsum(PAGES.float().copy_(K[:, 0, 0]), 0)),
])
def test_values_never_become_indices_through_floats(name, fn):
    ops = _count(fn)
    assert any(kind == "reduction" for kind, _ in ops.values()), (name, ops)


def test_an_index_written_in_place_with_what_is_no_index_is_none():
    """A copy of the page table overwritten with integers a kernel stored keeps no mark: its arithmetic counts."""
    def overwrite():
        pages = PAGES.clone()
        pages.copy_(torch.randint(0, 9, (512,), dtype=torch.int32))
        (pages * pages).sum()
    ops = _count(overwrite)
    assert any(kind == "integer" for kind, _ in ops.values()), ops


def test_the_count_does_not_follow_the_variable_the_candidate_can_remove(monkeypatch):
    from harness.sandbox import triton_interp, worker_calls

    monkeypatch.setattr(triton_interp, "_INTERPRETING", True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert isinstance(library_ops.counter("triton", torch.device("cpu")), library_ops.Counter)
    monkeypatch.setattr(triton_interp, "_PATCHED", True)
    assert worker_calls.interpreted_launches("triton") == triton_interp.LAUNCHES[0]


@pytest.mark.parametrize("source", [
    "import triton\ntriton.knobs.setenv(bytes.fromhex('5452495430').decode(), None)\n",
    "from triton import knobs\nknobs.getenv('CXX')\n",
    "from triton.knobs import propagate_env\n",
    "import triton.knobs as k\nk.env_str('TRITON_INTERPRET', '0').get()\n",
])
def test_tritons_own_environment_functions_are_env_probes(source):
    found = [f.rule for f in scan_sources({"main.py": source}, "triton", load_policy()) if f.severity == "error"]
    assert "env_probe" in found, found


def _cpu_audit(cfg: AuditConfig, inputs: int, reductions: int):
    call = LibraryCompute(input_elements=inputs, ops={
        "aten::cumsum": {"kind": "reduction", "elements": reductions},
        "aten::softplus": {"kind": "pointwise", "elements": reductions}})
    return cpu_attribution_audit([call], cfg)


def _shipped(op_type: str) -> AuditConfig:
    document = yaml.safe_load((ROOT / "definitions" / "audit_policy.yaml").read_text())
    return AuditConfig.for_level("fast", **policy_thresholds(document, None, op_type))


@pytest.mark.parametrize("op_type, reductions, passed", [
    ("gdn", T * 8, True),  # `torch.cumsum` of the log-decays per sequence, [T, 8]: 0.4% of q, k, v
    ("gdn", T * 2048 // 40, False),  # 2.5% of the inputs: past what a scan of gates reads
    ("dsa_paged", T * 8, False),  # a top-k reads as little and is the DSA indexer's work: no such setting there
    ("gqa_paged", T * 8, False),
])
def test_a_familys_scan_of_its_gates_is_glue_and_only_a_small_one(op_type, reductions, passed):
    audit = _cpu_audit(_shipped(op_type), T * 2048, reductions)
    assert audit.passed is passed, audit.detail


# -- wave 11b: marks written around, storages read whole ----------------------------------------------------------

def _laundered(write) -> dict:
    """Positions made of the values' bits, written into a clone of the page table through an alias, then used."""
    def run():
        positions = PAGES.long().clone()
        write(positions, (K.view(torch.int32)[:, 0, 0] & 511).long())
        K.flatten()[positions]
    return _count(run)


@pytest.mark.parametrize("name, write", [
    ("through a view", lambda b, codes: b.view(b.shape).copy_(codes)),
    ("by item assignment", lambda b, codes: b.__setitem__(Ellipsis, codes)),
    ("through an unsqueezed view", lambda b, codes: b.unsqueeze(0).__setitem__(0, codes)),
    ("through as_strided", lambda b, codes: b.as_strided((512,), (1,)).copy_(codes)),
])
def test_an_index_written_through_any_alias_is_an_index_no_more(name, write):
    ops = _laundered(write)
    assert sum(n for key, (_, n) in ops.items() if "lookups" in key) == 512, (name, ops)


def test_a_write_that_leaves_an_index_as_it_was_keeps_it():
    """The interpreter copies a launch's arguments back whether the kernel wrote them or not."""
    def run():
        positions = PAGES.long().clone()
        positions.view(positions.shape).copy_(PAGES.long().clone())
        K[positions]
    assert _count(run) == {}


def test_a_storage_is_read_whole():
    from harness.sandbox.host_reads import HostReads

    buffer = torch.randn(4096)
    with HostReads() as host:
        buffer[:1].untyped_storage()
    assert host.ops == {"host: Tensor.untyped_storage": ("host", 4096)}, host.ops


LAUNCHED = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import torch, triton, triton.language as tl
    from harness.sandbox import library_ops, triton_interp
    triton_interp.apply()

    @triton.jit
    def double(src, dst, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(dst + o, tl.load(src + o) * 2)

    pages, out = torch.arange(16, dtype=torch.int32), torch.empty(16, dtype=torch.int32)
    with library_ops.Counter({"kv_indices": pages, "q": torch.randn(4)}) as counter:
        double[(1,)](pages, out, 16)
        marked = library_ops._marked(library_ops._INDEX, pages)
        (pages[:8] + 1).sum()
    print(json.dumps({"marked": marked, "ops": sorted(counter.aten.ops)}))
''')


def test_an_index_a_launch_read_stays_an_index(tmp_path):
    """The interpreter moves a launch's arguments by `set_` over their storages: no write of the index's content."""
    from support import run_interpreted

    assert run_interpreted(tmp_path, LAUNCHED) == {"marked": True, "ops": []}
