"""`harness submit --executor ray` on a two-node Ray cluster on this machine (one CPU each, so one CPU lane per
node): every submission archived once by the driver, a node lost mid-evaluation (run again on the other lane), a
driver killed with SIGKILL and resumed. The local executor never imports ray (checked without Ray installed too)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support import ROOT, TORCH_CANDIDATE, solution_dict

try:
    import ray
    from ray import cluster_utils
except ImportError:  # the tests below skip; the local executor's test runs either way
    ray = None
needs_ray = pytest.mark.skipif(ray is None, reason="the `ray` extra is not installed (scripts/setup.sh --test)")

WORKLOAD = "tiny_b2_t40"
# The candidate sleeps in every call, so an evaluation lasts long enough to be cut short on purpose.
SLOW_CANDIDATE = TORCH_CANDIDATE.replace("    batch, heads, dim = q.shape",
                                         "    import time\n    time.sleep(SLEEP_S)\n    batch, heads, dim = q.shape")


def slow_solution(name: str, sleep_s: float) -> dict:
    return solution_dict(SLOW_CANDIDATE.replace("SLEEP_S", repr(sleep_s)), name=name)


def write(folder: Path, data: dict) -> Path:
    path = folder / f"{data['name']}.json"
    path.write_text(json.dumps(data))
    return path


def harness(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def rows(archive: Path) -> list[tuple]:
    con = sqlite3.connect(archive / "archive.db")
    try:
        return con.execute("select s.solution_name, s.status, count(e.id) from submissions s "
                           "left join evaluations e on e.submission_id = s.id group by s.id order by s.id").fetchall()
    except sqlite3.OperationalError:  # the driver is still creating the tables
        return []
    finally:
        con.close()


def test_local_submit_never_imports_ray(tmp_path, tiny_dataset_root):
    sol = write(tmp_path, solution_dict(TORCH_CANDIDATE))
    (tmp_path / "archive").mkdir()
    code = ("import sys\nfrom harness.cli import main\n"
            f"try:\n    main(['submit', {str(sol)!r}, '--archive', {str(tmp_path / 'archive')!r}, '--dataset', "
            f"{str(tiny_dataset_root)!r}, '-w', {WORKLOAD!r}, '--json'])\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'ray' not in sys.modules, 'the local executor imported ray'\nprint('NO_RAY')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 0 and "NO_RAY" in proc.stdout, proc.stdout + proc.stderr


def test_cluster_progress_shows_lanes_the_queue_and_what_is_finished():
    import io

    from rich.console import Console

    from harness.pipeline.ray_progress import ClusterProgress

    console = Console(file=io.StringIO(), width=160, force_terminal=False)
    progress = ClusterProgress(console)
    for kind, data in [("lanes", {"lanes": 2, "gpu": True, "queued": 3}),
                       ("lane_ready", {"lane": "lane0", "host": "gpu-a", "hardware": "NVIDIA H200"}),
                       ("lane_ready", {"lane": "lane1", "host": "gpu-b", "hardware": "NVIDIA H200"}),
                       ("assigned", {"lane": "lane0", "solution": "s0", "attempt": 1, "queued": 2}),
                       ("assigned", {"lane": "lane1", "solution": "s1", "attempt": 1, "queued": 1}),
                       ("lane_lost", {"lane": "lane1", "reason": "ActorDiedError: node gone", "requeued": "s1"}),
                       ("finished", {"lane": "lane0", "solution": "s0", "status": "PASSED", "done": 1, "queued": 1}),
                       ("assigned", {"lane": "lane0", "solution": "s1", "attempt": 2, "queued": 0})]:
        progress(kind, data)
    console.print(progress._render())
    text = console.file.getvalue()
    assert "ray: 2 GPU lane(s) for 3 solution(s)" in text
    assert "lane1 on gpu-b lost (ActorDiedError: node gone); s1 queued again" in text
    assert "lanes busy 1/1, queued 0, finished 1/3" in text and "s1 (attempt 2)" in text


@pytest.fixture(scope="module")
def cluster():
    """A head node and a worker node of one CPU each; this process connects as a driver."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a cluster of this test only, on this machine
    # num_gpus=0: CPU lanes on any host (on a GPU host both nodes would otherwise claim the same GPUs)
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0,
                                                                    "include_dashboard": False})
    worker = c.add_node(num_cpus=1, num_gpus=0)
    c.wait_for_nodes()
    c.worker = worker
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


