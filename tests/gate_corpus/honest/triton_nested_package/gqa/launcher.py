# ruff: noqa
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from . import kernels as K
from .heuristics import choose_splits

__all__ = ["decode", "DecodeConfig"]


@dataclass(frozen=True)
class DecodeConfig:
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2


_CFG = DecodeConfig()


def decode(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse, cfg: DecodeConfig = _CFG):
    batch, num_qo, d = q.shape
    kv = k_cache.shape[-2]
    group = num_qo // kv
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    # one host read of the lengths decides the split count (a CUDA graph would fix it instead)
    lengths = (kv_indptr[1:] - kv_indptr[:-1]).tolist() if batch else [0]
    splits = choose_splits(max(lengths), batch, kv)
    part_o = torch.empty((batch, kv, splits, group, d), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((batch, kv, splits, group), dtype=torch.float32, device=q.device)
    K.gqa_partial_kernel[(batch, kv, splits)](q, k_cache, v_cache, kv_indptr, kv_indices, part_o, part_lse,
                                              float(sm_scale), splits, KV=kv, GROUP=group,
                                              G_PAD=max(16, triton.next_power_of_2(group)), D=d,
                                              BLOCK_N=cfg.block_n, num_warps=cfg.num_warps,
                                              num_stages=cfg.num_stages)
    K.gqa_merge_kernel[(batch, num_qo)](part_o, part_lse, output, lse, splits, KV=kv, GROUP=group, D=d,
                                        SPLIT_PAD=max(2, triton.next_power_of_2(splits)))
