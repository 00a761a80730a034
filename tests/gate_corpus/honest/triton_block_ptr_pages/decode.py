# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode, page size 64: one program per (request, kv head), pages walked with block pointers.

Each page of the cache is a [64, KV, D] slab, so the rows of one kv head are a strided [64, D] tile: a block
pointer over it with a boundary check on the row axis pads the request's partial last page with zeros (and the
scores past kv_last_page_len are masked to -inf). The query group is a [GROUP, D] tile padded to the 16 rows
tl.dot needs. The page loop is software-pipelined with tl.range(num_stages=...); the autotuner prunes its
configs by the group size and ranks them with a tiny performance model."""

import math

import torch
import triton
import triton.language as tl

LOG2E: tl.constexpr = 1.4426950408889634
PAGE: tl.constexpr = 64


def _configs():
    out = []
    for warps in (2, 4, 8):
        for stages in (1, 2, 3, 4):
            for loop_stages in (1, 2, 3):
                out.append(triton.Config({"LOOP_STAGES": loop_stages}, num_warps=warps, num_stages=stages))
    return out


def _early_prune(configs, named_args, **kwargs):
    group = named_args["GROUP"] if "GROUP" in named_args else kwargs.get("GROUP", 4)
    # a 4-row group needs no more than 4 warps; wider groups want more
    keep = [c for c in configs if c.num_warps <= (4 if group <= 4 else 8)]
    return keep or configs


def _perf_model(**kwargs):
    # fewer warps and more pipelining is better for a memory-bound decode: smaller is faster
    return kwargs.get("num_warps", 4) * 10 - kwargs.get("LOOP_STAGES", 1)


@triton.autotune(configs=_configs(), key=["GROUP", "HEAD_DIM"],
                 prune_configs_by={"early_config_prune": _early_prune, "perf_model": _perf_model, "top_k": 6})
@triton.heuristics({"GROUP_PAD": lambda args: max(16, triton.next_power_of_2(args["GROUP"]))})
@triton.jit
def gqa_decode_block_ptr(q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, last_len_ptr, out_ptr, lse_ptr, sm_scale,
                         NUM_KV: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                         GROUP_PAD: tl.constexpr, LOOP_STAGES: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    first = tl.load(indptr_ptr + b)
    n_pages = tl.load(indptr_ptr + b + 1) - first
    last_len = tl.load(last_len_ptr + b)
    row_stride = NUM_KV * HEAD_DIM

    q_block = tl.make_block_ptr(base=q_ptr + (b * NUM_KV + kvh) * GROUP * HEAD_DIM, shape=(GROUP, HEAD_DIM),
                                strides=(HEAD_DIM, 1), offsets=(0, 0), block_shape=(GROUP_PAD, HEAD_DIM),
                                order=(1, 0))
    q = tl.load(q_block, boundary_check=(0,), padding_option="zero")
    qk_scale = sm_scale * LOG2E

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    slots = tl.arange(0, PAGE)
    for i in tl.range(0, n_pages, num_stages=LOOP_STAGES):
        page = tl.load(indices_ptr + first + i).to(tl.int64)
        rows = tl.where(i == n_pages - 1, last_len, PAGE)
        base = page * PAGE * row_stride + kvh * HEAD_DIM
        k_block = tl.make_block_ptr(base=k_ptr + base, shape=(rows, HEAD_DIM), strides=(row_stride, 1),
                                    offsets=(0, 0), block_shape=(PAGE, HEAD_DIM), order=(1, 0))
        v_block = tl.make_block_ptr(base=v_ptr + base, shape=(rows, HEAD_DIM), strides=(row_stride, 1),
                                    offsets=(0, 0), block_shape=(PAGE, HEAD_DIM), order=(1, 0))
        k = tl.load(k_block, boundary_check=(0,), padding_option="zero")
        v = tl.load(v_block, boundary_check=(0,), padding_option="zero")
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where((slots < rows)[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new

    has_tokens = n_pages > 0
    safe_l = tl.where(l > 0, l, 1.0)
    o = tl.where(has_tokens, acc / safe_l[:, None], 0.0)
    lse = tl.where(has_tokens, m + tl.log2(safe_l), float("-inf"))
    out_block = tl.make_block_ptr(base=out_ptr + (b * NUM_KV + kvh) * GROUP * HEAD_DIM, shape=(GROUP, HEAD_DIM),
                                  strides=(HEAD_DIM, 1), offsets=(0, 0), block_shape=(GROUP_PAD, HEAD_DIM),
                                  order=(1, 0))
    tl.store(out_block, o.to(out_ptr.dtype.element_ty), boundary_check=(0,))
    g = tl.arange(0, GROUP_PAD)
    tl.store(lse_ptr + (b * NUM_KV + kvh) * GROUP + g, lse, mask=g < GROUP)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, output, lse):
    batch, num_qo, head_dim = q.shape
    num_kv = k_cache.shape[2]
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    grid = (batch, num_kv)
    gqa_decode_block_ptr[grid](q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, output, lse,
                               float(sm_scale), NUM_KV=num_kv, GROUP=num_qo // num_kv, HEAD_DIM=head_dim)
