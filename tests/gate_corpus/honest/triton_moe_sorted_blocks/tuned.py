# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Tuned launch configs shipped beside the kernels as vLLM lays them out (configs/E=..,N=..,device_name=...json,
keyed by token count); the nearest key at or above the batch wins, a default where no file fits the GPU."""

import functools
import json
import os
from typing import Optional

import torch

_CONFIG_DIR = os.path.join(os.path.dirname(os.path.realpath(__file__)), "configs")
_DEFAULT = {"BLOCK_M": 64, "num_warps": 8}


@functools.lru_cache(maxsize=None)
def _configs(E: int, N: int, device_name: str) -> Optional[dict]:
    path = os.path.join(_CONFIG_DIR, f"E={E},N={N},device_name={device_name}.json")
    if os.path.exists(path):
        with open(path) as f:
            return {int(k): v for k, v in json.load(f).items()}
    return None


def tile_config(E: int, N: int, tokens: int) -> dict:
    name = torch.cuda.get_device_name().replace(" ", "_") if torch.cuda.is_available() else "cpu"
    table = _configs(E, N, name)
    if not table:
        return _DEFAULT
    return table[min((k for k in table if k >= tokens), default=max(table))]
