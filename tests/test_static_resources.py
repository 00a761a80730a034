"""harness/profiling/static_resources.py: a Triton kernel's registers, spills, shared memory and occupancy for sm_90,
compiled on a host without a GPU, from the launches the solution's own host code makes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from harness.profiling.static_resources import (Launch, _specialise, occupancy, parse_resource_usage,
                                                record_launches)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("registers, shared, warps, blocks, limiter, pct", [
    # the fused split-KV kernel as ncu measured it on the H200 (run 12): 162 registers, 72 KB dynamic + 1 KB static
    (162, 74752, 4, 3, "registers", 18.8),
    (104, 40192, 4, 4, "registers", 25.0),  # per-KV-head, bf16, 3 stages: 104 -> 128 per thread in warp units
    (112, 39936, 4, 4, "registers", 25.0),
    (64, 100000, 4, 2, "shared-memory", 12.5),  # 2 x (100,000 + 1 KB reserved) fit in 228 KB, 3 do not
    (255, 0, 8, 1, "registers", 12.5),  # 256 x 32 x 8 = the whole register file
    (8, 0, 4, 16, "warps", 100.0),
    (16, 0, 1, 32, "blocks", 50.0),  # one-warp blocks: 32 blocks is the SM's cap before its 64 warps
])
def test_occupancy_by_the_binding_limit(registers, shared, warps, blocks, limiter, pct):
    occ = occupancy(registers, shared, warps)
    assert (occ.blocks_per_sm, occ.limiter, occ.theoretical_pct) == (blocks, limiter, pct)


def test_shared_buffers_are_read_from_the_ttgir():
    from harness.profiling.static_resources import buffer_shapes

    ir = ('%0 = ttg.local_alloc : () -> !ttg.memdesc<2x64x128xbf16, #shared, #smem, mutable>\n'
          '%1 = ttg.local_alloc %q : (tensor<16x128xbf16, #blocked>) -> !ttg.memdesc<16x128xbf16, #shared1, #smem>\n'
          '%2 = ttg.local_load %0 : !ttg.memdesc<2x64x128xbf16> -> tensor<64x128xbf16>\n')
    assert buffer_shapes(ir) == ["16x128xbf16", "2x64x128xbf16"]
    assert buffer_shapes("") == []


def test_resource_usage_is_read_per_function():
    text = """
Resource usage:
 Common:
  GLOBAL:11 CONSTANT[4]:8
 Function _chunk_then_merge_kernel:
  REG:162 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:720 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _merge_splits_kernel:
  REG:38 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:600 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    assert parse_resource_usage(text) == {
        "_chunk_then_merge_kernel": {"registers": 162, "stack": 0, "shared_static": 1024, "local": 0},
        "_merge_splits_kernel": {"registers": 38, "stack": 16, "shared_static": 0, "local": 8}}


triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def _module(source: str, tmp_path: Path, name: str = "kernel_under_test"):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, scale, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs * stride, tl.load(x_ptr + offs, mask=offs < n) * scale, mask=offs < n)


def run(x, y):
    _copy[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), 2.0, 1, BLOCK=128, num_warps=2)
