"""`harness report`: the charts (matplotlib and the built-in renderer) and the HTML folder it writes, over the
realistic archive report_archive.py builds."""
# ruff: noqa: E501

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from harness.archive.database import Archive

from report_archive import RUN, SASS, _solution, _submit, build_h200_archive, ensure_review_migration
from support import DEFINITIONS, EXAMPLES, KV8_PS1


@pytest.fixture
def h200(tmp_path, monkeypatch):
    ensure_review_migration(monkeypatch)
    return build_h200_archive(tmp_path / "archive")




def _charts(h200):
    from harness.data.dataset import Dataset
    from harness.review import gather_report, latency_chart, roofline_charts, trajectory_charts

    s = gather_report(h200["archive"], definition=KV8_PS1, dataset=Dataset(DEFINITIONS)).sections[0]
    return [latency_chart(s.best), *roofline_charts(s.roofline, s.best.solution_name),
            *trajectory_charts("ctl", s.runs[RUN])]


def test_builtin_renderer_labels_axes_and_units(h200):
    from harness.review import render_builtin

    charts = _charts(h200)
    assert [c.key for c in charts] == ["latency", "roofline", "bandwidth", "trajectory-latency-ctl",
                                       "trajectory-regimes-ctl", "trajectory-spend-ctl"]
    for c in charts:
        svg = render_builtin(c)
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        assert re.search(r"\((ms|GB/s|TFLOP/s|USD|FLOP/byte)", c.ylabel + c.xlabel), c.ylabel
        assert _text(c.xlabel) in svg and _text(c.ylabel) in svg
    lat = render_builtin(charts[0])
    assert lat.count("<rect") > 14 * 4  # four bars per workload: candidate, FI official, FI kernel, floor
    assert "uniform_b64_kv8192" in lat and "roofline floor" in lat
    roof = render_builtin(charts[1])
    assert "<polyline" in roof and roof.count("<circle") >= 28 and "GB/s" in roof and "TFLOP/s" in roof
    assert "memory ceiling" in render_builtin(charts[2])
    assert charts[5].y_from_zero  # spend never goes below $0: its axis starts there


@pytest.mark.parametrize("from_zero, first_tick", [(True, "0"), (False, "0.5")])
def test_a_chart_of_a_nonnegative_quantity_starts_its_axis_at_zero(from_zero, first_tick):
    from harness.review import Chart, Series, render_builtin

    chart = Chart("spend", "Provider spend", "round", "spend (USD)",
                  [Series("spend", [0, 1, 2], [0.5, 0.6, 0.7], style="line", color="#000")],
                  integer_x=True, y_from_zero=from_zero)
    assert re.findall(r">([0-9.]+)</text>", render_builtin(chart))[0] == first_tick


def _text(s: str) -> str:
    import html

    return html.escape(s, quote=True)


def test_matplotlib_renderer_draws_the_same_charts(h200):
    pytest.importorskip("matplotlib")
    from harness.review import render_matplotlib

    for c in _charts(h200):
        svg = render_matplotlib(c)
        assert svg.startswith("<svg") and 'class="plot"' in svg
        assert c.ylabel in svg.replace("&amp;", "&")  # svg.fonttype none keeps text as text


def test_log_axis_ticks_cover_the_data():
    from harness.review.svg import _Axis

    ax = _Axis([0.0206, 2.195], True, 400, 40)
    assert ax.lo == pytest.approx(0.01) and ax.hi == pytest.approx(10)
    labels = [l for _, l, major in ax.ticks() if major]
    assert labels == ["0.01", "0.1", "1", "10"]
    lin = _Axis([0.42, 2.28], False, 400, 40, include_zero=True)
    assert lin.lo == 0 and lin.hi >= 2.28


# -- HTML --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["builtin", "matplotlib"])
def test_write_report_folder(h200, tmp_path, backend):
    if backend == "matplotlib":
        pytest.importorskip("matplotlib")
    from harness.data.dataset import Dataset
    from harness.review import write_report

    out = tmp_path / "report"
    index = write_report(h200["archive"], out, backend=backend, dataset=Dataset(DEFINITIONS))
    page = index.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing fetched from the network
    assert page.count('<section class="definition"') == 2
    assert page.count('class="leaderboard"') == 2
    for key in ("latency", "roofline", "bandwidth", "trajectory-latency-ctl-2026-11-29",
                "trajectory-spend-ctl-2026-11-29"):
        assert f'data-chart="{key}"' in page, key
    assert "no controller runs" in page  # the kv4 definition has none
    assert "ctl_r3_splitk" in page and "example_illegal_address" in page
    # every local link resolves
    for href in set(re.findall(r'href="([^"#]+)', page)):
        assert (out / href).exists(), href
    best = h200["ids"]["ctl_r3_splitk"]
    cand = (out / f"candidates/sub-{best}.html").read_text()
    assert "SPLIT_K=8" in cand  # the source, inline
    for href in set(re.findall(r'href="([^"#]+)', cand)):
        assert (out / "candidates" / href).resolve().exists(), href
    assert (out / f"files/sub-{best}/sass.txt").read_text() == SASS
    assert (out / f"files/sub-{best}/transcript.txt").read_text().startswith("# Candidate ctl_r3_splitk")
    assert "dram__throughput" in (out / f"files/sub-{best}/profile.txt").read_text()
    illegal = (out / f"candidates/sub-{h200['ids']['illegal']}.html").read_text()
    assert "illegal memory access" in illegal and ">log</a>" in illegal


