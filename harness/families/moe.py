"""FP8 block-scale DeepSeek MoE (op_type ``moe``): what differs about judging it from the generic operator.

- inputs (``harness.families.moe_inputs``): FP8 tensors drawn with consistent 128-block scales in the
  definition's layouts, and a DeepSeek-style stand-in for the captured routing logits and bias, whose
  official blobs are not public (``synthesizes_absent_blobs``: a dataset that holds them uses them);
- correctness: the contest's low-bit rule (the LowBitEvaluator of FlashInfer-Bench, run with
  ``--atol 1 --rtol 0.3 --required-matched-ratio 0.9``): the element rule of the default evaluator, but
  the output passes when at least the required fraction of elements does; ``matched_ratio`` is recorded;
- cost: weight streaming of the local experts that tokens are routed to, against FP8 compute of the
  routed (token, local expert) pairs;
- regimes: few tokens stream weights (each expert sees a handful of tokens: GEMV-like, memory-bound), many
  tokens make it a grouped GEMM (compute-bound above roughly 200 tokens per expert on an H200);
- the ``moe-fp8`` skill.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

from ..data.blobs import blob_inputs, blob_tensor
from ..measure.correctness import CheckResult, Tolerance, check_outputs
from ..data.dtypes import tensor_nbytes
from ..measure.roofline import WorkloadCost
from ..data.schema import Definition, EvaluationStatus, ScalarInput, Workload
from .base import OperatorFamily
from .moe_inputs import ROUTING, MoeGeometry, draw_routing, geometry, moe_special_inputs, route

# Below this many tokens every expert sees few tokens (T x top_k / num_experts: 32 at 1024), so the
# weights dominate the bytes and the kernel streams them; above it, tiles of a grouped GEMM fill up. The
# compute-bound point is later still (about 206 tokens per expert on an H200: T near 6600), which the
# measured fraction of the floor shows; the workloads have nothing between 901 and 11948.
REGIME_RULES_YAML = """
- name: weight-streaming
  all:
    axis_at_most: {seq_len: 1024}
- name: grouped-gemm
  all: {}
"""

# The low-bit rule's bar when a preset leaves it at the default evaluator's 1.0: the LowBitEvaluator's own
# default. The contest passed 0.9 explicitly (eval_config.yaml, op_type moe).
LOW_BIT_DEFAULT_RATIO = 0.95
# Fixed seed of the routing draw used to estimate the cost where the routing blob is absent.
COST_ESTIMATE_SEED = 0


class MoeFamily(OperatorFamily):
    op_type = "moe"
    skill = "moe-fp8"
    regime_rules = REGIME_RULES_YAML
    synthesizes_absent_blobs = True

    def special_inputs(self, definition: Definition, workload: Workload, inputs: Mapping[str, Any],
                       generator: Callable[[str], torch.Generator],
                       device: torch.device) -> Optional[dict[str, Any]]:
        return moe_special_inputs(definition, workload, inputs, generator, device)

    def compare(self, definition: Definition, outputs: Mapping[str, Any], reference: Mapping[str, torch.Tensor],
                tolerance: Tolerance) -> CheckResult:
        """The low-bit rule: shape, dtype and any inf/nan first (each fails outright), then an element fails iff
        |x - y| > atol and |x - y| / (|y| + 1e-8) > rtol, and the output passes when the matched ratio reaches
        the required one. ``matched_ratio`` is in the result (and per output) whether it passed or not."""
        if tolerance.required_matched_ratio >= 1.0:
            tolerance = Tolerance(tolerance.atol, tolerance.rtol, LOW_BIT_DEFAULT_RATIO,
                                  tolerance.allow_matching_nonfinite)
        result = check_outputs(dict(outputs), dict(reference), tolerance)
        if result.status == EvaluationStatus.INCORRECT_NUMERICAL and result.matched_ratio < 1.0 and result.per_output:
            result.message = f"low-bit rule: {result.message}"
        return result

    def reference_working_bytes(self, definition: Definition, workload: Workload) -> int:
        """The official reference dequantises every local expert's weights to float32 and builds each scale
        expanded to the weight's shape, both alive with their product: three copies of W13 and W2. The precision
        audit's oracle runs the same code in float64 in the same process, so the copies are 8 bytes a weight
        (measured on the H200: the reference process peaked at 37.1 GB for T = 1, 33.8 GB of it these copies)."""
        g = geometry(definition)
        weights = g.num_local_experts * 3 * g.intermediate_size * g.hidden_size  # W13 (2I x H) and W2 (H x I)
        return 3 * 8 * weights

    def workload_cost(self, definition: Definition, workload: Workload, root: Optional[Path] = None,
                      tokens: Optional[int] = None) -> WorkloadCost:
        """``moe_cost`` with the routing from the workload's blob under ``root`` (exact), else an estimate from
        the family's routing stand-in (``exact=False``: the true routing of a trial is not known here)."""
        return moe_cost(definition, workload, routed_topk(definition, workload, root))


