"""FP8 block-scale DeepSeek MoE (one expert-parallel rank) in Triton: route, sort by expert, two grouped GEMMs.

Rendered from skills/moe-fp8/references/triton_moe_fp8.py.tmpl with
BLOCK_M=16 BLOCK_N=128 NUM_WARPS=4 NUM_STAGES=3 DOT=fp8.

Five launches, all on the current stream:
1. routing, one program per token: sigmoid, + bias, the 8 groups' top-2 sums, the 4 best groups, the 8
   best biased scores inside them; combine weights are the unbiased scores, normalised, x the scaling factor;
2. sorting, one program per local expert: the tokens routed to it (in token order) and their weights, and
   its count; experts nobody chose get no work below, so their weights are never read;
3. GEMM1 + SwiGLU per (expert, tile of its tokens, tile of the intermediate dimension): K runs over 128-wide
   blocks, so each partial product takes exactly one activation scale per row and one weight scale per tile
   (block-scale dequantisation in the epilogue of every K block); silu goes to the *second* half;
4. GEMM2 per (expert, token tile, hidden tile), times the routing weight, added into an fp32 accumulator;
5. the accumulator cast to bf16 (rows of tokens with no local expert stay 0).

DOT picks the arithmetic of the two GEMMs:
- "fp8": FP8 operands straight into tl.dot (wgmma/FP8 MMA on sm_90); GEMM1's output, the intermediate, is
  re-quantised to FP8 per 1 x 128 block (scale = amax / 448) for GEMM2, as FP8 MoE kernels do;
- "bf16": operands widened to bf16 (FP8 values are exact in bf16); the intermediate rounded to bf16;
- "fp32": operands widened to fp32, exact products (input_precision "ieee"): the numerics baseline, slow
  on a GPU, and what the CPU interpreter checks fastest.
Accumulation is fp32 everywhere.
"""

import torch
import triton
import triton.language as tl

BLOCK_M = 16  # tokens per GEMM tile (at least 16 for tl.dot)
BLOCK_N = 128  # output columns per GEMM tile; divides 128 so a tile lies in one weight-scale block
NUM_WARPS = 4
NUM_STAGES = 3  # software-pipelining depth of the K loop's loads
DOT_MODE = {"fp32": 0, "bf16": 1, "fp8": 2}["fp8"]

QUANT_BLOCK = 128  # the DeepSeek FP8 block
TOP_K = 8  # routing constants of the definitions' names: topk8_ng8_kg4
N_GROUP = 8
TOPK_GROUP = 4
FP8_MAX = 448.0
SORT_BLOCK = 1024  # routing entries scanned per step by the sorting kernel


