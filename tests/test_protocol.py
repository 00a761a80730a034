"""Framing between the harness and its workers: JSON header + safetensors payload through a pipe, and
every malformed or late message from an untrusted peer ends as a typed error (never an unpickle)."""

from __future__ import annotations

import io
import json
import os
import pickle
import threading
import time

import pytest
import torch

from harness.sandbox import protocol
from harness.sandbox.protocol import (MAX_HEADER, MAX_PAYLOAD, PeerClosed, ProtocolError, Timeout, encode, read_message,
                              write_message)

LEN = protocol._LEN


@pytest.fixture
def pipe():
    r, w = os.pipe()
    fds = {"r": r, "w": w}
    yield fds
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass


def send_async(fd: int, data: bytes) -> threading.Thread:
    """Write from another thread: a message larger than the pipe buffer would block a single thread."""
    def run():
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def close(pipe, end):
    os.close(pipe[end])
    del pipe[end]


# -- round trips ----------------------------------------------------------------------------------------


def test_header_and_tensors_round_trip(pipe):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "q": torch.randn(4, 32, 128, generator=g).to(torch.bfloat16),  # 32 KiB
        "k": torch.randn(64, 8, 128, generator=g).to(torch.bfloat16),  # 128 KiB: more than a pipe buffer
        "indptr": torch.tensor([0, 5, 9], dtype=torch.int32),
        "scale": torch.tensor(0.125),                                   # scalar-shaped
        "mask": torch.tensor([True, False]),
        "empty": torch.empty(0, 3, dtype=torch.float16),
    }
    header = {"op": "run", "workload": "w-1", "nested": {"list": [1, 2.5, None, "x"]}, "ok": True}
    writer = threading.Thread(target=write_message, args=(pipe["w"], header, tensors), daemon=True)
    writer.start()
    got_header, got = read_message(pipe["r"], deadline=time.monotonic() + 10)
    writer.join(5)
    assert got_header == header
    assert list(got) == list(tensors) or set(got) == set(tensors)
    for name, t in tensors.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
        assert torch.equal(got[name], t), name
    assert got["scale"].dim() == 0


def test_header_only_message(pipe):
    write_message(pipe["w"], {"op": "ping"})
    assert read_message(pipe["r"], deadline=time.monotonic() + 5) == ({"op": "ping"}, {})


def test_messages_follow_each_other(pipe):
    for i in range(3):
        write_message(pipe["w"], {"i": i}, {"t": torch.full((2,), i, dtype=torch.int32)})
    for i in range(3):
        header, tensors = read_message(pipe["r"])
        assert header == {"i": i} and tensors["t"].tolist() == [i, i]


def test_header_values_json_cannot_hold_become_strings(pipe):
    write_message(pipe["w"], {"path": os.path, "dtype": torch.bfloat16})
    header, _ = read_message(pipe["r"])
    assert header["dtype"] == "torch.bfloat16" and isinstance(header["path"], str)


def test_aliased_tensors_can_be_sent(pipe):
    base = torch.arange(12, dtype=torch.float32)
    tensors = {"whole": base, "first": base[:6], "grid": base.view(3, 4), "strided": base.view(3, 4).t()}
    data = encode({"op": "outputs"}, tensors)
    send_async(pipe["w"], data)
    _, got = read_message(pipe["r"], deadline=time.monotonic() + 5)
    for name, t in tensors.items():
        assert torch.equal(got[name], t), name
    got["first"][0] = 100.0  # decoded tensors are independent of each other
    assert got["whole"][0] == 0.0


def test_encode_does_not_touch_the_caller_tensors():
    t = torch.arange(4, dtype=torch.int64)
    view = t.view(2, 2).t()
    encode({}, {"v": view})
    assert view.is_contiguous() is False and t.tolist() == [0, 1, 2, 3]


# -- failures -------------------------------------------------------------------------------------------


def test_timeout_when_nothing_arrives(pipe):
    start = time.monotonic()
    with pytest.raises(Timeout):
        read_message(pipe["r"], deadline=time.monotonic() + 0.2)
    assert 0.15 < time.monotonic() - start < 5




