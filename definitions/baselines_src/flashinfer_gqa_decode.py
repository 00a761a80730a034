"""FlashInfer's BatchDecodeWithPagedKVCacheWrapper as a baseline solution (author `baseline`).

`plan` runs once per workload and input set (Crucible's `setup`), outside the timed call, as a serving
engine plans once per batch; the harness also times plan + run together, which is the figure the
contest's own baseline reports (it calls plan() inside every timed call). Two variants: tensor cores
(the FA2 prefill path FlashInfer uses for GQA) and the CUDA-core decode kernel; the contest does not say
which, so reports compare against the faster one per workload.
"""

import torch
import flashinfer

_WORKSPACE_BYTES = 128 << 20
_workspaces = {}


def _workspace(device):
    # One workspace per device and process: FlashInfer keeps its split-KV scratch here.
    if device not in _workspaces:
        _workspaces[device] = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _workspaces[device]


def _plan(q, k_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, use_tensor_cores):
    batch, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    if kv_last_page_len is None:  # page_size 1: every page is full
        kv_last_page_len = torch.ones(batch, dtype=torch.int32, device=q.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(_workspace(q.device), "NHD",
                                                            use_tensor_cores=use_tensor_cores)
    wrapper.plan(kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                 pos_encoding_mode="NONE", sm_scale=float(sm_scale), q_data_type=q.dtype, kv_data_type=k_cache.dtype)
    return wrapper


def plan_tensor_cores(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    return _plan(q, k_cache, kv_indptr, kv_indices, None, sm_scale, True)


def plan_cuda_cores(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    return _plan(q, k_cache, kv_indptr, kv_indices, None, sm_scale, False)


def plan_paged_tensor_cores(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    return _plan(q, k_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, True)


def plan_paged_cuda_cores(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    return _plan(q, k_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, False)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse, wrapper):
    wrapper.run(q, (k_cache, v_cache), out=output, lse=lse, return_lse=True)


def run_paged(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, output, lse, wrapper):
    wrapper.run(q, (k_cache, v_cache), out=output, lse=lse, return_lse=True)
