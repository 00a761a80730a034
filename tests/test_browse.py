"""`harness browse`: the review views and full-text search (checked with sqlite directly), the migration
that adds them, and datasette serving them (when datasette is installed)."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import time
import urllib.request

import pytest
from click.testing import CliRunner

import harness.archive.database as archive_mod
from harness.archive.database import ARCHIVE_DB, Archive
from harness.archive.views import (CONTROLLER_VIEWS, VIEWS, add_artifact, datasette_command, datasette_metadata,
                                   fts_query, m005_review_views, search_documents, sync_documents)

from support import KV8_PS1
from report_archive import RUN, SPEND, build_h200_archive, ensure_review_migration, without_review_migration


@pytest.fixture
def h200(tmp_path, monkeypatch):
    ensure_review_migration(monkeypatch)
    built = build_h200_archive(tmp_path / "archive")
    sync_documents(built["archive"].db, built["archive"].blob_dir)
    return built


def rows(archive: Archive, sql: str, params=()) -> list[dict]:
    conn = sqlite3.connect(archive.folder / ARCHIVE_DB)  # as datasette (or any reader) sees the file
    conn.row_factory = sqlite3.Row
    return [dict(r) for r in conn.execute(sql, params)]


# -- the migration ---------------------------------------------------------------------------------------------


def test_migration_adds_tables_views_and_the_index(h200):
    a = h200["archive"]
    names = set(a.db.table_names())
    assert {"artifacts", "documents", "documents_fts"} <= names
    assert set(VIEWS) | set(CONTROLLER_VIEWS) <= set(a.db.view_names())
    applied = [r["name"] for r in a.db["_migrations"].rows]
    assert applied.count("m005_review_views") == 1
    assert archive_mod.migrate(a.db) == []


def test_migration_indexes_an_existing_archive(tmp_path, monkeypatch):
    """An archive from before the migration gets its sources and logs indexed when it is next opened."""
    without_review_migration(monkeypatch)
    built = build_h200_archive(tmp_path / "old", controller=False)
    assert "documents" not in built["archive"].db.table_names()
    ensure_review_migration(monkeypatch)
    a = Archive(tmp_path / "old")
    kinds = dict(a.db.execute("select kind, count(*) from documents group by kind").fetchall())
    assert kinds["source"] == 8  # one file per solution
    assert kinds["log"] == 2 + 14  # the crash logs and the failed build's
    assert search_documents(a.db, "illegal memory access")[0]["kind"] == "log"


def test_a_failing_migration_leaves_no_review_tables(tmp_path, monkeypatch):
    without_review_migration(monkeypatch)
    Archive(tmp_path / "a")

    def m005_review_views_broken(db):
        m005_review_views(db)
        raise RuntimeError("half way")

    monkeypatch.setattr(archive_mod, "MIGRATIONS", [*archive_mod.MIGRATIONS, m005_review_views_broken])
    with pytest.raises(RuntimeError):
        Archive(tmp_path / "a")
    conn = sqlite3.connect(tmp_path / "a" / ARCHIVE_DB)
    left = {r[0] for r in conn.execute("select name from sqlite_master")}
    assert not left & {"artifacts", "documents", "documents_fts", "submission_overview"}


# -- documents and search ------------------------------------------------------------------------------------


def test_documents_hold_sources_logs_transcripts_profiles_and_artifacts(h200):
    a = h200["archive"]
    kinds = dict(a.db.execute("select kind, count(*) from documents group by kind").fetchall())
    assert kinds == {"source": 8, "log": 16, "transcript": 4, "profile": 4, "build_log": 4, "sass": 4}
    assert sync_documents(a.db, a.blob_dir) == 0  # idempotent
    sub = h200["ids"]["ctl_r3_splitk"]
    add_artifact(a, sub, "sass", "LDG.E.128 96\nHMMA.16816.F32.BF16 64\n", "SASS after the fix")
    assert sync_documents(a.db, a.blob_dir) == 1
    with pytest.raises(ValueError):
        add_artifact(a, sub, "screenshot", "x")


def test_full_text_search(h200):
    a, ids = h200["archive"], h200["ids"]
    hits = search_documents(a.db, "illegal memory access")
    assert {h["kind"] for h in hits} == {"log", "source"}  # the crash logs, and the example's docstring
    assert {h["submission_id"] for h in hits if h["kind"] == "log"} == {ids["illegal"]}
    assert {h["title"] for h in hits if h["kind"] == "source"} == {"example_illegal_address / kernel.py"}
    assert "[illegal]" in hits[0]["snippet"]
    assert {h["kind"] for h in search_documents(a.db, "illegal memory access", kinds=["log"])} == {"log"}
    src = search_documents(a.db, "SPLIT_K", kinds=["source"])
    assert [h["title"] for h in src] == ["ctl_r3_splitk / kernel.py"]
    # stemming: 'spill' finds the build log's 'spills'; punctuation is quoted, not FTS syntax
    assert {h["kind"] for h in search_documents(a.db, "spill")} >= {"build_log", "sass"}
    assert search_documents(a.db, "maxnreg=32")[0]["kind"] == "log"
    assert search_documents(a.db, "LDG.E.128", kinds=["sass"])
    assert {h["kind"] for h in search_documents(a.db, "split-k")} >= {"transcript"}
    assert search_documents(a.db, "dram__throughput*", kinds=["profile"])  # a prefix search
    assert search_documents(a.db, "   ") == []
    assert fts_query('say "hi" tl.dot*') == '"say" """hi""" "tl.dot"*'


# -- the views --------------------------------------------------------------------------------------------


def test_submission_overview(h200):
    ids = h200["ids"]
    by_id = {r["submission_id"]: r for r in rows(h200["archive"], "select * from submission_overview")}
    best = by_id[ids["ctl_r3_splitk"]]
    assert (best["status"], best["workloads"], best["passed"], best["failed_audits"]) == ("PASSED", 14, 14, 0)
    assert best["score_vs_reference"] == pytest.approx(60.0, abs=0.1)
    assert best["mean_fraction_of_floor"] == pytest.approx(0.63, abs=0.01)
    assert set(best["artifacts"].split(", ")) == {"build_log", "sass"}
    bad = by_id[ids["ctl_r4_exp2_fastmath"]]
    assert (bad["status"], bad["passed"], bad["failed_audits"], bad["score_vs_reference"]) == (
        "INCORRECT_NUMERICAL", 11, 3, 0.0)
    assert by_id[ids["illegal"]]["mean_fraction_of_floor"] is None


def test_evaluation_details_and_audits(h200):
    a, ids = h200["archive"], h200["ids"]
    ev = rows(a, "select * from evaluation_details where submission_id = ? and workload_label = ?",
              [ids["triton"], "uniform_b64_kv8192"])[0]
    assert ev["latency_ms"] == 0.522 and ev["status"] == "PASSED"
    assert ev["flashinfer_official_ms"] == pytest.approx(0.522 * 1.99)
    assert ev["speedup_vs_flashinfer_kernel"] == pytest.approx(0.988)
    assert ev["fraction_of_floor"] == pytest.approx(0.97, abs=0.01)
    throttled = rows(a, "select workload_label from evaluation_details where submission_id = ? and throttled",
                     [ids["triton"]])
    assert [r["workload_label"] for r in throttled] == ["uniform_b1_kv2048"]
    failed = rows(a, "select * from audits where passed = 0")
    assert {(r["solution_name"], r["audit"]) for r in failed} == {("ctl_r4_exp2_fastmath", "output_aliasing")}
    assert len(failed) == 3
    plaus = rows(a, "select count(*) as n from audits where audit = 'roofline_plausibility' and passed = 1")
    assert plaus[0]["n"] > 0
    best = {r["workload_label"]: r for r in rows(a, "select * from best_per_workload where definition = ?", [KV8_PS1])}
    assert best["uniform_b1_kv8192"]["solution_name"] == "ctl_r3_splitk"
    assert best["uniform_b1_kv8192"]["best_latency_ms"] == pytest.approx(0.2999 * 0.092)


def test_controller_views(h200):
    a = h200["archive"]
    cands = {r["solution_name"]: r for r in rows(a, "select * from candidate_overview where run_id = ?", [RUN])}
    assert cands["ctl_r3_splitk"]["verdict"] == "PROMOTED"
    assert cands["ctl_r3_splitk"]["submission_status"] == "PASSED"
    assert cands["ctl_r2_warps8_bad"]["candidate_status"] == "COMPILE_ERROR"
    assert cands["ctl_r2_cuda_graphs"]["candidate_status"] == "REJECTED"  # the provider's proposal, refused
    assert cands["ctl_r2_cuda_graphs"]["submission_id"] is None
    assert cands["ctl_r1_stages3"]["verdict"] == "REJECTED"
    assert cands["ctl_r1_stages3"]["mean_latency_ms"] == pytest.approx(0.4404 * 0.99, abs=1e-3)
    rounds = {r["round"]: r for r in rows(a, "select * from round_overview where run_id = ?", [RUN])}
    assert sorted(rounds) == [1, 2, 3, 4]
    assert (rounds[2]["candidates"], rounds[2]["passed"], rounds[2]["promoted"]) == (3, 1, 1)
    assert rounds[3]["best_mean_latency_ms"] < rounds[2]["best_mean_latency_ms"]
    assert sum(r["cost_usd"] for r in rounds.values()) == pytest.approx(sum(SPEND.values()))
    tr = rows(a, "select * from transcripts order by round")
    assert [t["round"] for t in tr] == [1, 2, 3, 4]
    assert tr[2]["provider"] == "anthropic" and tr[2]["candidates"] == "ctl_r3_splitk" and "split-k" in tr[2]["text"]


# -- the command and datasette ----------------------------------------------------------------------------


def test_browse_search_option(h200):
    from harness.report_cli import browse

    result = CliRunner().invoke(browse, ["--archive", str(h200["archive"].folder), "--search", "illegal memory"])
    assert result.exit_code == 0, result.output
    assert "example_illegal_address" in result.output and "log" in result.output


def test_browse_needs_the_migration(tmp_path, monkeypatch):
    from harness.report_cli import browse

    without_review_migration(monkeypatch)
    Archive(tmp_path / "plain")
    result = CliRunner().invoke(browse, ["--archive", str(tmp_path / "plain"), "--no-open"])
    assert result.exit_code == 2 and "m005_review_views" in result.output


def test_datasette_metadata_and_command(tmp_path):
    meta = datasette_metadata("archive")
    tables = meta["databases"]["archive"]["tables"]
    assert set(VIEWS) | set(CONTROLLER_VIEWS) <= set(tables)
    assert ":q" in meta["databases"]["archive"]["queries"]["search"]["sql"]
    cmd = datasette_command(tmp_path / "archive.db", tmp_path / "m.json", port=8123, open_browser=False)
    assert cmd[1:4] == ["-m", "datasette", "serve"] and "--open" not in cmd and "8123" in cmd
    assert "--open" in datasette_command("a.db", "m.json")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:  # loopback only
        return json.loads(r.read())


def test_datasette_serves_the_views_and_search(h200, tmp_path):
    pytest.importorskip("datasette")
    a = h200["archive"]
    meta = tmp_path / "metadata.json"
    meta.write_text(json.dumps(datasette_metadata("archive")))
    port = _free_port()
    proc = subprocess.Popen(datasette_command(a.folder / ARCHIVE_DB, meta, port=port, open_browser=False),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/archive"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                got = _get(f"{base}/submission_overview.json?_shape=array")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode() if proc.poll() is not None else ""
                    pytest.fail(f"datasette did not come up: {out[-2000:]}")
                time.sleep(0.3)
        assert {r["solution_name"] for r in got} >= {"ctl_r3_splitk", "example_illegal_address"}
        hits = _get(f"{base}/search.json?_shape=array&q=illegal&kind=log")
        assert hits and all(h["kind"] == "log" for h in hits)
        fts = _get(f"{base}/documents.json?_shape=array&_search=SPLIT_K&_col=title")
        assert {h["title"] for h in fts} >= {"ctl_r3_splitk / kernel.py"}
        rounds = _get(f"{base}/round_overview.json?_shape=array")
        assert len(rounds) == 4
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
