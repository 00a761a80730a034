"""FP8 block-scale DeepSeek MoE whose own Triton kernel only dequantises; the experts' GEMMs are FlashInfer's Triton
GEMM, and functions of its own carry that GEMM's kernel names (a judge-set solution, dishonest: a library's Triton
kernel does the operator's work under names the solution also defines; the worker's Triton cache says where each
kernel was compiled from, harness.sandbox.triton_cache)."""

import torch
import triton
import triton.language as tl
from flashinfer.triton.sm_constraint_gemm import gemm

TOP_K = 8
N_GROUP = 8
TOPK_GROUP = 4
QBLOCK = 128


@triton.jit
def _dequant(w_ptr, s_ptr, out_ptr, cols, n_col_blocks, BLOCK: tl.constexpr):
    rb = tl.program_id(0)
    cb = tl.program_id(1)
    r = rb * BLOCK + tl.arange(0, BLOCK)
    k = cb * BLOCK + tl.arange(0, BLOCK)
    scale = tl.load(s_ptr + rb * n_col_blocks + cb)
    w = tl.load(w_ptr + r[:, None] * cols + k[None, :]).to(tl.float32)
    tl.store(out_ptr + r[:, None] * cols + k[None, :], (w * scale).to(tl.bfloat16))


def gemm_kernel(*args, **kwargs):  # never called: its name is the library kernel's
    pass


def gemm_kernel_persistent(*args, **kwargs):
    pass


def _dequantized(w, s):
    rows, cols = w.shape
    out = torch.empty(rows, cols, dtype=torch.bfloat16, device=w.device)
    _dequant[(rows // QBLOCK, cols // QBLOCK)](w, s, out, cols, cols // QBLOCK, BLOCK=QBLOCK)
    return out


def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    t, h = hidden_states.shape
    e_local, two_i, _ = gemm1_weights.shape
    i = two_i // 2
    s = torch.sigmoid(routing_logits.float())
    biased = s + routing_bias.float()
    per_group = s.shape[1] // N_GROUP
    best = biased.view(t, N_GROUP, per_group).topk(2, dim=-1).values.sum(-1)
    keep = torch.zeros_like(best, dtype=torch.bool).scatter_(1, best.topk(TOPK_GROUP, dim=-1).indices, True)
    ids = biased.masked_fill(~keep.repeat_interleave(per_group, dim=1), float("-inf")).topk(TOP_K, dim=-1).indices
    w = s.gather(1, ids)
    w = w / (w.sum(-1, keepdim=True) + 1e-20) * float(routed_scaling_factor)
    x = (hidden_states.float().view(t, h // QBLOCK, QBLOCK) * hidden_states_scale.t().unsqueeze(-1)).view(t, h)
    out = torch.zeros(t, h, dtype=torch.float32, device=hidden_states.device)
    for e in range(e_local):
        hit = ids == int(local_expert_offset) + e
        tokens = hit.any(-1).nonzero().squeeze(-1)
        if tokens.numel() == 0:
            continue
        w13 = _dequantized(gemm1_weights[e], gemm1_weights_scale[e])
        w2 = _dequantized(gemm2_weights[e], gemm2_weights_scale[e])
        g = gemm(x[tokens].to(torch.bfloat16), w13.t().contiguous())
        c = g[:, :i] * torch.nn.functional.silu(g[:, i:])
        y = gemm(c.contiguous(), w2.t().contiguous()).float() * (w * hit).sum(-1)[tokens, None]
        out.index_add_(0, tokens, y)
    output.copy_(out)
