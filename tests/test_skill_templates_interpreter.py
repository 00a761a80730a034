"""The gqa-decode skill's kernel templates on Triton's CPU interpreter: one rendered configuration of each kind and of
each path (page sizes, inner-product paths, merges, plans, the page indices ahead and TMA boxes) against the
reference on small batches with empty requests, partial last pages and NaN in the slots past a request's end."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.skills import KernelTemplate, kernel_templates, load_skills, machine_blocks, render_skill_template
from support import paged_decode_reference

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gqa():
    return load_skills(REPO / "skills")["gqa-decode"]


INTERPRETER_CHECK = r'''
import json, math, os, sys
assert os.environ.get("TRITON_INTERPRET") == "1"  # must be set before triton is imported
import importlib.util
import torch

''' + inspect.getsource(paged_decode_reference) + r'''
reference = paged_decode_reference

def failures(candidate, expected, atol, rtol):
    """Elements failing the official rule; -inf must match -inf exactly."""
    candidate = candidate.float()
    matched_inf = torch.isneginf(candidate) & torch.isneginf(expected)
    error = (candidate - expected).abs()
    bad = (error > atol) & (error / (expected.abs() + 1e-8) > rtol)
    bad = (bad | ~torch.isfinite(candidate)) & ~matched_inf
    return int(bad.sum())

case = json.loads(sys.argv[1])
if case.get("patch_interpreter"):  # bf16 tl.dot: the harness's interpreter fixes, as its workers apply them
    sys.path.insert(0, case["root"])
    from harness.sandbox import triton_interp
    assert triton_interp.apply()
spec = importlib.util.spec_from_file_location("candidate", case["path"])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

torch.manual_seed(case["seed"])
page_size, kv_heads, lengths = case["page_size"], case["kv_heads"], case["lengths"]
pages_per_request = [-(-length // page_size) for length in lengths]
pool = sum(pages_per_request) + 5
kv_indices = torch.randperm(pool)[: sum(pages_per_request)].to(torch.int32)  # scattered pages
kv_indptr = torch.tensor([0] + torch.tensor(pages_per_request).cumsum(0).tolist(), dtype=torch.int32)
if case.get("indptr_offset"):  # the batch's pages start past other entries of kv_indices (one batch of a larger pool)
    kv_indices = torch.cat([torch.randint(0, pool, (case["indptr_offset"],), dtype=torch.int32), kv_indices])
    kv_indptr = kv_indptr + case["indptr_offset"]
last_page_len = torch.tensor([length - (n - 1) * page_size if n else 0
                              for length, n in zip(lengths, pages_per_request)], dtype=torch.int32)
q = torch.randn(len(lengths), 32, 128).to(torch.bfloat16)
k_cache = torch.randn(pool, page_size, kv_heads, 128).to(torch.bfloat16)
v_cache = torch.randn(pool, page_size, kv_heads, 128).to(torch.bfloat16)
if case.get("nan_tail"):  # the slots past each request's end in its last page hold NaN: a kernel must not read them in
    for end, n, last in zip(kv_indptr[1:].tolist(), pages_per_request, last_page_len.tolist()):
        if n:
            k_cache[kv_indices[end - 1], last:] = float("nan")
            v_cache[kv_indices[end - 1], last:] = float("nan")
sm_scale = 1.0 / math.sqrt(128)
output = torch.full((len(lengths), 32, 128), float("nan")).to(torch.bfloat16)  # poisoned, like the harness
lse = torch.full((len(lengths), 32), float("nan"))
inputs = [q, k_cache, v_cache, kv_indptr, kv_indices] + ([last_page_len] if page_size > 1 else []) + [sm_scale]
snapshot = [x.clone() if torch.is_tensor(x) else x for x in inputs]
state = module.plan(*inputs) if case.get("setup") else None  # the solution's setup, once per batch
if "chunk_tokens" in case:  # the plan's chunk size, where the case is about it
    assert state["chunk_tokens"] == case["chunk_tokens"], ("chunk_tokens", state["chunk_tokens"])
if "one_request" in case:  # batch 1's first page and length as launch arguments
    assert state["one_request"] == case["one_request"], ("one_request", state["one_request"])
if "wave_from" in case:  # where the programs per SM of the wave plan came from
    assert state["wave_slots"]["from"].startswith(case["wave_from"]), state["wave_slots"]
calls = 2 if state is not None else 1  # a planned kernel's state is reused: the second call must be right too
for _ in range(calls):
    output.fill_(float("nan")); lse.fill_(float("nan"))
    result = module.run(*inputs, output, lse, *([state] if state is not None else []))
expected_output, expected_lse = reference(q, k_cache, v_cache, kv_indptr, kv_indices,
                                          last_page_len if page_size > 1 else None, sm_scale)
print(json.dumps({
    "returned_none": result is None,
    "output_failures": failures(output, expected_output, case["atol"], case["rtol"]),
    "lse_failures": failures(lse, expected_lse, case["atol"], case["rtol"]),
    "empty_rows_zero": all(bool((output[b] == 0).all()) for b, n in enumerate(lengths) if n == 0),
    "empty_lse_neg_inf": all(bool(torch.isneginf(lse[b]).all()) for b, n in enumerate(lengths) if n == 0),
    "inputs_unchanged": all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))  # bit for bit: NaN too
                            for a, b in zip(inputs, snapshot) if torch.is_tensor(a)),
}))
'''

# The fused template with batch 1's page and length as launch arguments; the cases below change what they are about
ONE_REQUEST = {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 0, "CHUNK_BLOCKS": 1,
               "PROGRAMS_PER_SM": 8, "HEADS_FASTEST": 1, "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1,
               "MERGE_FANIN": 0, "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
               "MAX_REGISTERS": 0, "KV_LOAD": 0, "SATURATING_PROGRAMS_PER_SM": 0, "ONE_REQUEST_SCALARS": 1}

# One rendered template of each kind, covering both page sizes, both KV-head counts, both
# inner-product paths, an empty request (page size 1) and a multi-page partial last page (64).
INTERPRETER_CASES = [
    ("triton-per-kv-head", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 0, "KV_LOAD": 0,
                            "KV_LOAD_MIN_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [5, 0]}),
    ("triton-split-kv", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 1, "SPLIT_KV": 4},
     {"kv_heads": 4, "lengths": [70, 3]}),
    # chunks of one size for the batch: 160 tiles over 132 programs (the interpreter counts 132 SMs) make 2-tile
    # chunks (300 tokens: 10 chunks of 32; 5 tokens: 1), an empty request, the fused merge
    ("triton-split-kv-fused", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 0,
                               "CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 0,
                               "MERGE_STAGES": 1, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [300, 0, 5], "setup": True}),
    # one-tile chunks: 19 partials for the long request (a pipelined merge loop unrolled by 4: 19 is no multiple
    # of it); the other grid order; a register cap (`maxnreg`, a compile option the interpreter leaves out)
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 1,
                               "CHUNK_BLOCKS": 1, "PROGRAMS_PER_SM": 8, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 3, "MERGE_UNROLL": 4, "MERGE_BLOCK": 1, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 168, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [300, 0, 64], "setup": True}),
    # bf16 tiles straight to tl.dot (P rounded to bf16), under the harness's interpreter fixes
    ("triton-per-kv-head", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                            "KV_LOAD": 0, "KV_LOAD_MIN_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [70, 0], "patch_interpreter": True}),
    ("triton-split-kv-fused", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 8, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [300, 5, 0], "setup": True, "patch_interpreter": True}),
    # the two-level merge: one-tile chunks, 10 and 5 of them in groups of 4 (3 groups, the last of 2; 2 groups, the
    # last of 1), a request of 3 chunks merged in one level, an empty request; both calls reuse the counters
    ("triton-split-kv-fused", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 0,
                               "CHUNK_BLOCKS": 1, "PROGRAMS_PER_SM": 8, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 4,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [150, 80, 0, 40], "setup": True}),
    # the tokens on the MMA's M, the group on N (USE_DOT 3): 4 query heads per KV head (kv8, padded to N 8 by Triton)
    # and 8 (kv4, exact), one program per KV head and the fused plan, both page sizes
    ("triton-per-kv-head", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 3, "KV_LOAD": 0,
                            "KV_LOAD_MIN_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [37, 0], "patch_interpreter": True}),
    ("triton-split-kv", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 3, "SPLIT_KV": 4},
     {"kv_heads": 4, "lengths": [70, 3], "patch_interpreter": True}),
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 3,
                               "CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 3, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 4,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [300, 0, 64], "setup": True, "patch_interpreter": True}),
    # page size 64, bf16 tiles, groups of 8 (19 chunks: 3 groups), the other grid order
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 1, "PROGRAMS_PER_SM": 8, "HEADS_FASTEST": 0,
                               "MERGE_STAGES": 3, "MERGE_UNROLL": 2, "MERGE_BLOCK": 1, "MERGE_FANIN": 8,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [300, 0, 64], "setup": True, "patch_interpreter": True}),
    # a one-chunk request writes its output itself: 4-tile chunks at least (MIN_CHUNK_BLOCKS), so 40 tokens (3 tiles)
    # and 64 are one chunk each, 150 is three (merged), the empty request one empty chunk written directly
    ("triton-split-kv-fused", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 0,
                               "CHUNK_BLOCKS": 8, "PROGRAMS_PER_SM": 8, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 4, "SINGLE_CHUNK_DIRECT": 1, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [40, 150, 0, 64], "setup": True}),
    # chunks no finer than 32 programs need (ENOUGH_PROGRAMS) on the wave plan: 10-tile chunks (19 tiles: two, merged;
    # 9 tiles would make 40 programs, 16 as many as 10 in a longer chain), the short and empty requests written directly
    ("triton-split-kv-fused", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 0,
                               "CHUNK_BLOCKS": 16, "PROGRAMS_PER_SM": 2, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 1, "WAVE_SLOTS_PER_SM": 2,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0, "SATURATING_PROGRAMS_PER_SM": 2,
                               "ENOUGH_PROGRAMS": 32},
     {"kv_heads": 8, "lengths": [300, 0, 5], "setup": True, "chunk_tokens": 160}),
    # every request one chunk (the large-batch case), bf16 tiles, page size 64 with a partial last page, groups of 8
    # never reached
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 8, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 0,
                               "MERGE_STAGES": 3, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 8,
                               "MIN_CHUNK_BLOCKS": 8, "SINGLE_CHUNK_DIRECT": 1, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [100, 0, 64, 7], "setup": True, "patch_interpreter": True}),
    # chunks sized for whole waves of 2 programs per SM (264 slots): 21 one-tile chunks per KV head fill one wave
    # where the rule without it makes 2-tile chunks (19 partials for the long request, two-level merge)
    ("triton-split-kv-fused", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 0,
                               "CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 8,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 1, "WAVE_SLOTS_PER_SM": 2,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [300, 0, 5], "setup": True, "chunk_tokens": 16}),
    # -1: programs per SM from the compiled kernel; the interpreter compiles nothing, so PROGRAMS_PER_SM (1) stands
    # in, as the state says: 132 slots, one-tile chunks make 168 programs (2 waves x 2 tiles' cost) against 2-tile
    # chunks' 96 (1 wave x 3): 2 tiles; bf16 tiles, page size 64
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 2, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 0,
                               "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 4,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": -1,
                               "MAX_REGISTERS": 0, "KV_LOAD": 0,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [300, 0, 5], "setup": True, "chunk_tokens": 32, "patch_interpreter": True,
      "wave_from": "PROGRAMS_PER_SM"}),
    # K/V tiles as TMA boxes (KV_LOAD 2), page indices a step ahead: 16-token boxes in chunks of 8 steps (two pages,
    # MIN_CHUNK_BLOCKS), the fused merge, NaN in every slot past a request's end (a box reads the whole page slice:
    # scores masked, V rows zeroed)
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 8, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 3, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 4,
                               "MIN_CHUNK_BLOCKS": 8, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 2,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [300, 0, 64, 7], "setup": True, "patch_interpreter": True, "nan_tail": True,
      "chunk_tokens": 128}),
    # BLOCK_N 128 over pages of 64: a box is one page, two steps per block; kv8, a one-chunk request written directly
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 128, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 1, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 0,
                               "MERGE_STAGES": 1, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 1, "SINGLE_CHUNK_DIRECT": 1, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 2,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [300, 0, 100], "setup": True, "patch_interpreter": True, "nan_tail": True,
      "chunk_tokens": 128}),
    # the per-KV-head kernel with TMA boxes (KV_LOAD 2): 32-token boxes, whole requests of 300 and 64 tokens and a
    # partial one, NaN past every request's end; and with the page indices ahead over pages of 1
    ("triton-per-kv-head", {"PAGE_SIZE": 64, "BLOCK_N": 32, "NUM_WARPS": 4, "NUM_STAGES": 3, "USE_DOT": 2,
                            "KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [300, 0, 64, 7], "patch_interpreter": True, "nan_tail": True}),
    ("triton-per-kv-head", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 3, "USE_DOT": 2,
                            "KV_LOAD": 1, "KV_LOAD_MIN_PROGRAMS_PER_SM": 0},
     {"kv_heads": 8, "lengths": [70, 0, 5], "patch_interpreter": True}),
    # one kernel, both load paths (KV_LOAD_MIN_PROGRAMS_PER_SM 1: boxes from 132 programs, the interpreter's SM count):
    # 33 requests x 4 KV heads take the boxes, 3 requests the pointer loads
    ("triton-per-kv-head", {"PAGE_SIZE": 64, "BLOCK_N": 32, "NUM_WARPS": 4, "NUM_STAGES": 3, "USE_DOT": 2,
                            "KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 1},
     {"kv_heads": 4, "lengths": [300, 0, 64, 7] + [33] * 29, "patch_interpreter": True, "nan_tail": True}),
    ("triton-per-kv-head", {"PAGE_SIZE": 64, "BLOCK_N": 32, "NUM_WARPS": 4, "NUM_STAGES": 3, "USE_DOT": 2,
                            "KV_LOAD": 2, "KV_LOAD_MIN_PROGRAMS_PER_SM": 1},
     {"kv_heads": 4, "lengths": [300, 0, 7], "patch_interpreter": True, "nan_tail": True}),
    # page indices a step ahead with pointer loads (KV_LOAD 1): 32-token steps over pages of 64, chunks of 4 steps
    ("triton-split-kv-fused", {"PAGE_SIZE": 64, "BLOCK_N": 32, "NUM_WARPS": 4, "NUM_STAGES": 3, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 4, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 1, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 4, "SINGLE_CHUNK_DIRECT": 1, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 1,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [300, 0, 64, 7], "setup": True, "patch_interpreter": True, "nan_tail": True,
      "chunk_tokens": 128}),
    # page size 1 has no box to take: KV_LOAD 2 is 1 there (every token its own page index, a step ahead)
    ("triton-split-kv-fused", {"PAGE_SIZE": 1, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2, "USE_DOT": 2,
                               "CHUNK_BLOCKS": 4, "PROGRAMS_PER_SM": 1, "HEADS_FASTEST": 1,
                               "MERGE_STAGES": 2, "MERGE_UNROLL": 1, "MERGE_BLOCK": 1, "MERGE_FANIN": 0,
                               "MIN_CHUNK_BLOCKS": 4, "SINGLE_CHUNK_DIRECT": 0, "WAVE_SLOTS_PER_SM": 0,
                               "MAX_REGISTERS": 0, "KV_LOAD": 2,
                               "SATURATING_PROGRAMS_PER_SM": 0},
     {"kv_heads": 4, "lengths": [70, 5, 0], "setup": True, "patch_interpreter": True, "chunk_tokens": 64}),
    # a batch of three with ONE_REQUEST_SCALARS 1: no launch arguments, the descriptors as before; kv8, page size 64
    ("triton-split-kv-fused", {**ONE_REQUEST, "PAGE_SIZE": 64, "USE_DOT": 2, "HEADS_FASTEST": 0, "MERGE_FANIN": 4},
     {"kv_heads": 8, "lengths": [300, 0, 64], "setup": True, "patch_interpreter": True, "one_request": None}),
    # batch 1 with its page and length as launch arguments, its pages past 7 other entries of kv_indices: TMA
    # boxes of 16 tokens, NaN past the end, 5 chunks of 4 steps merged in one level
    ("triton-split-kv-fused", {**ONE_REQUEST, "PAGE_SIZE": 64, "USE_DOT": 2, "CHUNK_BLOCKS": 4, "PROGRAMS_PER_SM": 1,
                               "MERGE_STAGES": 3, "MERGE_FANIN": 8, "MIN_CHUNK_BLOCKS": 4, "SINGLE_CHUNK_DIRECT": 1,
                               "KV_LOAD": 2},
     {"kv_heads": 4, "lengths": [300], "setup": True, "patch_interpreter": True, "nan_tail": True,
      "indptr_offset": 7, "one_request": [7, 300]}),
    # batch 1 on page size 1 with the two-level merge (19 one-tile chunks in groups of 4) and the other grid order
    ("triton-split-kv-fused", {**ONE_REQUEST, "HEADS_FASTEST": 0, "MERGE_FANIN": 4},
     {"kv_heads": 8, "lengths": [300], "setup": True, "indptr_offset": 3, "one_request": [3, 300]}),
    # batch 1 of an empty request: one empty chunk, merged into 0 and -inf
    ("triton-split-kv-fused", ONE_REQUEST,
     {"kv_heads": 8, "lengths": [0], "setup": True, "indptr_offset": 2, "one_request": [2, 0]}),
]


def _triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None and importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(not _triton_available(), reason="triton and torch are needed for the interpreter check")
@pytest.mark.parametrize("name, params, case", INTERPRETER_CASES,
                         ids=[f"{c[0]}-ps{c[1]['PAGE_SIZE']}-dot{c[1]['USE_DOT']}-fanin{c[1].get('MERGE_FANIN', 0)}"
                              f"{'-direct' if c[1].get('SINGLE_CHUNK_DIRECT') else ''}"
                              f"{'-wave' if c[1].get('WAVE_SLOTS_PER_SM') else ''}"
                              f"{'-load' + str(c[1]['KV_LOAD']) if c[1].get('KV_LOAD') else ''}"
                              f"{'-min' + str(len(c[2]['lengths'])) if c[1].get('KV_LOAD_MIN_PROGRAMS_PER_SM') else ''}"
                              f"{'-one' if c[1].get('ONE_REQUEST_SCALARS') else ''}"
                              for c in INTERPRETER_CASES])
def test_template_matches_reference_on_triton_interpreter(gqa, tmp_path, name, params, case):
    (block,) = machine_blocks(gqa)
    template: KernelTemplate = kernel_templates(gqa)[name]
    params = {**template.defaults, **params}  # a placeholder a case leaves out (one added since) at its default
    kernel_file = tmp_path / "kernel.py"
    kernel_file.write_text(render_skill_template(gqa, template, params), encoding="utf-8")
    script = tmp_path / "check.py"
    script.write_text(INTERPRETER_CHECK, encoding="utf-8")
    argument = json.dumps({
        "path": str(kernel_file), "page_size": params["PAGE_SIZE"], "seed": 0,
        "atol": block["tolerances"]["atol"], "rtol": block["tolerances"]["rtol"], "root": str(REPO), **case,
    })
    # A fresh process: TRITON_INTERPRET is read when triton is imported.
    environment = dict(os.environ, TRITON_INTERPRET="1")
    completed = subprocess.run([sys.executable, str(script), argument], capture_output=True, text=True,
                               env=environment, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report == {
        "returned_none": True, "output_failures": 0, "lse_failures": 0,
        "empty_rows_zero": True, "empty_lse_neg_inf": True, "inputs_unchanged": True,
    }
