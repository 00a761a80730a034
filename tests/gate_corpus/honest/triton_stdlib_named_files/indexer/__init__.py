from .api import run  # noqa: F401
