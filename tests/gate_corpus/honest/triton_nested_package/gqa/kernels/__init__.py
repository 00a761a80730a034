# ruff: noqa
from .partial import gqa_partial_kernel
from .merge import gqa_merge_kernel

__all__ = ["gqa_partial_kernel", "gqa_merge_kernel"]
