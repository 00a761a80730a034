# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Threads per CTA by batch: small batches spread each head's 128 value rows over more CTAs."""

_TABLE = ((4, 64), (16, 128), (1 << 30, 128))


def threads_for(batch: int) -> int:
    for limit, threads in _TABLE:
        if batch <= limit:
            return threads
    return 128
