"""What the trusted reference worker computed, kept across sessions of one archive.

A warm submission recomputed the reference (and its float64 oracle) for every workload and seed: a third of
its wall time. The seeds come from a secret; with the archive's own secret (derived from its seal key, hidden
from every candidate like the rest of the archive folder) the same (workload, seed) pairs recur across
sessions, so their reference outputs can be read back instead. The cache key names everything the outputs
depend on: the operation (reference or oracle), the GPU and toolchain that ran it, the definition's content,
the workload, the seed, and the code that draws the inputs (a change there changes every input).
Large outputs are not kept: the archive would grow by gigabytes for a few seconds saved.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import torch

MAX_CACHED_BYTES = 16 << 20  # outputs of one (workload, seed) above this are recomputed, not stored
_SEED_LABEL = b"crucible input seeds v1"


def archive_seed_secret(seal_key: Optional[bytes]) -> Optional[bytes]:
    """The archive's seed secret: an HMAC of the seal key, so it is as secret as the key and needs no file."""
    return hmac.new(seal_key, _SEED_LABEL, hashlib.sha256).digest()[:16] if seal_key else None


@lru_cache(maxsize=1)
def input_code_hash() -> str:
    """The code that turns (workload, seed) into inputs: the generator, blobs, dtypes and every family."""
    harness = Path(__file__).resolve().parents[1]
    data = harness / "data"
    files = [data / "inputs.py", data / "blobs.py", data / "dtypes.py", *sorted((harness / "families").glob("*.py"))]
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def cache_key(op: str, gpu_key: str, toolchain: str, definition_hash: str, workload_uuid: str, seed: int) -> str:
    return "|".join([op, gpu_key, toolchain, definition_hash[:16], workload_uuid, str(seed), input_code_hash()])


def encode_entry(header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Optional[tuple[str, bytes]]:
    """(header JSON, safetensors bytes), or None where the outputs are too large to keep."""
    from safetensors.torch import save

    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    if sum(t.numel() * t.element_size() for t in cpu.values()) > MAX_CACHED_BYTES:
        return None
    kept = {k: v for k, v in header.items() if k != "memory"}  # the memory of the run that made it
    return json.dumps(kept, sort_keys=True), save(cpu)


def decode_entry(header: str, blob: bytes) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    from safetensors.torch import load

    return json.loads(header), dict(load(blob))
