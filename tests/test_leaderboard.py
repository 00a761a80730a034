"""harness.review.leaderboard: who may be ranked, the reasons the others are not, and what the audits column counts."""

from __future__ import annotations

import pytest

from harness.audits.verdicts import promotion_blockers
from harness.review.leaderboard import (
    MODIFIED,
    audit_summary,
    clip,
    partial_scores,
    promotion_reasons,
    split_ranked,
)

OK = {"name": "input_mutation", "passed": True, "detail": "inputs unchanged"}
RECHECK = {"name": "fresh_input_recheck", "passed": False, "detail": "2 of 3 recheck calls wrong"}
CLOCK = {"name": "clock_truth", "passed": False, "detail": "wall 0.001 ms shorter than the GPU span 0.2 ms"}
ERROR = {"rule": "call_counting", "severity": "error", "path": "kernel.py", "line": 41, "message": "counter"}
WARNING = {"rule": "long_line", "severity": "warning", "path": "kernel.py", "line": 3, "message": "style"}


def wl(label: str, status: str = "PASSED", *audits: dict) -> dict:
    return {"label": label, "status": status, "audits": list(audits) or [OK]}


CLEAN = [wl("a"), wl("b")]


@pytest.mark.parametrize("case, kwargs, expected", [
    ("clean", {}, []),
    ("a static warning blocks nothing", {"static_findings": [WARNING]}, []),
    ("modified rows first", {"modified": True, "static_findings": [ERROR]},
     [MODIFIED, "static gate: 1 error finding, first call_counting at kernel.py:41"]),
    ("static errors counted", {"static_findings": [ERROR, WARNING, {**ERROR, "line": 7}]},
     ["static gate: 2 error findings, first call_counting at kernel.py:41"]),
    ("audits off", {"audit_level": "off"}, ["audits were switched off"]),
    ("a failed audit of the whole submission", {"submission_audits": [{**CLOCK, "name": "instruction_proof"}]},
     ["audit instruction_proof failed: wall 0.001 ms shorter than the GPU span 0.2 ms"]),
    ("failed audits grouped per audit, first workloads named",
     {"workloads": [wl("a"), *(wl(f"w{i}", "PASSED", OK, RECHECK) for i in range(5)), wl("z", "PASSED", CLOCK)]},
     ["audit fresh_input_recheck failed on 5 of 7 workloads (w0, w1, w2, ...)",
      "audit clock_truth failed on 1 of 7 workloads (z)"]),
    ("statuses grouped, skipped ones not counted",
     {"status": "INCORRECT_NUMERICAL", "workloads": [wl("a"), wl("b", "INCORRECT_NUMERICAL"), wl("c", "SKIPPED")]},
     ["INCORRECT_NUMERICAL on 1 of 2 workloads (b)"]),
    ("nothing evaluated", {"status": "SKIPPED", "workloads": [wl("a", "SKIPPED")]}, ["no workload was evaluated"]),
    ("a submission still running", {"status": "RUNNING"}, ["submission RUNNING"]),
    ("recorded as not promotable without a reason", {"recorded_promotable": False}, ["recorded as not promotable"]),
    ("a recorded reason the data does not show is kept",
     {"workloads": [wl("a", "PASSED", RECHECK), wl("b")],
      "recorded": ["a: audit fresh_input_recheck failed: 2 of 3 recheck calls wrong", "timing: GPU throttled"]},
     ["audit fresh_input_recheck failed on 1 of 2 workloads (a)", "timing: GPU throttled"]),
])
def test_promotion_reasons(case, kwargs, expected):
    args = {"status": "PASSED", "workloads": CLEAN, "static_findings": [], **kwargs}
    assert promotion_reasons(**args) == expected, case


@pytest.mark.parametrize("workloads, findings, audit_level, submission_audits", [
    ([wl("a", "PASSED", RECHECK, CLOCK), wl("b", "TIMEOUT"), wl("c", "SKIPPED")], [ERROR, WARNING], "fast",
     [{**CLOCK, "name": "instruction_proof"}]),
    ([wl("a", "SKIPPED")], [], "off", []),
])
def test_what_the_harness_records_is_summarised_not_repeated(workloads, findings, audit_level, submission_audits):
    """The blockers Session.submit archives (harness.audits.verdicts.promotion_blockers) are what the summary lines
    stand
    for: none is repeated beside them."""
    recorded = promotion_blockers(workloads, findings, audit_level, submission_audits)
    status = "TIMEOUT" if len(workloads) > 1 else "SKIPPED"
    with_record = promotion_reasons(status, workloads, findings, audit_level, submission_audits, recorded, False)
    assert with_record and with_record == promotion_reasons(status, workloads, findings, audit_level, submission_audits)


@pytest.mark.parametrize("findings, workloads, submission_audits, text, clean", [
    ([], [("a", [OK]), ("b", [OK])], [], "clean", True),
    ([], [("a", [])], [], "–", False),  # nothing audited: not "clean"
    ([WARNING], [("a", [OK])], [], "clean", True),
    ([ERROR, ERROR, WARNING], [("a", [OK])], [], "2 static-gate errors", False),  # never "clean"
    ([ERROR], [("a", [OK, RECHECK]), ("b", [RECHECK, CLOCK])], [],
     "1 static-gate error, 3 failed audits (clock_truth, fresh_input_recheck)", False),
    ([], [("a", [OK])], [CLOCK], "1 failed audit (clock_truth)", False),
])
def test_audit_summary(findings, workloads, submission_audits, text, clean):
    s = audit_summary(findings, workloads, submission_audits)
    assert (s.text(), s.clean) == (text, clean)


def test_split_ranked_keeps_a_high_score_out_of_the_ranking():
    rows = [("honest", 28.0, True), ("cheat", 8420.0, False), ("best", 60.0, True), ("broken", 0.0, False)]
    ranked, others = split_ranked(rows, lambda r: r[2], lambda r: -r[1])
    assert [r[0] for r in ranked] == ["best", "honest"]
    assert [r[0] for r in others] == ["cheat", "broken"]


@pytest.mark.parametrize("raw, expected", [
    (None, {}), ("vs_flashinfer_kernel", {}), ({}, {}), ({"vs_flashinfer_kernel": []}, {}),
    ({"vs_flashinfer_kernel": "one_long"}, {}),
    ({"vs_flashinfer_kernel": ["a", "b"], "vs_reference": []}, {"vs_flashinfer_kernel": ["a", "b"]}),
])
def test_partial_scores(raw, expected):
    assert partial_scores(raw) == expected


@pytest.mark.parametrize("text, limit, expected", [
    ("short", 160, "short"), ("two\nlines  here", 160, "two lines here"), ("abcdefghij", 6, "abcde…"),
])
def test_clip(text, limit, expected):
    assert clip(text, limit) == expected
