# ruff: noqa
from __future__ import annotations

from typing import Optional

import torch
import triton

from . import constants as C
from .kernels import gdn_prefill_recurrent_kernel
from .utils import input_guard, num_programs_hint


@input_guard
def _launch(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state):
    total, hq, head_k = q.shape
    hv, head_v = v.shape[1], v.shape[2]
    num_seqs = cu_seqlens.numel() - 1
    _ = num_programs_hint(q.device.index or 0)  # kept for a persistent variant
    grid = lambda meta: (triton.cdiv(head_v, meta["BV"]), num_seqs * hv)
    gdn_prefill_recurrent_kernel[grid](q, k, v, a, b, A_log, dt_bias, state, output, new_state, cu_seqlens,
                                       scale, total, HQ=hq, HV=hv, K=head_k, V=head_v)


def gdn_prefill(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale: Optional[float], output, new_state):
    if scale is None or float(scale) == 0.0:
        scale = C.DEFAULT_SCALE
    if state is None:
        state = torch.zeros_like(new_state)
    _launch(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, float(scale), output, new_state)
