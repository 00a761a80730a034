"""A float32 output kept in a narrower type: part of the precision audit (pure, on tensors).

A recurrent state stored in bf16 between steps (the GDN state is 64 KiB of fp32 per head, half the traffic in bf16)
can stay inside a relative precision floor set for bf16 outputs, so the mean error alone does not catch it. Its
values do: they come back every one exactly a bf16 (or fp16) number, which an honest float32 computation gives for
about 1 value in 65536. Compared with the reference's own output, so outputs coarse by nature are never flagged.
"""

from __future__ import annotations

from typing import Optional

import torch

# A float32 output kept in a narrower type (a recurrent state stored in bf16 between steps) comes back with every
# value exactly a bf16 (or fp16) number; an honest float32 computation gives that for about 1 value in 65536.
NARROW_TYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
NARROW_SHARE = 0.9  # of the nonzero finite values, for the candidate...
NARROW_SHARE_REFERENCE = 0.5  # ...while the reference's own output is not (outputs that are coarse by nature)
NARROW_MIN_VALUES = 256  # fewer values say nothing


def narrow_share(values: torch.Tensor, dtype: torch.dtype) -> tuple[float, int]:
    """(share of the nonzero finite values exactly representable in ``dtype``, how many were looked at)."""
    v = values.detach().to("cpu", torch.float32).flatten()
    v = v[torch.isfinite(v) & (v != 0)]
    if v.numel() == 0:
        return 0.0, 0
    return (v.to(dtype).to(torch.float32) == v).float().mean().item(), v.numel()


def narrow_storage(name: str, got: torch.Tensor, ref: torch.Tensor) -> Optional[str]:
    """Why a float32 output looks stored in a narrower type, or None (pure)."""
    if got.dtype != torch.float32:
        return None
    for label, dtype in NARROW_TYPES.items():
        share, count = narrow_share(got, dtype)
        if count < NARROW_MIN_VALUES or share < NARROW_SHARE:
            continue
        ref_share, _ = narrow_share(ref, dtype)
        if ref_share < NARROW_SHARE_REFERENCE:
            return (f"{name}: {100 * share:.1f}% of its {count} values are exactly {label} numbers (the reference's: "
                    f"{100 * ref_share:.1f}%): a float32 output kept in {label}")
    return None
