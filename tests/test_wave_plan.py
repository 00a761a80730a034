"""The fused split-KV template's chunk size for whole waves (``WAVE_SLOTS_PER_SM``, skills/gqa-decode): the rendered
module's ``_wave_chunk_tiles``, table-driven, on the H200's shapes (132 SMs, 128-token tiles, 3 resident programs
per SM as ncu reported for the fused kernel at 168 registers in run 15)."""

from __future__ import annotations

import importlib.util

import pytest

from controller.skills import kernel_templates, load_skills, render_skill_template
from support import ROOT

pytest.importorskip("triton")

SLOTS = 3 * 132  # resident programs on the H200 at 3 per SM


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    gqa = load_skills(ROOT / "skills")["gqa-decode"]
    template = kernel_templates(gqa)["triton-split-kv-fused"]
    path = tmp_path_factory.mktemp("wave") / "kernel.py"
    path.write_text(render_skill_template(gqa, template, {**template.defaults, "PAGE_SIZE": 1}), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("wave_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("request_tiles, kv_heads, low, high, expected", [
    # run 15's miss, batch 16 x 8192 tokens at kv8: the rule without waves gives 8 tiles (1024 chunks, 2.59 waves);
    # 11 tiles make 6 chunks per request (768, 1.94 waves): 2 waves x 12 against 3 x 9
    ([64] * 16, 8, 1, 16, 11),
    # batch 16 x 2048 tokens at kv8: 8 tiles fill 256 of 396 slots; 6 tiles (3 chunks) fill 384 in one wave
    ([16] * 16, 8, 1, 16, 6),
    # batch 1 x 8192 at kv8: 2 tiles (256 programs, 1 wave: 3) beat 1 tile (512 programs, 2 waves: 4)
    ([64], 8, 1, 4, 2),
    # batch 1 x 512: one-tile chunks, 32 programs
    ([4], 8, 1, 2, 1),
    # when every size fits in one wave the cost is c + 1: the smallest the range allows (MIN_CHUNK_BLOCKS the floor)
    ([4, 4], 1, 1, 4, 1),
    ([4, 4], 1, 2, 4, 2),
    # an empty request still costs one (empty) chunk per KV head; a range that is one value is that value
    ([0, 64], 8, 3, 3, 3),
    ([0], 8, 1, 0, 1),
])
def test_wave_chunk_tiles(fused, request_tiles, kv_heads, low, high, expected):
    assert fused._wave_chunk_tiles(request_tiles, kv_heads, SLOTS, low, high) == expected


@pytest.mark.parametrize("request_tiles, slots_per_sm, saturating, expected, high", [
    # run 18, kv4 64 x 2048 (16 tiles of 128 tokens), 3 programs per SM, chunks up to 16 tiles. Waves only: 768
    # six-tile chunks (2 waves x 7 against 1 x 17), timed 83 us; 256 whole requests (one wave at 2 per SM) 77 us.
    ([16] * 64, 3, 0, 6, None),
    # with SM bandwidth filled by 2 programs: 256 whole requests put 2 on the busiest SM (load 2 x 17 = 34), 768
    # chunks put 6 there (6 x 7 = 42): whole requests, as measured
    ([16] * 64, 3, 2, 16, None),
    ([16] * 64, 3, 3, 6, None),  # 3 programs fill it: 3 per SM overlap, waves decide again
    ([16] * 64, 2, 2, 16, None),  # 2 per SM: whole requests either way
    # 64 x 8192 (64 tiles), 3 per SM, chunks up to 64: waves only 768 chunks of 22 tiles (run 18: 258 us, its best);
    # at 2 one chunk per request
    ([64] * 64, 3, 0, 22, None),
    ([64] * 64, 3, 2, 64, None),
    # the same with chunks up to 32 tiles (CHUNK_BLOCKS 16, the fused template's 2 x): 512 chunks of 32 put 4 on the
    # busiest SM, run 3 + 1, the one alone at half the SM's bandwidth (H200 run 19, KV_LOAD 2: 296 us, the old rule's
    # pick); 768 of 22 put 6, run 3 + 3 (260 us, 6 x 23 = 138); 1024 of 16 put 8, run 3 + 3 + 2 (8 x 17 = 136, untimed)
    ([64] * 64, 3, 2, 16, 32),
    # a small batch never reaches the bandwidth term: batch 1 x 8192 at kv8 as waves only
    ([64], 3, 2, 2, None),
])
def test_the_bandwidth_term_keeps_near_full_batches_whole(fused, request_tiles, slots_per_sm, saturating, expected,
                                                          high):
    high = high or (max(request_tiles) if len(request_tiles) > 1 else 4)
    assert fused._wave_chunk_tiles(request_tiles, 4 if len(request_tiles) > 1 else 8, slots_per_sm * 132, 1, high,
                                   132, saturating) == expected


