"""DeepSeek-V3.2 sparse attention (op_type ``dsa_paged``): what differs about judging it from the generic operator.

Two kinds of definition share the op_type, told apart by name as the official evaluator registry does:

- ``dsa_sparse_attention_*``: MLA attention in the absorbed layout over the top-k tokens each query picked
  (``sparse_indices``, -1 = padding). Official rule (DsaSparseAttentionEvaluator): the default element test on
  ``output`` and, when the solution returns it, on ``lse`` (a value-returning solution may return ``output``
  alone; a destination-passing one gets both checked).
- ``dsa_topk_indexer_*``: scores every token of a request through the FP8 key cache and returns the global ids
  of the top-k. Official rule (DsaTopkIndexerEvaluator): every non-negative index must be reachable (its page
  in the row's ``block_table``, its position < ``seq_lens``) and unique; then the reference's scores at the
  reference's and at the solution's indices are sorted and compared with the tolerance (matching -inf
  paddings count as equal). Order is not checked, and a swap between near-tied scores passes.

Inputs (``harness.families.dsa_inputs``): stand-ins for the absent captured blobs (sparse indices; sequence
lengths and page tables) and the DeepGEMM-packed FP8 key cache drawn as the official evaluator draws it.
Cost: gathered rows only (the KV rows / indexer keys a kernel must read), not the page pool.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from ..data.blobs import blob_inputs, blob_tensor
from ..data.hardware import sm_count
from ..measure.correctness import REL_EPS, CheckResult, Tolerance, check_output, check_outputs
from ..data.dtypes import tensor_nbytes
from ..measure.roofline import WorkloadCost, generic_cost
from ..data.schema import Definition, EvaluationStatus, SafetensorsInput, Workload
from .base import OperatorFamily
from .dsa_inputs import (SCALE_BYTES, dequantize_key_cache, draw_block_table, draw_packed_key_cache,
                         draw_seq_lens, draw_sparse_indices)
from .regimes import RegimeFacts, assign_regime

ATTENTION_PREFIX = "dsa_sparse_attention"
INDEXER_PREFIX = "dsa_topk_indexer"

# First matching rule names the regime; conditions on an axis a definition lacks do not hold, so the
# indexer's rules never match an attention workload and the other way round.
REGIME_RULES_YAML = """
- name: indexer select-all
  all:
    axis_at_most: {max_num_pages: 32}
- name: indexer top-k select
  all:
    axis_above: {max_num_pages: 32}
- name: attention latency-bound
  all:
    axis_at_most: {num_tokens: 64}
- name: attention bandwidth-bound
  all:
    axis_above: {num_tokens: 64}
- name: other
  all: {}
