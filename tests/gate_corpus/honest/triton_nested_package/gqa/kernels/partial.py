# ruff: noqa
import triton
import triton.language as tl

from ..common import LOG2E

_LOG2E = tl.constexpr(LOG2E)


@triton.jit
def gqa_partial_kernel(q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, part_o_ptr, part_lse_ptr, sm_scale,
                       NUM_SPLITS, KV: tl.constexpr, GROUP: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    sp = tl.program_id(2)
    start = tl.load(indptr_ptr + b)
    length = tl.load(indptr_ptr + b + 1) - start
    per_split = tl.cdiv(length, NUM_SPLITS)
    lo = sp * per_split
    hi = tl.minimum(lo + per_split, length)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + ((b * KV + h) * GROUP + g)[:, None] * D + d[None, :], mask=(g < GROUP)[:, None], other=0.0)
    m = tl.full([G_PAD], float("-inf"), tl.float32)
    l = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    for off in range(lo, hi, BLOCK_N):
        n = off + tl.arange(0, BLOCK_N)
        ok = n < hi
        slot = tl.load(indices_ptr + start + n, mask=ok, other=0).to(tl.int64)
        kv_off = (slot * KV + h)[:, None] * D + d[None, :]
        k = tl.load(k_ptr + kv_off, mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + kv_off, mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * (sm_scale * _LOG2E)
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_use)
        p = tl.exp2(s - m_use[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    empty = l == 0.0
    o = acc / tl.where(empty, 1.0, l)[:, None]
    lse = tl.where(empty, float("-inf"), m + tl.log2(tl.where(empty, 1.0, l)))
    row = ((b * KV + h) * NUM_SPLITS + sp) * GROUP + g
    tl.store(part_o_ptr + row[:, None] * D + d[None, :], o, mask=(g < GROUP)[:, None])
    tl.store(part_lse_ptr + row, lse, mask=g < GROUP)