def test_ties_prefer_the_larger_chunk(fused):
    """One request of 3 tiles, one KV head, one slot: 1-tile chunks cost 3 waves x 2, 2-tile chunks 2 waves x 3; equal,
    so the larger (fewer partials to merge)."""
    assert fused._wave_chunk_tiles([3], 1, 1, 1, 2) == 2
    assert fused._wave_chunk_tiles([3], 1, 1, 1, 3) == 3  # one 3-tile chunk: 1 wave x 4


def test_the_plan_uses_it_only_when_asked(fused):
    """WAVE_SLOTS_PER_SM 0 (the default) keeps the rule without waves: the rendered defaults plan b16 x 8192 at kv8 in
    8-tile chunks (1024 tokens) on the interpreter's 132 SMs."""
    import torch

    assert fused.WAVE_SLOTS_PER_SM == 0
    batch, kv_heads, length = 16, 8, 8192
    q = torch.zeros(batch, 32, 128, dtype=torch.bfloat16)
    k_cache = torch.zeros(1, 1, kv_heads, 128, dtype=torch.bfloat16)
    kv_indptr = torch.arange(0, (batch + 1) * length, length, dtype=torch.int32)
    state = fused.plan(q, k_cache, k_cache, kv_indptr, None, 1.0)
    assert state["chunk_tokens"] == 8 * 128 and state["works"] == batch * 8
    fused.WAVE_SLOTS_PER_SM = 3
    try:
        state = fused.plan(q, k_cache, k_cache, kv_indptr, None, 1.0)
    finally:
        fused.WAVE_SLOTS_PER_SM = 0
    assert state["chunk_tokens"] == 11 * 128 and state["works"] == batch * 6


@pytest.mark.parametrize("registers, shared, warps, blocks", [
    # what ncu reported on the H200 (runs 13-15): the fused kernel at 168 and 209 registers, the per-KV-head one at 125
    (168, 73.7 * 1024, 4, 3),
    (209, 40 * 1024, 4, 2),
    (125, 39.2 * 1024, 4, 4),
    # shared memory binds: 100 KB per block leaves 2; none at all leaves the 32-block limit to the others
    (32, 100 * 1024, 4, 2),
    (16, 0, 1, 32),
    # warps bind: 16 warps of 32 registers -> 2048 threads / 512 = 4
    (32, 0, 16, 4),
])
def test_occupancy_counts_as_ncu_does(fused, registers, shared, warps, blocks):
    assert fused._occupancy(registers, int(shared), warps) == blocks


def test_the_compiled_kernels_occupancy_falls_back_where_nothing_is_compiled(fused):
    """-1 on a host without a GPU: the kernel cannot be compiled for a device, so PROGRAMS_PER_SM stands in and the
    state says so (on the H200 it is read from the kernel compiled for the batch)."""
    import torch

    batch, kv_heads, length = 16, 8, 8192
    q = torch.zeros(batch, 32, 128, dtype=torch.bfloat16)
    k_cache = torch.zeros(1, 1, kv_heads, 128, dtype=torch.bfloat16)
    kv_indptr = torch.arange(0, (batch + 1) * length, length, dtype=torch.int32)
    kv_indices = torch.zeros(batch * length, dtype=torch.int32)
    fused.WAVE_SLOTS_PER_SM = -1
    try:
        state = fused.plan(q, k_cache, k_cache, kv_indptr, kv_indices, 1.0)
    finally:
        fused.WAVE_SLOTS_PER_SM = 0
    assert state["wave_slots"]["per_sm"] == fused.PROGRAMS_PER_SM == 2
    assert state["wave_slots"]["from"] == "PROGRAMS_PER_SM (no kernel compiled for a GPU here)"
    # 264 slots: 16 tiles per chunk (512 programs, 2 waves x 17) beat 8 (1024, 4 x 9)
    assert state["chunk_tokens"] == 16 * 128


