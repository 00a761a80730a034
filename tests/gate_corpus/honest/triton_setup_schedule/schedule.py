# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Setup for GDN prefill: a longest-first schedule of the packed sequences (FlashInfer's plan() idiom).

Read once per input set on the host: the sequence lengths from cu_seqlens, sorted longest first so the longest
serial chains start in the first wave, as an int32 tensor on the device the kernel indexes by program id."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

import numpy as np
import torch


@dataclass
class PrefillSchedule:
    num_seqs: int
    order: torch.Tensor  # [num_seqs] int32: program i runs sequence order[i]
    longest: int
    lengths: List[int] = field(default_factory=list)


def plan(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale) -> PrefillSchedule:
    bounds = np.asarray(cu_seqlens.detach().cpu().tolist(), dtype=np.int64)
    lengths = np.diff(bounds) if bounds.size > 1 else np.zeros(0, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable").astype(np.int32)
    return PrefillSchedule(num_seqs=int(lengths.size), order=torch.from_numpy(order).to(q.device),
                           longest=int(lengths.max()) if lengths.size else 0, lengths=lengths.tolist())
