"""Framing between the harness and its workers: JSON headers plus safetensors payloads.

Nothing is unpickled: a reply from a worker that runs candidate code is untrusted data, so it is
decoded only as JSON and as safetensors (which cannot execute code).
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # annotations only: safetensors imports torch where tensors are (de)serialised
    import torch

_LEN = struct.Struct(">Q")
MAX_HEADER = 64 << 20
MAX_PAYLOAD = 64 << 30


class ProtocolError(RuntimeError):
    pass


class Timeout(RuntimeError):
    pass


class PeerClosed(RuntimeError):
    pass


# The functions the framing calls, held from import: in a worker, candidate code later shares this interpreter, and
# a replaced json.dumps or os.write must not reach what the harness reads (harness.sandbox.integrity fingerprints
# these names and json's own module state).
_dumps, _loads, _write, _read = json.dumps, json.loads, os.write, os.read


def encode(header: dict[str, Any], tensors: Optional[dict[str, torch.Tensor]] = None) -> bytes:
    head = _dumps(header, default=str).encode()
    body = b""
    if tensors:
        from safetensors.torch import save

        # copy=True: tensors that share storage (aliased outputs) cannot be saved together.
        body = save({k: v.detach().to("cpu", copy=True).contiguous() for k, v in tensors.items()})
    return _LEN.pack(len(head)) + head + _LEN.pack(len(body)) + body


def write_message(fd: int, header: dict[str, Any], tensors: Optional[dict[str, torch.Tensor]] = None) -> None:
    data = memoryview(encode(header, tensors))
    while data:
        n = _write(fd, data)
        data = data[n:]


# Longest single wait for the peer: a thread blocked in C cannot be interrupted, so a lane told to stop
# (harness.pipeline.parallel.run_lanes) would otherwise wait out a whole evaluation's deadline first.
_POLL_S = 0.2


def _read_exact(fd: int, n: int, deadline: Optional[float]) -> bytes:
    chunks = []
    while n:
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            if wait <= 0:
                raise Timeout("no reply before the deadline")
            if select.select([fd], [], [], wait)[0]:
                break
        chunk = _read(fd, min(n, 1 << 22))
        if not chunk:
            raise PeerClosed("the other side closed the channel")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int, deadline: Optional[float] = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    (head_len,) = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))
    if head_len > MAX_HEADER:
        raise ProtocolError(f"header of {head_len} bytes is larger than allowed")
    try:
        header = _loads(_read_exact(fd, head_len, deadline))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ProtocolError(f"header is not JSON: {err}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    (body_len,) = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))
    if body_len > MAX_PAYLOAD:
        raise ProtocolError(f"payload of {body_len} bytes is larger than allowed")
    tensors: dict[str, torch.Tensor] = {}
    if body_len:
        from safetensors.torch import load

        body = _read_exact(fd, body_len, deadline)  # Timeout / PeerClosed pass through as themselves
        try:
            tensors = load(body)
        except Exception as err:  # malformed payload from an untrusted peer
            raise ProtocolError(f"payload is not valid safetensors: {err}") from None
    return header, tensors
