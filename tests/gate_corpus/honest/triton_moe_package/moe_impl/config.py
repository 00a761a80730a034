from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Tuple


class DotMode(enum.IntEnum):
    FP32 = 0
    BF16 = 1
    FP8 = 2


@dataclass(frozen=True)
class MoEConfig:
    top_k: int = 8
    n_group: int = 8
    topk_group: int = 4
    quant_block: int = 128
    dot_mode: DotMode = DotMode.FP32
    block_m_choices: Tuple[int, ...] = field(default=(16, 32))


DEBUG = False  # set True to log the routed rows
CONFIG = MoEConfig()
