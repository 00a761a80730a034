"""gdn_scan: gated delta-rule prefill, recurrent form, as a small package (the entry point is this __init__)."""
from . import constants as C
from .api import gdn_prefill as run

__all__ = ["run", "C"]
__version__ = "0.3.1"
