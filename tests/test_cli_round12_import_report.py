"""Red team round 12, V6 and V7: `harness import` let in traces the archive cannot use (a definition the dataset has
not got, a workload it has not got or of other axes, an infinite or zero latency), after which every `harness export`
failed and `harness report` crashed; `harness report --rounds` took a file of the wrong shape with a traceback, or
silently."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.archive.database import Archive
from harness.archive.export import export_trace_set, import_trace_set
from harness.archive.trace_import import ImportReport, _write_import
from harness.cli import main
from harness.data.dataset import Dataset
from harness.data.schema import SchemaError, Solution, Trace, dump_json
from support import KV8_PS1, TORCH_CANDIDATE, solution_dict

PASSED = {"status": "PASSED", "environment": {"hardware": "H100"}, "timestamp": "2026-01-01T00:00:00",
          "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0}}


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def trace(solution: str, workload: dict, latency: float, definition: str = KV8_PS1) -> dict:
    return {"definition": definition, "workload": workload, "solution": solution,
            "evaluation": {**PASSED, "performance": {"latency_ms": latency, "reference_latency_ms": 1.0,
                                                     "speedup_factor": 1.0}}}


def write_trace_set(root: Path, solutions: list[dict], traces: list[dict]) -> Path:
    for i, sol in enumerate(solutions):
        path = root / "solutions" / f"s{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(sol))
    if traces:
        (root / "traces").mkdir(parents=True, exist_ok=True)
        # json.dumps writes inf as Infinity, as the tester's trace set held it
        (root / "traces" / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    return root


@pytest.fixture
def workloads(tiny_dataset_root) -> list[dict]:
    return [dump_json(w) for w in Dataset(tiny_dataset_root).workloads[KV8_PS1]]


def test_import_leaves_out_each_unusable_trace_with_its_line_and_reason_and_imports_the_rest(
        tiny_dataset_root, workloads, tmp_path):
    good, other = workloads
    stranger = {**good, "uuid": "ffffffff-0000-0000-0000-000000000000"}
    short_axes = {**good, "axes": {"batch_size": 2}}
    root = write_trace_set(tmp_path / "ts", [
        solution_dict(TORCH_CANDIDATE, name="kept"),
        solution_dict(TORCH_CANDIDATE + "# ghost\n", name="ghost", definition="no_such_def"),
    ], [
        trace("kept", good, 0.5),
        trace("ghost", good, 0.5, definition="no_such_def"),
        trace("kept", stranger, 0.5),
        trace("kept", short_axes, 0.5),
        trace("kept", other, math.inf),
        trace("kept", other, 0.0),
    ])
    archive = Archive(tmp_path / "archive")
    report = import_trace_set(archive, root, Dataset(tiny_dataset_root))
    assert (report.solutions, report.traces) == (1, 1)
    rows = archive.db.execute("select workload_uuid, latency_ms from evaluations").fetchall()
    assert [tuple(r) for r in rows] == [(good["uuid"], 0.5)]
    assert archive.db.execute("select count(*) from solutions where definition = 'no_such_def'").fetchone()[0] == 0
    t = root / "traces" / "t.jsonl"
    expected = [f"{root / 'solutions' / 's1.json'}: solution 'ghost' left out: definition 'no_such_def' is not in",
                f"{t}:2: trace of 'ghost' left out: definition 'no_such_def' is not in",
                f"{t}:3: trace of 'kept' left out: workload ffffffff-0000-0000-0000-000000000000 is not a workload",
                f"{t}:4: trace of 'kept' left out: workload {good['uuid']}: its axes do not match {KV8_PS1} "
                "(no value for ['num_pages', 'len_indptr', 'num_kv_indices'])",
                f"{t}:5: trace of 'kept' left out: latency_ms inf is not a time",
                f"{t}:6: trace of 'kept' left out: latency_ms 0.0 is not a time"]
    assert len(report.notices) == len(expected), report.notices
    for notice, start in zip(report.notices, expected):
        assert notice.startswith(start) and "\n" not in notice, (notice, start)


def test_a_trace_set_of_nothing_usable_is_one_line_exit_2_and_imports_nothing(tmp_path):
    good = {"uuid": "2eced51a-2429-5a5e-ba49-5afcdcd9c071", "axes": {"batch_size": 1}, "inputs": {}}
    root = write_trace_set(tmp_path / "ts", [solution_dict(TORCH_CANDIDATE, name="ghost", definition="no_such_def")],
                           [trace("ghost", good, 0.01, definition="no_such_def")])
    (tmp_path / "archive").mkdir()
    result = CliRunner().invoke(main, ["import", str(root), "--archive", str(tmp_path / "archive")])
    assert result.exit_code == 2, result.output
    line = one_line(result.stderr)
    assert line.startswith(f"error: {root}: nothing imported: all 2 solutions and traces were left out")
    assert "s0.json: solution 'ghost' left out: definition 'no_such_def' is not in the dataset" in line
    assert "Traceback" not in result.output
    archive = Archive(tmp_path / "archive")
    assert archive.db.execute("select count(*) from solutions").fetchone()[0] == 0


def test_a_trace_set_that_is_one_unusable_solution_says_why_on_one_line(tmp_path):
    root = write_trace_set(tmp_path / "ts", [solution_dict(TORCH_CANDIDATE, name="ghost", definition="no_such_def")],
                           [])
    with pytest.raises(SchemaError, match=r"nothing imported: .*s0.json: solution 'ghost' left out: definition "
                                          r"'no_such_def' is not in the dataset"):
        import_trace_set(Archive(tmp_path / "archive"), root)


@pytest.fixture
def poisoned(tiny_dataset_root, workloads, tmp_path) -> Archive:
    """An archive an older version's import filled: one usable trace, and traces of an infinite, a zero and a
    negative latency and of a workload with axes of no workload, written as that version wrote them (unchecked)."""
    good, other = workloads
    archive = Archive(tmp_path / "archive")
    kept = Solution.model_validate(solution_dict(TORCH_CANDIDATE, name="kept"))
    bad = Solution.model_validate(solution_dict(TORCH_CANDIDATE + "# bad\n", name="bad"))
    stranger = {"uuid": "ffffffff-0000-0000-0000-000000000000", "axes": {"batch_size": 1}, "inputs": {}}
    rows = [(kept, trace("kept", good, 0.5))] + [
        (bad, trace("bad", wl, latency)) for wl, latency in ((good, math.inf), (other, 0.0), (stranger, 0.25))]
    negative = Trace.model_validate(trace("bad", other, 1.0))
    negative.evaluation.performance.latency_ms = -1.0  # the schema refuses it; an older row may hold it still
    traces = [(tmp_path / "t.jsonl", Trace.model_validate(t), sol) for sol, t in rows]
    with archive.db.atomic():
        _write_import(archive, tmp_path, [kept, bad], traces + [(tmp_path / "t.jsonl", negative, bad)], ImportReport())
    return archive


def test_export_leaves_out_the_traces_an_older_import_let_in_and_writes_only_json(poisoned, tiny_dataset_root,
                                                                                  tmp_path):
    out = tmp_path / "export"
    report = export_trace_set(poisoned, Dataset(tiny_dataset_root), out)
    assert report.traces == 1
    lines = [line for f in (out / "traces").rglob("*.jsonl") for line in f.read_text().splitlines()]

    def refuse(token: str) -> float:
        raise AssertionError(f"{token} is not JSON")

    assert [json.loads(line, parse_constant=refuse)["evaluation"]["performance"]["latency_ms"] for line in lines] \
        == [0.5]
    (notice,) = [n for n in report.notices if "cannot be exported" in n]
    assert notice.startswith("4 evaluations' traces cannot be exported and were left out (they stay in the archive)")
    assert "latency_ms inf is not a time" in notice and "latency_ms 0.0 is not a time" in notice
    assert "workload ffffffff-0000-0000-0000-000000000000: var axes" in notice


def test_export_of_such_an_archive_on_the_command_line_succeeds_and_says_what_it_left_out(poisoned, tiny_dataset_root,
                                                                                          tmp_path):
    result = CliRunner().invoke(main, ["export", str(tmp_path / "export"), "--archive", str(poisoned.folder),
                                       "--dataset", str(tiny_dataset_root)])
    assert result.exit_code == 0, result.output
    assert "1 traces" in result.output and "cannot be exported and were left out" in result.output


def test_export_names_the_submissions_of_definitions_the_dataset_has_not_got(tiny_dataset_root, workloads, tmp_path):
    archive = Archive(tmp_path / "archive")
    ghost = Solution.model_validate(solution_dict(TORCH_CANDIDATE, name="ghost", definition="no_such_def"))
    with archive.db.atomic():
        _write_import(archive, tmp_path, [ghost], [(tmp_path / "t.jsonl", Trace.model_validate(
            trace("ghost", workloads[0], 0.5, definition="no_such_def")), ghost)], ImportReport())
    report = export_trace_set(archive, Dataset(tiny_dataset_root), tmp_path / "export")
    assert "1 submissions of definitions this dataset does not have were left out: no_such_def (1)" in report.notices


def test_report_shows_a_latency_that_is_no_time_as_missing_and_does_not_crash(poisoned, tmp_path):
    from harness.review.candidates import load_candidate

    bad = next(r for r in poisoned.submissions() if r["solution_name"] == "bad")
    rows = load_candidate(poisoned, bad["id"]).workloads
    # an infinite, a zero and a negative latency shown as missing; the unknown workload's own figure as it is
    assert [(w.uuid[:8], w.latency_ms) for w in rows] == [("00000000", None), ("00000000", None), ("ffffffff", 0.25),
                                                          ("00000000", None)]
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "report"), "--archive",
                                       str(poisoned.folder)])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "wrote" in result.output and (tmp_path / "report" / "index.html").is_file()


ROUNDS = [{"definition": KV8_PS1, "run": "ctl-1", "round": 0, "best_latency_ms": 0.5, "spend_usd": 0.0,
           "candidates": 1, "best_solution": "kept", "metric": "mean over 2 workloads"},
          {"definition": KV8_PS1, "run": "ctl-1", "round": 1, "best_latency_ms": None, "spend_usd": 0.25,
           "candidates": 2, "best_solution": ""}]


@pytest.mark.parametrize("content, says", [
    ([{"run": "x", "round": "y"}], '[0].round: Input should be a valid integer (got "y")'),
    ({"a": 1}, 'expected a list of round objects, or an object whose "rounds" is one (this object\'s keys: a)'),
    ([{"run": 1, "round": 1, "best_latency_ms": None, "spend_usd": "abc", "candidates": -5, "definition": "x"}],
     '[0].spend_usd: Input should be a valid number (got "abc"); [0].candidates: Input should be greater than or '
     'equal to 0 (got -5)'),
    ({"rounds": [{"round": 1, "best_latency_ms": 0}]},
     "rounds[0].best_latency_ms: Input should be greater than 0 (got 0)"),
    ([{"run": "x"}], "[0].round: Field required"),
    ([{"round": True}], "[0].round: Input should be a valid integer (got true)"),
], ids=["types", "object-without-rounds", "spend-and-count", "zero-latency", "no-round", "bool-round"])
def test_a_rounds_file_of_the_wrong_shape_is_one_line_naming_the_file_and_field(poisoned, tmp_path, content, says):
    rounds = tmp_path / "rounds.json"
    rounds.write_text(json.dumps(content))
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "report"), "--archive",
                                       str(poisoned.folder), "--rounds", str(rounds)])
    assert result.exit_code == 2, result.output
    assert one_line(result.stderr) == f"error: --rounds: {rounds}: {says}"
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("shape", ["list", "object"])
def test_a_rounds_file_as_the_report_and_the_controller_write_it_is_drawn(poisoned, tmp_path, shape):
    rounds = tmp_path / "rounds.json"
    summary = {"round": 2, "kind": "generate", "candidates": 1, "best_latency_ms": 0.4, "best_candidate": "kept",
               "tokens": 10, "cost_usd": 0.1, "incumbent": {"name": "kept", "latency_ms": 0.4, "regimes": {}}}
    rounds.write_text(json.dumps(ROUNDS if shape == "list" else {"run_id": "ctl-1", "rounds": [*ROUNDS, summary]}))
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "report"), "--archive",
                                       str(poisoned.folder), "--rounds", str(rounds), "--definition", KV8_PS1])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report" / "index.html").read_text()
    assert 'data-chart="trajectory-latency-ctl-1"' in page and 'data-chart="trajectory-spend-ctl-1"' in page


def test_a_rounds_file_reads_into_the_rounds_the_report_draws(tmp_path):
    from harness.review.rounds import _rounds_from, load_rounds_file

    rounds = tmp_path / "rounds.json"
    rounds.write_text(json.dumps(ROUNDS))
    (first, second) = _rounds_from(load_rounds_file(rounds), None)[KV8_PS1]["ctl-1"]
    assert (first.round, first.best_latency_ms, first.candidates, first.best_solution) == (0, 0.5, 1, "kept")
    assert (second.best_latency_ms, second.spend_usd, second.cumulative_spend_usd) == (None, 0.25, 0.25)
