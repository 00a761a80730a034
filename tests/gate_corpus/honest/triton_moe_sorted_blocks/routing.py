# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""No-aux (DeepSeek-V3) routing and the expert-sorted, block-padded token layout, in PyTorch: bookkeeping that is
cheap next to the GEMMs. Token slots are sorted by local expert with a stable argsort; each expert's run is padded
to a multiple of BLOCK_M so that one GEMM tile never mixes experts."""

from __future__ import annotations

import dataclasses
from typing import Final

import torch
import triton

N_GROUP: Final = 8
TOPK_GROUP: Final = 4
TOP_K: Final = 8


@dataclasses.dataclass(frozen=True, slots=True)
class SortedRoutes:
    slot_ids: torch.Tensor  # [padded] token*TOP_K + k, or -1 for padding
    block_expert: torch.Tensor  # [num_blocks] local expert of each BLOCK_M rows
    weights: torch.Tensor  # [T, TOP_K] float32
    num_blocks: int


def route(logits: torch.Tensor, bias: torch.Tensor, scaling: float):
    sig = torch.sigmoid(logits.float())
    biased = sig + bias.float()
    t, e = biased.shape
    per_group = e // N_GROUP
    top2 = torch.topk(biased.view(t, N_GROUP, per_group), 2, dim=-1).values
    group_score = top2.sum(dim=-1)
    chosen_groups = torch.topk(group_score, TOPK_GROUP, dim=-1).indices
    group_keep = torch.zeros(t, N_GROUP, dtype=torch.bool, device=logits.device)
    group_keep[torch.arange(t, device=logits.device)[:, None], chosen_groups] = True
    expert_keep = group_keep[:, :, None].expand(t, N_GROUP, per_group).reshape(t, e)
    candidates = torch.where(expert_keep, biased, torch.full_like(biased, float("-inf")))
    topk_ids = torch.topk(candidates, TOP_K, dim=-1).indices
    w = torch.gather(sig, 1, topk_ids)
    w = w * (scaling / (w.sum(dim=-1, keepdim=True) + 1e-20))
    return topk_ids, w


def sort_routes(topk_ids: torch.Tensor, weights: torch.Tensor, local_offset: int, num_local: int,
                block_m: int) -> SortedRoutes:
    device = topk_ids.device
    local = topk_ids.flatten().to(torch.int64) - local_offset
    foreign = (local < 0) | (local >= num_local)
    local = local.masked_fill(foreign, num_local)
    order = torch.argsort(local, stable=True)
    counts = torch.bincount(local, minlength=num_local + 1)[:num_local]
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(counts, 0) - counts
    padded_starts = torch.cumsum(padded, 0) - padded
    # the host needs the grid size: one sync, as vLLM's moe_align_block_size has
    total = int(padded.sum().item())
    num_blocks = triton.cdiv(max(total, block_m), block_m)
    slot_ids = torch.full((num_blocks * block_m,), -1, dtype=torch.int32, device=device)
    sorted_local = local[order]
    keep = sorted_local < num_local
    rank = torch.arange(order.numel(), device=device) - starts[sorted_local.clamp(max=num_local - 1)]
    dest = padded_starts[sorted_local.clamp(max=num_local - 1)] + rank
    slot_ids[dest[keep]] = order[keep].to(torch.int32)
    block_expert = torch.repeat_interleave(torch.arange(num_local, device=device, dtype=torch.int32),
                                           padded // block_m)
    block_expert = torch.nn.functional.pad(block_expert, (0, num_blocks - block_expert.numel()), value=-1)
    return SortedRoutes(slot_ids, block_expert, weights.float().contiguous(), num_blocks)
