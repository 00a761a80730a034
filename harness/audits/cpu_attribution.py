"""Who did the work on a host without a GPU (pure functions): the CPU variant of the `attribution` audit.

There are no CUPTI records on a CPU. Under Triton's interpreter a kernel's body is computed with numpy, never through
ATen, so every ATen operator that computes during a checked call of a Triton solution is a library's work; the worker
counts, per operator, the floating-point elements those operators read (``harness.sandbox.library_ops``) and this
module judges the count against the float elements of the definition's inputs (q, k_cache, v_cache...):

- the library read ``MAX_SHARE`` of them or more: the work was done outside the solution's kernels (``fallback:``);
- else, a matrix product (never glue, as cuBLAS is never glue on a GPU), a reduction, scan, sort or top-k where
  the definition's family does not count ATen kernels as glue (only MoE's routing does,
  ``attribution_aten_glue_us``), or values taken out of PyTorch (``Tensor.numpy``, ``tolist``: whatever numpy or
  Python computes on them, no count sees): it fails unsettled, neither cleared nor called a fallback. Its share says
  nothing of its cost (a top-k over the scores reads few elements and is the DSA indexer's whole selection; a sparse
  attention's page pool makes any share small), and only a GPU's attribution can time it;
- else (no compute, or pointwise maps: a scale, gate math, masks, which cannot contract, reduce or select an
  operator's work, and MoE's routing): passed. It settles the static gate's PyTorch warnings (`torch_compute`: torch
  calls, tensor methods, ``@``, numpy's, since no value left PyTorch) as a GPU's pass does
  (harness.audits.verdicts.unconfirmed_library_use): code the gate flagged that never ran (a self-test under
  ``if __name__ == "__main__":``) no longer blocks. Never its warnings on other libraries (FlashInfer, flash-attn,
  Liger; `library_fallback`: cuBLAS, CUTLASS), which a CPU does not run as a GPU would: a solution that calls
  FlashInfer where it imports and its own kernel elsewhere passes here and is not cleared by it.

Integers count toward the share too, never as values: arithmetic on integer tensors that are neither values nor the
definition's indices (its integer inputs and what is computed from them alone: page tables, lengths, block tables),
and integers taken out of PyTorch (a plan's lengths, a few per request). So value bits a kernel of the candidate's
stored into integer buffers, where no ATen operator marked them, read back or computed on (attention in int64 fixed
point), are a fallback (red team round 9), while a plan's arithmetic and reads stay far under the bound. The share's
whole is the inputs' float elements and their 8-bit integer ones (an FP8 cache packed as int8, the DSA indexer's,
whose elements count as values).

A workload's verdict is its worst call's (the correctness trials' and the fresh-input recheck's calls all count:
a solution cannot compute honestly only where it guesses it is watched).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from .model import Audit

# The library may read at most a quarter of the inputs' float elements. Honest host-side glue reads a small
# part of them: q * sm_scale reads q, under 1% of a paged decode's q + K + V (32 query heads against 8 KV heads x
# at least 512 tokens); MoE's routing reads the router logits [T, E], under 0.1% of the hidden states and weights;
# planning reads integer lengths, which count as nothing; GDN's gates read a, b and their parameters [T, H], under 2%
# of q, k, v and the state. Any operator done by the library reads its operands at least once, and attention or
# a GEMM in PyTorch reads K and V (or the weights) in full: 100% and more (the red team's attention through
# sum_to_size and max read 5x the inputs). A quarter leaves a wide margin on both sides: the half of a
# computation (QK^T in PyTorch, P.V in Triton) still fails.
MAX_SHARE = 0.25

# Python scalars taken out of PyTorch one element at a time (`int(counts.max())` sizing a grid, `.item()` of a padded
# length, `bool(mask.any())`): a plan's sizes, as MoE solutions in vLLM's style take them. Each reads exactly one
# element, so a call's count is exact; up to this many (and 1% of the inputs' float elements) nothing an operator does
# can be computed from them, and they are glue. More, or values taken out whole (`numpy`, `tolist`, storages, text),
# stay not glue (red team round 11: a MoE solution sizing its grid by `int(counts.max())` was unsettled).
SCALAR_READS = 4096
_SCALAR_METHODS = frozenset({"item", "__float__", "__int__", "__index__", "__complex__", "__bool__"})

# (input float elements, {operator: (kind, float elements read)}) of one checked call
Call = tuple[int, Mapping[str, tuple[str, int]]]
# Every detail of this variant says so after its outcome's prefix (``fallback: ``, ``unsettled: `` or none).
MARK = "CPU: "
# A static-gate finding on a library other than PyTorch and numpy (its message's "(the flashinfer library compute"):
# such a library's kernels are a GPU's, and where it is missing a CPU runs whatever the solution does instead.
_OTHER_LIBRARY = re.compile(r"\(the (?!numpy\b|torch\b)[\w.]+ library")
_NOT_GLUE = {"matmul": "matrix products", "reduction": "reductions, sorts or top-k",
             "host": "values taken out of PyTorch (numpy, lists)"}


# numpy's (and scipy's) compute on the host (python_references, python_calls): no attribution sees it, neither the
# GPU's CUPTI records nor this count of ATen operators, which a value taken out through a reinterpreting view
# (`q.view(torch.int16).numpy()`, red team round 7) leaves at zero float elements
_HOST_LIBRARY = re.compile(r"\(the (?:numpy|scipy) library's compute|\(numpy compute on an array\)")


def host_library(finding: Mapping[str, Any]) -> bool:
    """A static-gate finding of numpy or scipy compute on the host, which no attribution settles."""
    return finding.get("rule") == "torch_compute" and bool(_HOST_LIBRARY.search(str(finding.get("message", ""))))


def settles(finding: Mapping[str, Any]) -> bool:
    """Whether a pass of this variant settles a static-gate library finding: PyTorch compute (a torch call, a tensor
    method, ``@``; numpy's too, as no value left PyTorch in a call that passed), never another library's nor a GPU
    library's (`library_fallback`)."""
    return (finding.get("rule") == "torch_compute" and not _OTHER_LIBRARY.search(str(finding.get("message", "")))
            and not host_library(finding))


def is_cpu_variant(audit: Audit) -> bool:
    """An `attribution` audit of this module's (a CPU's count of library operators), not a GPU's CUPTI reading."""
    detail = audit.detail
    for prefix in ("fallback: ", "unsettled: "):
        detail = detail[len(prefix):] if detail.startswith(prefix) else detail
    return audit.name == "attribution" and detail.startswith(MARK)


def _pct(part: float, whole: int) -> str:
    return f"{100 * part / whole:.3g}%" if whole else "all"


def _listed(ops: Mapping[str, tuple[str, int]], whole: int) -> str:
    top = sorted(ops.items(), key=lambda item: -item[1][1])
    return ", ".join(f"{name} {_pct(n, whole)}" for name, (_, n) in top[:5]) + (", ..." if len(top) > 5 else "")


def call_verdict(call: Call, aten_glue: bool = False, library_is_own: bool = False,
                 max_share: float = MAX_SHARE, reduction_share: float = 0.0) -> tuple[int, float, Audit]:
    """One call's verdict, with its rank (2 fallback, 1 unsettled, 0 passed) and the share of the inputs' float
    elements the library read (inf where the inputs have none and the library read some). ``reduction_share``: the
    family's reductions reading together at most this share of the inputs are glue (GDN's scan of its gates)."""
    inputs, ops = call
    read = sum(n for _, n in ops.values())
    share = read / inputs if inputs else (float("inf") if read else 0.0)
    where = "outside the solution's own Triton kernels"
    if library_is_own:  # the dataset's own baselines: their library call is their kernel (as on a GPU)
        return 0, share, Audit(name="attribution", passed=True,
                               detail=f"{MARK}the dataset's own baseline: its library calls are its own")
    if not ops:
        return 0, 0.0, Audit(name="attribution", passed=True, detail=f"{MARK}no library compute {where}")
    said = f"{MARK}library ops read {_pct(read, inputs)} of the inputs' float elements {where}: {_listed(ops, inputs)}"
    if share >= max_share:
        return 2, share, Audit(name="attribution", passed=False,
                               detail=f"fallback: {said} (the bound is {max_share:.0%})")
    not_glue = {name: v for name, v in ops.items() if v[0] in ("matmul", "host") or (v[0] == "reduction"
                                                                                       and not aten_glue)}
    reductions = {name for name, (kind, _) in not_glue.items() if kind == "reduction"}
    if reductions and sum(ops[name][1] for name in reductions) <= reduction_share * inputs:
        not_glue = {name: v for name, v in not_glue.items() if name not in reductions}
    scalars = {name for name, (kind, _) in not_glue.items()
               if kind == "host" and name.removeprefix("host: Tensor.") in _SCALAR_METHODS}
    if scalars and sum(ops[name][1] for name in scalars) <= min(SCALAR_READS, inputs // 100):
        not_glue = {name: v for name, v in not_glue.items() if name not in scalars}
    if not_glue:
        kinds = " or ".join(sorted({_NOT_GLUE[k] for k, _ in not_glue.values()}))
        return 1, share, Audit(name="attribution", passed=False, detail=(
            f"unsettled: {said}; {kinds} ({', '.join(sorted(not_glue)[:4])}) are not glue for this definition, "
            "and only a GPU's attribution can time them (check it on a GPU host)"))
    return 0, share, Audit(name="attribution", passed=True,
                           detail=f"{said} (glue: under {max_share:.0%}{', ATen glue allowed' if aten_glue else ''})")


def cpu_attribution_verdict(calls: Sequence[Call], aten_glue: bool = False, library_is_own: bool = False,
                            max_share: float = MAX_SHARE, reduction_share: float = 0.0) -> Optional[Audit]:
    """The workload's verdict: its worst call's (a fallback before an unsettled call before a pass, then the larger
    share); None where no call was counted. ``aten_glue``: the family counts every ATen kernel as glue (its
    ``attribution_aten_glue_us`` or ``_share`` above 0: MoE's routing)."""
    judged = [call_verdict(c, aten_glue, library_is_own, max_share, reduction_share) for c in calls]
    if not judged:
        return None
    return max(judged, key=lambda j: (j[0], j[1]))[2]
