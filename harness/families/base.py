"""What an operator family (one FlashInfer-Bench ``op_type``) may change about how its definitions are judged.

Everything the harness does is the same for every operator except the few things listed here; a family
overrides only what differs for it, and ``OperatorFamily`` itself is the generic behaviour (the family of an
``op_type`` nobody registered). The data half of a family is not code: its definitions, workloads and
blobs sit in the trace-set folders named by the op_type (``definitions/<op_type>/``,
``workloads/<op_type>/``, ``blob/workloads/<op_type>/``), its FlashInfer baselines in
``solutions/baseline/<op_type>/<definition>/``, its tolerances and timing settings in ``eval_config.yaml``
and its audit rules in ``audit_policy.yaml`` (both layered default -> op_type -> definition).

Where each hook runs matters: ``special_inputs`` runs inside the sandboxed workers (both the reference's
and the candidate's, each drawing the same inputs from the seed), so a family that has special inputs
must be importable there (a module of ``harness/families/``); the others run in the harness process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from ..measure.correctness import CheckResult, Tolerance, check_outputs
from ..measure.roofline import WorkloadCost, generic_cost
from ..data.schema import Definition, Workload
from .regimes import RegimeFacts, assign_regime, load_regime_rules

# Without a family of its own an operator's workloads form one regime.
GENERIC_REGIME_RULES = """
- name: all
  all: {}
"""


class OperatorFamily:
    """The generic family; subclass it and override what differs for an op_type.

    A family module (``harness/families/<op_type>.py``, or any module given to ``load_family_module``)
    declares its instance as the module-level ``FAMILY`` (or a list, ``FAMILIES``); the registry registers it.
    """

    #: The FlashInfer-Bench ``op_type`` this family judges ("" for the generic family).
    op_type: str = ""
    #: The skill (``skills/<name>/``) a generation request for this family quotes; "" when there is none.
    skill: str = ""
    #: Regime rules (YAML, first match wins; conditions in ``harness.families.regimes``) that split measured
    #: workloads into the evidence's regime table (``controller.evidence.workload_stats``).
    regime_rules: str = GENERIC_REGIME_RULES
    #: The official workloads take some inputs from captured blobs (routing logits, sparse indices) that a
    #: dataset may not hold. True: where a blob is absent, ``special_inputs`` draws a stand-in (it sees
    #: ``inputs`` without that name and must return it); where it is present, the official tensor is used.
    #: False: an absent blob is an error.
    synthesizes_absent_blobs: bool = False
    #: The official check needs the call's inputs, not only the two outputs (a top-k judged by the scores at the
    #: chosen indices, so near-ties pass either way). Such a family's ``compare`` takes ``inputs=`` and runs in
    #: the trusted reference worker, which draws the same inputs from the seed; the harness never holds them.
    compare_needs_inputs: bool = False

    def special_inputs(self, definition: Definition, workload: Workload, inputs: Mapping[str, Any],
                       generator: Callable[[str], torch.Generator],
                       device: torch.device) -> Optional[dict[str, Any]]:
        """Inputs the generic generator cannot make, as replacements by name; None keeps the generic ones.

        ``inputs``: what the generic rules drew (random, scalar, blobs, valid page indices), in definition order.
        Inputs whose official blob is absent (``synthesizes_absent_blobs``) are missing from ``inputs``; the
        family returns them too, drawn to look like the real ones.
        ``generator(name)``: a fresh generator seeded by the trial's seed and ``name``; draw from it only, so
        the reference's and the candidate's workers (each calling this) produce identical tensors. Examples: FP8
        block scales of a given distribution, a key cache packed with its per-token scales, routing logits.
        """
        return None

    def compare(self, definition: Definition, outputs: Mapping[str, Any], reference: Mapping[str, torch.Tensor],
                tolerance: Tolerance) -> CheckResult:
        """The official correctness check of one call: the candidate's ``outputs`` against the reference's.

        ``reference`` holds every output of the definition, in the definition's order. The generic rule
        (``harness.measure.correctness.check_outputs``) is the official DefaultEvaluator's; a family whose official
        evaluator differs (low-bit matched ratios, top-k sets compared by score) overrides this.
        """
        return check_outputs(dict(outputs), dict(reference), tolerance)

    def reference_working_bytes(self, definition: Definition, workload: Workload) -> int:
        """GPU memory the definition's reference needs beyond its inputs and outputs at its peak (an official
        reference that dequantises every weight to float32, say): added to the workload's memory budget, as no
        harness can make the official code smaller. Generic: nothing."""
        return 0

    def required_outputs(self, definition: Definition) -> list[str]:
        """The outputs a value-returning solution must return, a leading part of the definition's outputs; the
        rest it may leave out (and ``compare`` then judges what it returned). Generic: every output."""
        return list(definition.outputs)

    def workload_cost(self, definition: Definition, workload: Workload, root: Optional[Path] = None,
                      tokens: Optional[int] = None) -> WorkloadCost:
        """The minimum bytes moved and flops of one workload, for the roofline floor.

        It must be a lower bound (a floor above the truth would convict honest kernels); a count taken from
        above is returned with ``exact=False``. ``root``: the dataset folder, for families that count exactly
        from the workload's index blobs (page tables, sequence lengths). ``tokens``: a count of the tokens
        touched that the caller already has (attention families; others ignore it). Generic: every input read
        once and every output written once, no flops.
        """
        return generic_cost(definition, workload)

    def serial_steps(self, definition: Definition, workload: Workload) -> int:
        """The steps of a recurrence one call must take (a sequence's tokens, one after another), where the inputs'
        size does not say the work: on a host without a GPU the Triton interpreter runs every program in turn and
        each step as numpy calls, so such a workload is too slow there however small its inputs. Generic: none
        (0: the inputs' size says it)."""
        return 0

    def request_lengths(self, definition: Definition, workload: Workload, root: Path) -> Optional[list[int]]:
        """Per-request lengths (tokens) of a batched workload where its blobs say them, else None.

        The evidence uses them to recognise skewed batches (``length_max_over_mean_above``).
        """
        return None

    def regime(self, axes: Mapping[str, int], *, label: str = "", lengths: Optional[Sequence[int]] = None,
               target_hardware: str = "H200") -> str:
        """The regime of a workload before anything is measured (the loop's per-regime incumbents and starts).

        ``axes``: the definition's const axes together with the workload's var axes; ``label``: the
        workload's readable name; ``lengths``: per-request lengths where known. Generic: the first of
        ``regime_rules`` that holds without measurements.
        """
        return assign_regime(RegimeFacts(label=label, axes=dict(axes), lengths=lengths), self.rules())

    def rules(self) -> list[dict[str, Any]]:
        """``regime_rules`` parsed and checked."""
        return load_regime_rules(self.regime_rules)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(op_type={self.op_type!r})"
