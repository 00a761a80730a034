"""Framing between the harness and its workers: JSON headers plus safetensors payloads.

Nothing is unpickled: a reply from a worker that runs candidate code is untrusted data, so it is
decoded only as JSON and as safetensors (which cannot execute code).
"""

from __future__ import annotations

import json
import os
import re
import select
import struct
import sys
import time
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # annotations only: safetensors imports torch where tensors are (de)serialised
    import torch

_LEN = struct.Struct(">Q")
MAX_HEADER = 64 << 20
MAX_PAYLOAD = 64 << 30
MAX_NESTING = 32  # every message the harness and its workers exchange is a few levels deep


class ProtocolError(RuntimeError):
    pass


class ForeignFrame(ProtocolError):
    """A frame whose nonce is not its request's: written into the channel by someone other than the worker's loop
    (candidate code shares the worker's process, and so its descriptors)."""


class Timeout(RuntimeError):
    pass


class PeerClosed(RuntimeError):
    pass


# The functions the framing calls, held from import: in a worker, candidate code later shares this interpreter, and
# a replaced json.dumps or os.write must not reach what the harness reads (harness.sandbox.integrity fingerprints
# these names and json's own module state).
_dumps, _loads, _write, _read = json.dumps, json.loads, os.write, os.read
# a JSON escape of a UTF-16 surrogate: a lone one decodes to a str nothing downstream can encode (red team round 12,
# a02: an exception message holding "\ud800" failed the archive's write and ended the whole batch)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _encodable(value: Any) -> Any:
    """``value`` with every lone surrogate of its strings (keys too) written out as its escape (``\\ud800``)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    return value


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


def _nesting(value: Any) -> int:
    """How deeply lists and objects nest in a decoded header (without recursion: the peer chose the depth)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING:
                stack += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def pending(fd: int) -> int:
    """How many bytes are waiting to be read on the pipe ``fd`` now (0 at its end: a closed peer is no data)."""
    import fcntl
    import termios

    if not select.select([fd], [], [], 0)[0]:
        return 0
    count = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return int.from_bytes(count, sys.byteorder)


def require_quiet(fd: int) -> None:
    """ForeignFrame where bytes wait on ``fd`` before a request is sent: the worker's loop writes one reply per
    request, so they were written by someone else."""
    if pending(fd):
        raise ForeignFrame("the worker's channel held bytes before a request was sent: code in the worker wrote into "
                           "the harness's channel")


def read_message(fd: int, deadline: Optional[float] = None, max_payload: int = MAX_PAYLOAD,
                 nonce: Optional[str] = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """One message; ``max_payload``: the most payload bytes this message may honestly carry (a larger length is
    refused before a byte of it is read). ``nonce``: the value the header's ``nonce`` must hold (it is removed);
    any other raises ForeignFrame before the payload is read."""
    (head_len,) = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))
    if head_len > MAX_HEADER:
        raise ProtocolError(f"header of {head_len} bytes is larger than allowed")
    raw = _read_exact(fd, head_len, deadline)
    try:
        header = _loads(raw)
        if _SURROGATE_ESCAPE.search(raw):  # rare: only then is the header walked
            header = _encodable(header)
    except (ValueError, RecursionError) as err:
        # ValueError: not JSON, not UTF-8, or an integer past Python's digit limit; RecursionError: nesting deeper
        # than the interpreter's stack. Whatever the peer sent, it is that peer's fault, never the harness's.
        raise ProtocolError(f"header is not JSON: {type(err).__name__}: {str(err)[:200]}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    if _nesting(header) > MAX_NESTING:  # loadable here, but deep enough to break a later dump or validation
        raise ProtocolError(f"header is nested more than {MAX_NESTING} levels deep")
    if nonce is not None and header.pop("nonce", None) != nonce:  # before its length: a frame of another request
        raise ForeignFrame("a reply the worker's loop did not write (its request's nonce is missing or wrong): code "
                           "in the worker wrote into the harness's channel")
    (body_len,) = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))
    if body_len > min(max_payload, MAX_PAYLOAD):
        raise ProtocolError(f"payload of {body_len} bytes is larger than allowed ({min(max_payload, MAX_PAYLOAD)})")
    tensors: dict[str, torch.Tensor] = {}
    if body_len:
        from safetensors.torch import load

        body = _read_exact(fd, body_len, deadline)  # Timeout / PeerClosed pass through as themselves
        try:
            tensors = load(body)
        except Exception as err:  # malformed payload from an untrusted peer
            raise ProtocolError(f"payload is not valid safetensors: {err}") from None
    return header, tensors