def test_report_command(h200, tmp_path):
    from harness.report_cli import report

    rounds = tmp_path / "rounds.json"
    rounds.write_text(json.dumps(h200["rounds"]))
    out = tmp_path / "out"
    result = CliRunner().invoke(report, ["--archive", str(h200["archive"].folder), "--out", str(out),
                                         "--definition", KV8_PS1, "--rounds", str(rounds), "--plots", "builtin"])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "1 definitions" in result.output
    page = (out / "index.html").read_text()
    assert page.count('<section class="definition"') == 1 and 'data-chart="roofline"' in page


def test_flashinfer_is_a_leaderboard_row_where_its_score_would_rank_it(h200, tmp_path):
    """FlashInfer over the leader's workloads, both timings, from the archived baseline figures."""
    from harness.review import baseline_rows, gather_report, write_report

    kv8 = next(s for s in gather_report(h200["archive"]).sections if s.name == KV8_PS1)
    rows = {b.name: b for b in kv8.baselines}
    assert set(rows) == {"FlashInfer (official)", "FlashInfer (kernel)"}
    timed = [w for w in kv8.best.workloads if w.status == "PASSED" and w.fi_kernel_ms]
    kernel = rows["FlashInfer (kernel)"]
    assert kernel.workloads == len(timed) and kernel.vs_fi_kernel == pytest.approx(1.0)
    assert kernel.vs_reference == pytest.approx(sum(w.reference_latency_ms / w.fi_kernel_ms for w in timed) / len(timed))
    assert kernel.fraction_of_floor == pytest.approx(sum(w.floor_ms / w.fi_kernel_ms for w in timed) / len(timed))
    assert rows["FlashInfer (official)"].vs_fi_official == pytest.approx(1.0)
    assert baseline_rows(None) == []
    page = write_report(h200["archive"], tmp_path / "r", backend="builtin").read_text()
    board = page[page.index('<table class="leaderboard">'):]
    board = board[:board.index("</table>")]
    assert board.count('<tr class="baseline">') == 2
    ranked = [c for c in kv8.leaderboard if c.status == "PASSED"]
    official = rows["FlashInfer (official)"].vs_reference
    above = [c.solution_name for c in ranked if c.score("vs_reference") >= official]
    position = board.index("FlashInfer (official)")
    assert all(board.index(f">{n}<") < position for n in above)
    assert all(board.index(f">{c.solution_name}<") > position for c in ranked if c.solution_name not in above)


def test_report_of_an_empty_archive_and_a_cpu_run(tmp_path):
    from harness.review import gather_report, write_report

    empty = Archive(tmp_path / "empty")
    page = write_report(empty, tmp_path / "r1", backend="builtin").read_text()
    assert "the archive holds no submissions" in page
    a = Archive(tmp_path / "cpu")
    sol = _solution(EXAMPLES / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json")
    env = a.put_environment({"host": "ci", "hardware": "cpu (x86_64)"})
    _submit(a, env, sol, KV8_PS1, {"u1": {"label": "tiny_b2_t40", "status": "SKIPPED", "message": "skipped on CPU"}})
    data = gather_report(a)
    assert data.sections[0].roofline is None
    page = write_report(a, tmp_path / "r2", data=data, backend="builtin").read_text()
    # nothing evaluated: not promotable, so no per-workload table or plot; the reason is on its row
    assert "no promotable solution" in page and "no workload was evaluated" in page
    assert "no timed results" in page and "no controller runs" in page and 'data-chart="' not in page


def test_a_re_measurement_links_its_solutions_sass_and_logs():
    """The controller's paired timing re-submits the same code: the leaderboard row (the latest run) shows the
    SASS and build log its earlier submission recorded, and says which one."""
    from harness.review import Artifact, Candidate, WorkloadRow
    from harness.review.candidates import leaderboard

    def run(sid, artifacts, status="PASSED"):
        return Candidate(sid, "h1", "k", KV8_PS1, "controller/offline", "triton", status, "", None, "", {},
                         [WorkloadRow(sid, "u", "w", status)], artifacts=artifacts)

    first = run(1, {"sass": Artifact("sass", "SASS summary", "b1"), "build_log": Artifact("build_log", "build log", "b2")})
    paired = run(2, {"transcript": Artifact("transcript", "generation transcript", text="t")})
    cut = run(3, {}, status="INTERRUPTED")
    (row,) = leaderboard([first, paired, cut])
    assert row.submission_id == 2 and row.runs == 3  # an interrupted run never shadows a finished one
    assert row.artifacts["sass"].blob == "b1" and row.artifacts["sass"].title == "SASS summary (submission 1)"
    assert row.artifacts["transcript"].title == "generation transcript"  # its own stays as it was
    assert set(row.artifacts) == {"sass", "build_log", "transcript"}
