# ruff: noqa
"""Split-KV GQA decode for page size 1: a partial kernel per (request, kv head, split) and a merge kernel."""
from .launcher import *  # noqa: F401,F403
from .launcher import __all__  # noqa: F401
