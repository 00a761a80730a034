"""benchmarks/family_records.py: the contest families' record, built from archived submissions (pure part)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import family_records as fr  # noqa: E402

# An H200 submission of the GDN decode example cut short after 46 of its 54 workloads (harness show --json)
SHOWN = ROOT / "benchmarks" / "results" / "2026-12-02_h200" / "gdn_decode_46_of_54_show.json"


def test_a_cut_short_submission_gives_its_finished_workloads():
    sub = json.loads(SHOWN.read_text())
    record = fr.definition_record(sub["definition"], [sub], 54, 98.0)
    assert (record["finished"], record["passed"], record["timed"], record["workloads"]) == (46, 46, 46, 54)
    assert record["statuses"] == ["INTERRUPTED"] and record["promotable"] is False  # no verdict was archived
    first = record["rows"][0]
    assert first["workload"] == "b1_0" and first["own_share"] == 1.0 and first["failed_audits"] == []
    assert 0 < first["fraction_of_floor"] < 1 and first["together_gib"] == 0.19


def test_the_newest_evaluation_of_a_workload_wins_and_its_submission_decides():
    old = json.loads(SHOWN.read_text())
    new = copy.deepcopy(old)
    new["id"], new["status"], new["scores"] = old["id"] + 1, "PASSED", {"promotable": True}
    new["evaluations"] = [dict(old["evaluations"][0], latency_ms=0.001, status="INCORRECT_NUMERICAL")]
    record = fr.definition_record(old["definition"], [old, new], 54, 1.0)
    assert record["finished"] == 46 and record["passed"] == 45
    assert record["submissions"] == [old["id"], new["id"]] and record["promotable"] is False
    redone = next(r for r in record["rows"] if r["workload"] == "b1_0")
    assert redone["latency_ms"] == 0.001 and redone["status"] == "INCORRECT_NUMERICAL"


def test_the_markdown_has_one_line_per_workload():
    sub = json.loads(SHOWN.read_text())
    report = {"date": "2026-12-02", "gpu": "NVIDIA H200",
              "definitions": [fr.definition_record(sub["definition"], [sub], 54, 98.0)]}
    text = fr.markdown(report)
    assert "| gdn_decode_qk4_v8_d128_k_last | 46/54 | 46 |" in text
    assert text.count("\n| b") == 46 and "| b64_0 |" not in text  # the cut-off workloads are absent, not invented


def test_clean_reads_every_workload_across_the_submissions_a_record_joins():
    """A record continued after a time limit joins a cut submission (never promotable as a whole) and the one that
    finished it: `clean` says whether each workload would pass promotion; a missing workload, a failed audit or
    library compute make it False."""
    sub = json.loads(SHOWN.read_text())
    rows = fr.definition_record(sub["definition"], [sub], 54, 1.0)["rows"]
    assert fr.workloads_clean(rows, 46) is True
    assert fr.workloads_clean(rows, 54) is False  # 8 workloads never evaluated
    audited = [dict(rows[0], failed_audits=["precision"])] + rows[1:]
    assert fr.workloads_clean(audited, 46) is False
    borrowed = [dict(rows[0], own_share=0.5)] + rows[1:]
    assert fr.workloads_clean(borrowed, 46) is False
    unattributed = [dict(rows[0], own_share=None)] + rows[1:]
    assert fr.workloads_clean(unattributed, 46) is True
    failed = [dict(rows[0], status="INCORRECT_NUMERICAL")] + rows[1:]
    assert fr.workloads_clean(failed, 46) is False
