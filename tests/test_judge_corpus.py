"""The judge set's corpus mode (benchmarks/judge_set.py --corpus DIR): other people's solutions, each on its
definition's largest workload, judged and written as a table, with expectations where DIR says them."""

from __future__ import annotations

import json
import sys

from support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import judge_set  # noqa: E402


def _reply(status: str, audits: list[tuple[str, bool, str]], blockers: list[str], message: str = "") -> dict:
    return {"status": status, "promotion_blockers": blockers, "static_findings": [], "scores": None,
            "workloads": [{"label": "largest_w", "status": status, "latency_ms": 1.0, "message": message,
                           "audits": [{"name": n, "passed": p, "detail": d} for n, p, d in audits]}]}


def test_a_corpus_is_every_json_but_the_expectations_in_name_order(tmp_path):
    for name in ("b_moe", "a_gqa", "c_dsa"):
        (tmp_path / f"{name}.json").write_text("{}")
    (tmp_path / "expected.json").write_text(json.dumps({"a_gqa": True, "c_dsa": False}))
    (tmp_path / "notes.md").write_text("not a solution")
    assert [(n, p.name, h) for n, p, h in judge_set.corpus_set(tmp_path)] == [
        ("a_gqa", "a_gqa.json", True), ("b_moe", "b_moe.json", None), ("c_dsa", "c_dsa.json", False)]


def test_the_corpus_run_submits_on_the_largest_workload_without_baselines_and_keeps_every_verdict(
        tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a_honest", "b_unknown", "c_cut"):
        (corpus / f"{name}.json").write_text("{}")
    (corpus / "expected.json").write_text(json.dumps({"a_honest": True, "c_cut": True}))
    asked = []
    replies = {
        "a_honest": _reply("PASSED", [("attribution", False, "fallback: 12.7% of compute time")],
                           ["largest_w: audit attribution failed"]),
        "b_unknown": _reply("COMPILE_ERROR", [], ["largest_w: COMPILE_ERROR"], "No module named 'cutlass'"),
    }
    clock = iter([0.0, 1.0, 2.0, 500.0, 501.0, 502.0, 503.0])
    monkeypatch.setattr(judge_set.time, "perf_counter", lambda: next(clock))

    def fake_submit(path, archive, workloads, extra, timeout_s):
        asked.append((path.stem, workloads, extra, timeout_s))
        return replies[path.stem], 1.0

    monkeypatch.setattr(judge_set, "submit", fake_submit)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["judge_set.py", "--corpus", str(corpus), "--out", str(out), "--archive",
                                      str(tmp_path / "archive"), "--budget-s", "100", "--timeout", "150"])
    judge_set.main()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary == {"judged": 2, "promotable": 0, "no_result": 0, "not_as_expected": ["a_honest"]}
    assert asked == [("a_honest", "largest", ["--no-baselines"], 150.0),
                     ("b_unknown", "largest", ["--no-baselines"], 150.0)]  # c_cut: past the budget, not started
    rows = json.loads(next(out.glob("judge_set_*.json")).read_text())
    assert [(r["name"], r["promotable"], r["as_expected"]) for r in rows] == [
        ("a_honest", False, False), ("b_unknown", False, None)]
    assert rows[0]["workloads"][0]["audits"] == {"attribution": [False, "fallback: 12.7% of compute time"]}
    assert rows[0]["workloads"][0]["message"] is None
    assert rows[1]["workloads"][0]["message"] == "No module named 'cutlass'"
    table = next(out.glob("judge_set_*.md")).read_text().splitlines()
    assert table[2].startswith("| a_honest | True | PASSED | False | NO |")
    assert table[3].startswith("| b_unknown | None | COMPILE_ERROR | False | - |")
