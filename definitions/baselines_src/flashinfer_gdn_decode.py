"""FlashInfer's GDN decode (`gated_delta_rule_decode_pretranspose`) as the baseline of `gdn_decode_qk4_v8_d128_k_last`.

This is the contest's own baseline kind (`flashinfer_wrapper_9b7f1e`): the same API, value-returning, with
`use_qk_l2norm=False` (FlashInfer's default is True, but the definition's reference does not normalise q or
k). The API exists from flashinfer-python 0.6.2 and needs SM90+, so it runs on
the H200 as on the B200.

Nothing is converted: the API's contract is the definition's. q, k [B, 1, 4, 128] and v [B, 1, 8, 128] bf16;
state fp32 [B, 8, V, K] ("pretranspose", K-last: the fp32 legacy kernel for T = 1); A_log, dt_bias fp32 [8]; a, b
bf16 [B, 1, 8]; the kernel computes g = exp(-exp(A_log) * softplus(a + dt_bias)) (softplus threshold 20, as
torch's) and beta = sigmoid(b) itself, and maps v head h to q/k head h // 2 (`i_h = i_hv // (HV // H)` in
flashinfer/gdn_kernels/gdn_decode_pretranspose.py), the reference's repeat_interleave.
"""

import torch


def kernel_scale(scale):
    """The scale FlashInfer should get: the reference's default (1/sqrt(K)) for None or 0.0 is FlashInfer's
    for None, while a literal 0.0 would reach the kernel as 0."""
    return None if scale is None or float(scale) == 0.0 else float(scale)


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    """As the contest's wrapper calls it: the API allocates its output itself (with torch.zeros)."""
    return _decode(q, k, v, state, A_log, a, dt_bias, b, scale, output=None)


def run_preallocated(q, k, v, state, A_log, a, dt_bias, b, scale):
    """The same API with its output allocated here by torch.empty (no kernel) and passed in. Given none, the API
    zero-fills one with a kernel before its CuTe-DSL kernel, and the official span of a call then runs from that
    fill across the host's launch work to the end of the decode kernel; given one, the span is the kernel's."""
    batch, tokens, heads, dim = v.shape
    output = torch.empty(batch, tokens, heads, dim, dtype=q.dtype, device=q.device)
    return _decode(q, k, v, state, A_log, a, dt_bias, b, scale, output=output)


def _decode(q, k, v, state, A_log, a, dt_bias, b, scale, output):
    import flashinfer.gdn_decode as gdn_decode

    # FlashInfer imports its CuTe-DSL kernels optionally; without nvidia-cutlass-dsl the call would fail on a
    # None, so say what is missing instead.
    if not getattr(gdn_decode, "_PRETRANSPOSE_AVAILABLE", True):
        raise RuntimeError("FlashInfer's GDN decode kernel did not import (it needs nvidia-cutlass-dsl and "
                           "cuda-python beside flashinfer-python)")
    if state is None:  # optional in the definition: the reference starts from zeros
        batch, _, heads, dim = v.shape
        state = torch.zeros(batch, heads, dim, q.shape[-1], dtype=torch.float32, device=q.device)
    # The kernel updates `state` in place and returns it as the new state, as the contest's baseline does. No
    # copy: the harness hands a solution a clone of each input and draws fresh inputs for every trial, so the
    # aliasing only marks this baseline's input_mutation / output_aliasing audits, which baselines are exempt
    # from; the timed figure is then the kernel's alone (a copy would add 1 MiB of traffic per sequence, as
    # much as the kernel's own). Across the timer's repeated calls the state keeps evolving, as in serving.
    output, new_state = gdn_decode.gated_delta_rule_decode_pretranspose(
        q, k, v, state, A_log, a, dt_bias, b, scale=kernel_scale(scale), output=output, use_qk_l2norm=False)
    return output, new_state
