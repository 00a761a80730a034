"""Definition dtypes -> torch dtypes, in a module of its own.

Input generation, roofline costs, memory budgets and the operator families all need this table; keeping
it below all of them lets ``harness.data.inputs`` consult the families without an import circle.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Optional

from .schema import Definition, DType, SchemaError, TensorSpec

if TYPE_CHECKING:
    import torch


@lru_cache(maxsize=1)
def torch_dtypes() -> dict[DType, Optional["torch.dtype"]]:
    """The table, built on first use: importing this module does not import torch (the harness launches its
    workers before it imports torch; harness.pipeline.early_workers)."""
    import torch

    return {
        DType.float32: torch.float32,
        DType.float16: torch.float16,
        DType.bfloat16: torch.bfloat16,
        DType.float8_e4m3fn: getattr(torch, "float8_e4m3fn", None),
        DType.float8_e5m2: getattr(torch, "float8_e5m2", None),
        DType.float4_e2m1: getattr(torch, "float4_e2m1fn_x2", None),
        DType.int64: torch.int64,
        DType.int32: torch.int32,
        DType.int16: torch.int16,
        DType.int8: torch.int8,
        DType.bool: torch.bool,
    }


def __getattr__(name: str) -> Any:
    if name == "TORCH_DTYPES":  # the table under its old name (``from harness.data.dtypes import TORCH_DTYPES``)
        return torch_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def torch_dtype(dtype: DType) -> "torch.dtype":
    t = torch_dtypes()[dtype]
    if t is None:
        import torch

        raise SchemaError(f"dtype {dtype.value} is not supported by this torch ({torch.__version__})")
    return t


def tensor_nbytes(definition: Definition, spec: TensorSpec, axes: dict[str, int]) -> int:
    """Bytes of one tensor of the definition for these axis values; a scalar counts 0 (passed by value)."""
    if spec.shape is None:
        return 0
    return math.prod(definition.shape_of(spec, axes)) * torch_dtype(spec.dtype).itemsize


def io_nbytes(definition: Definition, axes: dict[str, int]) -> int:
    """A workload's own size: every input and output tensor of the definition once, at these axis values."""
    return sum(tensor_nbytes(definition, spec, axes) for spec in [*definition.inputs.values(),
                                                                   *definition.outputs.values()])
