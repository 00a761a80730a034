"""FlashInfer-style plan: the work list (request, first token, last token) of every KV chunk, made on the host."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

CHUNK = 32


@dataclass(frozen=True)
class DecodePlan:
    work_req: torch.Tensor
    work_start: torch.Tensor
    work_end: torch.Tensor
    merge_ptr: torch.Tensor
    num_work: int
    max_splits: int
    partial_o: torch.Tensor
    partial_ml: torch.Tensor


def plan(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale) -> DecodePlan:
    indptr = kv_indptr.cpu().numpy().astype(np.int64)
    lens = np.diff(indptr)
    splits = np.maximum(1, -(-lens // CHUNK))
    req = np.repeat(np.arange(len(lens)), splits)
    first = np.concatenate([[0], np.cumsum(splits)[:-1]]).astype(np.int64) if len(lens) else np.zeros(0, np.int64)
    local = np.arange(len(req)) - np.repeat(first, splits)
    start = indptr[:-1][req] + local * CHUNK
    end = np.minimum(start + CHUNK, indptr[1:][req])
    merge_ptr = np.concatenate([[0], np.cumsum(splits)]).astype(np.int32)
    dev = q.device
    heads, dim = q.shape[1], q.shape[2]
    as_dev = lambda a, dt: torch.from_numpy(np.ascontiguousarray(a)).to(device=dev, dtype=dt)  # noqa: E731
    return DecodePlan(as_dev(req, torch.int32), as_dev(start, torch.int32), as_dev(end, torch.int32),
                      as_dev(merge_ptr, torch.int32), int(len(req)), int(splits.max()) if len(splits) else 1,
                      torch.empty((len(req), heads, dim), dtype=torch.float32, device=dev),
                      torch.empty((len(req), heads, 2), dtype=torch.float32, device=dev))