def _stalled_at(pipe, where: str) -> None:
    data = encode({"op": "run", "pad": "x" * 100}, {"t": torch.zeros(100)})
    head_len = LEN.unpack(data[:8])[0]
    sent = {"in_header": 8 + head_len // 2, "in_payload": len(data) - 50}[where]
    os.write(pipe["w"], data[:sent])  # the peer stalls there


def test_timeout_in_the_middle_of_a_header(pipe):
    _stalled_at(pipe, "in_header")
    with pytest.raises(Timeout):
        read_message(pipe["r"], deadline=time.monotonic() + 0.2)


def test_timeout_in_the_middle_of_a_payload(pipe):
    _stalled_at(pipe, "in_payload")
    with pytest.raises(Timeout):
        read_message(pipe["r"], deadline=time.monotonic() + 0.2)


def test_a_past_deadline_times_out_at_once(pipe):
    write_message(pipe["w"], {"op": "late"})
    with pytest.raises(Timeout):
        read_message(pipe["r"], deadline=time.monotonic() - 1)


@pytest.mark.parametrize("cut", ["nothing", "in_length", "in_header", "in_payload_length", "in_payload"])
def test_a_closed_peer_raises_peer_closed(pipe, cut):
    data = encode({"op": "run"}, {"t": torch.arange(10)})
    head_len = LEN.unpack(data[:8])[0]
    sent = {"nothing": 0, "in_length": 3, "in_header": 8 + head_len // 2, "in_payload_length": 8 + head_len + 4,
            "in_payload": len(data) - 5}[cut]
    os.write(pipe["w"], data[:sent])
    close(pipe, "w")
    with pytest.raises(PeerClosed):
        read_message(pipe["r"], deadline=time.monotonic() + 5)


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return LEN.pack(len(header)) + header + LEN.pack(len(body)) + body


@pytest.mark.parametrize("header, words", [
    (b"this is not json", "header is not JSON"),
    (b"\xff\xfe\x00garbage", "header is not JSON"),
    (b'{"unterminated": ', "header is not JSON"),
    (b"[1, 2, 3]", "header is not a JSON object"),
    (b'"just a string"', "header is not a JSON object"),
])
def test_a_garbage_header_is_a_protocol_error(pipe, header, words):
    os.write(pipe["w"], _frame(header))
    with pytest.raises(ProtocolError, match=words):
        read_message(pipe["r"], deadline=time.monotonic() + 5)


def test_an_oversize_header_length_is_refused_before_reading(pipe):
    os.write(pipe["w"], LEN.pack(MAX_HEADER + 1))  # and nothing else: reading it would block
    with pytest.raises(ProtocolError, match=f"header of {MAX_HEADER + 1} bytes is larger than allowed"):
        read_message(pipe["r"], deadline=time.monotonic() + 5)


def test_an_oversize_payload_length_is_refused_before_reading(pipe):
    head = b'{"op": "run"}'
    os.write(pipe["w"], LEN.pack(len(head)) + head + LEN.pack(MAX_PAYLOAD + 1))
    with pytest.raises(ProtocolError, match="larger than allowed"):
        read_message(pipe["r"], deadline=time.monotonic() + 5)


class _Trap:
    """Unpickling this creates a marker file: proof that something unpickled the payload."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _torch_save_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["pickle", "torch_save", "random_bytes", "truncated_safetensors", "json"])
def test_a_payload_that_is_not_safetensors_is_a_protocol_error(pipe, tmp_path, kind):
    marker = tmp_path / "unpickled"
    valid = encode({}, {"t": torch.arange(100)})
    valid_body = valid[8 + 2 + 8:]  # header "{}" is 2 bytes
    body = {
        "pickle": pickle.dumps({"t": _Trap(str(marker))}),
        "torch_save": _torch_save_bytes({"t": _Trap(str(marker))}),
        "random_bytes": os.urandom(256),
        "truncated_safetensors": valid_body[:-16],
        "json": b'{"t": [1, 2, 3]}',
    }[kind]
    send_async(pipe["w"], _frame(b'{"op": "outputs"}', body))
    with pytest.raises(ProtocolError, match="payload is not valid safetensors"):
        read_message(pipe["r"], deadline=time.monotonic() + 5)
    assert not marker.exists()


def test_the_trap_would_fire_if_unpickled(tmp_path):
    # guards the test above: the trap is real
    marker = tmp_path / "unpickled"
    pickle.loads(pickle.dumps(_Trap(str(marker))))
    assert marker.is_dir()


def test_encode_frames_lengths_big_endian():
    data = encode({"a": 1})
    head = json.dumps({"a": 1}).encode()
    assert data == LEN.pack(len(head)) + head + LEN.pack(0)
    assert data[:8] == len(head).to_bytes(8, "big")
