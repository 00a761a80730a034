from .fla_lite import fused_recurrent_gated_delta_rule


def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state):
    fused_recurrent_gated_delta_rule(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state)
