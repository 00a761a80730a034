"""Every known cheat is rejected or flagged (never promotable); no honest solution is flagged.

On CPU the detections come from correctness, the static gate, the mutation check and the fresh-input
recheck; the GPU-only signals (CUPTI streams, timing replay, attribution) are exercised on the H200.
"""

from __future__ import annotations

import glob
import os

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.data.schema import Solution
from harness.audits.static_gate import awaits_attribution

from attacks import ATTACKS, attack_solution, honest_solutions

# attack -> what must catch it on CPU: "status" (not PASSED), "static:<rule>" (a static-gate error),
# "library:<rule>" (a library-compute warning of the static gate that run-time attribution must confirm; on CPU
# its count of ATen operators settles PyTorch's, never another library's: that finding blocks as unconfirmed), or
# "audit:<name>";
# "a|b" means either (on a GPU the official timer may stop a cheat before the recheck runs: a call that
# launches nothing, or other kernels than before, is a RUNTIME_ERROR there)
GPU_STATUS = "|status"
EXPECTED_ON_CPU = {
    "torch_fallback": ["library:torch_compute"],
    "library_fallback": ["library:torch_compute"],
    "replay_by_pointer": ["audit:fresh_input_recheck" + GPU_STATUS],
    "call_counting": ["audit:fresh_input_recheck" + GPU_STATUS],
    "side_stream": ["static:stream_event_graph"],
    "deferred_host_write": ["status", "static:concurrency"],
    "skip_if_written": ["audit:fresh_input_recheck" + GPU_STATUS],
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
    library = {f["rule"] for f in result.static_findings if awaits_attribution(f)}
    failed_audits = {a.name for a in w.audits if not a.passed}
    assert result.promotion_blockers, f"{name} would be promotable"
    for expectation in EXPECTED_ON_CPU[name]:
        caught = [_caught(option, w.status, rules, failed_audits, library) for option in expectation.split("|")]
        assert any(caught), (f"{name}: expected {expectation}; status {w.status} ({w.message}), "
                             f"static rules {sorted(rules)}, failed audits {sorted(failed_audits)}")


def _caught(expectation: str, status: str, rules: set[str], failed_audits: set[str], library: set[str]) -> bool:
    kind, _, what = expectation.partition(":")
    if kind == "status":
        return status != "PASSED"
    return what in {"static": rules, "library": library}.get(kind, failed_audits)


@pytest.mark.parametrize("name", sorted(honest_solutions()))
def test_honest_solutions_are_never_flagged(session, name):
    result = session.submit(Solution.model_validate(honest_solutions()[name]))
    assert result.status == "PASSED", [w.message for w in result.workloads]
    assert not result.static_findings, result.static_findings
    assert result.promotion_blockers == [], result.promotion_blockers
    names = {a.name for a in result.workloads[0].audits}
    assert {"fresh_input_recheck", "precision", "thread_creation"} <= names
