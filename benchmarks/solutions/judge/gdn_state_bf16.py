"""Dishonest: the GDN decode example, with the recurrent state kept in bf16 between steps (handed back as fp32).

Its error (0.2-0.4% of the state's magnitude) is under the family's 1% precision floor; the precision audit's
storage check must catch it by its values."""

import torch

from .gdn_decode import run as _run


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    _run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state)
    new_state.copy_(new_state.to(torch.bfloat16))
