from .fused_recurrent import fused_recurrent_gated_delta_rule  # noqa: F401
