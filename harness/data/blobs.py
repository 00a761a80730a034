"""Reading a workload's safetensors blobs, cached, for every module that needs their values.

Input generation reads whole blobs; operator families read index tensors (page tables, sequence
lengths) to count exactly what a workload touches. One cache serves both, so a blob is parsed once
per process and device.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

from .schema import SafetensorsInput, Workload


@lru_cache(maxsize=64)
def load_safetensors(path: str, device: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path, device=device)


def blob_tensor(root: Path, source: SafetensorsInput, device: str = "cpu") -> torch.Tensor:
    """The tensor a workload's safetensors input names, read from the dataset folder ``root``."""
    return load_safetensors(str((Path(root) / source.path).resolve()), device)[source.tensor_key]


def blob_inputs(workload: Workload, names: tuple[str, ...]) -> dict[str, SafetensorsInput]:
    """Those of ``names`` that the workload reads from blobs (the others are random or scalar)."""
    return {n: s for n in names if isinstance(s := workload.inputs.get(n), SafetensorsInput)}