"""


def kind_of(definition: Definition) -> str:
    """"attention", "indexer" or "" (a dsa_paged definition neither official evaluator covers)."""
    if definition.name.startswith(ATTENTION_PREFIX):
        return "attention"
    if definition.name.startswith(INDEXER_PREFIX):
        return "indexer"
    return ""


def _from_blob(workload: Workload, name: str, inputs: Mapping[str, Any]) -> bool:
    """Whether ``inputs[name]`` is the official tensor (its blob was present), not a draw to replace."""
    return name in inputs and isinstance(workload.inputs.get(name), SafetensorsInput)


# ---------------------------------------------------------------------------------------------
# The indexer's rule


def validate_topk_indices(indices: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
                          page_size: int) -> tuple[list[int], list[int]]:
    """Rows with an unreachable index and rows with a duplicate index (-1 padding exempt from both).

    Reachable: the index's page appears in the row's ``block_table`` and, at the first slot holding it, the
    position slot * page_size + offset is below the row's length: exactly the pages the reference gathers.
    """
    idx = indices.to(torch.int64)
    valid = idx >= 0
    safe = idx.clamp(min=0)
    page, offset = safe // page_size, safe % page_size
    hits = page.unsqueeze(2) == block_table.to(torch.int64).unsqueeze(1)  # [B, K, M]
    found = hits.any(dim=2)
    position = hits.to(torch.int64).argmax(dim=2) * page_size + offset
    reachable = found & (position < seq_lens.to(torch.int64).unsqueeze(1))
    unreachable = (valid & ~reachable).any(dim=1)
    ordered = idx.sort(dim=1).values
    duplicate = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any(dim=1)
    return unreachable.nonzero().flatten().tolist(), duplicate.nonzero().flatten().tolist()


def indexer_scores_at(indices: torch.Tensor, keys: torch.Tensor, q: torch.Tensor, weights: torch.Tensor,
                      page_size: int) -> torch.Tensor:
    """The reference's score, sum_h w_h relu(q_h . k_j), at each index ([B, K] fp32; -inf at padding)."""
    valid = indices >= 0
    safe = indices.clamp(min=0).to(torch.int64)
    gathered = keys[safe // page_size, safe % page_size]  # [B, K, D]
    per_head = torch.relu(torch.bmm(q.to(torch.float32), gathered.transpose(1, 2)))  # [B, H, K]
    scores = (per_head * weights.to(torch.float32).unsqueeze(2)).sum(dim=1)
    return scores.masked_fill(~valid, float("-inf"))


def sorted_score_check(got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> CheckResult:
    """Descending-sorted scores of the solution's indices against the reference's: the element test, where a
    non-finite value matches only the same non-finite value (both rows padded there)."""
    x = got.to(torch.float32).sort(dim=1, descending=True).values
    y = want.to(torch.float32).sort(dim=1, descending=True).values
    shared = (torch.isnan(x) & torch.isnan(y)) | (torch.isinf(x) & torch.isinf(y) & (x.signbit() == y.signbit()))
    finite = torch.isfinite(x) & torch.isfinite(y)
    abs_err = torch.where(finite, (x - y).abs(), torch.zeros_like(x))
    rel_err = abs_err / (y.abs().where(finite, torch.ones_like(y)) + REL_EPS)
    failed = (~shared & ~finite) | (finite & (abs_err > tol.atol) & (rel_err > tol.rtol))
    n_failed, total = int(failed.sum()), max(x.numel(), 1)
    ratio = 1.0 - n_failed / total
    mismatch = bool((~shared & ~finite).any())
    worst_abs = float(abs_err.max()) if abs_err.numel() else 0.0
    worst_rel = float(rel_err.max()) if rel_err.numel() else 0.0
    result = CheckResult(EvaluationStatus.PASSED, math.inf if mismatch else worst_abs,
                         math.inf if mismatch else worst_rel, ratio)
    result.per_output["topk_indices"] = {"max_absolute_error": result.max_absolute_error,
                                         "max_relative_error": result.max_relative_error,
                                         "matched_ratio": ratio, "failed_elements": n_failed}
    if ratio < tol.required_matched_ratio:
        row, col = (int(i) for i in failed.nonzero()[0])
        result.status = EvaluationStatus.INCORRECT_NUMERICAL
        result.message = (f"topk_indices: {n_failed} of {x.numel()} sorted scores outside atol={tol.atol} and "
                          f"rtol={tol.rtol}; first at row {row}, rank {col}: score {float(x[row, col]):.6g}, "
                          f"reference {float(y[row, col]):.6g} (a missing index scores -inf)")
    return result


def _index_sets_check(got: torch.Tensor, want: torch.Tensor) -> CheckResult:
    """Without the inputs no score can be recomputed: the valid indices of each row, as sets, must equal the
    reference's (stricter than the official rule, which also accepts near-tie swaps)."""
    bad = [b for b in range(got.shape[0])
           if not torch.equal(got[b][got[b] >= 0].sort().values, want[b][want[b] >= 0].sort().values)]
    if not bad:
        return CheckResult(EvaluationStatus.PASSED)
    return CheckResult(EvaluationStatus.INCORRECT_NUMERICAL, math.inf, math.inf, 1 - len(bad) / got.shape[0],
                       message=f"topk_indices: rows {bad[:8]} select other tokens than the reference (compared as "
                               "sets: the inputs needed to compare scores were not given)")


def check_topk_indexer(definition: Definition, got: Any, want: torch.Tensor, tol: Tolerance,
                       inputs: Optional[Mapping[str, Any]] = None) -> CheckResult:
    """The official indexer rule on one call (see the module docstring)."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        return check_output("topk_indices", got, want, tol)  # the status of a wrong type, shape or dtype
    got = got.detach().to(want.device)
    page_size = definition.const_axes["page_size"]
    if inputs is None:
        ordered = got.to(torch.int64).sort(dim=1).values
        dup = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any(dim=1).nonzero().flatten().tolist()
        if dup:
            return CheckResult(EvaluationStatus.INCORRECT_NUMERICAL, math.inf, math.inf, 0.0,
                               message=f"topk_indices: duplicate indices in rows {dup[:8]}")
        return _index_sets_check(got, want)
    seq_lens, table = inputs["seq_lens"].to(got.device), inputs["block_table"].to(got.device)
    unreachable, duplicate = validate_topk_indices(got, seq_lens, table, page_size)
    if unreachable or duplicate:
        what = (f"unreachable indices (page not in the row's block_table or position >= seq_len) in rows "
                f"{unreachable[:8]}" if unreachable else f"duplicate indices in rows {duplicate[:8]}")
        return CheckResult(EvaluationStatus.INCORRECT_NUMERICAL, math.inf, math.inf, 0.0,
                           message=f"topk_indices: {what}")
    keys = dequantize_key_cache(inputs["k_index_cache_fp8"].to(got.device))
    q = inputs["q_index_fp8"].to(got.device).to(torch.float32)
    weights = inputs["weights"].to(got.device)
    scores = indexer_scores_at(torch.cat([want.to(got.device), got], dim=1), keys, q, weights, page_size)
    ref_scores, sol_scores = scores.split(want.shape[1], dim=1)
    return sorted_score_check(sol_scores, ref_scores, tol)


def check_sparse_attention(outputs: Mapping[str, Any], reference: Mapping[str, torch.Tensor],
                           tol: Tolerance) -> CheckResult:
    """The default element test on ``output``, and on ``lse`` only where the solution returned it."""
    names = [n for n in reference if n == "output" or outputs.get(n) is not None]
    return check_outputs({n: outputs[n] for n in names if n in outputs}, {n: reference[n] for n in names}, tol)


# ---------------------------------------------------------------------------------------------
# Cost


def _bytes(definition: Definition, workload: Workload, names: Sequence[str]) -> int:
    specs = {**definition.inputs, **definition.outputs}
    return sum(tensor_nbytes(definition, specs[n], workload.axes) for n in names if n in specs)


def attention_cost(definition: Definition, workload: Workload, rows: Optional[int],
                   pairs: Optional[int]) -> WorkloadCost:
    """Gathered KV rows: each distinct selected row (ckv + kpe) read once; q, output, lse and the indices.

    flops = 2 x heads x (ckv + kpe) per (token, selected row) for the logits plus 2 x heads x ckv for P.V.
    ``rows``/``pairs``: distinct rows and (token, row) pairs from the captured indices; without them every
    index is taken as valid and distinct, an upper bound (padding rows read nothing), so ``exact=False``.
    """
    axes = {**definition.const_axes, **workload.axes}
    tokens, topk, heads = axes["num_tokens"], axes["topk"], axes["num_qo_heads"]
    ckv, kpe = axes["head_dim_ckv"], axes["head_dim_kpe"]
    exact = rows is not None and pairs is not None
    rows = tokens * topk if rows is None else rows
    pairs = tokens * topk if pairs is None else pairs
    element = 2  # bf16 caches
    kv_bytes = rows * (ckv + kpe) * element
    io_bytes = _bytes(definition, workload, ["q_nope", "q_pe", "sparse_indices", "output", "lse"])
    flops = pairs * 2 * heads * (ckv + kpe + ckv)
    note = "" if exact else " (upper bound: every index counted as valid and distinct; blob absent)"
    formula = (f"dsa sparse attention: {rows} gathered rows x ({ckv} + {kpe}) x 2 B = {kv_bytes} B{note}; "
               f"q + indices + output + lse = {io_bytes} B; flops = {pairs} (token, row) pairs x 2 x {heads} heads "
               f"x ({ckv + kpe} + {ckv})")
    return WorkloadCost(bytes_moved=kv_bytes + io_bytes, flops=flops, formula=formula, exact=exact)


def indexer_cost(definition: Definition, workload: Workload, keys: Optional[int],
                 pages: Optional[int]) -> WorkloadCost:
    """Gathered keys: each reachable token's FP8 key and fp32 scale read once, its page-table entry, q, weights,
    lengths and the output. flops = 2 x heads x head_dim per key (the MMA), all FP8: the floor takes them at the
    GPU's FP8 tensor rate (measured; twice the bf16 rate on sm_90 and sm_100 where it is not).
    ``keys``/``pages``: from the captured lengths; without them every row is taken as max_num_pages full
    pages, an upper bound, so ``exact=False``.
    """
    axes = {**definition.const_axes, **workload.axes}
    batch, max_pages, page_size = axes["batch_size"], axes["max_num_pages"], axes["page_size"]
    heads, dim = axes["num_index_heads"], axes["index_head_dim"]
    exact = keys is not None and pages is not None
    keys = batch * max_pages * page_size if keys is None else keys
    pages = batch * max_pages if pages is None else pages
    key_bytes = keys * (dim + SCALE_BYTES) + pages * 4
    io_bytes = _bytes(definition, workload, ["q_index_fp8", "weights", "seq_lens", "topk_indices"])
    fp8_flops = keys * 2 * heads * dim
    note = "" if exact else " (upper bound: lengths unknown, every row taken as full; blob absent)"
    formula = (f"dsa top-k indexer: {keys} keys x ({dim} + {SCALE_BYTES}) B + {pages} page-table entries x 4 B"
               f"{note}; q + weights + seq_lens + output = {io_bytes} B; flops = {keys} keys x 2 x {heads} x {dim} "
               f"= {fp8_flops} FP8 (at the FP8 tensor rate)")
    return WorkloadCost(bytes_moved=key_bytes + io_bytes, flops=fp8_flops, formula=formula, exact=exact,
                        fp8_flops=fp8_flops)


def _blob(workload: Workload, root: Optional[Path], name: str) -> Optional[torch.Tensor]:
    source = blob_inputs(workload, (name,)).get(name)
    if source is None or root is None or not (Path(root) / source.path).exists():
        return None
    return blob_tensor(root, source)


class DsaPagedFamily(OperatorFamily):
    op_type = "dsa_paged"
    skill = "dsa-sparse"
    regime_rules = REGIME_RULES_YAML
    synthesizes_absent_blobs = True
    #: The indexer's official rule recomputes scores from the call's inputs; ``compare`` takes them as
    #: ``inputs=`` and, given none, falls back to comparing index sets (strict: near-tie swaps fail).
    compare_needs_inputs = True

    def special_inputs(self, definition: Definition, workload: Workload, inputs: Mapping[str, Any],
                       generator: Callable[[str], torch.Generator],
                       device: torch.device) -> Optional[dict[str, Any]]:
        axes = {**definition.const_axes, **workload.axes}
        out: dict[str, Any] = {}
        kind = kind_of(definition)
        if kind == "attention" and not _from_blob(workload, "sparse_indices", inputs):
            out["sparse_indices"] = draw_sparse_indices(axes["num_tokens"], axes["topk"], axes["num_pages"],
                                                        axes["page_size"], generator("sparse_indices"), device)
        if kind == "indexer":
            page_size, max_pages = axes["page_size"], axes["max_num_pages"]
            seq_lens = inputs["seq_lens"] if _from_blob(workload, "seq_lens", inputs) else None
            if seq_lens is None:
                seq_lens = out["seq_lens"] = draw_seq_lens(axes["batch_size"], max_pages, page_size,
                                                           generator("seq_lens"), device)
            if not _from_blob(workload, "block_table", inputs):
                out["block_table"] = draw_block_table(seq_lens, max_pages, axes["num_pages"], page_size,
                                                      generator("block_table"), device)
            if not _from_blob(workload, "k_index_cache_fp8", inputs):
                out["k_index_cache_fp8"] = draw_packed_key_cache(axes["num_pages"], page_size, axes["index_head_dim"],
                                                                 generator("k_index_cache_fp8"), device)
        return out or None

    def required_outputs(self, definition: Definition) -> list[str]:
        # the sparse attention may return ``output`` alone (the official evaluator's optional lse)
        return ["output"] if kind_of(definition) == "attention" else list(definition.outputs)

    def compare(self, definition: Definition, outputs: Mapping[str, Any], reference: Mapping[str, torch.Tensor],
                tolerance: Tolerance, inputs: Optional[Mapping[str, Any]] = None) -> CheckResult:
        kind = kind_of(definition)
        if kind == "attention":
            return check_sparse_attention(outputs, reference, tolerance)
        if kind == "indexer":
            if "topk_indices" not in outputs:
                return CheckResult(EvaluationStatus.RUNTIME_ERROR, message="missing outputs: ['topk_indices']")
            return check_topk_indexer(definition, outputs["topk_indices"], reference["topk_indices"], tolerance,
                                      inputs)
        return super().compare(definition, outputs, reference, tolerance)

    def workload_cost(self, definition: Definition, workload: Workload, root: Optional[Path] = None,
                      tokens: Optional[int] = None) -> WorkloadCost:
        """Gathered rows, exact from the captured blobs under ``root`` (``tokens``, where given, is the count of
        distinct rows / keys read); an upper bound marked inexact without them."""
        kind = kind_of(definition)
        if kind == "attention":
            indices = _blob(workload, root, "sparse_indices")
            if indices is not None:
                valid = indices[indices >= 0]
                return attention_cost(definition, workload, int(valid.unique().numel()), int(valid.numel()))
            return attention_cost(definition, workload, tokens, tokens)
        if kind == "indexer":
            lengths = self._lengths(definition, workload, root)
            if lengths is not None:
                page_size = definition.const_axes["page_size"]
                return indexer_cost(definition, workload, sum(lengths), sum(-(-n // page_size) for n in lengths))
            return indexer_cost(definition, workload, None, None)
        return generic_cost(definition, workload)

    def _lengths(self, definition: Definition, workload: Workload, root: Optional[Path]) -> Optional[list[int]]:
        seq_lens = _blob(workload, root, "seq_lens")
        return None if seq_lens is None else [int(n) for n in seq_lens.tolist()]

    def request_lengths(self, definition: Definition, workload: Workload, root: Path) -> Optional[list[int]]:
        """The indexer's ``seq_lens``; for the attention, the selected (valid) rows of each query token. From
        the captured blobs only: None where they are absent (drawn stand-ins differ per trial)."""
        kind = kind_of(definition)
        try:
            if kind == "indexer":
                return self._lengths(definition, workload, root)
            if kind == "attention":
                indices = _blob(workload, root, "sparse_indices")
                return None if indices is None else [int(n) for n in (indices >= 0).sum(dim=1).tolist()]
        except Exception:
            return None
        return None

    def regime(self, axes: Mapping[str, int], *, label: str = "", lengths: Optional[Sequence[int]] = None,
               target_hardware: str = "H200") -> str:
        """Attention: latency-bound while one program per query token (all 16 heads share its gathered rows)
        cannot fill the SMs, which every official workload (at most 8 tokens) is; else memory-bound.
        Indexer: select-all when every row fits in top-k (the output is the row's tokens; scoring is the
        work), top-k select when a real selection is needed (selection dominates at small batch)."""
        if "num_tokens" in axes:
            return "latency-bound" if axes["num_tokens"] < sm_count(target_hardware) else "memory-bound"
        if "max_num_pages" in axes and "page_size" in axes and "topk" in axes:
            return "select-all" if axes["max_num_pages"] * axes["page_size"] <= axes["topk"] else "top-k select"
        return assign_regime(RegimeFacts(label=label, axes=dict(axes), lengths=lengths), self.rules())


FAMILY = DsaPagedFamily()
