"""What a worker measures on its own device, beside the candidate: a cold L2, warm clocks, host wall time of
one call, and its allocator's memory per request (harness.measure.memory adds the processes up)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import torch

KEEP_CACHED_BYTES = 512 << 20  # a worker between requests holds at most this much of its allocator's cache


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def l2_flush(device: torch.device) -> Callable[[], None]:
    """Zero a 2 x L2 buffer, as the official timer does before every call (nothing to do on a CPU)."""
    if device.type != "cuda":
        return lambda: None
    from .timing import flush_buffer_bytes

    buffer = torch.empty(flush_buffer_bytes(int(torch.cuda.get_device_properties(device).L2_cache_size)),
                         dtype=torch.int8, device=device)
    return buffer.zero_


def raise_clocks(device: torch.device, flush: Callable[[], None], seconds: float = 0.05) -> None:
    """Harness-owned GPU work until the clocks have left idle (an idle H200 sits at a few hundred MHz)."""
    if device.type != "cuda":
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            flush()
        torch.cuda.synchronize()


def wall_call(device: torch.device, flush: Callable[[], None], call: Callable[[], Any]) -> tuple[float, Any]:
    """One call on a cold L2, timed by the host between two synchronisations."""
    flush()
    sync(device)
    started = time.perf_counter()
    result = call()
    sync(device)
    return (time.perf_counter() - started) * 1e3, result


def memory_mark(device: torch.device) -> None:
    """Start of a request: the allocator's peak counts from here."""
    if device.type == "cuda" and torch.cuda.is_initialized():
        try:
            torch.cuda.reset_peak_memory_stats(device)
        except Exception:  # a broken context: the request will say so
            pass


def memory_release(device: torch.device, reply: dict[str, Any]) -> dict[str, int]:
    """End of a request: what it held at most, then give back what is no longer used, so an idle worker holds
    only its context and what its code keeps on purpose (a workspace). Returned to the harness, which adds up
    the processes of one evaluation. The reply's tensors are moved to the host first: they leave anyway."""
    if device.type != "cuda" or not torch.cuda.is_initialized():
        return {}
    try:
        for name, t in list(reply.items()):
            if isinstance(t, torch.Tensor) and t.device.type == "cuda":
                reply[name] = t.cpu()
        peak = int(torch.cuda.max_memory_reserved(device))
        if torch.cuda.memory_reserved(device) > KEEP_CACHED_BYTES:  # small caches stay
            # The request's tensors died with its frame, so giving the cache back is usually enough; a garbage
            # collection (~50 ms with torch loaded, on every request of a large workload) only where something
            # in a reference cycle (a traceback, a closure of the candidate's) still holds the memory.
            torch.cuda.empty_cache()
            if torch.cuda.memory_reserved(device) > KEEP_CACHED_BYTES:
                gc.collect()
                torch.cuda.empty_cache()
        return {"peak_bytes": peak, "resident_bytes": int(torch.cuda.memory_reserved(device))}
    except Exception:  # a broken context: nothing to measure, and the worker is replaced
        return {}
