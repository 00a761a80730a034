"""FP8 block-scale DeepSeek MoE in the style of vLLM's fused-MoE wrappers (a judge-set solution, honest).

Routing, the sort of (token, expert) pairs by expert and the final sum over the top-k are PyTorch, as such wrappers
do them; the experts' two GEMMs are Triton kernels that read the FP8 operands and apply the 128-blocks' scales
inside the K loop, with the SwiGLU fused into the first. Sizes come from the tensors, so the same code runs on the
contest's definition and on smaller ones.
"""

import torch
import triton
import triton.language as tl

TOP_K = 8
N_GROUP = 8
TOPK_GROUP = 4
QBLOCK = 128  # the FP8 scales' block
BM, BN = 16, 64


@triton.jit
def _expert_rows(seg_ptr, e, mt, BM: tl.constexpr):
    """The rows (pairs sorted by expert) of tile ``mt`` of expert ``e``, which of them exist, and whether any does."""
    start = tl.load(seg_ptr + e)
    end = tl.load(seg_ptr + e + 1)
    rows = start + mt * BM + tl.arange(0, BM)
    return rows, rows < end, start + mt * BM < end


@triton.jit
def _gate_up_swiglu(x_ptr, x_scale_ptr, w_ptr, w_scale_ptr, row_token_ptr, seg_ptr, c_ptr,
                    T, H, I, n_kb,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    e = tl.program_id(0)
    nt = tl.program_id(2)
    rows, row_ok, any_row = _expert_rows(seg_ptr, e, tl.program_id(1), BM)
    if not any_row:
        return
    tokens = tl.load(row_token_ptr + rows, mask=row_ok, other=0)
    cols = nt * BN + tl.arange(0, BN)
    col_ok = cols < I
    kk = tl.arange(0, BK)
    up = tl.zeros((BM, BN), dtype=tl.float32)
    gate = tl.zeros((BM, BN), dtype=tl.float32)
    w_rows = 2 * I
    for kb in range(0, n_kb):
        k = kb * BK + kk
        x = tl.load(x_ptr + tokens[:, None] * H + k[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
        xs = tl.load(x_scale_ptr + kb * T + tokens, mask=row_ok, other=0.0)
        x = x * xs[:, None]
        wu = tl.load(w_ptr + (e * w_rows + cols[:, None]) * H + k[None, :], mask=col_ok[:, None],
                     other=0.0).to(tl.float32)
        wg = tl.load(w_ptr + (e * w_rows + I + cols[:, None]) * H + k[None, :], mask=col_ok[:, None],
                     other=0.0).to(tl.float32)
        n_blocks_out = w_rows // BK
        su = tl.load(w_scale_ptr + (e * n_blocks_out + (nt * BN) // BK) * n_kb + kb)
        sg = tl.load(w_scale_ptr + (e * n_blocks_out + (I + nt * BN) // BK) * n_kb + kb)
        up += tl.dot(x, tl.trans(wu)) * su
        gate += tl.dot(x, tl.trans(wg)) * sg
    c = up * (gate / (1.0 + tl.exp(-gate)))
    tl.store(c_ptr + rows[:, None] * I + cols[None, :], c, mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _down(c_ptr, w_ptr, w_scale_ptr, row_weight_ptr, seg_ptr, out_ptr,
          H, I, n_kb,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    e = tl.program_id(0)
    nt = tl.program_id(2)
    rows, row_ok, any_row = _expert_rows(seg_ptr, e, tl.program_id(1), BM)
    if not any_row:
        return
    cols = nt * BN + tl.arange(0, BN)
    col_ok = cols < H
    kk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    n_blocks_out = H // BK
    for kb in range(0, n_kb):
        k = kb * BK + kk
        c = tl.load(c_ptr + rows[:, None] * I + k[None, :], mask=row_ok[:, None], other=0.0)
        w = tl.load(w_ptr + (e * H + cols[:, None]) * I + k[None, :], mask=col_ok[:, None], other=0.0).to(tl.float32)
        s = tl.load(w_scale_ptr + (e * n_blocks_out + (nt * BN) // BK) * n_kb + kb)
        acc += tl.dot(c, tl.trans(w)) * s
    weight = tl.load(row_weight_ptr + rows, mask=row_ok, other=0.0)
    tl.store(out_ptr + rows[:, None] * H + cols[None, :], acc * weight[:, None],
             mask=row_ok[:, None] & col_ok[None, :])


def _route(logits, bias, scaling):
    """DeepSeek's no-aux routing: (expert ids [T, 8], weights [T, 8]) from the sigmoid scores."""
    s = torch.sigmoid(logits.float())
    biased = s + bias.float()
    t, n_experts = s.shape
    per_group = n_experts // N_GROUP
    group_best = biased.view(t, N_GROUP, per_group).topk(2, dim=-1).values.sum(-1)
    keep = torch.zeros_like(group_best, dtype=torch.bool)
    keep.scatter_(1, group_best.topk(TOPK_GROUP, dim=-1).indices, True)
    allowed = keep.repeat_interleave(per_group, dim=1)
    ids = biased.masked_fill(~allowed, float("-inf")).topk(TOP_K, dim=-1).indices
    w = s.gather(1, ids)
    return ids, w / (w.sum(-1, keepdim=True) + 1e-20) * scaling


def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    t, h = hidden_states.shape
    e_local, two_i, _ = gemm1_weights.shape
    i = two_i // 2
    ids, weights = _route(routing_logits, routing_bias, float(routed_scaling_factor))
    local = ids - int(local_expert_offset)
    mine = (local >= 0) & (local < e_local)
    pairs = mine.nonzero()  # (token, slot) of every pair this rank computes
    if pairs.shape[0] == 0:
        output.zero_()
        return
    experts = local[pairs[:, 0], pairs[:, 1]]
    order = torch.argsort(experts, stable=True)
    row_token = pairs[order, 0].to(torch.int32).contiguous()
    row_weight = weights[pairs[order, 0], pairs[order, 1]].float().contiguous()
    counts = torch.bincount(experts, minlength=e_local)
    seg = torch.zeros(e_local + 1, dtype=torch.int32, device=hidden_states.device)
    seg[1:] = torch.cumsum(counts, 0).to(torch.int32)
    rows = row_token.shape[0]
    m_tiles = triton.cdiv(int(counts.max()), BM)
    c = torch.empty(rows, i, dtype=torch.float32, device=hidden_states.device)
    _gate_up_swiglu[(e_local, m_tiles, triton.cdiv(i, BN))](
        hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale, row_token, seg, c,
        t, h, i, h // QBLOCK, BM=BM, BN=BN, BK=QBLOCK)
    per_row = torch.empty(rows, h, dtype=torch.float32, device=hidden_states.device)
    _down[(e_local, m_tiles, triton.cdiv(h, BN))](
        c, gemm2_weights, gemm2_weights_scale, row_weight, seg, per_row, h, i, i // QBLOCK, BM=BM, BN=BN, BK=QBLOCK)
    summed = torch.zeros(t, h, dtype=torch.float32, device=hidden_states.device)
    summed.index_add_(0, row_token.long(), per_row)  # the sum over the top-k, in PyTorch
    output.copy_(summed)
