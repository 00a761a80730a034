"""`harness report`: the data layer over a realistic archive (report_archive.py builds it), and who may lead
the leaderboard. The charts and the HTML folder are in test_report_html.py."""

from __future__ import annotations

import json
import re

import pytest

from harness.archive.database import Archive

from report_archive import (BF16_RATE, CHEAT_SCORE, H200_TRITON, KV4_PS1, READ_BW, RUN, SPEND, _labels, _passed,
                            _solution, _submit, add_flagged_submissions, build_h200_archive, ensure_review_migration)
from support import DEFINITIONS, EXAMPLES, KV8_PS1


@pytest.fixture
def h200(tmp_path, monkeypatch):
    ensure_review_migration(monkeypatch)
    return build_h200_archive(tmp_path / "archive")



# -- data -----------------------------------------------------------------------------------------------------


def test_gather_ranks_solutions_per_definition(h200):
    from harness.review import gather_report

    data = gather_report(h200["archive"])
    assert [s.name for s in data.sections] == [KV8_PS1, KV4_PS1]  # the busiest definition first
    kv8 = next(s for s in data.sections if s.name == KV8_PS1)
    names = [c.solution_name for c in kv8.leaderboard]
    assert names[0] == "ctl_r3_splitk"  # the split-k candidate leads on the official score
    assert set(names[-3:]) == {"example_illegal_address", "ctl_r2_warps8_bad", "ctl_r4_exp2_fastmath"}
    assert all(c.status != "PASSED" for c in kv8.leaderboard[-3:])
    triton = next(c for c in kv8.leaderboard if c.solution_name == "triton_gqa_decode")
    # the log's scores: vs reference 27.8x; vs FlashInfer official 3.08x; kernel 0.673x
    assert triton.score("vs_reference") == pytest.approx(27.8, abs=0.05)
    assert triton.score("vs_flashinfer_official") == pytest.approx(3.08, abs=0.01)
    assert triton.score("vs_flashinfer_kernel") == pytest.approx(0.673, abs=0.002)
    b64 = next(w for w in triton.workloads if w.label == "uniform_b64_kv8192")
    assert b64.fraction_of_floor == pytest.approx(0.97, abs=0.01)  # 97% of floor in the log
    assert next(w for w in triton.workloads if w.label == "uniform_b1_kv2048").throttled is True
    assert triton.failed_audits == [] and triton.audited
    bad = next(c for c in kv8.leaderboard if c.solution_name == "ctl_r4_exp2_fastmath")
    assert bad.score("vs_reference") == 0.0
    assert {n for _, n in bad.failed_audits} == {"output_aliasing"}
    # the controller's artifacts, and the failed build's log as its build log
    best = kv8.best
    assert set(best.artifacts) == {"build_log", "sass", "profile", "transcript"}
    failed_build = next(c for c in kv8.leaderboard if c.solution_name == "ctl_r2_warps8_bad")
    assert failed_build.artifacts["build_log"].title == "build log (failed build)"
    assert set(failed_build.artifacts) == {"build_log", "transcript"}
    assert "SPLIT_K=8" in best.sources[0]["content"]
    # the controller's trajectory, from its own tables
    assert list(kv8.runs) == [RUN]
    rounds = {r.round: r for r in kv8.runs[RUN]}
    assert sorted(rounds) == [0, 1, 2, 3, 4]  # round 0: the incumbent
    assert rounds[0].best_solution == "triton_gqa_decode" and rounds[0].note == "incumbent"
    assert rounds[2].candidates == 3 and rounds[2].passed == 1  # + a compile error and a rejected proposal
    assert rounds[3].best_solution == "ctl_r3_splitk" and rounds[3].promoted == 1
    assert rounds[3].best_latency_ms < rounds[2].best_latency_ms < rounds[0].best_latency_ms
    assert rounds[4].best_latency_ms is None and rounds[4].passed == 0  # round 4 produced nothing that passed
    assert rounds[4].cumulative_spend_usd == pytest.approx(sum(SPEND.values()))
    assert rounds[3].metric == "mean over 14 workloads"
    # where the incumbent stood after each round (the loop's round summaries)
    assert [rounds[n].incumbent for n in (1, 2, 3, 4)] == ["triton_gqa_decode", "ctl_r2_block128", "ctl_r3_splitk",
                                                           "ctl_r3_splitk"]
    assert rounds[3].incumbent_latency_ms == pytest.approx(rounds[3].best_latency_ms)
    assert set(rounds[3].incumbent_regimes) == {"small-batch", "large-batch"}
    assert rounds[3].incumbent_regimes["small-batch"] < rounds[2].incumbent_regimes["small-batch"]
    assert rounds[0].incumbent == ""  # no archived summary for round 0 here: nothing invented


