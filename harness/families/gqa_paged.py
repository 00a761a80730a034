"""GQA paged decode (op_type ``gqa_paged``): what differs about judging it from the generic operator.

- cost: only the KV tokens the page table references are read, not the whole page pool, so the roofline
  needs the token count, exact when ``kv_last_page_len`` is known (a blob) or pages hold one token;
- request lengths from the page table (``kv_indptr``, ``kv_last_page_len``), which tell skewed batches apart;
- regimes: the evidence's rules (skewed, small batch, large batch) and, before anything is measured,
  whether batch x KV heads programs give every SM two (UNSPLIT_PROGRAMS_PER_SM, the skill's dispatch rule);
- the ``gqa-decode`` skill.

Inputs and the correctness check are the generic ones: the page indices FlashInfer-Bench names
(``*_indices``, ``*_indptr``, ``*_last_page_len``) already get valid structure from ``harness.data.inputs``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..data.blobs import blob_inputs, blob_tensor
from ..data.dtypes import torch_dtype
from ..data.hardware import sm_count
from ..data.dtypes import tensor_nbytes
from ..measure.roofline import WorkloadCost, generic_cost
from ..data.schema import Definition, Workload
from .base import OperatorFamily
from .regimes import RegimeFacts, assign_regime

# First matching rule names the regime. `all`: every condition holds; `any`: at least one does.
REGIME_RULES_YAML = """
- name: skewed
  any:
    label_regex: "skewed|one_long"
    length_max_over_mean_above: 4
- name: small-batch latency-bound
  all:
    axis_at_most: {batch_size: 16}
    fraction_of_floor_below: 0.6
- name: small-batch
  all:
    axis_at_most: {batch_size: 16}
- name: large-batch bandwidth-bound
  all:
    axis_above: {batch_size: 16}
- name: other
  all: {}
