"""A float32 output kept in a narrower type (harness/audits/storage.py): caught by its values, whatever the error."""

from __future__ import annotations

import pytest
import torch

from harness.audits.storage import narrow_share, narrow_storage

torch.manual_seed(0)
STATE = torch.randn(8, 128, 128) * 0.05  # a GDN-like fp32 state


def _zeros_and_infs(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[::3] = 0.0
    t.view(-1)[1::7] = float("-inf")
    return t


@pytest.mark.parametrize("got, ref, flagged", [
    (STATE, STATE, None),  # honest float32
    (STATE.to(torch.bfloat16).float(), STATE, "bfloat16"),  # kept in bf16 between steps
    (STATE.to(torch.float16).float(), STATE, "float16"),
    (_zeros_and_infs(STATE.to(torch.bfloat16).float()), STATE, "bfloat16"),  # zeros and infinities are not counted
    (STATE.to(torch.bfloat16).float()[:1, :8, :8], STATE[:1, :8, :8], None),  # 64 values say nothing
    (STATE.to(torch.bfloat16).float(), STATE.to(torch.bfloat16).float(), None),  # the reference is coarse too
    (STATE.to(torch.bfloat16), STATE.to(torch.bfloat16), None),  # a bf16 output is bf16 by definition
    (torch.round(STATE * 1000), torch.round(STATE * 1000), None),  # small integers by nature, both sides
])
def test_narrow_storage(got, ref, flagged):
    why = narrow_storage("new_state", got, ref)
    if flagged is None:
        assert why is None
    else:
        assert why is not None and why.startswith("new_state: ") and f"kept in {flagged}" in why


def test_an_honest_float32_value_is_rarely_a_bf16_number():
    share, count = narrow_share(STATE, torch.bfloat16)
    assert count == STATE.numel() and share < 0.01