@pytest.mark.parametrize("request_tiles, kv_heads, enough, cap, expected", [
    # kv4 page 64 at 128-token tiles (H100 run 26): 16 x 512 whole (64 programs, no merge), 1 x 8192 in 4-tile
    # chunks (64), 1 x 2048 and 1 x 512 as split as they go (64 and 16 programs at one tile)
    ([4] * 16, 4, 64, 64, 4),
    ([64], 4, 64, 64, 4),
    ([16], 4, 64, 64, 1),
    ([4], 4, 64, 64, 1),
    # the cap (CHUNK_BLOCKS) and the longest request bound it; a larger target asks for finer chunks
    ([64], 4, 16, 8, 8),
    ([4] * 16, 4, 16, 64, 4),
    # 3-tile chunks make as many programs as 2-tile ones (3 + 1 per request): the even cut, the shorter chain
    ([4] * 16, 4, 128, 64, 2),
    # a ragged batch counts each request's own chunks (7 tiles: 5 + 1 + 1 + 1; 6 would make 9); an empty request is
    # one program however large the chunk
    ([32, 1, 1, 1], 1, 8, 64, 7),
    ([32, 1, 1, 1], 1, 9, 64, 6),
    ([0, 0], 8, 64, 64, 1),
    ([], 8, 64, 64, 1),
])
def test_enough_chunk_tiles(fused, request_tiles, kv_heads, enough, cap, expected):
    assert fused._enough_chunk_tiles(request_tiles, kv_heads, enough, cap) == expected
    programs = kv_heads * sum(max(1, -(-t // expected)) for t in request_tiles)
    assert expected == 1 or programs >= enough  # never below the target unless one tile already is


@pytest.mark.parametrize("batch, length, chunk_tokens, works", [
    (16, 512, 512, 16),  # one chunk per request: nothing to merge
    (1, 8192, 512, 16),
    (1, 2048, 128, 16),  # the split is kept where the batch is small
    (1, 512, 128, 4),
    (16, 8192, None, None),  # no lift past ENOUGH_MAX_TOKENS (4 tiles): the plan without the floor, unchanged
])
def test_enough_programs_floors_the_chunk_in_both_plans(fused, batch, length, chunk_tokens, works):
    """ENOUGH_PROGRAMS 64 at kv4: the rule without waves and the wave plan (3 slots per SM, the bandwidth term at 2)
    both take the chunk no finer than 64 programs need, up to 512 tokens; 0 (the default) leaves batch 16 x 512 in
    one-tile chunks."""
    import torch

    kv_heads = 4
    q = torch.zeros(batch, 32, 128, dtype=torch.bfloat16)
    k_cache = torch.zeros(1, 1, kv_heads, 128, dtype=torch.bfloat16)
    kv_indptr = torch.arange(0, (batch + 1) * length, length, dtype=torch.int32)
    assert fused.ENOUGH_PROGRAMS == 0 and fused.ENOUGH_MAX_TOKENS == 512 and fused.BLOCK_N == 128
    if (batch, length) == (16, 512):
        assert fused.plan(q, k_cache, k_cache, kv_indptr, None, 1.0)["chunk_tokens"] == 128

    def planned(enough, slots, saturating):
        fused.ENOUGH_PROGRAMS, fused.WAVE_SLOTS_PER_SM, fused.SATURATING_PROGRAMS_PER_SM = enough, slots, saturating
        try:
            state = fused.plan(q, k_cache, k_cache, kv_indptr, None, 1.0)
        finally:
            fused.ENOUGH_PROGRAMS, fused.WAVE_SLOTS_PER_SM, fused.SATURATING_PROGRAMS_PER_SM = 0, 0, 0
        return state["chunk_tokens"], state["works"]

    for slots, saturating in [(0, 0), (3, 2)]:
        expected = (chunk_tokens, works) if chunk_tokens else planned(0, slots, saturating)
        assert planned(64, slots, saturating) == expected, (slots, saturating)