"""

PAGE_TABLE = ("kv_indptr", "kv_last_page_len")
# The gqa-decode skill's regime_dispatch.py rule, which solutions run: one program per (request, KV head) streams
# at full bandwidth only with at least two per SM (H200 run 16: 256 programs on 132 SMs 85-93% of the floor,
# split chunks 93-98%); a batch below that is latency-bound (split the tokens).
UNSPLIT_PROGRAMS_PER_SM = 2


def paged_token_count(kv_indptr: Sequence[int], kv_last_page_len: Sequence[int], page_size: int) -> int:
    """Exact KV tokens of a paged batch: a request with n > 0 pages holds (n - 1) * page_size + last."""
    indptr = [int(x) for x in (kv_indptr.tolist() if hasattr(kv_indptr, "tolist") else kv_indptr)]
    last = [int(x) for x in (kv_last_page_len.tolist() if hasattr(kv_last_page_len, "tolist") else kv_last_page_len)]
    if len(last) != len(indptr) - 1:
        raise ValueError(f"kv_last_page_len has {len(last)} entries for {len(indptr) - 1} requests")
    total = 0
    for i, last_len in enumerate(last):
        pages = indptr[i + 1] - indptr[i]
        if pages < 0:
            raise ValueError(f"kv_indptr decreases at request {i}")
        if pages:
            total += (pages - 1) * page_size + last_len
    return total


def exact_tokens(definition: Definition, workload: Workload, root: Path) -> Optional[int]:
    """Exact token count of a workload whose page table is a blob (needs the last-page lengths); else None."""
    page_size = definition.const_axes.get("page_size")
    blobs = blob_inputs(workload, PAGE_TABLE)
    if page_size is None or len(blobs) != len(PAGE_TABLE):
        return None
    return paged_token_count(blob_tensor(root, blobs["kv_indptr"]), blob_tensor(root, blobs["kv_last_page_len"]),
                             page_size)


def gqa_paged_cost(definition: Definition, workload: Workload, tokens: Optional[int]) -> Optional[WorkloadCost]:
    """Paged GQA decode: one query token per request attends to the KV tokens its pages hold.

    bytes = q + output + lse + K and V of the referenced tokens + the index tensors;
    flops = 4 x tokens x num_qo_heads x head_dim (QK^T and PV, one multiply-add = 2 flops each).
    The unreferenced rest of the page pool is not counted: a kernel need not read it.

    Tokens: page_size 1 gives tokens = num_kv_indices exactly. For page_size > 1 the count needs
    kv_last_page_len (``paged_token_count``); without a ``tokens`` argument, num_kv_indices x
    page_size is used, an upper bound, and the cost is marked inexact. None for definitions of the
    op_type this formula does not model (prefill): those get the generic count.
    """
    if not definition.name.startswith("gqa_paged_decode"):
        return None
    axes = {**definition.const_axes, **workload.axes}
    num_pages_referenced = axes["num_kv_indices"]
    page_size = axes["page_size"]
    num_qo_heads, num_kv_heads, head_dim = axes["num_qo_heads"], axes["num_kv_heads"], axes["head_dim"]

    most = num_pages_referenced * page_size
    if tokens is None:
        tokens, exact = most, page_size == 1
        token_note = (f"tokens = num_kv_indices x page_size = {tokens}"
                      + ("" if exact else " (upper bound: kv_last_page_len unknown)"))
    else:
        # Every referenced page holds at least one token and at most page_size.
        if not num_pages_referenced <= tokens <= most:
            raise ValueError(f"tokens={tokens} is impossible for {num_pages_referenced} pages of {page_size} "
                             f"(must lie in [{num_pages_referenced}, {most}])")
        exact = True
        token_note = f"tokens = {tokens} (given)"

    kv_element = torch_dtype(definition.inputs["k_cache"].dtype).itemsize
    kv_bytes = tokens * num_kv_heads * head_dim * 2 * kv_element
    io_names = ["q", "output", "lse", "kv_indptr", "kv_indices", "kv_last_page_len"]
    specs = {**definition.inputs, **definition.outputs}
    io_bytes = sum(tensor_nbytes(definition, specs[n], workload.axes) for n in io_names if n in specs)
    flops = 4 * tokens * num_qo_heads * head_dim
    formula = (f"gqa_paged decode: {token_note}; KV = tokens x {num_kv_heads} kv heads x {head_dim} x 2 (K,V) x "
               f"{kv_element} B = {kv_bytes} B; q + output + lse + index tensors = {io_bytes} B; "
               f"flops = 4 x tokens x {num_qo_heads} qo heads x {head_dim}")
    return WorkloadCost(bytes_moved=kv_bytes + io_bytes, flops=flops, formula=formula, exact=exact)


class GqaPagedFamily(OperatorFamily):
    op_type = "gqa_paged"
    skill = "gqa-decode"
    regime_rules = REGIME_RULES_YAML

    def workload_cost(self, definition: Definition, workload: Workload, root: Optional[Path] = None,
                      tokens: Optional[int] = None) -> WorkloadCost:
        """``gqa_paged_cost``, with the exact token count read from the page-table blobs under ``root``
        where the caller gave none (blob read errors propagate: the page table is part of the workload)."""
        if tokens is None and root is not None:
            tokens = exact_tokens(definition, workload, root)
        return gqa_paged_cost(definition, workload, tokens) or generic_cost(definition, workload)

    def request_lengths(self, definition: Definition, workload: Workload, root: Path) -> Optional[list[int]]:
        """Tokens per request from the page-table blobs: pages when a page holds one token, else
        (pages - 1) x page_size + last page's length; None where the blobs are absent or unreadable."""
        page_size = definition.const_axes.get("page_size", 1)
        tables: dict[str, list[int]] = {}
        for name, source in blob_inputs(workload, PAGE_TABLE).items():
            try:
                tables[name] = [int(x) for x in blob_tensor(root, source).tolist()]
            except Exception:
                pass
        indptr = tables.get("kv_indptr")
        if indptr is None:
            return None
        pages = [b - a for a, b in zip(indptr, indptr[1:])]
        last = tables.get("kv_last_page_len")
        if page_size == 1:
            return pages
        if last is not None and len(last) == len(pages):
            return [(p - 1) * page_size + lp if p else 0 for p, lp in zip(pages, last)]
        return None

    def regime(self, axes: Mapping[str, int], *, label: str = "", lengths: Optional[Sequence[int]] = None,
               target_hardware: str = "H200") -> str:
        """skewed when a few long requests dominate the batch (the evidence's own `skewed` rule: by request
        lengths where known, else by label); else latency-bound when batch x KV heads programs give the SMs fewer
        than UNSPLIT_PROGRAMS_PER_SM each, else memory-bound (decode); "all" when the batch size is unknown."""
        skewed = [r for r in self.rules() if r["name"] == "skewed"]
        facts: Any = RegimeFacts(label=label, axes=dict(axes), lengths=lengths)
        if skewed and assign_regime(facts, skewed) == "skewed":
            return "skewed"
        batch = axes.get("batch_size")
        kv_heads = axes.get("num_kv_heads") or 1
        if batch is None:
            return "all"
        return "latency-bound" if batch * kv_heads < UNSPLIT_PROGRAMS_PER_SM * sm_count(target_hardware) \
            else "memory-bound"


FAMILY = GqaPagedFamily()
