"""The wall around candidate code: hostile candidates through `harness submit`, limits, degrading loudly.

Every hostile candidate keeps the honest example kernel and adds hostile steps before its first call; the
log says per step whether it ESCAPED or was BLOCKED. Without the sandbox (``--no-sandbox``, the old worker)
each of these tests fails: the steps escape (``test_without_the_sandbox_the_steps_escape`` shows it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

import harness.sandbox.isolation as sandbox_mod
from harness.archive.database import Archive
from harness.cli import main as harness_cli
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.sandbox.runner import LOG_LIMIT, LogSink
from harness.sandbox.isolation import (UID_BASE, MountPlan, SandboxPolicy, host_memory_bytes, init_script,
                                      load_sandbox_policy, memory_for_host,
                                      visible_paths, worker_uid)
from harness.sandbox.stale import remove_stale
from harness.data.schema import Solution
from sandbox_attacks import hostile_solution, outcomes, plant_key, revoke_key, write_solution
from support import ROOT

needs_sandbox = pytest.mark.skipif(not sandbox_mod.probe()[0],
                                   reason=f"this host gives no sandbox: {sandbox_mod.probe()[1]}")
CANARY_PREFIX = "sk-ant-canary-"  # what the attacker knows to look for; the rest of the key it must steal
CANARY = CANARY_PREFIX + uuid.uuid4().hex
# Steps the wall must stop outright, and steps that succeed inside it (a file in its private /tmp, a child
# process) but must leave nothing once the evaluation ends.
BLOCKED_STEPS = ["environ_secrets", "cmdline_archive", "tamper_archive", "read_blobs", "other_candidate",
                 "ptrace", "proc_mem", "poison_bytecode", "keyring", "kill_parent"]
CONTAINED_STEPS = ["write_escape", "fork_sleeper", "setsid_sleeper"]
READ_ONLY_STEPS = BLOCKED_STEPS[:-1] + CONTAINED_STEPS + ["kill_parent"]


def sandbox_uids(harness_pids: list[int]) -> set[int]:
    """The user ids the sandbox gives these harness processes' first 64 workers (`worker_uid`). A worker cannot change
    its user id, so an escaped one keeps it; another harness on the host (a second CI job, a user's run) has its own
    and is not taken for an escape."""
    return {worker_uid(pid, k) for pid in harness_pids for k in range(64)}


def sandbox_processes(harness_pids: list[int] | None = None) -> list[int]:
    """Processes on this host running as a sandbox user id of these harnesses (default: this test process's
    in-process sessions); none may outlive an evaluation."""
    uids = sandbox_uids(harness_pids if harness_pids is not None else [os.getpid()])
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = int(next(line for line in status.read_text().splitlines() if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if uid in uids:
            found.append(int(status.parent.name))
    return found


def sandbox_processes_gone(harness_pids: list[int] | None = None, timeout_s: float = 10.0) -> bool:
    """The kernel kills a dead namespace's processes asynchronously: give it a moment."""
    deadline = time.time() + timeout_s
    while sandbox_processes(harness_pids) and time.time() < deadline:
        time.sleep(0.1)
    return sandbox_processes(harness_pids) == []


def marked_processes(marker: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            pass
    return pids


def cli_submit(solution: Path, archive: Path, dataset: Path, *extra: str, env: dict | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """`harness submit` in its own process, as a user runs it; the result carries that harness's ``pid`` (its workers'
    user ids come from it: ``sandbox_uids``)."""
    with subprocess.Popen([sys.executable, "-m", "harness", "submit", str(solution), "--archive", str(archive),
                           "--dataset", str(dataset), "-w", "tiny_b2_t40", "--json", *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env={**os.environ, "ANTHROPIC_API_KEY": CANARY, "OPENAI_API_KEY": CANARY, **(env or {})}) \
            as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.pid = proc.pid
    return done


def everything_archived(archive: Path) -> bytes:
    data = b""
    for path in archive.rglob("*"):
        if path.is_file() and path.name != "seal.key":
            data += path.read_bytes()
    return data


@pytest.fixture(scope="module")
def hostile_run(tiny_dataset_root, tmp_path_factory):
    """One `harness submit` (a separate process, as a user runs it) of a candidate that tries every read-only
    escape, with the harness's API keys set and an earlier failed verdict in the archive."""
    tmp = tmp_path_factory.mktemp("hostile")
    archive_dir = tmp / "archive"
    archive = Archive(archive_dir)
    archive.put_solution(hostile_solution("earlier", []), "earlier-hash")
    earlier = archive.start_submission("earlier-hash", "earlier", "d", "a", {}, None)
    archive.finish_submission(earlier, "RUNTIME_ERROR", "it crashed")
    other = Path(tempfile.mkdtemp(prefix=f"crucible-candidate-{os.getpid()}-"))
    (other / "secret.txt").write_text("other-candidate-" + CANARY)
    escape = Path(tempfile.gettempdir()) / f"crucible-escape-{uuid.uuid4().hex}" / "escape.txt"
    marker = "crucible-marker-" + uuid.uuid4().hex
    key = plant_key(marker, ("earlier-candidate-" + CANARY).encode())  # a key left readable by every user id
    sol = write_solution(tmp, "hostile", READ_ONLY_STEPS, canary=CANARY_PREFIX, archive=str(archive_dir),
                         other_secret=str(other / "secret.txt"), escape=str(escape), marker=marker,
                         key_marker=marker)
    bytecode = tmp / "bytecode"  # the harness's bytecode folder, named so it is used whatever the installation
    proc = cli_submit(sol, archive_dir, tiny_dataset_root, env={"CRUCIBLE_BYTECODE_CACHE": str(bytecode)})
    time.sleep(0.5)
    yield {"proc": proc, "archive_dir": archive_dir, "earlier": earlier, "escape": escape, "marker": marker,
           "other": other, "bytecode": bytecode}
    revoke_key(key)
    for pid in marked_processes(marker):  # only where the wall failed
        os.kill(pid, signal.SIGKILL)
    import shutil

    shutil.rmtree(other, ignore_errors=True)
    shutil.rmtree(escape.parent, ignore_errors=True)


def _result(run) -> dict:
    assert run["proc"].returncode in (0, 1), run["proc"].stderr[-3000:]
    return json.loads(run["proc"].stdout)


def _first_log(run) -> str:
    archive = Archive(run["archive_dir"])
    sub = _result(run)["submission_id"]
    ev = archive.submission(sub)["evaluations"][0]
    return archive.get_blob(ev["log_blob"]).decode(errors="replace") if ev["log_blob"] else ""


@needs_sandbox
def test_the_harness_survives_and_judges_the_honest_kernel(hostile_run):
    result = _result(hostile_run)
    assert result["sandbox"] == "full"
    assert [w["status"] for w in result["workloads"]] == ["PASSED"]


@needs_sandbox
@pytest.mark.parametrize("step", BLOCKED_STEPS)
def test_every_hostile_step_is_blocked(hostile_run, step):
    seen = outcomes(_first_log(hostile_run))
    assert step in seen, f"{step} never ran: {seen}"
    assert seen[step].startswith("BLOCKED"), seen[step]


@needs_sandbox
def test_no_secret_reaches_the_archive_or_the_output(hostile_run):
    assert CANARY not in hostile_run["proc"].stdout + hostile_run["proc"].stderr
    assert CANARY.encode() not in everything_archived(hostile_run["archive_dir"])


@needs_sandbox
def test_the_harness_bytecode_is_read_and_never_written_by_a_candidate(hostile_run):
    """The harness filled its bytecode folder (torch's modules among them); the candidate saw the folder (its step
    reached it) and could not write a byte into it."""
    _result(hostile_run)
    stored = list(hostile_run["bytecode"].rglob("*.pyc"))
    assert any("torch" in p.parts for p in stored), len(stored)
    seen = outcomes(_first_log(hostile_run))["poison_bytecode"]
    assert seen.startswith("BLOCKED") and str(hostile_run["bytecode"]) in seen, seen  # it got as far as the folder
    assert "Read-only file system" in seen or "Permission denied" in seen, seen  # (a bind read-only, another owner)
    assert not any(p.read_bytes().endswith(b"poison") for p in stored)


@needs_sandbox
def test_earlier_verdicts_are_untouched(hostile_run):
    _result(hostile_run)
    assert Archive(hostile_run["archive_dir"]).submission(hostile_run["earlier"])["status"] == "RUNTIME_ERROR"


@needs_sandbox
def test_nothing_is_left_behind(hostile_run):
    seen = outcomes(_first_log(hostile_run))
    assert all(step in seen for step in CONTAINED_STEPS), seen
    assert not hostile_run["escape"].exists()
    assert marked_processes(hostile_run["marker"]) == []
    assert sandbox_processes_gone([hostile_run["proc"].pid])
    # its harness's candidate folders (named by its pid; another harness on the host keeps its own meanwhile)
    assert list(Path(tempfile.gettempdir()).glob(f"crucible-candidate-{hostile_run['proc'].pid}-*")) == []


@needs_sandbox
def test_a_harness_killed_with_kill_9_takes_its_candidates_with_it(tiny_dataset_root, tmp_path):
    marker = "crucible-marker-" + uuid.uuid4().hex
    sol = write_solution(tmp_path, "sleeper", ["fork_sleeper", "setsid_sleeper"], marker=marker)
    source = json.loads(sol.read_text())  # then hang, so the harness is killed mid-evaluation
    source["sources"][0]["content"] = source["sources"][0]["content"].replace(
        "    _hostile()\n", "    _hostile()\n    import time as _t; _t.sleep(600)\n")
    sol.write_text(json.dumps(source))
    (tmp_path / "a").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "submit", str(sol), "--archive",
                             str(tmp_path / "a"), "--dataset", str(tiny_dataset_root), "-w", "tiny_b2_t40"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while len(marked_processes(marker)) < 2 and time.time() < deadline:
            time.sleep(0.5)
        assert len(marked_processes(marker)) == 2, "the sleepers never started"
        # they run as this harness's sandbox user ids (what the checks below count), and no other harness's do
        assert set(marked_processes(marker)) <= set(sandbox_processes([proc.pid]))
        assert not set(marked_processes(marker)) & set(sandbox_processes([proc.pid + 1, os.getpid()]))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 20
    while (marked_processes(marker) or sandbox_processes([proc.pid])) and time.time() < deadline:
        time.sleep(0.2)
    assert marked_processes(marker) == [] and sandbox_processes_gone([proc.pid])
    # the next session removes the dead harness's folders (and closes its RUNNING submission)
    assert list(Path(tempfile.gettempdir()).glob(f"crucible-*-{proc.pid}-*"))
    remove_stale()
    assert not list(Path(tempfile.gettempdir()).glob(f"crucible-*-{proc.pid}-*"))


def _session_result(root: Path, tmp: Path, steps: list[str], policy: SandboxPolicy, timeout_s: float = 120, **params):
    sol = Solution.model_validate(hostile_solution("limited", steps, **params))
    with Session(Dataset(root), Archive(tmp / "archive"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=timeout_s, sandbox_policy=policy)) as s:
        result = s.submit(sol)
    return result, result.workloads[0]


@needs_sandbox
def test_host_memory_is_bounded(tiny_dataset_root, tmp_path):
    result, wr = _session_result(tiny_dataset_root, tmp_path, ["memory"], SandboxPolicy(memory_bytes=3 << 30),
                                 memory_gib=6, uncaught=["memory"])
    assert wr.status == "RUNTIME_ERROR", (wr.status, wr.message)
    assert "memory limit (3 GiB)" in wr.message
    assert "ESCAPED" not in wr.log
    assert sandbox_processes_gone()


def _any_cgroup() -> bool:
    from harness.sandbox.cgroups import Cgroup, CgroupV1

    return Cgroup.parent()[0] is not None or CgroupV1.parent()[0] is not None


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0 or not _any_cgroup(), reason="no cgroup this harness may write")
def test_host_memory_is_bounded_for_the_workers_processes_together(tiny_dataset_root, tmp_path):
    """Six children of 300 MiB each, every one under a 1 GiB worker's limit alone, cannot all hold it at once."""
    result, wr = _session_result(tiny_dataset_root, tmp_path, ["memory_children"], SandboxPolicy(memory_bytes=1 << 30),
                                 children=6, child_mib=300)
    seen = outcomes(wr.log)
    if wr.status == "PASSED":  # the kernel chose children to kill: the worker lived on
        assert seen["memory_children"].startswith("BLOCKED"), seen
    else:
        assert wr.status == "RUNTIME_ERROR" and "memory limit (1 GiB)" in wr.message, (wr.status, wr.message)
    assert sandbox_processes_gone()


@needs_sandbox
def test_output_is_bounded_and_the_next_workload_runs(tiny_dataset_root, tmp_path):
    policy = SandboxPolicy(output_bytes=4 << 20)
    sol = Solution.model_validate(hostile_solution("flood", ["flood"], flood_mib=200))
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "archive"),
                 SubmitOptions(workloads=["tiny_b2_t40", "tiny_b3_t96"], timeout_s=120, sandbox_policy=policy)) as s:
        result = s.submit(sol)
    first, second = result.workloads
    assert first.status == "RUNTIME_ERROR" and "output limit (4 MiB" in first.message, first.message
    assert len(first.log.encode()) <= LOG_LIMIT + 200
    # a fresh worker for the next workload; its flood (the step runs once per process) ends the same way
    assert second.status == "RUNTIME_ERROR" and "output limit" in second.message


def test_the_log_buffer_stays_bounded_whatever_is_printed():
    r, w = os.pipe()
    hits = []
    sink = LogSink(r, limit=100 << 20, on_limit=lambda: hits.append(1), keep=1 << 20)
    chunk = b"z" * (1 << 20)
    for _ in range(200):
        os.write(w, chunk)
    os.close(w)
    sink.wait()
    assert sink.total == 200 << 20 and hits == [1]
    assert len(sink.text().encode()) < (1 << 20) + 100
    assert "bytes of log cut" in sink.text()
    start = sink.mark()
    assert sink.since(start) == ""


@needs_sandbox
def test_a_fork_bomb_is_bounded_by_the_process_limit(tiny_dataset_root, tmp_path):
    result, wr = _session_result(tiny_dataset_root, tmp_path, ["fork_bomb"], SandboxPolicy(processes=48),
                                 fork_cap=300)
    seen = outcomes(wr.log)
    assert seen["fork_bomb"].startswith("BLOCKED"), seen
    assert int(seen["fork_bomb"].split("after ")[1].split()[0]) < 48
    # its sleeping children hold the budget: on a GPU the kernel's own compile (ptxas) may find none left
    assert wr.status in ("PASSED", "RUNTIME_ERROR"), wr.message
    assert sandbox_processes_gone()


def test_without_the_sandbox_the_steps_escape(tiny_dataset_root, tmp_path):
    """The control: the same candidate with --no-sandbox (the worker as it was) escapes, so the tests above
    prove the wall and not a broken attack. Only harmless steps: a file written, a secret read."""
    escape = tmp_path / "out" / "escape.txt"
    sol = write_solution(tmp_path, "control", ["environ_secrets", "write_escape"], canary=CANARY_PREFIX,
                         escape=str(escape))
    (tmp_path / "archive").mkdir()
    proc = cli_submit(sol, tmp_path / "archive", tiny_dataset_root, "--no-sandbox")
    result = json.loads(proc.stdout)
    assert result["sandbox"].startswith("reduced (switched off")
    assert escape.exists()
    log = Archive(tmp_path / "archive").get_blob(
        Archive(tmp_path / "archive").submission(result["submission_id"])["evaluations"][0]["log_blob"]).decode()
    assert outcomes(log)["environ_secrets"].startswith("ESCAPED")  # through /proc/<harness>/environ
    assert CANARY in log
    assert "sandbox: reduced" in proc.stdout


def test_a_host_without_namespaces_degrades_loudly(tiny_dataset_root, tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox_mod, "probe", lambda: ("", "namespaces forbidden by this test"))
    sol = write_solution(tmp_path, "plain", [])
    (tmp_path / "a").mkdir()
    runner = CliRunner()
    res = runner.invoke(harness_cli, ["submit", str(sol), "--archive", str(tmp_path / "a"), "--dataset",
                                      str(tiny_dataset_root), "-w", "tiny_b2_t40", "--json"])
    result = json.loads(res.output)
    assert result["sandbox"] == "reduced (namespaces forbidden by this test)"
    assert any("sandbox: reduced" in n for n in result["notices"])
    row = Archive(tmp_path / "a").submission(result["submission_id"])
    assert row["options"]["sandbox"] == result["sandbox"]
    assert row["environment"]["sandbox"] == result["sandbox"]
    from harness.review import write_report

    index = write_report(Archive(tmp_path / "a"), tmp_path / "report")
    html = Path(index).read_text() if Path(index).is_file() else (tmp_path / "report" / "index.html").read_text()
    assert "sandbox: reduced" in html
    res = runner.invoke(harness_cli, ["submit", str(sol), "--archive", str(tmp_path / "b"), "--dataset",
                                      str(tiny_dataset_root), "-w", "tiny_b2_t40", "--require-sandbox"])
    assert res.exit_code == 2
    assert "--require-sandbox" in res.output and "namespaces forbidden by this test" in res.output
    assert not (tmp_path / "b").exists()


def test_an_oversized_solution_file_is_refused_before_anything_is_archived(tiny_dataset_root, tmp_path):
    big = hostile_solution("big", [])
    big["sources"].append({"path": "padding.py", "content": "#" * (17 << 20)})
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    archive = tmp_path / "archive"
    archive.mkdir()
    res = CliRunner().invoke(harness_cli, ["submit", str(path), "--archive", str(archive), "--dataset",
                                           str(tiny_dataset_root)])
    assert res.exit_code == 2
    assert "over the 16 MiB limit" in res.output and len(res.output.strip().splitlines()) == 1
    assert list(archive.iterdir()) == []


def test_the_shipped_policy_loads_and_rejects_typos(tmp_path):
    assert load_sandbox_policy().solution_bytes == 16 << 20
    (tmp_path / "sandbox.yaml").write_text("memory_byte: 5\n")
    with pytest.raises(ValueError, match="memory_byte"):
        load_sandbox_policy(tmp_path)


@pytest.mark.parametrize("asked, host, expected", [
    (32 << 30, 23 << 30, int((23 << 30) * 0.75)),  # the policy asks more than the host has: 3/4 of the host
    (32 << 30, 128 << 30, 32 << 30),  # a large host: the policy as written
    (1 << 30, 2 << 30, 1 << 30),
    (32 << 30, None, 32 << 30),  # the host does not say: as asked
])
def test_a_worker_never_gets_more_memory_than_the_host_has(asked, host, expected):
    assert memory_for_host(asked, host) == expected


def test_the_loaded_policy_fits_this_host():
    host = host_memory_bytes()
    assert host is not None and load_sandbox_policy().memory_bytes <= max(host * 0.75, 1)


def test_visible_paths_never_expose_the_archive(tmp_path):
    archive = tmp_path / "project" / "artifacts"
    archive.mkdir(parents=True)
    shown, notes = visible_paths([str(tmp_path / "project")], [str(archive)], pythonpath=str(tmp_path))
    assert not any(str(archive).startswith(p) for p in shown)
    assert any("left out" in n for n in notes)
    assert "/usr" in shown and not any(p in ("/", "/root", "/home") for p in shown)


def test_the_init_script_drops_nothing_it_must_not(tmp_path):
    site = str(tmp_path)  # a PYTHONPATH folder under /tmp, as on the H200 host (/tmp/site)
    assert site.startswith("/tmp/")
    plan = MountPlan(root="/tmp/r", readonly=["/usr", site], devices=["/dev/null", "/dev/nvidia0"],
                     uid=UID_BASE, cgroup_procs="/sys/fs/cgroup/crucible/1-x/cgroup.procs")
    script = init_script(plan)
    lines = script.splitlines()
    assert lines[1].startswith("echo 0 > /sys/fs/cgroup/crucible/1-x/cgroup.procs")  # before any candidate code
    assert "mount -o remount,bind,ro,nosuid,nodev ./usr" in lines
    # /tmp is the private tmpfs, and binds under it come after it (else they would be hidden)
    assert lines.index(next(l for l in lines if "crucible-tmp tmp" in l)) < lines.index(f"mount --rbind {site} .{site}")
    assert lines.index("pivot_root . .old") < lines.index('"$@" || exit $?')
    assert "umount -l /.old" in lines


@pytest.mark.parametrize("memory_gib, requested, cpus, jobs", [
    (32, "16", 16, "6"),    # the H200 host: 16 jobs of a CUTLASS build would pass the worker's 32 GiB
    (32, None, 16, "6"),    # nothing asked: the CPU count, capped the same
    (32, "4", 16, "4"),     # asked for fewer: kept
    (256, "16", 16, "16"),  # a roomy limit: what was asked
    (4, "16", 16, "1"),     # a tight limit: one job, never zero
    (32, "many", 2, "2"),   # not a number: the CPU count
])
def test_compile_jobs_fit_the_workers_memory_limit(memory_gib, requested, cpus, jobs):
    from harness.sandbox.runner import compile_jobs

    assert compile_jobs(memory_gib << 30, requested, cpus) == jobs


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_a_shared_cache_the_host_filled_first_is_handed_over_whole_but_never_through_links(tmp_path):
    """A FlashInfer cache prebuilt by the host (root's files, folders nested deep) must become the baseline
    workers' user's, or FlashInfer cannot write its JIT log there; a link inside must not hand over its target."""
    cache, outside = tmp_path / "cache", tmp_path / "outside.txt"
    (cache / "a" / "b").mkdir(parents=True)
    (cache / "a" / "b" / "flashinfer_jit.log").write_text("built by the host")
    outside.write_text("not the workers'")
    (cache / "a" / "link").symlink_to(outside)
    (cache / "a" / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    uid = UID_BASE - 1
    sandbox_mod.hand_over(cache, uid)
    owned = [p for p in [cache, *cache.rglob("*")]]
    assert all(os.lstat(p).st_uid == uid for p in owned), [(p, os.lstat(p).st_uid) for p in owned]
    assert outside.stat().st_uid == 0 and tmp_path.stat().st_uid == 0


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="no key call numbers for this machine")
def test_the_keyring_wrapper_refuses_key_calls_and_nothing_else():
    from harness.sandbox.isolation import KEYRINGS

    probe = ("import ctypes, os, subprocess; libc = ctypes.CDLL(None, use_errno=True);"
             "libc.syscall.restype = ctypes.c_long;"
             "n = {'x86_64': 250, 'aarch64': 219}[os.uname().machine];"
             "r = libc.syscall(n, 22, ctypes.c_long(-1), ctypes.c_long(-2)); e = ctypes.get_errno();"
             "print(r, e, subprocess.run(['true']).returncode, os.getpid() > 0)")
    proc = subprocess.run([sys.executable, "-I", "-S", KEYRINGS, "--", sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["-1", "1", "0", "True"], (proc.stdout, proc.stderr)  # EPERM; the rest works
