"""`controller loop --executor ray`: a run's candidates evaluated on a Ray lane (a local Ray instance, one CPU lane),
each one archived by the driver with the lane it ran on, and the run's report as with the local executor."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from support import KV8_PS1

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (scripts/setup.sh --test)")

WORKLOAD = "tiny_b2_t40"


def test_loop_on_a_ray_lane_archives_every_candidate_with_its_lane(tiny_dataset_root, tmp_path, monkeypatch):
    from controller.cli import main
    from controller.store import Store
    from harness.archive.database import Archive

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setitem(os.environ, "RAY_AUTH_MODE", "disabled")  # a private instance of this test only
    archive = tmp_path / "archive"
    archive.mkdir()
    ray.init(num_cpus=1, num_gpus=0, log_to_driver=False, include_dashboard=False)  # a CPU lane on any host
    try:
        result = CliRunner().invoke(main, ["loop", "--definition", KV8_PS1, "--rounds", "1", "--candidates", "1",
                                           "--archive", str(archive), "--dataset", str(tiny_dataset_root),
                                           "--workloads", WORKLOAD, "--timeout-s", "120", "--no-profile",
                                           "--executor", "ray", "--json"])
    finally:
        ray.shutdown()
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "DONE" and report["timing"] == "unavailable: no GPU on this host"
    assert [r["statuses"] for r in report["rounds"]] == [{"PASSED": 1}, {"PASSED": 1}]
    store, db = Store(Archive(archive)), Archive(archive)
    assert store.submission_count() == 2
    candidates = store.candidates(report["run_id"])
    assert len(candidates) == 2 and all(c["submission_id"] for c in candidates)
    for c in candidates:
        row = db.submission(c["submission_id"])
        assert row["options"]["lane"]["executor"] == "ray" and row["options"]["lane"]["attempt"] == 1
        assert db.verify_seal(c["submission_id"]).state == "sealed"
