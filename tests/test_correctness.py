"""The official correctness rule, table-driven: an element fails iff |x-y| > atol AND |x-y|/(|y|+eps) > rtol;
shape before dtype before inf/nan before values; reported errors are maxima."""

from __future__ import annotations

import math

import pytest
import torch

from harness.measure.correctness import (CheckResult, Tolerance, check_output, check_outputs, first_failure,
                                         merge_results)
from harness.data.schema import EvaluationStatus as S

INF, NAN = math.inf, math.nan
T = Tolerance(atol=1e-2, rtol=1e-2)


def f32(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


# (id, got, want, tolerance, expected status)
ELEMENT_RULE = [
    ("exact", f32(1.0, -2.0), f32(1.0, -2.0), T, S.PASSED),
    ("small_abs_large_rel", f32(0.005), f32(0.0001), T, S.PASSED),      # rel 49 but abs 0.0049 <= atol
    ("large_abs_small_rel", f32(1005.0), f32(1000.0), T, S.PASSED),     # abs 5 but rel 0.005 <= rtol
    ("both_large", f32(1.5), f32(1.0), T, S.INCORRECT_NUMERICAL),
    ("both_just_over", f32(1.0 + 0.0125), f32(1.0), T, S.INCORRECT_NUMERICAL),
    ("zero_reference", f32(0.02), f32(0.0), T, S.INCORRECT_NUMERICAL),   # rel uses |y| + 1e-8
    ("zero_reference_tiny", f32(0.009), f32(0.0), T, S.PASSED),
    ("negative", f32(-1.5), f32(-1.0), T, S.INCORRECT_NUMERICAL),
    ("loose_tolerance", f32(1.5), f32(1.0), Tolerance(atol=1.0, rtol=0.0), S.PASSED),
    ("zero_tolerance", f32(1.0 + 2 ** -20), f32(1.0), Tolerance(atol=0.0, rtol=0.0), S.INCORRECT_NUMERICAL),
    ("empty", torch.empty(0, 3), torch.empty(0, 3), T, S.PASSED),
]


@pytest.mark.parametrize("got, want, tol, status", [c[1:] for c in ELEMENT_RULE], ids=[c[0] for c in ELEMENT_RULE])
def test_element_rule(got, want, tol, status):
    r = check_output("out", got, want, tol)
    assert r.status == status, r.message
    if status == S.INCORRECT_NUMERICAL:
        assert "outside atol" in r.message and r.matched_ratio < 1.0


def test_reported_errors_are_maxima():
    got = f32(1.0, 2.5, 0.0, 10.0)
    want = f32(1.0, 2.0, 0.001, 10.0)
    r = check_output("out", got, want, T)
    assert r.max_absolute_error == pytest.approx(0.5)
    assert r.max_relative_error == pytest.approx(1.0, rel=1e-4)  # 0.001 / (0.001 + 1e-8)
    assert r.status == S.INCORRECT_NUMERICAL
    assert r.matched_ratio == pytest.approx(0.75)
    assert r.per_output["out"]["failed_elements"] == 1
    assert "first at (1,): got 2.5, expected 2" in r.message


@pytest.mark.parametrize("n_bad, required, status", [
    (0, 1.0, S.PASSED),
    (1, 1.0, S.INCORRECT_NUMERICAL),
    (10, 0.9, S.PASSED),              # exactly the required ratio
    (11, 0.9, S.INCORRECT_NUMERICAL),  # just below it
    (50, 0.5, S.PASSED),
    (51, 0.5, S.INCORRECT_NUMERICAL),
])
def test_matched_ratio(n_bad, required, status):
    want = torch.zeros(100)
    got = want.clone()
    got[:n_bad] = 1.0
    r = check_output("out", got, want, Tolerance(required_matched_ratio=required))
    assert r.status == status
    assert r.matched_ratio == pytest.approx(1 - n_bad / 100)
    assert r.max_absolute_error == (1.0 if n_bad else 0.0)


# (id, got, want, allow_matching_nonfinite, expected status)
NONFINITE = [
    ("inf_in_candidate", f32(1.0, INF), f32(1.0, 2.0), False, S.INCORRECT_NUMERICAL),
    ("nan_in_candidate", f32(NAN, 1.0), f32(1.0, 1.0), False, S.INCORRECT_NUMERICAL),
    ("inf_matching_reference_still_fails", f32(1.0, -INF), f32(1.0, -INF), False, S.INCORRECT_NUMERICAL),
    ("nan_matching_reference_still_fails", f32(NAN), f32(NAN), False, S.INCORRECT_NUMERICAL),
    ("allowed_same_neg_inf", f32(1.0, -INF), f32(1.0, -INF), True, S.PASSED),
    ("allowed_same_pos_inf", f32(INF, 3.0), f32(INF, 3.0), True, S.PASSED),
    ("allowed_other_sign", f32(1.0, INF), f32(1.0, -INF), True, S.INCORRECT_NUMERICAL),
    ("allowed_but_reference_finite", f32(1.0, -INF), f32(1.0, 5.0), True, S.INCORRECT_NUMERICAL),
    ("allowed_nan_never_matches", f32(NAN), f32(NAN), True, S.INCORRECT_NUMERICAL),
    ("allowed_values_elsewhere_still_checked", f32(2.0, -INF), f32(1.0, -INF), True, S.INCORRECT_NUMERICAL),
]


@pytest.mark.parametrize("got, want, allow, status", [c[1:] for c in NONFINITE], ids=[c[0] for c in NONFINITE])
def test_non_finite_values(got, want, allow, status):
    r = check_output("lse", got, want, Tolerance(allow_matching_nonfinite=allow))
    assert r.status == status, r.message
    if status == S.PASSED:
        assert math.isfinite(r.max_absolute_error) and math.isfinite(r.max_relative_error)


@pytest.mark.parametrize("allow", [False, True], ids=["official", "allow_matching_nonfinite"])
@pytest.mark.parametrize("reference", [-INF, INF], ids=["ref_neg_inf", "ref_pos_inf"])
def test_finite_candidate_where_reference_is_not_finite_fails(allow, reference):
    # e.g. an empty request: the reference's lse is -inf, a candidate that writes 0 there is wrong
    r = check_output("lse", f32(1.0, 0.0), f32(1.0, reference), Tolerance(allow_matching_nonfinite=allow))
    assert r.status == S.INCORRECT_NUMERICAL


def test_non_finite_candidate_reports_infinite_errors_and_position():
    r = check_output("lse", f32(1.0, 2.0, NAN, INF), f32(1.0, 2.0, 3.0, 4.0), T)
    assert r.status == S.INCORRECT_NUMERICAL
    assert r.max_absolute_error == INF and r.max_relative_error == INF and r.matched_ratio == 0.0
    assert "2 inf/nan values (first at index (2,))" in r.message


def test_non_finite_is_checked_even_with_a_loose_ratio():
    got = torch.zeros(1000)
    got[3] = NAN
    r = check_output("out", got, torch.zeros(1000), Tolerance(required_matched_ratio=0.5))
    assert r.status == S.INCORRECT_NUMERICAL


# -- order of the checks ------------------------------------------------------------------------------

BF = torch.bfloat16


@pytest.mark.parametrize("got, want, status", [
    # shape before dtype (both wrong)
    (torch.zeros(2, 3, dtype=torch.float16), torch.zeros(3, 2, dtype=BF), S.INCORRECT_SHAPE),
    (torch.zeros(6, dtype=BF), torch.zeros(2, 3, dtype=BF), S.INCORRECT_SHAPE),
    (torch.zeros(1, 2, 3, dtype=BF), torch.zeros(2, 3, dtype=BF), S.INCORRECT_SHAPE),
    # dtype before values (values wrong as well, inf even)
    (torch.full((2, 3), INF, dtype=torch.float32), torch.zeros(2, 3, dtype=BF), S.INCORRECT_DTYPE),
    (torch.ones(2, 3, dtype=torch.float16), torch.zeros(2, 3, dtype=BF), S.INCORRECT_DTYPE),
    # not a tensor at all
    ([[0.0] * 3] * 2, torch.zeros(2, 3, dtype=BF), S.RUNTIME_ERROR),
])
def test_shape_before_dtype_before_values(got, want, status):
    r = check_output("output", got, want, T)
    assert r.status == status
    assert not r.has_errors and r.max_absolute_error == 0.0
    assert "'output'" in r.message


def test_check_outputs_checks_every_shape_and_dtype_before_any_value():
    want = {"output": torch.zeros(2, 4, dtype=BF), "lse": torch.zeros(2), "extra": torch.zeros(3, dtype=torch.int32)}
    bad_values = torch.full((2, 4), 7.0, dtype=BF)
    cases = [
        ({"output": bad_values, "lse": torch.zeros(3), "extra": want["extra"]}, S.INCORRECT_SHAPE, "'lse'"),
        ({"output": bad_values, "lse": torch.zeros(2), "extra": want["extra"].long()}, S.INCORRECT_DTYPE, "'extra'"),
        ({"output": torch.full((2, 4), NAN, dtype=BF), "lse": torch.zeros(2), "extra": want["extra"].view(3, 1)},
         S.INCORRECT_SHAPE, "'extra'"),
        ({"output": bad_values, "lse": torch.zeros(2), "extra": want["extra"]}, S.INCORRECT_NUMERICAL, "'output'"),
        ({"output": bad_values, "extra": want["extra"]}, S.RUNTIME_ERROR, "missing outputs: ['lse']"),
    ]
    for got, status, words in cases:
        r = check_outputs(got, want, T)
        assert (r.status, words in r.message) == (status, True), r.message


def test_check_outputs_merges_all_outputs():
    want = {"output": torch.zeros(4), "lse": torch.ones(2)}
    got = {"output": f32(0.0, 0.004, 0.0, 0.0), "lse": f32(1.0, 1.5)}
    r = check_outputs(got, want, T)
    assert r.status == S.INCORRECT_NUMERICAL and "'lse'" in r.message
    assert r.max_absolute_error == pytest.approx(0.5)
    assert r.matched_ratio == pytest.approx(0.5)
    assert set(r.per_output) == {"output", "lse"}
    assert r.per_output["output"]["max_absolute_error"] == pytest.approx(0.004)
    ok = check_outputs({"output": torch.zeros(4), "lse": torch.ones(2)}, want, T)
    assert ok.passed and ok.max_absolute_error == 0.0


def test_bf16_is_compared_in_fp32():
    # 258 - 1.0078125 is 256.9921875 in fp32 but 256 in bf16 arithmetic
    got = torch.tensor([258.0], dtype=BF)
    want = torch.tensor([1.0078125], dtype=BF)
    r = check_output("output", got, want, T)
    assert r.max_absolute_error == 256.9921875
    # one bf16 ulp at 1.0 (0.0078125) is inside atol=1e-2: computed in fp32 it passes
    near = check_output("output", torch.tensor([1.0078125], dtype=BF), torch.tensor([1.0], dtype=BF), T)
    assert near.passed and near.max_absolute_error == 0.0078125


def test_integer_outputs_are_compared_as_values():
    want = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert check_output("i", want.clone(), want, Tolerance(atol=0, rtol=0)).passed
    r = check_output("i", torch.tensor([1, 2, 4], dtype=torch.int32), want, Tolerance(atol=0, rtol=0))
    assert r.status == S.INCORRECT_NUMERICAL and r.max_absolute_error == 1.0


# -- merging ------------------------------------------------------------------------------------------


def _r(status, abs_=0.0, rel=0.0, ratio=1.0, msg="", name=None, failed=0):
    r = CheckResult(status, abs_, rel, ratio, msg)
    if name:
        r.per_output[name] = {"max_absolute_error": abs_, "max_relative_error": rel, "matched_ratio": ratio,
                              "failed_elements": failed}
    return r


@pytest.mark.parametrize("a, b, status, message", [
    (_r(S.PASSED), _r(S.PASSED), S.PASSED, ""),
    (_r(S.PASSED), _r(S.INCORRECT_NUMERICAL, msg="b bad"), S.INCORRECT_NUMERICAL, "b bad"),
    (_r(S.INCORRECT_NUMERICAL, msg="a bad"), _r(S.PASSED), S.INCORRECT_NUMERICAL, "a bad"),
    (_r(S.INCORRECT_SHAPE, msg="a shape"), _r(S.PASSED, msg="fine"), S.INCORRECT_SHAPE, "a shape"),
    (_r(S.INCORRECT_NUMERICAL, msg="first"), _r(S.INCORRECT_NUMERICAL, msg="second"), S.INCORRECT_NUMERICAL, "first"),
])
def test_merge_keeps_the_failure(a, b, status, message):
    m = merge_results(a, b)
    assert (m.status, m.message) == (status, message)


def test_merge_keeps_max_errors_and_min_ratio():
    a = _r(S.PASSED, abs_=0.5, rel=0.01, ratio=1.0, name="out", failed=0)
    b = _r(S.INCORRECT_NUMERICAL, abs_=0.1, rel=3.0, ratio=0.8, name="out", failed=4)
    c = _r(S.PASSED, abs_=0.2, rel=0.2, ratio=0.9, name="lse", failed=1)
    m = merge_results(merge_results(a, b), c)
    assert m.status == S.INCORRECT_NUMERICAL
    assert (m.max_absolute_error, m.max_relative_error, m.matched_ratio) == (0.5, 3.0, 0.8)
    assert m.per_output["out"] == {"max_absolute_error": 0.5, "max_relative_error": 3.0, "matched_ratio": 0.8,
                                   "failed_elements": 4}
    assert m.per_output["lse"]["failed_elements"] == 1
    # the inputs are not modified
    assert a.per_output["out"]["failed_elements"] == 0 and a.status == S.PASSED


def test_merge_over_trials_keeps_infinite_errors():
    trial1 = check_output("o", f32(1.0), f32(1.0), T)
    trial2 = check_output("o", f32(INF), f32(1.0), T)
    m = merge_results(trial1, trial2)
    assert m.status == S.INCORRECT_NUMERICAL and m.max_absolute_error == INF and m.matched_ratio == 0.0


def test_first_failure():
    ok, bad1, bad2 = _r(S.PASSED), _r(S.INCORRECT_DTYPE), _r(S.INCORRECT_SHAPE)
    assert first_failure([ok, bad1, bad2]) is bad1
    assert first_failure([ok, ok]) is None
    assert first_failure([]) is None