@needs_ray
def test_two_lanes_archive_every_submission_once_sealed(tmp_path, cluster, tiny_dataset_root):
    archive = tmp_path / "archive"
    archive.mkdir()
    files = [write(tmp_path, solution_dict(TORCH_CANDIDATE, name=f"c{i}")) for i in range(3)]
    proc = harness("submit", *map(str, files), "--executor", "ray", "--address", cluster.address, "--archive",
                   str(archive), "--dataset", str(tiny_dataset_root), "-w", WORKLOAD, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ray: 2 CPU lane(s) for 3 solution(s)" in proc.stderr
    assert sorted(rows(archive)) == [("c0", "PASSED", 1), ("c1", "PASSED", 1), ("c2", "PASSED", 1)]
    listed = json.loads(harness("list", "--archive", str(archive), "--json").stdout)
    assert {r["seal_state"] for r in listed} == {"sealed"}
    shown = harness("show", "1", "--archive", str(archive))
    assert "ray lane" in shown.stdout and "attempt 1" in shown.stdout, shown.stdout
    again = harness("submit", *map(str, files), "--executor", "ray", "--address", cluster.address, "--archive",
                    str(archive), "--dataset", str(tiny_dataset_root), "-w", WORKLOAD, "--resume")
    assert again.returncode == 0 and "nothing to do" in again.stderr and len(rows(archive)) == 3


@needs_ray
def test_a_driver_killed_mid_run_resumes_with_nothing_lost_or_duplicated(tmp_path, cluster, tiny_dataset_root):
    archive = tmp_path / "archive"
    archive.mkdir()
    fast, slow = write(tmp_path, slow_solution("fast", 0.0)), write(tmp_path, slow_solution("slow", 1.0))
    args = ["submit", str(fast), str(slow), "--executor", "ray", "--address", cluster.address, "--archive",
            str(archive), "--dataset", str(tiny_dataset_root), "-w", WORKLOAD]
    driver = subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None:
        if (archive / "archive.db").exists() and rows(archive):
            break
        time.sleep(0.2)
    assert driver.poll() is None, "the driver finished before it could be killed"
    os.kill(driver.pid, signal.SIGKILL)  # the slow one is still being evaluated on the other lane
    driver.wait()
    assert rows(archive) == [("fast", "PASSED", 1)]  # whole or absent: nothing RUNNING, nothing half-written

    resumed = harness(*args, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "fast [" in resumed.stderr and "already archived, skipped" in resumed.stderr
    assert rows(archive) == [("fast", "PASSED", 1), ("slow", "PASSED", 1)]


@needs_ray
def test_a_node_lost_mid_evaluation_is_run_again_on_the_other_lane(tmp_path, cluster, tiny_dataset_root):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.pipeline.ray_executor import RaySettings, submit_on_ray
    from harness.data.schema import Solution, parse_model

    archive = Archive(tmp_path / "archive")
    solutions = [parse_model(Solution, slow_solution(f"s{i}", 0.5), ".") for i in range(2)]
    events: list[tuple[str, dict]] = []
    worker_node = cluster.worker.node_id

    def on_event(kind: str, data: dict) -> None:
        events.append((kind, data))
        if kind == "assigned" and data["node_id"] == worker_node and data["attempt"] == 1:
            # mid-evaluation: the lane has started its submission when its node goes
            threading.Timer(2.0, cluster.remove_node, [cluster.worker]).start()

    ray.init(address=cluster.address, log_to_driver=False)
    try:
        results = submit_on_ray(solutions, Dataset(tiny_dataset_root), archive, SubmitOptions(workloads=[WORKLOAD]),
                                RaySettings(cpu_lanes=2), on_event=on_event)
    finally:
        ray.shutdown()
    lost = [d for k, d in events if k == "lane_lost"]
    assert len(lost) == 1 and lost[0]["requeued"] in ("s0", "s1"), events
    assert sorted(r.status for r in results) == ["PASSED", "PASSED"]
    assert sorted(rows(tmp_path / "archive")) == [("s0", "PASSED", 1), ("s1", "PASSED", 1)]
    rerun = next(r for r in results if r.solution == lost[0]["requeued"])
    lane = archive.submission(rerun.submission_id)["options"]["lane"]
    assert lane["attempt"] == 2 and lane["node_id"] != worker_node
    assert all(archive.verify_seal(r.submission_id).state == "sealed" for r in results)


@needs_ray
def test_a_solution_whose_lanes_all_die_is_archived_as_harness_error(tmp_path, cluster, tiny_dataset_root):
    """No second chance here (retries=0): the lost evaluation is archived, sealed, with the reason."""
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.pipeline.ray_executor import RaySettings, submit_on_ray
    from harness.data.schema import Solution, parse_model

    node = cluster.add_node(num_cpus=1, num_gpus=0)  # the node the previous test removed, back
    cluster.wait_for_nodes()
    archive = Archive(tmp_path / "archive")
    solutions = [parse_model(Solution, slow_solution(f"d{i}", 0.5), ".") for i in range(2)]

    def on_event(kind: str, data: dict) -> None:
        if kind == "assigned" and data["node_id"] == node.node_id:
            threading.Timer(2.0, cluster.remove_node, [node]).start()

    ray.init(address=cluster.address, log_to_driver=False)
    try:
        results = submit_on_ray(solutions, Dataset(tiny_dataset_root), archive, SubmitOptions(workloads=[WORKLOAD]),
                                RaySettings(cpu_lanes=2, retries=0), on_event=on_event)
    finally:
        ray.shutdown()
    assert sorted(r.status for r in results) == ["HARNESS_ERROR", "PASSED"]
    failed = next(r for r in results if r.status == "HARNESS_ERROR")
    row = archive.submission(failed.submission_id)
    assert "its Ray lane died under it 1 time(s)" in row["message"] and row["evaluations"] == []
    assert archive.verify_seal(failed.submission_id).state == "sealed"
    assert len(archive.submissions()) == 2
