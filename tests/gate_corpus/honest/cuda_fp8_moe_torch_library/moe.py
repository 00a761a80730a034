# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""DeepSeek-style FP8 block-scale MoE: no-aux routing and the expert sort in PyTorch (cheap bookkeeping), the two
grouped GEMMs in CUDA kernels registered as torch ops (TORCH_LIBRARY) and built from kernels/ next to this file."""

from pathlib import Path

import torch
from torch.utils.cpp_extension import load

_KERNELS = Path(__file__).resolve().parent / "kernels"

load(
    name="moe_fp8_grouped",
    sources=[str(_KERNELS / "grouped_gemm.cu"), str(_KERNELS / "ops.cpp")],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo", "-gencode=arch=compute_90a,code=sm_90a"],
    is_python_module=False,  # the library registers torch.ops.moe_fp8.* at load
    verbose=False,
)

N_GROUP, TOPK_GROUP, TOP_K = 8, 4, 8
BLOCK = 128


def _route(routing_logits, routing_bias, routed_scaling_factor):
    """No-aux routing: expert choice on sigmoid + bias within the best groups, weights from the plain sigmoid."""
    s = routing_logits.float().sigmoid()
    biased = s + routing_bias.float()
    t, e = biased.shape
    grouped = biased.view(t, N_GROUP, e // N_GROUP)
    group_scores = grouped.topk(2, dim=-1).values.sum(-1)
    best_groups = group_scores.topk(TOPK_GROUP, dim=-1).indices
    keep = torch.zeros_like(group_scores).scatter_(1, best_groups, 1.0)
    masked = biased.masked_fill(keep.repeat_interleave(e // N_GROUP, dim=1) == 0, float("-inf"))
    topk_ids = masked.topk(TOP_K, dim=-1).indices
    w = s.gather(1, topk_ids)
    w = w / (w.sum(-1, keepdim=True) + 1e-20) * routed_scaling_factor
    return topk_ids, w


def _sort_by_expert(topk_ids, local_offset, num_local):
    """Token slots grouped by local expert: a stable argsort of the expert ids, bincount/cumsum offsets."""
    flat = topk_ids.flatten() - local_offset
    local = (flat >= 0) & (flat < num_local)
    key = torch.where(local, flat, torch.full_like(flat, num_local))  # foreign experts sort last
    order = torch.argsort(key, stable=True)
    counts = torch.bincount(key, minlength=num_local + 1)[:num_local]
    offsets = torch.zeros(num_local + 1, dtype=torch.int32, device=topk_ids.device)
    offsets[1:] = torch.cumsum(counts, 0)
    return order.to(torch.int32), offsets


def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    t, hidden = hidden_states.shape
    num_local, gemm1_out, _ = gemm1_weights.shape
    inter = gemm1_out // 2
    topk_ids, weights = _route(routing_logits, routing_bias, float(routed_scaling_factor))
    order, offsets = _sort_by_expert(topk_ids, int(local_expert_offset), num_local)
    act = torch.empty(t * TOP_K, inter, dtype=torch.float32, device=hidden_states.device)
    acc = torch.zeros(t, hidden, dtype=torch.float32, device=hidden_states.device)
    torch.ops.moe_fp8.gemm1_swiglu(hidden_states.view(torch.uint8), hidden_states_scale,
                                   gemm1_weights.view(torch.uint8), gemm1_weights_scale, order, offsets, act, TOP_K)
    torch.ops.moe_fp8.gemm2_combine(act, gemm2_weights.view(torch.uint8), gemm2_weights_scale, order, offsets,
                                    weights.float().contiguous(), acc, TOP_K)
    torch.ops.moe_fp8.to_bf16(acc, output)
