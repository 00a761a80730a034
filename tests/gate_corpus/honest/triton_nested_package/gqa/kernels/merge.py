# ruff: noqa
import triton
import triton.language as tl


@triton.jit
def gqa_merge_kernel(part_o_ptr, part_lse_ptr, out_ptr, lse_ptr, NUM_SPLITS, KV: tl.constexpr,
                     GROUP: tl.constexpr, D: tl.constexpr, SPLIT_PAD: tl.constexpr):
    b = tl.program_id(0)
    hq = tl.program_id(1)
    h = hq // GROUP
    g = hq % GROUP
    s = tl.arange(0, SPLIT_PAD)
    ok = s < NUM_SPLITS
    row = ((b * KV + h) * NUM_SPLITS + s) * GROUP + g
    lse = tl.load(part_lse_ptr + row, mask=ok, other=float("-inf"))
    m = tl.max(lse, axis=0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m_use)
    total = tl.sum(w, axis=0)
    d = tl.arange(0, D)
    o = tl.load(part_o_ptr + row[:, None] * D + d[None, :], mask=ok[:, None], other=0.0)
    merged = tl.sum(o * w[:, None], axis=0) / tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + (b * KV * GROUP + hq) * D + d, merged.to(out_ptr.dtype.element_ty))
    tl.store(lse_ptr + b * KV * GROUP + hq, tl.where(total == 0.0, float("-inf"), m_use + tl.log2(total)))
