"""The official correctness rule, as pure functions on tensors.

Per output: shape first (INCORRECT_SHAPE), then dtype (INCORRECT_DTYPE), then any inf/nan in the
candidate (INCORRECT_NUMERICAL), then values in fp32: an element fails iff
|x - y| > atol AND |x - y| / (|y| + 1e-8) > rtol, and the output fails when the matched ratio is
below ``required_matched_ratio``. Reported errors are maxima over outputs and trials.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from ..data.schema import EvaluationStatus
from .tolerance import Tolerance  # noqa: F401  (callers import it from here)

REL_EPS = 1e-8


@dataclass
class CheckResult:
    status: EvaluationStatus
    max_absolute_error: float = 0.0
    max_relative_error: float = 0.0
    matched_ratio: float = 1.0
    message: str = ""
    per_output: dict[str, dict] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == EvaluationStatus.PASSED

    def to_json(self) -> dict:
        return {"status": self.status.value, "max_absolute_error": self.max_absolute_error,
                "max_relative_error": self.max_relative_error, "matched_ratio": self.matched_ratio,
                "message": self.message, "per_output": self.per_output}

    @classmethod
    def from_json(cls, data: dict) -> "CheckResult":
        return cls(EvaluationStatus(data["status"]), float(data["max_absolute_error"]),
                   float(data["max_relative_error"]), float(data["matched_ratio"]), str(data["message"]),
                   dict(data.get("per_output") or {}))

    @property
    def has_errors(self) -> bool:
        """Whether numeric errors were measured (official: only PASSED and INCORRECT_NUMERICAL carry them)."""
        return self.status in (EvaluationStatus.PASSED, EvaluationStatus.INCORRECT_NUMERICAL)


def check_output(name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> CheckResult:
    if not isinstance(got, torch.Tensor):
        return CheckResult(EvaluationStatus.RUNTIME_ERROR,
                           message=f"output {name!r} is a {type(got).__name__}, not a tensor")
    if tuple(got.shape) != tuple(want.shape):
        return CheckResult(EvaluationStatus.INCORRECT_SHAPE,
                           message=f"output {name!r} has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if got.dtype != want.dtype:
        return CheckResult(EvaluationStatus.INCORRECT_DTYPE,
                           message=f"output {name!r} has dtype {got.dtype}, expected {want.dtype}")
    x = got.detach().to(torch.float32)
    y = want.detach().to(torch.float32).to(x.device)
    nonfinite = ~torch.isfinite(x)
    if tol.allow_matching_nonfinite:
        # Accepted only where the reference holds exactly the same non-finite value (e.g. -inf lse).
        same = (x == y) & torch.isinf(y)
        nonfinite = nonfinite & ~same
        x = torch.where(same, torch.zeros_like(x), x)
        y = torch.where(same, torch.zeros_like(y), y)
    n_bad = int(nonfinite.sum())
    if n_bad:
        first = tuple(int(i) for i in nonfinite.nonzero()[0])
        return CheckResult(EvaluationStatus.INCORRECT_NUMERICAL, float("inf"), float("inf"), 0.0,
                           message=f"output {name!r} has {n_bad} inf/nan values (first at index {first})")
    if x.numel() == 0:
        return CheckResult(EvaluationStatus.PASSED)
    abs_err = (x - y).abs()
    rel_err = abs_err / (y.abs() + REL_EPS)
    # Written as "not within either bound" so that NaN comparisons (a finite value where the reference
    # is infinite) fail; the official `abs > atol and rel > rtol` would let them pass.
    failed = ~((abs_err <= tol.atol) | (rel_err <= tol.rtol))
    n_failed = int(failed.sum())
    ratio = 1.0 - n_failed / x.numel()
    result = CheckResult(EvaluationStatus.PASSED, float(abs_err.max()), float(rel_err.max()), ratio)
    result.per_output[name] = {"max_absolute_error": result.max_absolute_error,
                               "max_relative_error": result.max_relative_error,
                               "matched_ratio": ratio, "failed_elements": n_failed}
    if ratio < tol.required_matched_ratio:
        first = tuple(int(i) for i in failed.nonzero()[0])
        result.status = EvaluationStatus.INCORRECT_NUMERICAL
        result.message = (f"output {name!r}: {n_failed} of {x.numel()} elements outside atol={tol.atol} and "
                          f"rtol={tol.rtol} (matched {ratio:.6f} < required {tol.required_matched_ratio}); "
                          f"first at {first}: got {float(x[first]):.6g}, expected {float(y[first]):.6g}")
    return result


def check_outputs(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], tol: Tolerance) -> CheckResult:
    """All outputs of one call, in ``want``'s order: shapes and dtypes of every output before any value."""
    missing = [n for n in want if n not in got]
    if missing:
        return CheckResult(EvaluationStatus.RUNTIME_ERROR, message=f"missing outputs: {missing}")
    for name, ref in want.items():
        x = got[name]
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != tuple(ref.shape) or x.dtype != ref.dtype:
            return check_output(name, x, ref, tol)
    merged = CheckResult(EvaluationStatus.PASSED)
    for name, ref in want.items():
        merged = merge_results(merged, check_output(name, got[name], ref, tol))
    return merged


def merge_results(a: CheckResult, b: CheckResult) -> CheckResult:
    """Combine two checks (outputs or trials): worst status, maximal errors, minimal ratio."""
    status = a.status if not a.passed else b.status
    message = a.message if not a.passed else b.message
    out = CheckResult(status, max(a.max_absolute_error, b.max_absolute_error),
                      max(a.max_relative_error, b.max_relative_error), min(a.matched_ratio, b.matched_ratio), message)
    out.per_output = {**a.per_output}
    for k, v in b.per_output.items():
        if k in out.per_output:
            old = out.per_output[k]
            v = {"max_absolute_error": max(old["max_absolute_error"], v["max_absolute_error"]),
                 "max_relative_error": max(old["max_relative_error"], v["max_relative_error"]),
                 "matched_ratio": min(old["matched_ratio"], v["matched_ratio"]),
                 "failed_elements": old["failed_elements"] + v["failed_elements"]}
        out.per_output[k] = v
    return out


def first_failure(results: list[CheckResult]) -> Optional[CheckResult]:
    return next((r for r in results if not r.passed), None)
