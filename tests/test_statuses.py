"""Statuses are defined once (harness/data/statuses.py), and the SM counts of the target GPUs are data
(definitions/hardware.yaml) that both attention families read."""

from __future__ import annotations

import ast
import json
import sqlite3
from pathlib import Path

import pytest

from harness.data import hardware
from harness.data.statuses import NO_VERDICT, EvaluationStatus, RunStatus, SubmissionStatus

ROOT = Path(__file__).resolve().parent.parent
STATUS_MODULE = ROOT / "harness" / "data" / "statuses.py"
STATUS_TEXTS = {s.value for enum in (EvaluationStatus, SubmissionStatus, RunStatus) for s in enum}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _exported_names(tree: ast.AST) -> set[int]:
    """The strings of ``__all__ = [...]``: names of things, not statuses."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            found |= {id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return found


def status_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed = _docstrings(tree) | _exported_names(tree)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{where}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STATUS_TEXTS
            and id(node) not in allowed]


def test_the_scan_sees_a_literal(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Says HARNESS_ERROR in a docstring: allowed."""\n__all__ = ["TIMEOUT"]\n'
                      'def f(s):\n    """INTERRUPTED."""\n    return s == "SKIPPED"\n')
    assert [line.rsplit(": ", 1)[1] for line in status_literals(sample)] == ["'SKIPPED'"]


def test_no_status_literal_outside_the_statuses_module():
    found = [hit for package in ("harness", "controller") for path in sorted((ROOT / package).rglob("*.py"))
             if path != STATUS_MODULE for hit in status_literals(path)]
    assert not found, "use harness.data.statuses instead of these literals:\n" + "\n".join(found)


def test_statuses_are_their_text():
    """Written to JSON or SQLite, and compared with text read back, a member is its text."""
    assert {s.value for s in SubmissionStatus} >= {"RUNNING", "SKIPPED", "INTERRUPTED", "HARNESS_ERROR"}
    assert [s.value for s in EvaluationStatus] == ["PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL",
                                                   "INCORRECT_DTYPE", "RUNTIME_ERROR", "COMPILE_ERROR", "TIMEOUT"]
    for member in (*SubmissionStatus, *RunStatus):
        assert str(member) == f"{member}" == member.value == member
        assert json.dumps({"status": member}) == json.dumps({"status": member.value})
    db = sqlite3.connect(":memory:")
    db.execute("create table t (status text)")
    db.execute("insert into t values (?)", [SubmissionStatus.HARNESS_ERROR])
    assert db.execute("select status, typeof(status) from t").fetchall() == [("HARNESS_ERROR", "text")]
    assert db.execute("select count(*) from t where status = ?", [SubmissionStatus.HARNESS_ERROR]).fetchone() == (1,)
    assert "RUNNING" in NO_VERDICT and "PASSED" not in NO_VERDICT
    assert {"RUNNING": 1}[SubmissionStatus.RUNNING] == 1  # hashes as its text


def test_schema_still_exports_evaluation_status():
    from harness.data.schema import EvaluationStatus as FromSchema

    assert FromSchema is EvaluationStatus


# -- hardware -------------------------------------------------------------------------------------------------


@pytest.fixture
def hardware_file(tmp_path, monkeypatch):
    def write(text: str) -> Path:
        path = tmp_path / "hardware.yaml"
        path.write_text(text)
        monkeypatch.setattr(hardware, "HARDWARE_PATH", path)
        return path
    return write


def _families():
    """Each family with the programs per SM its memory-bound regime needs (GQA: two per (request, KV head))."""
    from harness.families.dsa_paged import FAMILY as DSA
    from harness.families.gqa_paged import FAMILY as GQA
    return (GQA, 2), (DSA, 1)


def _boundary(family, target: str) -> int:
    """The least grid the family calls memory-bound on ``target``: a multiple of its SM count."""
    def bound(n: int) -> bool:
        gqa = family.__class__.__name__.startswith("Gqa")
        axes = {"batch_size": n, "num_kv_heads": 1} if gqa else {"num_tokens": n}
        return family.regime(axes, target_hardware=target) == "memory-bound"
    return next(n for n in range(1, 1025) if bound(n))


def test_both_families_read_the_sm_count_from_the_file():
    shipped = hardware.hardware_table()
    assert hardware.HARDWARE_PATH == ROOT / "definitions" / "hardware.yaml"
    assert shipped["H200"].sm_count == 132
    for family, per_sm in _families():
        assert _boundary(family, "H200") == 132 * per_sm
        assert _boundary(family, "B200") == shipped["B200"].sm_count * per_sm


def test_a_target_added_to_the_file_is_seen(hardware_file):
    hardware_file("H200: {sm_count: 132, architecture: hopper}\nX1: {sm_count: 7, architecture: hopper}\n")
    assert hardware.sm_count("X1") == 7
    assert hardware.sm_count("not-listed") == 132  # the default target's
    for family, per_sm in _families():
        assert _boundary(family, "X1") == 7 * per_sm
    from controller.tactics import tactics_skill

    assert tactics_skill("X1") == "hopper-tactics" and tactics_skill("not-listed") == ""


def test_a_malformed_file_is_refused(hardware_file):
    hardware_file("H200: {architecture: hopper}\n")
    with pytest.raises(ValueError, match="sm_count"):
        hardware.hardware_table()
    hardware_file("H100: {sm_count: 132, architecture: hopper}\n")
    with pytest.raises(ValueError, match="default target H200"):
        hardware.hardware_table()