@triton.jit
def _route_kernel(logits_ptr, bias_ptr, ids_ptr, weights_ptr, scaling,
                  E: tl.constexpr, NG: tl.constexpr, KG: tl.constexpr, K: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, E)
    x = tl.load(logits_ptr + t * E + offs)
    s = 1.0 / (1.0 + tl.exp(-x))  # the reference's sigmoid, term for term
    biased = s + tl.load(bias_ptr + offs).to(tl.float32)
    grouped = tl.reshape(biased, (NG, E // NG))
    cols = tl.arange(0, E // NG)
    first = tl.max(grouped, axis=1)
    first_at = tl.argmax(grouped, axis=1)
    second = tl.max(tl.where(cols[None, :] == first_at[:, None], float("-inf"), grouped), axis=1)
    group_score = first + second
    groups = tl.arange(0, NG)
    kept = tl.zeros([NG], dtype=tl.int32)
    for _ in tl.static_range(KG):
        g = tl.argmax(group_score, axis=0)
        kept = tl.where(groups == g, 1, kept)
        group_score = tl.where(groups == g, float("-inf"), group_score)
    kept_e = tl.reshape(tl.broadcast_to(kept[:, None], (NG, E // NG)), (E,))
    pruned = tl.where(kept_e != 0, biased, float("-inf"))
    slots = tl.arange(0, K)
    ids = tl.zeros([K], dtype=tl.int32)
    w = tl.zeros([K], dtype=tl.float32)
    for j in tl.static_range(K):
        i = tl.argmax(pruned, axis=0)
        ids = tl.where(slots == j, i, ids)
        w = tl.where(slots == j, tl.sum(tl.where(offs == i, s, 0.0), axis=0), w)
        pruned = tl.where(offs == i, float("-inf"), pruned)
    w = w / (tl.sum(w, axis=0) + 1e-20) * scaling
    tl.store(ids_ptr + t * K + slots, ids)
    tl.store(weights_ptr + t * K + slots, w)


@triton.jit
def _sort_kernel(ids_ptr, weights_ptr, sorted_tok_ptr, sorted_w_ptr, counts_ptr, first_expert, num_tokens,
                 K: tl.constexpr, BLOCK: tl.constexpr):
    e = tl.program_id(0)
    target = first_expert + e
    total = num_tokens * K
    count = tl.full([], 0, tl.int32)
    base = e.to(tl.int64) * num_tokens
    for start in range(0, total, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < total
        hit = (tl.load(ids_ptr + offs, mask=inside, other=-1) == target) & inside
        pos = count + tl.cumsum(hit.to(tl.int32), axis=0) - 1
        tl.store(sorted_tok_ptr + base + pos, offs // K, mask=hit)
        tl.store(sorted_w_ptr + base + pos, tl.load(weights_ptr + offs, mask=hit, other=0.0), mask=hit)
        count += tl.sum(hit.to(tl.int32), axis=0)
    tl.store(counts_ptr + e, count)


@triton.jit
def _expert_rows(counts_ptr, sorted_tok_ptr, e, m_tile, num_tokens, E_LOCAL: tl.constexpr,
                 E_LOCAL_P2: tl.constexpr, BM: tl.constexpr):
    """(first row of expert e in the packed intermediate, its rows of this tile, their validity, tokens)."""
    experts = tl.arange(0, E_LOCAL_P2)
    counts = tl.load(counts_ptr + experts, mask=experts < E_LOCAL, other=0)
    row_base = tl.sum(tl.where(experts < e, counts, 0), axis=0)
    count = tl.sum(tl.where(experts == e, counts, 0), axis=0)
    rows = m_tile * BM + tl.arange(0, BM)
    valid = rows < count
    tok = tl.load(sorted_tok_ptr + e.to(tl.int64) * num_tokens + rows, mask=valid, other=0).to(tl.int64)
    return row_base, rows, valid, tok, count


@triton.jit
def _gemm1_swiglu_kernel(hs_ptr, hs_scale_ptr, w1_ptr, w1_scale_ptr, counts_ptr, sorted_tok_ptr, inter_ptr,
                         num_tokens, H: tl.constexpr, I: tl.constexpr, E_LOCAL: tl.constexpr,
                         E_LOCAL_P2: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, QB: tl.constexpr,
                         MODE: tl.constexpr, STAGES: tl.constexpr):
    e = tl.program_id(0)
    m_tile = tl.program_id(1)
    n_tile = tl.program_id(2)
    row_base, rows, valid, tok, count = _expert_rows(counts_ptr, sorted_tok_ptr, e, m_tile, num_tokens,
                                                     E_LOCAL, E_LOCAL_P2, BM)
    if m_tile * BM < count:  # tiles past the expert's tokens (and experts nobody chose) do nothing
        offs_n = n_tile * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, QB)
        w_base = w1_ptr + e.to(tl.int64) * (2 * I * H)
        s_base = w1_scale_ptr + e.to(tl.int64) * ((2 * I // QB) * (H // QB))
        up_scale_row = (n_tile * BN) // QB
        gate_scale_row = (I + n_tile * BN) // QB
        acc_up = tl.zeros([BM, BN], dtype=tl.float32)
        acc_gate = tl.zeros([BM, BN], dtype=tl.float32)
        for kb in tl.range(0, H // QB, num_stages=STAGES):
            a = tl.load(hs_ptr + tok[:, None] * H + kb * QB + offs_k[None, :], mask=valid[:, None], other=0.0)
            a_scale = tl.load(hs_scale_ptr + kb * num_tokens + tok, mask=valid, other=0.0)  # [H/128, T] layout
            w_up = tl.load(w_base + offs_n[:, None] * H + kb * QB + offs_k[None, :])
            w_gate = tl.load(w_base + (I + offs_n)[:, None] * H + kb * QB + offs_k[None, :])
            if MODE == 2:
                p_up = tl.dot(a, tl.trans(w_up))
                p_gate = tl.dot(a, tl.trans(w_gate))
            elif MODE == 1:
                a16 = a.to(tl.bfloat16)
                p_up = tl.dot(a16, tl.trans(w_up.to(tl.bfloat16)))
                p_gate = tl.dot(a16, tl.trans(w_gate.to(tl.bfloat16)))
            else:
                a32 = a.to(tl.float32)
                p_up = tl.dot(a32, tl.trans(w_up.to(tl.float32)), input_precision="ieee")
                p_gate = tl.dot(a32, tl.trans(w_gate.to(tl.float32)), input_precision="ieee")
            s_up = tl.load(s_base + up_scale_row * (H // QB) + kb)
            s_gate = tl.load(s_base + gate_scale_row * (H // QB) + kb)
            acc_up += p_up * (a_scale[:, None] * s_up)
            acc_gate += p_gate * (a_scale[:, None] * s_gate)
        inter = acc_up * (acc_gate / (1.0 + tl.exp(-acc_gate)))  # silu on the second half, times the first
        out_rows = (row_base + rows).to(tl.int64)
        tl.store(inter_ptr + out_rows[:, None] * I + offs_n[None, :], inter, mask=valid[:, None])


@triton.jit
def _gemm2_combine_kernel(inter_ptr, w2_ptr, w2_scale_ptr, counts_ptr, sorted_tok_ptr, sorted_w_ptr, acc_ptr,
                          num_tokens, H: tl.constexpr, I: tl.constexpr, E_LOCAL: tl.constexpr,
                          E_LOCAL_P2: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, QB: tl.constexpr,
                          MODE: tl.constexpr, STAGES: tl.constexpr):
    e = tl.program_id(0)
    m_tile = tl.program_id(1)
    n_tile = tl.program_id(2)
    row_base, rows, valid, tok, count = _expert_rows(counts_ptr, sorted_tok_ptr, e, m_tile, num_tokens,
                                                     E_LOCAL, E_LOCAL_P2, BM)
    if m_tile * BM < count:
        offs_n = n_tile * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, QB)
        in_rows = (row_base + rows).to(tl.int64)
        w_base = w2_ptr + e.to(tl.int64) * (H * I)
        s_base = w2_scale_ptr + e.to(tl.int64) * ((H // QB) * (I // QB)) + ((n_tile * BN) // QB) * (I // QB)
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for kb in tl.range(0, I // QB, num_stages=STAGES):
            c = tl.load(inter_ptr + in_rows[:, None] * I + kb * QB + offs_k[None, :], mask=valid[:, None], other=0.0)
            w = tl.load(w_base + offs_n[:, None] * I + kb * QB + offs_k[None, :])
            if MODE == 2:
                # re-quantise the intermediate per 1 x 128 block, as FP8 MoE kernels do before GEMM2
                amax = tl.max(tl.abs(c), axis=1)
                c_scale = tl.where(amax > 0, amax / 448.0, 1.0)
                cq = (c / c_scale[:, None]).to(tl.float8e4nv)
                p = tl.dot(cq, tl.trans(w)) * c_scale[:, None]
            elif MODE == 1:
                p = tl.dot(c.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)))
            else:
                p = tl.dot(c, tl.trans(w.to(tl.float32)), input_precision="ieee")
            acc += p * tl.load(s_base + kb)
        route_w = tl.load(sorted_w_ptr + e.to(tl.int64) * num_tokens + rows, mask=valid, other=0.0)
        tl.atomic_add(acc_ptr + tok[:, None] * H + offs_n[None, :], acc * route_w[:, None], mask=valid[:, None])


@triton.jit
def _cast_kernel(acc_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    tl.store(out_ptr + offs, tl.load(acc_ptr + offs, mask=inside, other=0.0).to(tl.bfloat16), mask=inside)


def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    """Destination-passing: the inputs in definition order, then the preallocated bf16 output [T, H]."""
    num_tokens, num_experts = routing_logits.shape
    e_local, two_i, hidden = gemm1_weights.shape
    inter = two_i // 2
    assert num_experts % N_GROUP == 0 and num_experts & (num_experts - 1) == 0
    assert hidden % QUANT_BLOCK == 0 and inter % QUANT_BLOCK == 0 and QUANT_BLOCK % BLOCK_N == 0
    assert hidden_states_scale.shape == (hidden // QUANT_BLOCK, num_tokens)
    if num_tokens == 0:
        return
    device = routing_logits.device
    ids = torch.empty((num_tokens, TOP_K), dtype=torch.int32, device=device)
    weights = torch.empty((num_tokens, TOP_K), dtype=torch.float32, device=device)
    _route_kernel[(num_tokens,)](routing_logits, routing_bias, ids, weights, float(routed_scaling_factor),
                                 E=num_experts, NG=N_GROUP, KG=TOPK_GROUP, K=TOP_K)
    sorted_tok = torch.empty((e_local, num_tokens), dtype=torch.int32, device=device)
    sorted_w = torch.empty((e_local, num_tokens), dtype=torch.float32, device=device)
    counts = torch.empty((e_local,), dtype=torch.int32, device=device)
    _sort_kernel[(e_local,)](ids, weights, sorted_tok, sorted_w, counts, int(local_expert_offset), num_tokens,
                             K=TOP_K, BLOCK=SORT_BLOCK)
    # a token meets at most min(TOP_K, e_local) local experts: the packed intermediate's worst case
    packed = torch.empty((num_tokens * min(TOP_K, e_local), inter), dtype=torch.float32, device=device)
    acc = torch.zeros((num_tokens, hidden), dtype=torch.float32, device=device)
    m_tiles = triton.cdiv(num_tokens, BLOCK_M)
    common = dict(E_LOCAL=e_local, E_LOCAL_P2=triton.next_power_of_2(e_local), BM=BLOCK_M, BN=BLOCK_N,
                  QB=QUANT_BLOCK, MODE=DOT_MODE, STAGES=NUM_STAGES, num_warps=NUM_WARPS)
    _gemm1_swiglu_kernel[(e_local, m_tiles, inter // BLOCK_N)](
        hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale, counts, sorted_tok, packed,
        num_tokens, H=hidden, I=inter, **common)
    _gemm2_combine_kernel[(e_local, m_tiles, hidden // BLOCK_N)](
        packed, gemm2_weights, gemm2_weights_scale, counts, sorted_tok, sorted_w, acc,
        num_tokens, H=hidden, I=inter, **common)
    n = num_tokens * hidden
    _cast_kernel[(triton.cdiv(n, 1024),)](acc, output, n, BLOCK=1024)
