"""The report as a person sees it: rendered by headless Chromium from a small archive.

Chromium's ``--dump-dom`` gives the DOM after parsing (so the inline SVG plots and the tables are
checked as the browser built them, not as text), and ``--screenshot`` keeps a picture of the page in
tests/artifacts/report.png (git-ignored), next to the report folder itself (tests/artifacts/report/).
Skipped, with the reason, where no Chromium is on PATH (Debian: apt-get install -y chromium).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from click.testing import CliRunner

from harness.report_cli import report as report_cmd

from report_archive import add_flagged_submissions, build_h200_archive, ensure_review_migration

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def find_browser() -> str | None:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


BROWSER = find_browser()
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless browser on PATH (tried " + ", ".join(BROWSERS)
                                + "); on Debian: apt-get install -y chromium")


def chromium(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    ensure_review_migration(mp)
    try:
        built = build_h200_archive(tmp_path_factory.mktemp("browser") / "archive")
        # two solutions the harness would never promote, scored above every honest one
        built["ids"].update(add_flagged_submissions(built["archive"], built["env"]))
        out = ARTIFACTS / "report"
        shutil.rmtree(out, ignore_errors=True)
        # As a user runs it; plots by matplotlib where installed, else by the built-in SVG renderer.
        result = CliRunner().invoke(report_cmd, ["--archive", str(built["archive"].folder), "--out", str(out)])
        assert result.exit_code == 0, result.output
        yield {"index": out / "index.html", "ids": built["ids"]}
    finally:
        mp.undo()


def test_report_renders_with_plots_and_tables(report, tmp_path):
    url = report["index"].resolve().as_uri()
    dom = chromium(["--dump-dom", url], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "<title>Crucible report</title>" in html
    # two definitions, each with its leaderboard; the rank-1 solution of the controller run leads one
    assert len(re.findall(r'<section class="definition"', html)) == 2
    assert len(re.findall(r'<table class="leaderboard"', html)) == 2
    lead = re.findall(r'<tr class="lead">(.*?)</tr>', html, re.DOTALL)
    assert len(lead) == 2 and ">ctl_r3_splitk<" in lead[0]
    # the plots are inline SVG the browser parsed: one <svg> per figure, each with axis labels in ms/GB/s/TFLOP/s
    figures = re.findall(r'<figure class="chart" data-chart="([^"]+)">\s*<svg', html)
    for key in ("latency", "roofline", "bandwidth", "trajectory-latency-ctl-2026-11-29",
                "trajectory-spend-ctl-2026-11-29"):
        assert key in figures, (key, figures)
    assert html.count("<svg") >= len(figures) >= 8
    for unit in ("latency (ms, log scale)", "achieved bandwidth (GB/s)", "attained throughput (TFLOP/s, log scale)",
                 "spend (USD)", "arithmetic intensity (FLOP/byte, log scale)"):
        assert unit in html, unit
    assert "no controller runs" in html  # the kv4 definition
    assert '<table class="workloads"' in html and '<table class="rounds"' in html


def _section(html: str, name: str) -> str:
    start = html.index(f'<section class="definition" id="{name}">')
    return html[start:html.index("</section>", start)]


def test_flagged_solutions_are_listed_below_every_promotable_one(report, tmp_path):
    """As the browser built the page: the 8420x call-counting cheat and the 80x one with static-gate errors are
    neither ranked nor plotted; they sit in the "Not promotable" table, after every ranked row, with their reasons
    and their static-gate error counts."""
    dom = chromium(["--dump-dom", report["index"].resolve().as_uri()], tmp_path / "profile-flagged")
    assert dom.returncode == 0, dom.stderr[-2000:]
    kv8 = _section(dom.stdout, "gqa_paged_decode_h32_kv8_d128_ps1")
    board = re.search(r'<table class="leaderboard">(.*?)</table>', kv8, re.DOTALL).group(1)
    ranked = re.findall(r'<td class="num">(\d+)</td>\s*<td><a href="candidates/sub-\d+\.html">([^<]+)</a>', board)
    assert [n for _, n in ranked] == ["ctl_r3_splitk", "ctl_r2_block128", "ctl_r1_stages3", "triton_gqa_decode"]
    assert [r for r, _ in ranked] == ["1", "2", "3", "4"] and "cheat_" not in board
    heading = kv8.index(">Not promotable <")
    rest = re.search(r'<table class="not-promotable">(.*?)</table>', kv8, re.DOTALL)
    assert rest.start() > heading > kv8.index(board)
    rows = {re.search(r'>([^<]+)</a>', r).group(1): r
            for r in re.findall(r"<tr[^>]*>(.*?)</tr>", rest.group(1), re.DOTALL) if "</a>" in r}
    assert {"cheat_call_counting", "cheat_static_only"} <= set(rows)
    assert "2 static-gate errors, 26 failed audits" in rows["cheat_call_counting"]
    assert "2 static-gate errors" in rows["cheat_static_only"] and "clean" not in rows["cheat_static_only"]
    for name in ("cheat_call_counting", "cheat_static_only"):
        assert "static gate: 2 error findings, first call_counting at kernel.py:41" in rows[name]
    for key, svg in re.findall(r'<figure class="chart" data-chart="([^"]+)">(.*?)</figure>', kv8, re.DOTALL):
        assert "cheat_" not in svg, key
    assert "Per workload: " in kv8 and "ctl_r3_splitk</a> <span" in kv8[kv8.index("Per workload: "):]


LAYOUT_PROBE = """<script>
const rows = [];
for (const table of document.querySelectorAll("table.workloads")) {
  for (const tr of table.tBodies[0].rows) {
    rows.push({label: tr.cells[0].textContent, height: tr.getBoundingClientRect().height,
               line: parseFloat(getComputedStyle(tr.cells[0]).lineHeight)});
  }
}
const out = document.createElement("pre");
out.id = "layout-probe";
out.textContent = JSON.stringify(rows);
document.body.appendChild(out);
</script>"""


def workload_row_heights(page: Path, profile: Path) -> list[dict]:
    """Each per-workload table row's rendered height (px) and line height, measured in a 1400 px wide window."""
    probe = page.with_name(page.stem + "-probe.html")
    probe.write_text(page.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    try:
        dom = chromium(["--window-size=1400,2000", "--dump-dom", probe.resolve().as_uri()], profile)
    finally:
        probe.unlink()
    assert dom.returncode == 0, dom.stderr[-2000:]
    return json.loads(html_unescape(re.search(r'<pre id="layout-probe">(.*?)</pre>', dom.stdout, re.DOTALL).group(1)))


def html_unescape(s: str) -> str:
    import html

    return html.unescape(s)


def test_workload_rows_are_never_taller_than_two_lines(report, tmp_path):
    """A long message, an audit detail or a throttling note is cut in its cell (whole in the tooltip): no row of
    the per-workload table grows into a block of mostly blank cells."""
    pages = [report["index"], report["index"].parent / f"candidates/sub-{report['ids']['illegal']}.html",
             report["index"].parent / f"candidates/sub-{report['ids']['cheat_call_counting']}.html"]
    for i, page in enumerate(pages):
        rows = workload_row_heights(page, tmp_path / f"profile-layout-{i}")
        assert rows, page
        for r in rows:
            assert r["height"] <= 2 * r["line"] + 14, (page.name, r)


def test_screenshot_is_kept(report, tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    run = chromium([f"--screenshot={shot}", "--window-size=1400,2000", report["index"].resolve().as_uri()],
                   tmp_path / "profile-shot")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert png_size(shot) == (1400, 2000)
    assert shot.stat().st_size > 40_000  # a page of tables and plots, not a blank one


def test_candidate_page_renders_source_and_artifacts(report, tmp_path):
    page = report["index"].parent / f"candidates/sub-{report['ids']['ctl_r3_splitk']}.html"
    dom = chromium(["--dump-dom", page.resolve().as_uri()], tmp_path / "profile-cand")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert '<h3 id="source">Source</h3>' in html and "SPLIT_K=8" in html
    for kind in ("build_log", "sass", "profile", "transcript"):
        assert f'<h3 id="{kind}">' in html, kind
        assert f'href="../files/sub-{report["ids"]["ctl_r3_splitk"]}/{kind}.txt"' in html
    assert '<figure class="chart" data-chart="latency"><svg' in html
    shot = ARTIFACTS / "candidate.png"
    run = chromium([f"--screenshot={shot}", "--window-size=1400,2000", page.resolve().as_uri()],
                   tmp_path / "profile-cand-shot")
    assert run.returncode == 0 and shot.exists()
