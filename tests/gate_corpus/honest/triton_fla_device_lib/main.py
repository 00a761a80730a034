from .gdn_fla import fused_recurrent_gdn_decode


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    fused_recurrent_gdn_decode(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state)
