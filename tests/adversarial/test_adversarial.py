"""Every known cheat is rejected or flagged (never promotable); no honest solution is flagged.

On CPU the detections come from correctness, the static gate, the mutation check and the fresh-input
recheck; the GPU-only signals (CUPTI streams, timing replay, attribution) are exercised on the H200.
"""

from __future__ import annotations

import glob
import os

import pytest

from harness.archive import Archive
from harness.dataset import Dataset
from harness.evaluate import Session, SubmitOptions
from harness.schema import Solution

from attacks import ATTACKS, attack_solution, honest_solutions

# attack -> what must catch it on CPU: "status" (not PASSED), "static:<rule>", or "audit:<name>"
EXPECTED_ON_CPU = {
    "torch_fallback": ["static:torch_compute"],
    "library_fallback": ["static:torch_compute"],
    "replay_by_pointer": ["audit:fresh_input_recheck"],
    "call_counting": ["audit:fresh_input_recheck"],
    "side_stream": ["static:stream_event_graph"],
    "deferred_host_write": ["status", "static:concurrency"],
    "skip_if_written": ["audit:fresh_input_recheck"],
    "read_reference_outputs": ["status", "static:harness_internals"],
    "timer_monkeypatch": ["static:timer_tampering"],
    "input_mutation": ["audit:input_mutation"],
    "precision_downcast": ["audit:precision"],
    "partial_work": ["status"],
    "disk_cache": ["status", "static:file_cache"],
    "probe_checking": ["static:env_probe"],
}


@pytest.fixture(scope="module")
def session(tiny_dataset_root, tmp_path_factory):
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path_factory.mktemp("adv")),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=120)) as s:
        yield s
    for f in glob.glob("/tmp/crucible_adversarial_cache_*"):
        os.remove(f)


def test_every_attack_has_an_expectation():
    assert set(EXPECTED_ON_CPU) == set(ATTACKS)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_caught_and_never_promotable(session, name):
    result = session.submit(Solution.model_validate(attack_solution(name)))
    w = result.workloads[0]
    rules = {f["rule"] for f in result.static_findings if f["severity"] == "error"}
    failed_audits = {a["name"] for a in w.audits if not a["passed"]}
    assert result.promotion_blockers, f"{name} would be promotable"
    for expectation in EXPECTED_ON_CPU[name]:
        kind, _, what = expectation.partition(":")
        if kind == "status":
            assert w.status != "PASSED", f"{name}: expected a failing status, got {w.status}"
        elif kind == "static":
            assert what in rules, f"{name}: static gate rules {rules} lack {what}"
        else:
            assert what in failed_audits, f"{name}: failed audits {failed_audits} lack {what} ({w.status}: {w.message})"


@pytest.mark.parametrize("name", sorted(honest_solutions()))
def test_honest_solutions_are_never_flagged(session, name):
    result = session.submit(Solution.model_validate(honest_solutions()[name]))
    assert result.status == "PASSED", [w.message for w in result.workloads]
    assert not result.static_findings, result.static_findings
    assert result.promotion_blockers == [], result.promotion_blockers
    names = {a["name"] for a in result.workloads[0].audits}
    assert {"fresh_input_recheck", "precision", "thread_creation"} <= names
