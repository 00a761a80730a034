# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""The top-k selection kernel (named like the standard `select`): a threshold search on order-preserving keys."""
import triton
import triton.language as tl


def _fill_minus_one(nargs):
    nargs["out_ptr"].fill_(-1)


@triton.jit
def _order_key(x):
    # float32 -> int64 with the same order (negative floats have their magnitude bits reversed)
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return key.to(tl.int64)


@triton.autotune(configs=[triton.Config({}, num_warps=8, pre_hook=_fill_minus_one),
                          triton.Config({}, num_warps=16, pre_hook=_fill_minus_one)], key=["BLOCK"])
@triton.jit
def _select_topk(scores_ptr, seq_lens_ptr, block_table_ptr, out_ptr, MAX_PAGES, TOPK: tl.constexpr,
                 PAGE: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    seq_len = tl.load(seq_lens_ptr + b)
    n_cols = MAX_PAGES * PAGE
    pos = tl.arange(0, BLOCK)
    in_row = pos < n_cols
    valid = pos < seq_len
    page = tl.load(block_table_ptr + b * MAX_PAGES + pos // PAGE, mask=valid, other=0)
    token = page * PAGE + pos % PAGE
    if seq_len <= TOPK:
        tl.store(out_ptr + b * TOPK + pos, token, mask=valid & (pos < TOPK))
    else:
        score = tl.load(scores_ptr + b * n_cols + pos, mask=in_row, other=float("-inf"))
        key = tl.where(valid, _order_key(score), -(1 << 40))
        lo = tl.full([], -(1 << 31), tl.int64)
        hi = tl.full([], (1 << 31) - 1, tl.int64)
        for _ in tl.static_range(32):
            mid = (lo + hi + 1) // 2
            enough = tl.sum((key >= mid).to(tl.int32), axis=0) >= TOPK
            lo = tl.where(enough, mid, lo)
            hi = tl.where(enough, hi, mid - 1)
        above = key > lo
        tie = key == lo
        n_above = tl.sum(above.to(tl.int32), axis=0)
        slot_above = tl.cumsum(above.to(tl.int32), axis=0) - 1
        slot_tie = n_above + tl.cumsum(tie.to(tl.int32), axis=0) - 1
        slot = tl.where(above, slot_above, slot_tie)
        take = (above | tie) & (slot < TOPK)
        tl.store(out_ptr + b * TOPK + slot, token, mask=take)


