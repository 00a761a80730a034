"""Hopper stand-in baseline for `gdn_prefill_qk4_v8_d128_k_last`: FlashInfer's `chunk_gated_delta_rule` (SM90 path).

NOT the contest's baseline. The contest measured `flashinfer_wrapper_123ca6`, which ships its own copy of
FlashInfer's CuTe-DSL Blackwell (tcgen05) chunked GDN kernel: it does not run on an H200. On sm_90 the
closest FlashInfer path is `flashinfer.gdn_prefill.chunk_gated_delta_rule`, which dispatches to its SM90
CuTe-DSL kernel (or, when few sequences leave SMs idle, to its SM90 context-parallel kernel, FlashInfer's own
"auto" choice, kept). Speedups against this are speedups against a Hopper stand-in and must be reported so.

What the wrapper converts, read from flashinfer-python 0.6.18's source (flashinfer/gdn_prefill.py and
gdn_kernels/delta_rule_dsl/), so that both outputs mean what the definition's reference computes:
- gates: the API takes the decay as a linear alpha in (0, 1] per (token, v head), fp32, not its log (the SM90
  kernels take log2(alpha + 1e-10) themselves, in AlphaProcessor), and beta = sigmoid(b), fp32. Both come
  from the raw inputs here with the reference's own expression (`gates`); the 1e-10 lets at most 1e-10 of
  the earlier state through where the true decay is smaller, far inside the 1e-2 tolerance.
- state: initial and final states are [N, 8, V, K] fp32, k-last, the definition's layout (FlashInfer's tests
  compare `state.transpose(-1, -2)` with their [K, V] reference); passed and returned as they are.
- heads: 4 q/k heads and 8 v heads are GVA, which the kernel maps itself (q/k head = v head x 4 // 8, i.e.
  v heads 2i and 2i + 1 read q/k head i, the reference's repeat_interleave). Output is [T, 8, 128] bf16.
- cu_seqlens: int64 as given (the SM90 kernel wants int64). scale: the reference's default for None / 0.0
  is FlashInfer's. use_qk_l2norm_in_kernel=False (the definition normalises nothing; the SM90 path ignores
  the flag anyway).
- the final state is asked for (output_final_state=True); FlashInfer allocates it.
Not matched: a sequence of length 0 gets zeros from the reference but an untouched (uninitialised) row here;
the harness's input generator never draws one, and a captured blob with one would fail this baseline's
correctness check on that workload (archived with its message), never pass silently. Zeroing the rows would
cost a full pass over the state in every call.
The gate arithmetic (a few elementwise PyTorch kernels over T x 8 values) runs inside the timed call, as the
contest's wrapper computes its gates inside its call.
"""

import torch
import torch.nn.functional as F


def gates(A_log, a, dt_bias, b):
    """(alpha, beta), fp32 [T, 8] contiguous: the reference's g = exp(-exp(A_log) * softplus(a + dt_bias)),
    linear as FlashInfer wants it, and beta = sigmoid(b)."""
    alpha = torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))
    beta = torch.sigmoid(b.float())
    return alpha.contiguous(), beta.contiguous()


def kernel_scale(scale):
    """None for the reference's default (None or 0.0: 1/sqrt(head_size), FlashInfer's default too)."""
    return None if scale is None or float(scale) == 0.0 else float(scale)


def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale):
    if torch.cuda.get_device_capability(q.device)[0] != 9:
        raise RuntimeError("this stand-in is FlashInfer's SM90 chunked GDN prefill, for Hopper; on Blackwell use "
                           "the contest's own baseline (flashinfer_wrapper_123ca6)")
    from flashinfer.gdn_prefill import chunk_gated_delta_rule

    alpha, beta = gates(A_log, a, dt_bias, b)
    output, new_state = chunk_gated_delta_rule(
        q, k, v, g=alpha, beta=beta, scale=kernel_scale(scale), initial_state=state, output_final_state=True,
        cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=False)
    return output, new_state
