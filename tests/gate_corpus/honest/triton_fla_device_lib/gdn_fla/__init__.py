from .decode import fused_recurrent_gdn_decode

__all__ = ["fused_recurrent_gdn_decode"]
