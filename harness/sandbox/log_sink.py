"""A worker's stdout and stderr as the harness keeps them: head and tail, never more than the official 5 MiB."""

from __future__ import annotations

import os
import threading
from typing import Any

LOG_LIMIT = 5 << 20  # the official evaluator keeps at most 5 MiB of log


class LogSink:
    """A worker's stdout and stderr, read from a pipe by a thread: the head and tail of the whole stream and of
    the current segment (one workload's share), never more. Past ``limit`` bytes it calls ``on_limit`` once."""

    def __init__(self, fd: int, limit: int, on_limit: Any, keep: int = LOG_LIMIT):
        self.total = 0
        self.limit, self.on_limit, self.half = limit, on_limit, keep // 2
        self.over = False
        self._head = bytearray()
        self._segment_start = 0
        self._segment_head = bytearray()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(fd,), daemon=True, name="worker-log")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                self.feed(chunk)
        finally:
            os.close(fd)

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self.total += len(chunk)
            for buf in (self._head, self._segment_head):
                if len(buf) < self.half:
                    buf += chunk[: self.half - len(buf)]
            self._tail += chunk
            if len(self._tail) > self.half:
                del self._tail[: len(self._tail) - self.half]
            crossed = self.total > self.limit and not self.over
            self.over = self.over or crossed
        if crossed:
            self.on_limit()

    def mark(self) -> int:
        """Start a new segment; returns its offset in the stream."""
        with self._lock:
            self._segment_start, self._segment_head = self.total, bytearray()
            return self.total

    @staticmethod
    def _join(head: bytes, tail: bytes, length: int) -> str:
        """``length`` bytes of which ``head`` are the first and ``tail`` the last (they may overlap)."""
        if length <= len(head):
            data = head[:length]
        elif length <= len(head) + len(tail):
            data = head + tail[len(tail) - (length - len(head)):]
        else:
            cut = length - len(head) - len(tail)
            return (head.decode(errors="replace") + f"\n[... {cut} bytes of log cut ...]\n"
                    + tail.decode(errors="replace"))
        return bytes(data).decode(errors="replace")

    def text(self) -> str:
        with self._lock:
            return self._join(bytes(self._head), bytes(self._tail), self.total)

    def since(self, offset: int) -> str:
        with self._lock:
            if offset != self._segment_start:
                return self._join(b"", bytes(self._tail), self.total - offset)
            return self._join(bytes(self._segment_head), bytes(self._tail), self.total - offset)

    def wait(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


def truncate_log(text: str, limit: int = LOG_LIMIT) -> str:
    data = text.encode(errors="replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    cut = len(data) - 2 * half
    return (data[:half].decode(errors="replace") + f"\n[... {cut} bytes of log cut ...]\n"
            + data[-half:].decode(errors="replace"))
