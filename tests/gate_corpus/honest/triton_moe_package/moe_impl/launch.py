from __future__ import annotations

import functools
import logging
import math
import warnings

import torch
import triton

from .config import CONFIG, DEBUG
from .kernels import gemm1_swiglu, gemm2_scaled
from .routing import align_to_experts, grouped_topk
from .utils import workspace

logger = logging.getLogger("moe_fp8")
if DEBUG:
    logging.basicConfig(level=logging.DEBUG)
warnings.filterwarnings("ignore", category=UserWarning, module="triton")


@functools.lru_cache(maxsize=64)
def _grids(num_local: int, max_rows: int, inter: int, hidden: int):
    g1 = lambda meta: (num_local, triton.cdiv(max_rows, meta["BLOCK_M"]), inter // meta["BLOCK_N"])  # noqa: E731
    g2 = lambda meta: (num_local, triton.cdiv(max_rows, meta["BLOCK_M"]), hidden // meta["BLOCK_N"])  # noqa: E731
    return g1, g2


@torch.inference_mode()
def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor):
    T = routing_logits.shape[0]
    num_local, two_i, hidden = gemm1_weights.shape
    inter = two_i // 2
    assert hidden % CONFIG.quant_block == 0 and math.gcd(inter, CONFIG.quant_block) == CONFIG.quant_block
    out = torch.zeros((T, hidden), dtype=torch.float32, device=hidden_states.device)
    if T == 0:
        return out.to(torch.bfloat16)
    ids, w = grouped_topk(routing_logits, routing_bias, float(routed_scaling_factor))
    tokens, weights, offsets, max_rows = align_to_experts(ids, w, int(local_expert_offset), num_local)
    n = tokens.numel()
    if n == 0:
        return out.to(torch.bfloat16)
    logger.debug("T=%d routed rows=%d", T, n)
    inter_buf = workspace("inter", (n, inter), torch.float32, hidden_states.device)
    rows_out = hidden_states.new_empty((n, hidden), dtype=torch.float32)
    g1, g2 = _grids(num_local, max_rows, inter, hidden)
    gemm1_swiglu[g1](hidden_states, hidden_states_scale.contiguous(), gemm1_weights, gemm1_weights_scale, offsets,
                     tokens, inter_buf, T, H=hidden, I=inter, E_LOCAL=num_local)
    gemm2_scaled[g2](inter_buf, gemm2_weights, gemm2_weights_scale, offsets, weights, rows_out, H=hidden, I=inter)
    out.index_add_(0, tokens.long(), rows_out)
    return out.to(torch.bfloat16)
