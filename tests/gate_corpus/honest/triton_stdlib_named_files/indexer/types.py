# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Shapes of one indexer call (a module named like the standard `types`: reached relatively, it is this file)."""
from typing import NamedTuple


class IndexerShapes(NamedTuple):
    batch: int
    heads: int
    head_dim: int
    max_pages: int
    topk: int
