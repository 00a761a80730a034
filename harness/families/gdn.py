"""Qwen3-Next gated delta net (op_type ``gdn``): what differs about judging it from the generic operator.

Two definitions share the op_type: ``gdn_decode_*`` (one token per sequence, axis ``batch_size``) and
``gdn_prefill_*`` (variable-length packed sequences, ``total_seq_len`` / ``num_seqs`` and ``cu_seqlens``).
Both carry an fp32 recurrent state per (sequence, v head), [V, K] "k-last", 64 KiB each, in and out.

- inputs (``harness.families.gdn_inputs``): every official input but ``scale`` is a captured blob that is not
  public (``synthesizes_absent_blobs``); the stand-ins are unit-norm q/k, trained-looking gate parameters, a
  state built as a real history would leave it and valid ``cu_seqlens``. A dataset holding the blobs uses them.
- correctness: the contest's DefaultEvaluator (1e-2 / 1e-2, every element of ``output`` and ``new_state``):
  the generic rule, unchanged.
- cost: exact bytes (every input read once, both outputs written once: the state dominates, 1 MiB per
  sequence in + out) and a flop lower bound of 4 x K x V per (token, v head).
- regimes: decode by batch (a few states are latency-bound, many stream memory); prefill by total length and
  number of sequences (the serial chain over tokens is the limiter when few sequences are long).
- the ``gdn`` skill.

Mutation and aliasing need nothing here: the worker hands the candidate a clone of ``state`` and compares it
with the original after the call (an in-place update is ``input_mutation``), and a ``new_state`` sharing
storage with the input it was given is ``output_aliasing``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

from ..data.blobs import blob_inputs, blob_tensor
from ..measure.roofline import WorkloadCost, generic_cost
from ..data.schema import Definition, Workload
from .base import OperatorFamily
from .gdn_inputs import gdn_special_inputs

# First match wins; an axis the definition lacks never holds, so decode and prefill rules stay apart.
# Decode moves 1 MiB of state per sequence: 8 sequences are ~1.7 us at the H200's 4.8 TB/s, under the cost of a
# launch, and 8 x 8 heads are half the SMs' worth of programs; from 16 on, the state stream is the time.
# Prefill: up to 256 tokens the call is short whatever its shape (launch and the first chunk dominate); past
# it, few sequences mean few independent chains (8 per sequence) and a long serial dependence per chain,
# while many sequences fill the GPU with chains and the state traffic and chunk GEMMs dominate.
REGIME_RULES_YAML = """
- name: decode latency-bound
  all:
    axis_at_most: {batch_size: 8}
- name: decode memory-bound
  all:
    axis_above: {batch_size: 8}
- name: prefill short
  all:
    axis_at_most: {total_seq_len: 256}
- name: prefill few long sequences
  all:
    axis_above: {total_seq_len: 256}
    axis_at_most: {num_seqs: 4}
- name: prefill many sequences
  all:
    axis_above: {total_seq_len: 256, num_seqs: 4}
- name: other
  all: {}
"""


def tokens_and_sequences(definition: Definition, workload: Workload) -> tuple[int, int]:
    """(tokens, sequences) of one call: decode has one token per sequence."""
    axes = {**definition.const_axes, **workload.axes}
    if "batch_size" in axes:
        return axes["batch_size"] * axes.get("seq_len", 1), axes["batch_size"]
    return axes["total_seq_len"], axes["num_seqs"]


def gdn_cost(definition: Definition, workload: Workload) -> WorkloadCost:
    """bytes = every input read once and both outputs written once (exact from shapes: q, k, v, a, b, the gate
    parameters, cu_seqlens, the state of every sequence in and out, the output);
    flops = tokens x v heads x 4 x K x V, a lower bound: each token's output needs q . S (2 K V) and the
    state's update contracts each token's key with its new value (2 K V) in any form, recurrent or chunked;
    the k . S read, the decay and the chunked form's intra-chunk products are left out."""
    axes = {**definition.const_axes, **workload.axes}
    tokens, seqs = tokens_and_sequences(definition, workload)
    heads, dim = axes["num_v_heads"], axes["head_size"]
    moved = generic_cost(definition, workload).bytes_moved
    state = seqs * heads * dim * dim * 4
    flops = tokens * heads * 4 * dim * dim
    formula = (f"gdn: state in + out 2 x {seqs} seqs x {heads} heads x {dim} x {dim} x 4 B = {2 * state} B, "
               f"q/k/v/a/b/gates/output {moved - 2 * state} B; flops = {tokens} tokens x {heads} heads x 4 x "
               f"{dim} x {dim} (q.S and the state update; a lower bound)")
    return WorkloadCost(bytes_moved=moved, flops=flops, formula=formula, exact=True)


class GdnFamily(OperatorFamily):
    op_type = "gdn"
    skill = "gdn"
    regime_rules = REGIME_RULES_YAML
    synthesizes_absent_blobs = True

    def special_inputs(self, definition: Definition, workload: Workload, inputs: Mapping[str, Any],
                       generator: Callable[[str], torch.Generator],
                       device: torch.device) -> Optional[dict[str, Any]]:
        return gdn_special_inputs(definition, workload, inputs, generator, device)

    def workload_cost(self, definition: Definition, workload: Workload, root: Optional[Path] = None,
                      tokens: Optional[int] = None) -> WorkloadCost:
        return gdn_cost(definition, workload)

    def serial_steps(self, definition: Definition, workload: Workload) -> int:
        """Prefill: the recurrence updates a 128 x 128 state per token and head, token after token; the interpreter
        runs the sequences' programs in turn, so every token of the call is a step (3 MiB of inputs at 1377
        tokens). Decode: one token per state, its work said by the states' size."""
        if "batch_size" in {**definition.const_axes, **workload.axes}:
            return 0
        return tokens_and_sequences(definition, workload)[0]

    def request_lengths(self, definition: Definition, workload: Workload, root: Path) -> Optional[list[int]]:
        """Prefill: each sequence's length from the captured ``cu_seqlens``; None without the blob (the drawn
        stand-in differs per trial) and for decode (one token per request; the history behind each state is
        not recorded)."""
        source = blob_inputs(workload, ("cu_seqlens",)).get("cu_seqlens")
        if source is None or root is None or not (Path(root) / source.path).exists():
            return None
        try:
            cu = blob_tensor(root, source).to(torch.int64)
        except Exception:
            return None
        return [int(n) for n in (cu[1:] - cu[:-1]).tolist()]


FAMILY = GdnFamily()
