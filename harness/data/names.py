"""Names that become file names: a solution named after its parameters can outgrow the 255 bytes a file name holds."""

from __future__ import annotations

import hashlib
from typing import Optional

NAME_MAX = 200  # room left for prefixes (`r12_`, `sweep3_`) and suffixes (`.json`) within 255 bytes


def bounded(name: str, limit: int = NAME_MAX, key: Optional[str] = None) -> str:
    """``name`` itself up to ``limit`` characters; longer, its readable start and an 8-hex digest of ``key`` (default:
    the whole name), so two long names that differ only past the cut stay different."""
    if len(name) <= limit:
        return name
    return name[:limit - 9].rstrip("_") + "_" + hashlib.sha256((key or name).encode()).hexdigest()[:8]
