"""FP8 block-scale MoE: PyTorch routing, Triton grouped GEMMs."""
from .launch import run  # noqa: F401
from .config import MoEConfig, DotMode  # noqa: F401

__all__ = ["run", "MoEConfig", "DotMode"]
