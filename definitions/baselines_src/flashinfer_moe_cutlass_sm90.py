"""Hopper stand-in baseline for the FP8 block-scale DeepSeek MoE: FlashInfer's CUTLASS fused MoE (SM90).

NOT the contest's baseline. The contest measured `flashinfer_wrapper_9sdjf3`, a wrapper around
`flashinfer.fused_moe.trtllm_fp8_block_scale_moe` (TRT-LLM-gen kernels, SM100 only: it does not run on an
H200). On sm_90 the closest FlashInfer path is `flashinfer.fused_moe.cutlass_fused_moe` with
`use_deepseek_fp8_block_scale=True` (128 x 128 FP8 weight blocks, activations quantised per 1 x 128 inside
the kernel; SM90 only). It does no routing, so the DeepSeek no-aux routing runs here in PyTorch, inside the
timed call, as the contest's baseline routes inside its call. Speedups against this are speedups against a
Hopper stand-in and must be reported as such.

What differs from the definition's arithmetic: the kernel takes bf16 activations, so the FP8 hidden states
are dequantised to bf16 first (one bf16 rounding) and re-quantised by the kernel. Assumptions taken from
FlashInfer's public API and its users, not verified on a GPU here: `quant_scales` is [W13 block scales,
W2 block scales] in the definition's layouts; W13 is [first half multiplied, second half through silu], the
definition's order; expert-parallel rank r owns experts [r x E_local, (r + 1) x E_local). The harness checks
this baseline against the reference like any solution before using its time.

FlashInfer builds this module on first use: one JIT build of 247 compile units (219 generated CUTLASS kernels),
about 68 minutes of a 16-core host, longer than any workload's time limit. So this baseline does not start that
build inside an evaluation: where the module is not built, importing this file fails at once with what to run
(``scripts/prebuild_flashinfer_moe.py``, once per host), and the harness archives that as the baseline's failure
for the session instead of timing out on every workload.
"""

import torch

TOP_K = 8
N_GROUP = 8
TOPK_GROUP = 4
BLOCK = 128


def require_the_prebuilt_module() -> None:
    """Fail now, with the fix, where FlashInfer's SM90 CUTLASS fused-MoE module is not built on this host."""
    try:
        from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
    except ImportError:  # no FlashInfer (or another version's layout): run() reports what is missing
        return
    spec = gen_cutlass_fused_moe_sm90_module(False)
    if not spec.is_compiled:
        raise RuntimeError(
            f"FlashInfer's CUTLASS fused-MoE module for sm_90 is not built on this host ({spec.get_library_path()}): "
            "its JIT build takes longer than a workload's limit, so it is not started here. Build it once per host "
            "with `python scripts/prebuild_flashinfer_moe.py` (it fills $CRUCIBLE_FLASHINFER_CACHE, the folder the "
            "baseline workers read), then submit again.")


require_the_prebuilt_module()


def route(routing_logits, routing_bias, routed_scaling_factor):
    """DeepSeek-V3 no-aux routing: (global expert ids int32 [T, 8], combine weights fp32 [T, 8])."""
    s = torch.sigmoid(routing_logits.float())
    biased = s + routing_bias.float()
    tokens, experts = s.shape
    group_scores = biased.view(tokens, N_GROUP, experts // N_GROUP).topk(2, dim=2).values.sum(dim=2)
    kept = group_scores.topk(TOPK_GROUP, dim=1).indices
    mask = torch.zeros_like(group_scores).scatter_(1, kept, 1.0).repeat_interleave(experts // N_GROUP, dim=1)
    ids = biased.masked_fill(mask == 0, float("-inf")).topk(TOP_K, dim=1).indices
    weights = s.gather(1, ids)
    weights = weights / (weights.sum(dim=1, keepdim=True) + 1e-20) * routed_scaling_factor
    return ids.to(torch.int32), weights.float()


def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    if torch.cuda.get_device_capability(hidden_states.device) != (9, 0):
        raise RuntimeError("the CUTLASS DeepSeek FP8 block-scale MoE is an SM90 kernel: this stand-in is for Hopper; "
                           "on Blackwell use the contest's trtllm_fp8_block_scale_moe baseline")
    from flashinfer.fused_moe import cutlass_fused_moe

    ids, weights = route(routing_logits, routing_bias, float(routed_scaling_factor))
    tokens, hidden = hidden_states.shape
    scale = hidden_states_scale.t().unsqueeze(-1)  # [H/128, T] block-major -> [T, H/128, 1]
    x = (hidden_states.float().view(tokens, hidden // BLOCK, BLOCK) * scale).view(tokens, hidden).to(torch.bfloat16)
    local_experts = gemm1_weights.shape[0]
    cutlass_fused_moe(input=x, token_selected_experts=ids, token_final_scales=weights,
                      fc1_expert_weights=gemm1_weights, fc2_expert_weights=gemm2_weights,
                      output_dtype=torch.bfloat16, quant_scales=[gemm1_weights_scale, gemm2_weights_scale],
                      ep_size=routing_logits.shape[1] // local_experts,
                      ep_rank=int(local_expert_offset) // local_experts,
                      output=output, use_deepseek_fp8_block_scale=True)
