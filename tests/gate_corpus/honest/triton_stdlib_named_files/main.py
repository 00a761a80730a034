from .indexer import run  # noqa: F401
