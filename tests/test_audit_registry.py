"""The audit catalogue (definitions/audits.yaml, harness.audits.model) and the one type of an audit's outcome.

Every audit the harness produces is registered and every registered audit is produced (read statically from the
harness's sources, like test_import_graph); a name outside the catalogue cannot become an ``Audit``; and the JSON an
audit is archived and printed as keeps its shape (``name``, ``passed``, ``detail``; attribution's figures).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from harness.audits.model import AUDIT_LEVELS, REGISTRY_PATH, Audit, Level, audit_names, load_registry
from harness.audits.verdicts import promotion_blockers
from harness.data.results import SubmissionResult, WorkloadResult

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"


def _produced() -> tuple[dict[str, list[str]], list[str]]:
    """(audit name -> where an ``Audit(name="...")`` creates it, calls whose name is not a literal)."""
    names: dict[str, list[str]] = {}
    opaque: list[str] = []
    for path in sorted(HARNESS.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=where)):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Audit"):
                continue
            name = next((k.value for k in node.keywords if k.arg == "name"), None)
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                names.setdefault(name.value, []).append(f"{where}:{node.lineno}")
            elif not (isinstance(name, ast.Attribute) and name.attr == "name"):  # a copy of an Audit keeps its name
                opaque.append(f"{where}:{node.lineno}")
    return names, opaque


def _dict_audits() -> list[str]:
    """Dict literals shaped like an audit ({"name": ..., "passed": ...}) in the harness: the old way to make one."""
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=where)):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if {"name", "passed"} <= keys:
                    found.append(f"{where}:{node.lineno}")
    return found


def test_the_catalogue_loads_and_every_entry_is_complete():
    registry = load_registry()
    assert REGISTRY_PATH.name == "audits.yaml" and REGISTRY_PATH.parent.name == "definitions"
    assert set(get_args(Level)) == set(AUDIT_LEVELS)
    assert len(registry) >= 12
    for name, entry in registry.items():
        assert entry.name == name
        assert entry.catches.strip() and entry.catches.rstrip().endswith("."), name
        assert entry.levels and set(entry.levels) <= set(AUDIT_LEVELS), name
        assert entry.evidence, name
        assert isinstance(entry.blocks_promotion, bool)
        assert entry.recorded_as in ("audit", "static_findings") and entry.scope in ("workload", "submission")
    assert registry["static_gate"].recorded_as == "static_findings"
    assert registry["instruction_proof"].scope == "submission" and "sass" in registry["instruction_proof"].evidence
    assert registry["attribution"].evidence == ("cupti", "worker")  # a GPU's CUPTI records; a CPU's ATen count


def test_an_incomplete_entry_does_not_load(tmp_path):
    path = tmp_path / "audits.yaml"
    path.write_text("audits:\n  precision:\n    catches: x.\n    levels: [fast]\n    evidence: [worker]\n")
    with pytest.raises(ValidationError):
        load_registry(path)
    path.write_text("audits:\n  precision:\n    catches: x.\n    levels: [fastest]\n    evidence: [worker]\n"
                    "    blocks_promotion: true\n    recorded_as: audit\n    scope: workload\n")
    with pytest.raises(ValidationError):
        load_registry(path)


def test_every_audit_the_harness_produces_is_registered_and_every_entry_is_produced():
    produced, opaque = _produced()
    assert not opaque, f"Audit(name=...) must name its audit literally: {opaque}"
    assert not _dict_audits(), "an audit is an Audit (harness.audits.model), not a dict"
    assert set(produced) - audit_names() == set(), produced
    assert audit_names() - set(produced) == set(), "registered but produced nowhere"
    for name, entry in load_registry().items():
        if entry.recorded_as == "static_findings":  # the static gate: its findings, from its own package
            assert (HARNESS / "audits" / name / "__init__.py").exists(), name
    # the ones the brief's grep finds today, by module
    assert {"input_mutation", "output_aliasing", "own_kernel", "precision", "clock_truth", "fresh_input_recheck",
            "thread_creation", "fresh_input_timing", "known_input_timing", "timer_consistency", "setup_work",
            "roofline_plausibility",
            "attribution", "escalation", "instruction_proof"} == set(produced)


def test_an_unknown_name_raises():
    with pytest.raises(ValidationError, match="not in the catalogue"):
        Audit(name="stream_audit", passed=False, detail="side stream")
    with pytest.raises(ValidationError):  # catalogued, but recorded as findings: never an Audit
        Audit(name="static_gate", passed=True, detail="")
    with pytest.raises(ValidationError):
        Audit.model_validate({"name": "precison", "passed": True, "detail": ""})
    with pytest.raises(ValidationError):  # no key beyond the model's
        Audit(name="precision", passed=True, detail="", speedup=9.0)


def test_a_failure_of_every_audit_blocks_promotion_as_catalogued():
    for name in sorted(audit_names()):
        failed = Audit(name=name, passed=False, detail="d")
        blockers = promotion_blockers([{"label": "w", "status": "PASSED", "audits": [failed]}], [])
        assert (f"w: audit {name} failed: d" in blockers) is load_registry()[name].blocks_promotion, name


ATTRIBUTION = {"name": "attribution", "passed": False,
               "detail": "fallback: 10.0% of compute time in the candidate's kernels", "share": 0.1,
               "own_kernels": ["_gqa_decode_kernel"]}


def _result() -> SubmissionResult:
    wr = WorkloadResult("uuid", "b1", "PASSED", latency_ms=0.5)
    wr.audits = [Audit(name="input_mutation", passed=True, detail="inputs unchanged"), Audit(**ATTRIBUTION)]
    proof = Audit(name="instruction_proof", passed=True, detail="no claims")
    return SubmissionResult(1, "s", "d", "PASSED", [wr], audits=[proof])


def test_the_json_of_a_result_with_audits_is_unchanged():
    data = _result().to_json()
    text = json.dumps(data)  # no default=: every audit is plain JSON
    assert data["workloads"][0]["audits"] == [{"name": "input_mutation", "passed": True, "detail": "inputs unchanged"},
                                              ATTRIBUTION]
    assert list(data["workloads"][0]["audits"][1]) == ["name", "passed", "detail", "share", "own_kernels"]
    assert list(data["workloads"][0]["audits"][0]) == ["name", "passed", "detail"]
    assert data["workloads"][0]["fallback"] is True
    assert data["audits"] == [{"name": "instruction_proof", "passed": True, "detail": "no claims"}]
    assert ('"audits": [{"name": "input_mutation", "passed": true, "detail": "inputs unchanged"}, '
            '{"name": "attribution", "passed": false, "detail": "fallback: 10.0% of compute time in the candidate\'s '
            'kernels", "share": 0.1, "own_kernels": ["_gqa_decode_kernel"]}]') in text


def test_the_archived_rows_hold_the_same_json():
    from harness.data.records import evaluation_row
    from harness.pipeline.submission_summary import archived_scores

    result = _result()
    definition = type("D", (), {"name": "d"})()
    workload = type("W", (), {"uuid": "uuid"})()
    row = evaluation_row(1, definition, workload, result.workloads[0], None, None, "env")
    json.dumps(row)
    assert row["extra"]["audits"] == result.to_json()["workloads"][0]["audits"]
    assert row["extra"]["fallback"] is True
    assert archived_scores(result)["audits"] == [{"name": "instruction_proof", "passed": True, "detail": "no claims"}]
    # an archived audit reads back into the same Audit
    assert [Audit.model_validate(a) for a in row["extra"]["audits"]] == result.workloads[0].audits
