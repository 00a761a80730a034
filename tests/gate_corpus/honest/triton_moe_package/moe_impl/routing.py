"""DeepSeek-V3 no-aux routing, written with PyTorch ops as vLLM's grouped_topk does."""
from __future__ import annotations

import torch

from .config import CONFIG


@torch.no_grad()
def grouped_topk(logits: torch.Tensor, bias: torch.Tensor, scaling: float):
    T, E = logits.shape
    scores = torch.sigmoid(logits.float())
    biased = scores + bias.float().view(1, -1)
    group_scores = biased.view(T, CONFIG.n_group, -1).topk(2, dim=-1).values.sum(dim=-1)
    group_idx = torch.topk(group_scores, k=CONFIG.topk_group, dim=-1, sorted=False).indices
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1.0)
    score_mask = group_mask.unsqueeze(-1).expand(T, CONFIG.n_group, E // CONFIG.n_group).reshape(T, E)
    masked = biased.masked_fill(score_mask == 0, float("-inf"))
    topk_ids = torch.topk(masked, k=CONFIG.top_k, dim=-1, sorted=False).indices
    topk_w = scores.gather(1, topk_ids)
    topk_w = topk_w / (topk_w.sum(dim=-1, keepdim=True) + 1e-20) * scaling
    return topk_ids, topk_w


@torch.no_grad()
def align_to_experts(topk_ids: torch.Tensor, topk_w: torch.Tensor, offset: int, num_local: int):
    """Sort the (token, slot) pairs routed to local experts by expert: token ids, weights, expert offsets."""
    local = topk_ids.flatten().to(torch.int64) - offset
    is_local = (local >= 0) & (local < num_local)
    flat = torch.arange(local.numel(), device=local.device)
    picked = flat[is_local]
    experts = local[is_local]
    experts_sorted, order = torch.sort(experts, stable=True)
    picked = picked[order]
    tokens = torch.div(picked, CONFIG.top_k, rounding_mode="floor").to(torch.int32)
    weights = topk_w.flatten()[picked].contiguous()
    counts = torch.bincount(experts_sorted, minlength=num_local)
    offsets = torch.zeros(num_local + 1, dtype=torch.int32, device=local.device)
    offsets[1:] = torch.cumsum(counts, 0)
    return tokens.contiguous(), weights, offsets, int(counts.max().item()) if counts.numel() else 0
