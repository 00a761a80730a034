"""A finished submission moved whole from a lane's private archive into the driver's (harness/archive/transfer.py):
every row and blob once, new ids, the lane recorded, and sealed again with the driver's key."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from harness.archive.database import Archive
from harness.archive.transfer import export_submission, finished_keys, import_submission, record_failure
from harness.cli import main
from harness.archive.views import add_artifact

SOLUTION = {"name": "cand", "definition": "defn", "author": "tests",
            "spec": {"language": "python", "entry_point": "kernel.py::run"},
            "sources": [{"path": "kernel.py", "content": "def run(): pass\n"}]}
LANE = {"executor": "ray", "lane": "lane3", "attempt": 2, "actor_id": "a" * 32, "node_id": "n" * 56, "host": "gpu-7",
        "gpu_ids": ["5"]}


def finished_submission(archive: Archive, workloads=("w1", "w2")) -> int:
    env_id = archive.put_environment({"host": "gpu-7", "hardware": "NVIDIA H200", "driver": "575.1", "cuda": "12.9"})
    archive.put_solution(SOLUTION, "hash1")
    sub = archive.start_submission("hash1", "cand", "defn", "tests", {"workloads": list(workloads),
                                                                      "audit_level": "fast"}, env_id)
    for i, w in enumerate(workloads):
        log = archive.put_blob(f"log of {w}", "log")
        archive.add_evaluation({"submission_id": sub, "definition": "defn", "workload_uuid": w, "workload_label": w,
                                "status": "PASSED", "latency_ms": 0.1 + i, "log_blob": log, "extra": {"i": i},
                                "environment_id": env_id},
                               [{"role": "candidate", "trial": 0, "median_ms": 0.1 + i, "samples": [0.1, 0.2]}])
    add_artifact(archive, sub, "build_log", "built")
    archive.finish_submission(sub, "PASSED", "", {"vs_reference": 2.0})
    return sub


def test_a_submission_moves_whole_and_is_sealed_with_the_drivers_key(tmp_path):
    lane, driver = Archive(tmp_path / "lane"), Archive(tmp_path / "driver")
    finished_submission(driver, workloads=("other",))  # the driver's ids are ahead of the lane's
    sub = finished_submission(lane)
    assert lane.verify_seal(sub).state == "sealed"
    bundle = export_submission(lane, sub)
    assert bundle.seal_state == "sealed" and len(bundle.blobs) == 4  # solution, two logs, the build log

    new_id, evaluation_ids = import_submission(driver, bundle, LANE)
    assert new_id == 2 and sorted(evaluation_ids) == [1, 2] and sorted(evaluation_ids.values()) == [2, 3]
    assert driver.verify_seal(new_id).state == "sealed"  # the lane's key is not the driver's: sealed again
    assert (tmp_path / "lane" / "seal.key").read_bytes() != (tmp_path / "driver" / "seal.key").read_bytes()
    row = driver.submission(new_id)
    assert row["status"] == "PASSED" and row["options"]["lane"] == LANE
    assert [e["workload_uuid"] for e in row["evaluations"]] == ["w1", "w2"]
    assert driver.get_blob(row["evaluations"][1]["log_blob"]) == b"log of w2"
    con = sqlite3.connect(tmp_path / "driver" / "archive.db")
    assert con.execute("select count(*) from timing_samples t join evaluations e on e.id = t.evaluation_id "
                       "where e.submission_id = ?", [new_id]).fetchone()[0] == 2
    assert con.execute("select count(*) from artifacts where submission_id = ?", [new_id]).fetchone()[0] == 1
    # a row changed behind the driver's back after the import reads as modified, as for any submission
    con.execute("update evaluations set status = 'FAILED' where submission_id = ?", [new_id])
    con.commit()
    assert driver.verify_seal(new_id).state == "modified"


def test_harness_show_names_the_lane_and_the_hosts_gpu_driver_and_toolchain(tmp_path):
    lane, driver = Archive(tmp_path / "lane"), Archive(tmp_path / "driver")
    new_id, _ = import_submission(driver, export_submission(lane, finished_submission(lane)), LANE)
    shown = CliRunner().invoke(main, ["show", str(new_id), "--archive", str(tmp_path / "driver")])
    assert shown.exit_code == 0, shown.output
    assert "host: gpu-7; driver 575.1, CUDA 12.9; ray lane3" in shown.output
    assert "GPU 5, attempt 2" in shown.output and "NVIDIA H200" in shown.output


def test_a_modified_lane_submission_is_not_blessed_and_running_ones_are_refused(tmp_path):
    lane, driver = Archive(tmp_path / "lane"), Archive(tmp_path / "driver")
    finished_submission(driver)  # the driver has a seal key (without one, nothing is verifiable there)
    sub = finished_submission(lane)
    con = sqlite3.connect(tmp_path / "lane" / "archive.db")
    con.execute("update submissions set message = 'edited' where id = ?", [sub])
    con.commit()
    new_id, _ = import_submission(driver, export_submission(lane, sub), LANE)
    assert driver.verify_seal(new_id).state == "modified"
    running = lane.start_submission("hash1", "cand", "defn", "tests", {}, None)
    with pytest.raises(ValueError, match="only a finished submission"):
        import_submission(driver, export_submission(lane, running))


def test_finished_keys_are_what_resume_skips(tmp_path):
    archive = Archive(tmp_path / "a")
    finished_submission(archive)
    failed = record_failure(archive, SOLUTION, "hash2", "its Ray lane died 2 times", {"workloads": ["w1"]})
    assert archive.submission(failed)["status"] == "HARNESS_ERROR"
    assert archive.verify_seal(failed).state == "sealed"
    assert finished_keys(archive) == {("hash1", "defn", ("w1", "w2"), "fast")}  # a HARNESS_ERROR is run again
    assert json.loads(json.dumps(sorted(finished_keys(archive))))  # plain data
