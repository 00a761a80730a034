"""An abandoned API call stops reading its stream.

A call past its deadline is abandoned by the caller (controller/providers/api_agent.py ``call_within``), but its
worker thread goes on reading until the stream yields an event it can check. A server that only trickles
keep-alives (Anthropic's pings, OpenAI's comment lines, which the SDKs swallow) would keep that thread reading, and
its connection open, for as long as the server goes on. So every response body the SDK client reads passes through
a stream that looks at its reader thread's cancellation at each chunk and ends the read once it is set.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

ATTRIBUTE = "crucible_cancelled"  # the threading.Event a chat-call thread carries


def mark(event: threading.Event) -> None:
    """The current thread's reads end once ``event`` is set."""
    setattr(threading.current_thread(), ATTRIBUTE, event)


def watch_streams(http_client: Any) -> Any:
    """``http_client`` (an httpx2.Client) with its response bodies cut short once their thread is cancelled."""
    import httpx2

    class Cancellable(httpx2.SyncByteStream):
        def __init__(self, inner: Any, cancelled: threading.Event):
            self.inner, self.cancelled = inner, cancelled

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.inner:
                if self.cancelled.is_set():
                    raise httpx2.ReadError("the call was abandoned past its deadline")
                yield chunk

        def close(self) -> None:
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()

    def on_response(response: Any) -> None:
        cancelled = getattr(threading.current_thread(), ATTRIBUTE, None)
        if cancelled is not None and isinstance(response.stream, httpx2.SyncByteStream):
            response.stream = Cancellable(response.stream, cancelled)

    hooks = http_client.event_hooks
    if on_response.__qualname__ not in {getattr(h, "__qualname__", "") for h in hooks.get("response", [])}:
        hooks.setdefault("response", []).append(on_response)
        http_client.event_hooks = hooks
    return http_client
