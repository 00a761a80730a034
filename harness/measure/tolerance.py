"""The correctness rule's thresholds (``Tolerance``), in a module without torch: the worker protocol's messages
carry one, and the harness launches its workers before it imports torch (harness.pipeline.early_workers).
harness.measure.correctness applies it and re-exports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    atol: float = 1e-2
    rtol: float = 1e-2
    required_matched_ratio: float = 1.0
    allow_matching_nonfinite: bool = False
