"""benchmarks/gpu_check.sh's time budget and its continuation on the same host (BUDGET_S, DONE_DIR): a device lease
runs what fits, leaves the rest to the next call, and the next call skips what is done. Runs on CPU: the stages
named here need no GPU to be planned."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _check(out: Path, done: Path, stages: str, budget: int, **settings) -> str:
    """One run of the script; ``settings``: EST_<stage> estimates (ints) and other environment (strings)."""
    env = {**os.environ, "STAGES": stages, "BUDGET_S": str(budget), "DONE_DIR": str(done),
           "ARCHIVE": str(out.parent / "archive"),
           **{(f"EST_{k}" if isinstance(v, int) else k): str(v) for k, v in settings.items()}}
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(out)], env=env, cwd=ROOT,
                   capture_output=True, timeout=120)
    return (out / "run.log").read_text()


def test_stages_past_the_budget_are_deferred_and_done_ones_are_not_run_again(tmp_path):
    done = tmp_path / "done"
    first = _check(tmp_path / "first", done, "report", 60, report=100)
    assert "DEFERRED report (estimate 100 s, " in first  # does not fit: not started
    assert (tmp_path / "first" / "deferred.txt").read_text().startswith("DEFERRED report")
    assert not done.exists() or not any(done.iterdir())
    _check(tmp_path / "second", done, "report", 60, report=5)  # fits now: runs, and finishes
    assert sorted(p.name for p in done.iterdir()) == ["report"]
    third = _check(tmp_path / "third", done, "report", 60, report=5)
    assert "(stage report: done in an earlier call)" in third and "DEFERRED" not in third


def test_a_moe_prebuild_that_did_not_build_is_not_marked_done(tmp_path):
    """The prebuild marks itself done only when FlashInfer's module built (here there is no FlashInfer): the next
    call on the host continues the build instead of skipping it."""
    done = tmp_path / "done"
    log = _check(tmp_path / "out", done, "moe_prebuild", 60, CRUCIBLE_FLASHINFER_CACHE=str(tmp_path / "fi"))
    assert "===== MoE prebuild =====" in log
    assert not any(done.iterdir())
    assert (tmp_path / "out" / "moe_prebuild.log").exists()


def _carried(tmp_path: Path, name: str, text: str) -> Path:
    """A travel copy as KEEP_ARCHIVE=1 returns it: a tgz of the archive folder's contents."""
    folder = tmp_path / f"travel-{name}"
    folder.mkdir()
    (folder / "marker.txt").write_text(text)
    tgz = tmp_path / f"{name}.tgz"
    subprocess.run(["tar", "czf", str(tgz), "-C", str(folder), "."], check=True)
    return tgz


def test_a_carried_archive_seeds_an_empty_archive_and_never_overwrites_one(tmp_path):
    """CARRIED: the next host starts from the last host's archive (FlashInfer's modules, baselines); a host that
    already has an archive (a second call on the same host) keeps its own."""
    archive = tmp_path / "archive"
    _check(tmp_path / "first", tmp_path / "done", "nothing", 60, CARRIED=str(_carried(tmp_path, "a", "host A")))
    assert (archive / "marker.txt").read_text() == "host A"
    _check(tmp_path / "second", tmp_path / "done", "nothing", 60, CARRIED=str(_carried(tmp_path, "b", "host B")))
    assert (archive / "marker.txt").read_text() == "host A"


def test_the_probe_stage_sets_this_calls_submissions_beside_the_reads(tmp_path):
    """Without a GPU the probe itself exits with its reason; a stream_probe.json already there (a probe of this call)
    and the promoted stage's submission still give the comparison table, named after the submission."""
    import json

    out = tmp_path / "out"
    (out / "probe").mkdir(parents=True)
    (out / "probe" / "stream_probe.json").write_text(json.dumps({
        "meta": {"gpu": "GPU X"}, "contiguous": [{"definition": "d", "workload": "a", "us": 6.0}],
        "rows": [{"definition": "d", "workload": "a", "reader": "tma", "us": 8.0}]}))
    (out / "promoted_d.json").write_text(json.dumps({"definition": "d", "solution": "s", "workloads": [
        {"label": "a", "kernel_latency_ms": 0.012, "floor_ms": 0.004}]}))
    log = _check(out, tmp_path / "done", "probe", 600, PROBE_DEFINITIONS="gqa_paged_decode_h32_kv4_d128_ps64")
    assert "===== stream probe =====" in log
    assert "stream probe rc 1" in log  # no CUDA GPU here: the probe says so and stops
    assert "needs a CUDA GPU" in (out / "probe.log").read_text()
    table = (out / "probe" / "decode_vs_read_promoted_d.md").read_text()
    assert "| a | 12.00 (33%) | 6.00 (67%) | 8.00 (50%, tma) | 1.50x |" in table
