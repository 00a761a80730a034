"""The reference run in float64 throughout: the yardstick of the precision audit (harness.audits.verdicts).

The reference's source runs with an ``import torch`` that names float64 for every floating dtype, so its own
conversions (``.to(torch.float32)`` of what it gathers) widen too. Small floating inputs are widened before the
call; large ones (a KV cache) stay as they are: a float64 copy of a whole cache would be 4x the workload's bytes
for the oracle alone.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..data.schema import Definition

ORACLE_WIDEN_BYTES = 256 << 20


class _Float64Torch:
    """torch, except that every floating dtype it names is float64."""

    _WIDE = {"float32", "float", "bfloat16", "float16", "half"}

    def __getattr__(self, name: str) -> Any:
        return torch.float64 if name in self._WIDE else getattr(torch, name)


_FLOAT64_TORCH = _Float64Torch()


def _float64_import(name, globals=None, locals=None, fromlist=(), level=0):
    module = __import__(name, globals, locals, fromlist, level)
    return _FLOAT64_TORCH if name == "torch" and not fromlist else module


def run_in_float64(definition: Definition, inputs: Mapping[str, Any]) -> Any:
    """What the definition's reference returns when run in float64 on ``inputs`` (the trusted worker's own)."""
    wide = {k: v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point()
            and v.numel() * 8 <= ORACLE_WIDEN_BYTES else v for k, v in inputs.items()}
    builtins = __builtins__.__dict__ if hasattr(__builtins__, "__dict__") else __builtins__
    namespace: dict[str, Any] = {"__name__": f"oracle_{definition.name}",
                                 "__builtins__": {**builtins, "__import__": _float64_import}}
    exec(compile(definition.reference, f"<oracle {definition.name}>", "exec"), namespace)
    with torch.no_grad():
        return namespace["run"](*wide.values())
