# ruff: noqa
from .gqa import *  # noqa: F401,F403  (decode, DecodeConfig)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    decode(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse)