def routed_topk(definition: Definition, workload: Workload, root: Optional[Path]) -> tuple[torch.Tensor, bool]:
    """(top-k expert ids [T, K], exact): from the official routing blob where ``root`` holds it, else from the
    stand-in drawn with a fixed seed (an estimate of a typical trial, not of a given one)."""
    g = geometry(definition)
    tokens = workload.axes["seq_len"]
    blobs = blob_inputs(workload, ROUTING) if root is not None else {}
    if len(blobs) == len(ROUTING) and all((Path(root) / s.path).exists() for s in blobs.values()):
        logits = blob_tensor(root, blobs["routing_logits"])
        bias = blob_tensor(root, blobs["routing_bias"])
        return route(logits, bias, g)[0], True

    def gen(name: str) -> torch.Generator:
        digest = hashlib.sha256(f"{COST_ESTIMATE_SEED}/{name}".encode()).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))

    logits, bias = draw_routing(tokens, g, gen("routing_logits"), gen("routing_bias"), torch.device("cpu"))
    return route(logits, bias, g)[0], False


def local_offset(workload: Workload) -> Optional[int]:
    source = workload.inputs.get("local_expert_offset")
    return int(source.value) if isinstance(source, ScalarInput) else None


def moe_cost(definition: Definition, workload: Workload, routing: tuple[torch.Tensor, bool]) -> WorkloadCost:
    """Bytes and flops a kernel cannot avoid, given which experts the tokens chose.

    bytes = FP8 weights and block scales of every local expert at least one token is routed to (each read once)
          + routing logits and bias (all of them: routing needs every score)
          + hidden states and their scales of the tokens routed to at least one local expert
          + the output (every row is written, zero rows too);
    flops = routed (token, local expert) pairs x 6 x H x I (GEMM1 2 x H x 2I, GEMM2 2 x I x H).
    Routing, SwiGLU and the weighted sum are not counted (a few flops per element). Unknown local offset
    (random scalar): the rank with the fewest routed pairs, so the count stays a lower bound.
    """
    topk, exact = routing
    g: MoeGeometry = geometry(definition)
    axes = {**definition.const_axes, **workload.axes}
    offset = local_offset(workload)
    offsets = [offset] if offset is not None else range(0, g.num_experts, g.num_local_experts)
    best: Optional[tuple[int, int, int]] = None
    for start in offsets:
        local = (topk >= start) & (topk < start + g.num_local_experts)
        pairs = int(local.sum())
        active = int(torch.unique(topk[local]).numel()) if pairs else 0
        routed_tokens = int(local.any(dim=1).sum())
        if best is None or pairs < best[0]:
            best = (pairs, active, routed_tokens)
    pairs, active, routed_tokens = best or (0, 0, 0)
    specs = {**definition.inputs, **definition.outputs}
    io = sum(tensor_nbytes(definition, specs[n], axes) for n in ("routing_logits", "routing_bias", "output"))
    hidden_row = g.hidden_size * 1 + (g.hidden_size // g.block) * 4
    weights = active * (g.expert_weight_bytes + g.expert_scale_bytes)
    flops = pairs * g.flops_per_pair
    source = "routing blob" if exact else "routing stand-in (fixed seed; an estimate, not a bound)"
    formula = (f"moe: {source}: {active} of {g.num_local_experts} local experts routed to, {pairs} (token, expert) "
               f"pairs, {routed_tokens} of {axes['seq_len']} tokens; weights {active} x "
               f"{g.expert_weight_bytes + g.expert_scale_bytes} B; hidden rows {routed_tokens} x {hidden_row} B; "
               f"logits, bias and output {io} B; flops = pairs x 6 x {g.hidden_size} x {g.intermediate_size}, FP8 "
               f"(at the FP8 tensor rate)")
    return WorkloadCost(bytes_moved=weights + routed_tokens * hidden_row + io, flops=flops, formula=formula,
                        exact=exact, fp8_flops=flops)


FAMILY = MoeFamily()
