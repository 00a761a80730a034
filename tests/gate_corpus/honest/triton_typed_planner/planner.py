# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Launch planning for GQA decode: typed plan objects, a planner memoised on integers, config sets per GPU generation."""

from __future__ import annotations

import enum
import functools
import itertools
import logging
import math
from typing import TYPE_CHECKING, NamedTuple

import torch
import triton

if TYPE_CHECKING:  # annotations only; nothing is imported at run time
    from collections.abc import Sequence

    from torch import Tensor

__all__ = ["Arch", "DecodePlan", "plan_for", "device_arch", "sm_count"]

logger = logging.getLogger(__name__)


class Arch(enum.Enum):
    AMPERE = 80
    HOPPER = 90
    BLACKWELL = 100


class DecodePlan(NamedTuple):
    group_pad: int
    block_n: int
    num_warps: int
    num_stages: int


# (block_n, num_warps, num_stages) candidates per generation; Hopper and newer have the shared memory for 3 stages
_CONFIG_SETS: dict[Arch, list[tuple[int, int, int]]] = {
    Arch.AMPERE: list(itertools.product((32, 64), (4,), (2,))),
    Arch.HOPPER: list(itertools.product((64, 128), (4, 8), (2, 3))),
    Arch.BLACKWELL: list(itertools.product((64, 128), (4, 8), (3,))),
}


@functools.lru_cache(maxsize=None)
def device_arch(index: int) -> Arch:
    if not torch.cuda.is_available():
        return Arch.AMPERE  # the CPU interpreter: smallest tiles
    major, minor = torch.cuda.get_device_capability(index)
    cc = major * 10 + minor
    return Arch.BLACKWELL if cc >= 100 else Arch.HOPPER if cc >= 90 else Arch.AMPERE


@functools.lru_cache(maxsize=None)
def sm_count(index: int) -> int:
    if not torch.cuda.is_available():
        return 1
    props = triton.runtime.driver.active.utils.get_device_properties(index)
    return props["multiprocessor_count"]


def _score(cfg: tuple[int, int, int], batch: int, kv_heads: int, sms: int) -> float:
    # prefer the largest tile that still leaves every SM a program; ties go to fewer warps
    block_n, warps, stages = cfg
    waves = math.ceil(batch * kv_heads / max(sms, 1))
    return waves * 1000.0 - block_n - stages + warps * 0.1


@functools.lru_cache(maxsize=256)
def plan_for(batch_bucket: int, kv_heads: int, group: int, arch: Arch, sms: int) -> DecodePlan:
    candidates: Sequence[tuple[int, int, int]] = _CONFIG_SETS[arch]
    block_n, warps, stages = min(candidates, key=lambda c: _score(c, batch_bucket, kv_heads, sms))
    plan = DecodePlan(max(16, triton.next_power_of_2(group)), block_n, warps, stages)
    logger.debug("plan for batch<=%d kv_heads=%d group=%d on %s: %s", batch_bucket, kv_heads, group, arch.name, plan)
    return plan


def bucket(batch: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(batch, 1))))


def describe(q: Tensor) -> str:
    return f"{tuple(q.shape)} {q.dtype}"