'''


def test_launches_are_recorded_without_running_and_the_kernels_put_back(tmp_path):
    module = _module(KERNEL, tmp_path)
    kernel = module._copy
    x, y = torch.zeros(320), torch.ones(320)
    launches = record_launches(module, lambda: module.run(x, y))
    assert module._copy is kernel and bool((y == 1).all())  # put back; nothing ran
    (launch,) = launches
    assert launch.kernel is kernel and launch.args[2] == 320 and launch.kwargs == {"BLOCK": 128, "num_warps": 2}
    signature, constexprs, attrs, options = _specialise(launch)
    # as Triton's JIT specialises: pointers and 320 divisible by 16, the 1 a constant, the float a scalar
    assert signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "scale": "fp32", "stride": "constexpr",
                         "BLOCK": "constexpr"}
    assert constexprs == {"stride": 1, "BLOCK": 128} and options == {"num_warps": 2}
    assert set(attrs) == {(0,), (1,), (2,)}


def test_an_argument_it_cannot_type_is_said(tmp_path):
    module = _module(KERNEL, tmp_path)
    with pytest.raises(TypeError, match="argument scale of type str"):
        _specialise(Launch(module._copy, (torch.zeros(4), torch.zeros(4), 4, "x", 2), {"BLOCK": 128}))


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton has no NVIDIA backend with ptxas")
def test_the_shipped_fused_kernel_compiles_to_what_ncu_measured_on_the_h200(tmp_path):
    """The skill's default fused split-KV kernel (kv8, page size 1): run 12's ncu digest on the H200 reported 162
    registers per thread, 72 KB of dynamic shared memory, 3 blocks per SM limited by registers, 18.8% theoretical
    occupancy. The compile here must give the same, or the figures it gives for other configurations mean nothing."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import template_resources as tr

    (entry,) = tr.measure("gqa_paged_decode_h32_kv8_d128_ps1", [{"template": "triton-split-kv-fused"}], 90)
    (kernel,) = entry["kernels"]
    assert kernel["kernel"] == "_chunk_then_merge_kernel" and kernel["constexprs"]["GROUP"] == 4
    assert (kernel["registers"], kernel["spill_stack_bytes"], kernel["shared_bytes"] - 1024) == (162, 0, 73728)
    assert kernel["occupancy"]["blocks_per_sm"] == 3 and kernel["occupancy"]["theoretical_pct"] == 18.8
    digest = json.loads((ROOT / "benchmarks/results/2026-12-03_h200_run12/loop_kv8ps1/ncu_digest.json").read_text())
    measured = digest["profiles"][0]["digests"][0]["values"]
    assert measured["registers_per_thread"] == kernel["registers"]
    assert measured["occupancy_theoretical_pct"] == kernel["occupancy"]["theoretical_pct"]


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton has no NVIDIA backend with ptxas")
@pytest.mark.parametrize("params, kv_tile, blocks", [
    ({"NUM_STAGES": 2}, "1x128x128xbf16", 2),
    ({"NUM_STAGES": 3}, "1x128x128xbf16", 2),  # a stage more asked, none given: the page index load took it
    ({"BLOCK_N": 64, "NUM_STAGES": 3}, "1x64x128xbf16", 3),
    ({"BLOCK_N": 64, "NUM_STAGES": 5}, "2x64x128xbf16", 3),  # K and V double-buffered at the same occupancy
    # the page indices a step ahead (KV_LOAD 1): NUM_STAGES - 1 buffers, and 152 registers instead of 168-209
    ({"BLOCK_N": 64, "NUM_STAGES": 3, "KV_LOAD": 1}, "2x64x128xbf16", 3),
    ({"BLOCK_N": 64, "NUM_STAGES": 4, "KV_LOAD": 1}, "3x64x128xbf16", 2),  # now shared memory binds
    # TMA boxes of one page (64 tokens of one KV head: [1, 64, 1, 128] of the cache), the same depths
    ({"KV_LOAD": 2}, "1x1x64x1x128xbf16", 3),
    ({"KV_LOAD": 2, "NUM_STAGES": 3}, "2x1x64x1x128xbf16", 3),  # whole steps unmasked: no 16 KB V round trip
])
def test_how_deep_the_fused_kernels_pipeline_really_is(params, kv_tile, blocks):
    """The K and V tiles of the fused kernel (kv4, page 64) get the shared buffers Triton's pipeliner allots, not
    the NUM_STAGES asked: one buffer each up to 4 stages (the paged load's index takes a stage of the latency
    budget), two at 5; with the page indices loaded a step ahead (KV_LOAD 1, and 2 with TMA boxes), NUM_STAGES - 1.
    The tool says so before any GPU time is spent."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import template_resources as tr

    config = {"template": "triton-split-kv-fused", "MERGE_FANIN": 8, **params}
    (entry,) = tr.measure("gqa_paged_decode_h32_kv4_d128_ps64", [config], 90)
    (kernel,) = entry["kernels"]
    assert kernel["shared_buffers"].count(kv_tile) == 2, kernel["shared_buffers"]  # K and V
    assert kernel["occupancy"]["blocks_per_sm"] == blocks


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton has no NVIDIA backend with ptxas")
@pytest.mark.parametrize("definition, params, registers, blocks", [
    ("gqa_paged_decode_h32_kv4_d128_ps64", {}, 209, 2),                      # the pipelined merge at a group of 8
    ("gqa_paged_decode_h32_kv4_d128_ps64", {"MERGE_STAGES": 1}, 168, 3),     # the same chunk loop, merge unpipelined
    ("gqa_paged_decode_h32_kv4_d128_ps64", {"MAX_REGISTERS": 168}, 168, 3),  # the pipeline kept, .maxnreg 168
    ("gqa_paged_decode_h32_kv4_d128_ps64", {"KV_LOAD": 2}, 150, 3),          # the pipeline kept, no K/V addresses
    ("gqa_paged_decode_h32_kv4_d128_ps1", {}, 203, 2),
    ("gqa_paged_decode_h32_kv4_d128_ps1", {"MAX_REGISTERS": 168}, 168, 3),
    ("gqa_paged_decode_h32_kv8_d128_ps64", {}, 168, 3),                      # a group of 4: the merge costs nothing
])
def test_the_merge_sets_the_fused_kernels_registers_at_kv4(definition, params, registers, blocks):
    """The latency-bound starting point's fused kernel (two-level merge, wave plan): at kv4 its merge loop's
    pipeline, not the chunk loop, sets the kernel's registers and costs a resident program per SM; `MAX_REGISTERS`
    (ptx .maxnreg, passed as Triton's `maxnreg`) gives it back without unpipelining the merge."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import template_resources as tr

    config = {"template": "triton-split-kv-fused", "MERGE_FANIN": 8, "WAVE_SLOTS_PER_SM": -1, **params}
    (entry,) = tr.measure(definition, [config], 90)
    (kernel,) = entry["kernels"]
    assert (kernel["registers"], kernel["occupancy"]["blocks_per_sm"]) == (registers, blocks)


def test_a_configuration_the_definition_does_not_allow_is_not_measured_as_the_default(capsys):
    """TMA boxes (KV_LOAD 2) are narrowed away at page size 1: the tool says so instead of compiling KV_LOAD 0 under
    the asked-for configuration."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import template_resources as tr

    assert tr.measure("gqa_paged_decode_h32_kv4_d128_ps1", [{"template": "triton-split-kv-fused", "KV_LOAD": 2}],
                      90) == []
    assert "skipped, not allowed here: KV_LOAD=2 (allowed: [0, 1])" in capsys.readouterr().err


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton has no NVIDIA backend with ptxas")
@pytest.mark.parametrize("params, batch, chunk_tokens, programs", [
    # run 18's 3-program kernel (MERGE_STAGES 1: 168 registers, 3 per SM): its record said 64 x 2048 stayed 256 whole
    # requests and 64 x 8192 became one chunk each; the plan is 768 chunks in both
    ({"MERGE_STAGES": 1, "CHUNK_BLOCKS": 32}, (64, 2048), 768, 768),
    ({"MERGE_STAGES": 1, "CHUNK_BLOCKS": 32}, (64, 8192), 2816, 768),
    # the bandwidth term keeps them whole
    ({"MERGE_STAGES": 1, "CHUNK_BLOCKS": 32, "SATURATING_PROGRAMS_PER_SM": 2}, (64, 2048), 2048, 256),
    ({"MERGE_STAGES": 1, "CHUNK_BLOCKS": 32, "SATURATING_PROGRAMS_PER_SM": 2}, (64, 8192), 8192, 256),
    ({}, (64, 2048), 2048, 256),  # the starting point (2 per SM) as timed
])
def test_the_plan_a_timing_runs_is_read_from_the_compiled_kernel(params, batch, chunk_tokens, programs):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import template_resources as tr

    config = {"template": "triton-split-kv-fused", "MERGE_FANIN": 8, "WAVE_SLOTS_PER_SM": -1, **params}
    (entry,) = tr.measure("gqa_paged_decode_h32_kv4_d128_ps64", [config], 90, [tr.uniform(*batch)], 132)
    (plan,) = entry["plans"]
    blocks = entry["kernels"][0]["occupancy"]["blocks_per_sm"]
    assert (plan["chunk_tokens"], plan["programs"], plan["slots_per_sm"]) == (chunk_tokens, programs, blocks)
    assert plan["batch"] == f"{batch[0]}x{batch[1]}" and plan["waves"] == round(programs / (blocks * 132), 2)



@pytest.mark.skipif(not PTXAS.exists(), reason="this triton has no NVIDIA backend with ptxas")
def test_the_definitions_own_workloads_are_planned_from_their_page_tables():
    """skewed_b64 (one request of 15,794 tokens among 2,489 on average) and one_long (32k + 31 x 256) are planned with
    their real lengths: chunks sized for the whole batch, the long requests cut into many; a uniform label plans as
    --batches does."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import template_resources as tr

    config = {"template": "triton-split-kv-fused", "MERGE_FANIN": 8, "WAVE_SLOTS_PER_SM": -1}
    (entry,) = tr.measure("gqa_paged_decode_h32_kv4_d128_ps64", [config], 90, [tr.uniform(64, 2048)], 132,
                          "skewed_b64, one_long_32k_31x256,uniform_b64_kv2048")
    plans = {p["batch"]: p for p in entry["plans"]}
    assert list(plans) == ["64x2048", "uniform_b64_kv2048", "skewed_b64", "one_long_32k_31x256"]
    assert {k: v for k, v in plans["uniform_b64_kv2048"].items() if k != "batch"} == \
        {k: v for k, v in plans["64x2048"].items() if k != "batch"}
    lengths = dict(tr.workload_batches("gqa_paged_decode_h32_kv4_d128_ps64", "skewed_b64"))["skewed_b64"]
    assert len(lengths) == 64 and max(lengths) == 15794
    skewed = plans["skewed_b64"]
    chunks = sum(-(-n // skewed["chunk_tokens"]) or 1 for n in lengths) * 4
    assert skewed["programs"] == chunks > 64 * 4  # the long requests are cut into several chunks