def test_artifacts_come_from_the_profiles_and_controller_tables(h200):
    from harness.review import gather_report

    kv8 = next(s for s in gather_report(h200["archive"]).sections if s.name == KV8_PS1)
    best = kv8.best
    profile = best.artifacts["profile"].text
    assert "uniform_b64_kv2048" in profile and "dram__throughput.avg.pct_of_peak_sustained_elapsed" in profile
    assert "88.4 %" in profile and "memory-bandwidth" in profile
    transcript = best.artifacts["transcript"].text
    assert transcript.startswith("# Candidate ctl_r3_splitk: run ctl-2026-11-29, round 3, request r3/explore")
    assert "## Request" in transcript and "split the KV sequence (split-k)" in transcript  # the rendered prompt
    assert "## Response: anthropic claude-sonnet-4-5" in transcript and "[proposal] ctl_r3_splitk" in transcript
    assert best.artifacts["sass"].blob and best.artifacts["build_log"].blob
    triton = next(c for c in kv8.leaderboard if c.solution_name == "triton_gqa_decode")
    assert triton.artifacts == {}  # the incumbent came from outside the controller: nothing recorded


def test_failed_build_log_is_the_build_log_without_artifacts(tmp_path):
    from harness.review import gather_report

    data = gather_report(build_h200_archive(tmp_path / "a", controller=False)["archive"])
    kv8 = next(s for s in data.sections if s.name == KV8_PS1)
    failed = next(c for c in kv8.leaderboard if c.solution_name == "ctl_r2_warps8_bad")
    assert list(failed.artifacts) == ["build_log"]
    assert failed.artifacts["build_log"].title == "build log (failed build)"
    assert all(not c.artifacts for c in kv8.leaderboard if c.status == "PASSED")
    assert kv8.runs == {}  # no rounds given, no controller run recorded


def test_roofline_uses_the_dataset_costs_and_the_measured_ceilings(h200):
    from harness.data.dataset import Dataset
    from harness.review import gather_report

    data = gather_report(h200["archive"], definition=KV8_PS1, dataset=Dataset(DEFINITIONS))
    r = data.sections[0].roofline
    assert r.memory_bytes_per_s == READ_BW and r.flops_per_s == BF16_RATE
    assert "ceilings.json" in r.ceilings_note and "dataset" in r.cost_note
    cand = {p.label: p for p in r.points if p.who == "candidate"}
    assert len(cand) == 14 and {p.who for p in r.points} == {"candidate", "FlashInfer"}
    p = cand["uniform_b64_kv8192"]
    assert p.intensity == pytest.approx(4.0, abs=0.02)  # decode attention: ~4 FLOP per byte
    assert p.bytes_per_s <= READ_BW  # nothing beats the ceiling
    assert p.bytes_per_s / READ_BW == pytest.approx(0.97 / 0.985, abs=0.02)


def test_roofline_without_a_dataset_falls_back_to_the_floor(h200):
    from harness.review import gather_report, roofline_charts

    r = gather_report(h200["archive"], definition=KV8_PS1).sections[0].roofline
    assert not r.has_flops and "implied by the floor" in r.cost_note
    keys = [c.key for c in roofline_charts(r, "x")]
    assert keys == ["bandwidth"]  # no flops: no classic roofline, but bandwidth against the ceiling
    (h200["archive"].folder / "ceilings.json").unlink()
    r = gather_report(h200["archive"], definition=KV8_PS1).sections[0].roofline
    assert r.points == [] and [c.key for c in roofline_charts(r, "x")] == ["fraction"]


def test_rounds_file_and_rounds_without_definition(tmp_path):
    from harness.review import gather_report, load_rounds_file

    h200 = build_h200_archive(tmp_path / "a", controller=False)
    path = tmp_path / "rounds.json"
    path.write_text(json.dumps({"rounds": [{k: v for k, v in r.items() if k != "definition"}
                                           for r in h200["rounds"]]}))
    rounds = load_rounds_file(path)
    one = gather_report(h200["archive"], definition=KV8_PS1, rounds=rounds)
    assert list(one.sections[0].runs) == [RUN]  # one definition: rounds go to it
    got = one.sections[0].runs[RUN]
    assert [r.round for r in got] == [1, 2, 3, 4] and got[2].best_solution == "ctl_r3_splitk"
    assert got[-1].cumulative_spend_usd == pytest.approx(sum(SPEND.values()))
    both = gather_report(h200["archive"], rounds=rounds)
    assert all(not s.runs for s in both.sections) and "without a definition" in both.notices[0]
    path.write_text('{"rounds": 3}')
    with pytest.raises(ValueError):
        load_rounds_file(path)


def test_given_rounds_replace_the_archived_run_of_the_same_name(h200):
    from harness.review import gather_report

    given = [{**r, "best_latency_ms": 1.0} for r in h200["rounds"]]
    kv8 = next(s for s in gather_report(h200["archive"], rounds=given).sections if s.name == KV8_PS1)
    assert [r.round for r in kv8.runs[RUN]] == [1, 2, 3, 4]
    assert {r.best_latency_ms for r in kv8.runs[RUN]} == {1.0}


# -- charts ----------------------------------------------------------------------------------------------------


# -- who may lead -------------------------------------------------------------------------------------------------


def _table(page: str, cls: str, start: int = 0) -> str:
    """The first <table class="cls"> at or after ``start``, as text."""
    at = page.index(f'<table class="{cls}">', start)
    return page[at:page.index("</table>", at)]


def _row(table: str, name: str) -> str:
    return next(r for r in table.split("<tr") if f">{name}</a>" in r)


def test_a_flagged_solution_never_outranks_a_promotable_one(h200, tmp_path):
    """A call-counting cheat scores 8420x with two static-gate errors and failed audits on 13 workloads, and one
    with static-gate errors alone scores 80x: both above every honest solution. Neither is ranked, neither leads,
    neither is plotted; each is listed under "Not promotable" with its reasons and its error count."""
    from harness.data.dataset import Dataset
    from harness.review import gather_report, write_report

    flagged = add_flagged_submissions(h200["archive"], h200["env"])
    data = gather_report(h200["archive"], dataset=Dataset(DEFINITIONS))
    kv8 = next(s for s in data.sections if s.name == KV8_PS1)
    honest = [c.solution_name for c in kv8.promotable]
    assert honest == ["ctl_r3_splitk", "ctl_r2_block128", "ctl_r1_stages3", "triton_gqa_decode"]
    assert [c.rank for c in kv8.promotable] == [1, 2, 3, 4]
    assert max(c.score("vs_reference") for c in kv8.promotable) < 80.0  # the flagged ones scored more
    assert kv8.best.solution_name == "ctl_r3_splitk"
    others = {c.solution_name: c for c in kv8.not_promotable}
    assert set(flagged) <= set(others) and all(c.rank is None for c in others.values())
    assert kv8.leaderboard == kv8.promotable + kv8.not_promotable
    cheat, static_only = others["cheat_call_counting"], others["cheat_static_only"]
    assert cheat.score("vs_reference") == pytest.approx(CHEAT_SCORE)
    assert cheat.blockers[:2] == ["static gate: 2 error findings, first call_counting at kernel.py:41",
                                  ("audit fresh_input_recheck failed on 13 of 14 workloads (uniform_b1_kv2048, "
                                   "uniform_b1_kv8192, uniform_b16_kv512, ...)")]
    assert static_only.blockers == ["static gate: 2 error findings, first call_counting at kernel.py:41"]
    assert static_only.audit_summary.text() == "2 static-gate errors"
    assert cheat.audit_summary.text() == "2 static-gate errors, 26 failed audits (attribution, fresh_input_recheck)"
    # the roofline is the leader's: nothing faster than the memory ceiling
    assert all(p.bytes_per_s <= READ_BW for p in kv8.roofline.points)

    page = write_report(h200["archive"], tmp_path / "r", data=data, backend="builtin").read_text()
    section = page[page.index(f'<section class="definition" id="{KV8_PS1}">'):]
    section = section[:section.index("</section>")]
    board = _table(section, "leaderboard")
    assert "cheat_" not in board
    assert board.count('<tr class="baseline">') == 2  # FlashInfer still ranked among the promotable
    assert re.search(r'<tr class="lead">.{0,300}>ctl_r3_splitk<', board, re.DOTALL)
    below = section.index('>Not promotable <')
    assert all(section.index(f">{n}</a>") < below for n in honest)
    rest = _table(section, "not-promotable")
    assert section.index(rest) > below
    row = _row(rest, "cheat_call_counting")
    assert "2 static-gate errors, 26 failed audits" in row and "clean" not in row
    assert "static gate: 2 error findings" in row and "audit fresh_input_recheck failed on 13 of 14" in row
    row = _row(rest, "cheat_static_only")
    assert "2 static-gate errors" in row and "clean" not in row and "static gate: 2 error findings" in row
    figures = re.findall(r'<figure class="chart" data-chart="([^"]+)">(.*?)</figure>', section, re.DOTALL)
    assert {k for k, _ in figures} >= {"latency", "roofline", "bandwidth"}
    assert all("cheat_" not in svg for _, svg in figures)
    assert "ctl_r3_splitk" in dict(figures)["bandwidth"]
    # its own page says why, and lists the static gate's findings
    own = (tmp_path / "r" / f"candidates/sub-{flagged['cheat_call_counting']}.html").read_text()
    assert "Not promotable (3 reasons above)" in own and "call_counting" in own and "global_state" in own


def test_a_partial_score_is_marked_with_the_workloads_left_out(tmp_path):
    from harness.review import gather_report, write_report

    a = Archive(tmp_path / "a")
    env = a.put_environment({"host": "h200-node-1", "hardware": "NVIDIA H200"})
    kv8 = [(u, l) for u, l in _labels(KV8_PS1) if l in ("uniform_b1_kv512", "skewed_b64", "uniform_b64_kv2048")]
    results = {u: _passed(l, H200_TRITON[l][0], H200_TRITON[l], 0.01) for u, l in kv8}
    sol = _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json")
    partial = _submit(a, env, sol, KV8_PS1, results, scores={
        "scores_partial": {"vs_flashinfer_kernel": ["skewed_b64"], "vs_reference": []}})
    other = _submit(a, env, _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json", "other",
                                      ("BLOCK_N=64", "BLOCK_N=128")), KV8_PS1, results,
                    scores={"scores_partial": "not a mapping"})  # malformed: read as absent
    data = gather_report(a)
    rows = {c.submission_id: c for c in data.sections[0].leaderboard}
    assert rows[partial].scores_partial == {"vs_flashinfer_kernel": ["skewed_b64"]}
    assert rows[other].scores_partial == {} and rows[partial].promotable and rows[other].promotable
    page = write_report(a, tmp_path / "r", data=data, backend="builtin").read_text()
    row = _row(_table(page, "leaderboard"), sol["name"])
    assert re.search(r'class="partial" title="partial: vs FlashInfer kernel leaves out 1 workload its baseline did '
                     r'not cover: skewed_b64">partial<', row)
    assert row.count('class="partial"') == 1 and 'class="partial"' not in _row(_table(page, "leaderboard"), "other")
    assert "Partial scores" in page and "vs FlashInfer kernel over 2 of 3 workloads (no baseline for skewed_b64)" in page
