"""`harness submit/list/show` as a user runs them: real subprocesses, real exit codes, real archives."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import KV8_PS1, ROOT, TORCH_CANDIDATE, solution_dict, triton_example


def harness(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def write(tmp_path: Path, data, name: str = "solution.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.fixture
def archive_dir(tmp_path):
    d = tmp_path / "archive"
    d.mkdir()
    return d


def test_submit_json_output_and_exit_code(tmp_path, archive_dir, tiny_dataset_root):
    sol = write(tmp_path, solution_dict(TORCH_CANDIDATE))
    proc = harness("submit", str(sol), "--archive", str(archive_dir), "--dataset", str(tiny_dataset_root), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) >= {"submission_id", "solution", "definition", "status", "workloads"}
    assert out["status"] == "PASSED" and out["definition"] == KV8_PS1
    assert [w["status"] for w in out["workloads"]] == ["PASSED", "PASSED"]
    for w in out["workloads"]:
        assert set(w) >= {"workload", "status", "max_absolute_error", "max_relative_error", "latency_ms"}
        assert w["latency_ms"] is None
    assert "no GPU" in out["timing_unavailable_reason"]

    listed = harness("list", "--archive", str(archive_dir), "--json")
    rows = json.loads(listed.stdout)
    assert rows[0]["id"] == out["submission_id"] and rows[0]["status"] == "PASSED"
    shown = harness("show", str(out["submission_id"]), "--archive", str(archive_dir))
    assert shown.returncode == 0 and "tiny_b2_t40" in shown.stdout and "PASSED" in shown.stdout
    table = harness("list", "--archive", str(archive_dir))
    assert "candidate" in table.stdout and "2 PASSED" in table.stdout


def test_submit_fails_with_exit_1_when_a_workload_fails(tmp_path, archive_dir, tiny_dataset_root):
    sol = write(tmp_path, solution_dict(TORCH_CANDIDATE.replace("* sm_scale", "* 2.0")))
    proc = harness("submit", str(sol), "--archive", str(archive_dir), "--dataset", str(tiny_dataset_root),
                   "--workloads", "tiny_b2_t40")
    assert proc.returncode == 1
    assert "INCORRECT_NUMERICAL" in proc.stdout
    assert "time: " in proc.stdout and "s in the harness (" in proc.stdout and "in the workers: " in proc.stdout
    assert len(json.loads(harness("show", "1", "--archive", str(archive_dir), "--json").stdout)["evaluations"]) == 1


def test_submit_skips_large_workloads_on_cpu_with_a_notice(tmp_path, archive_dir):
    sol = write(tmp_path, triton_example(KV8_PS1))
    proc = harness("submit", str(sol), "--archive", str(archive_dir),
                   "--workloads", "uniform_b1_kv512,uniform_b16_kv512")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SKIPPED" in proc.stdout and "too slow to check without a GPU" in proc.stdout
    assert "timing unavailable" in proc.stdout


BAD_INPUTS = [
    ("malformed", "{not json", "not valid JSON: line 1"),
    ("schema", {"name": "x"}, "definition: Field required"),
    ("unknown_definition", solution_dict(TORCH_CANDIDATE, definition="no_such_op"), "unknown definition 'no_such_op'"),
    ("missing_entry_file", {**solution_dict(TORCH_CANDIDATE), "spec": {**solution_dict(TORCH_CANDIDATE)["spec"],
                            "entry_point": "main.py::run"}}, "entry file 'main.py' is not among the sources"),
    ("escape", solution_dict(TORCH_CANDIDATE, entry="../evil.py::run"), "must be relative and stay inside"),
    ("absolute", solution_dict(TORCH_CANDIDATE, entry="/tmp/evil.py::run"), "must be relative and stay inside"),
]


@pytest.fixture(scope="module")
def archive_with_one_submission(tmp_path_factory):
    """An archive holding one finished submission, made once: each case gets a copy to lose nothing from."""
    folder = tmp_path_factory.mktemp("with_one") / "archive"
    folder.mkdir()
    good = write(folder.parent, solution_dict(TORCH_CANDIDATE), "good.json")
    proc = harness("submit", str(good), "--archive", str(folder), "--workloads", "uniform_b1_kv512")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


@pytest.mark.parametrize("case, data, message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_solution_files_give_one_clear_line_and_lose_nothing(tmp_path, archive_with_one_submission, case, data,
                                                                 message):
    archive_dir = tmp_path / "archive"
    shutil.copytree(archive_with_one_submission, archive_dir)
    before = json.loads(harness("list", "--archive", str(archive_dir), "--json").stdout)
    assert len(before) == 1
    bad = write(tmp_path, data, "bad.json")
    proc = harness("submit", str(bad), "--archive", str(archive_dir))
    assert proc.returncode == 2
    assert message in proc.stderr and str(bad) in proc.stderr or case == "unknown_definition" and message in proc.stderr
    assert "Traceback" not in proc.stderr
    after = json.loads(harness("list", "--archive", str(archive_dir), "--json").stdout)
    assert after == before


def test_missing_symbol_and_wrong_signature_are_recorded_compile_errors(tmp_path, archive_dir, tiny_dataset_root):
    no_symbol = write(tmp_path, solution_dict("def other(*a):\n    pass\n"), "nosym.json")
    proc = harness("submit", str(no_symbol), "--archive", str(archive_dir), "--dataset", str(tiny_dataset_root),
                   "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "COMPILE_ERROR"
    assert "defines no top-level `run`" in out["workloads"][0]["message"]
    wrong = write(tmp_path, solution_dict("def run(q, k):\n    pass\n"), "wrong.json")
    out = json.loads(harness("submit", str(wrong), "--archive", str(archive_dir), "--dataset", str(tiny_dataset_root),
                             "--json").stdout)
    assert out["status"] == "COMPILE_ERROR" and "must take 8 positional parameters" in out["workloads"][0]["message"]


PYTHON_ENTRY = ("entry point main.py is Python: language cuda builds .cu/.cpp sources natively; a Python entry point "
                "that compiles CUDA with load()/load_inline() is language python (or triton)")


def test_a_cuda_solution_with_a_python_entry_point_is_a_recorded_compile_error(tmp_path, archive_dir,
                                                                              tiny_dataset_root):
    data = solution_dict(TORCH_CANDIDATE, entry="main.py::run", language="cuda",
                         extra_sources={"csrc/k.cu": "__global__ void k() {}\n"})
    proc = harness("submit", str(write(tmp_path, data)), "--archive", str(archive_dir), "--dataset",
                   str(tiny_dataset_root), "-w", "tiny_b2_t40", "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "COMPILE_ERROR", proc.stderr
    assert out["workloads"][0]["message"] == PYTHON_ENTRY


def test_nonexistent_archive_folder_and_unknown_workload_are_clear_errors(tmp_path):
    sol = write(tmp_path, solution_dict(TORCH_CANDIDATE))
    proc = harness("submit", str(sol), "--archive", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "archive folder" in proc.stderr and "does not exist" in proc.stderr
    proc = harness("submit", str(sol), "--archive", str(tmp_path), "--workloads", "no_such_workload")
    assert proc.returncode == 2 and "no workload 'no_such_workload'" in proc.stderr
    proc = harness("show", "42", "--archive", str(tmp_path))
    assert proc.returncode == 2 and "no submission 42" in proc.stderr


def test_a_folder_without_solution_json_is_an_error_not_an_empty_success(tmp_path, archive_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    sources = tmp_path / "sources"  # files, but no JSON among them
    sources.mkdir()
    (sources / "kernel.py").write_text("def run(*a):\n    pass\n")
    good = write(tmp_path, solution_dict(TORCH_CANDIDATE))
    for folder in (empty, sources):
        proc = harness("submit", str(folder), "--archive", str(archive_dir))
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.strip() == f"error: no solution JSON in {folder}"
        proc = harness("submit", str(good), str(folder), "--archive", str(archive_dir))  # with others too
        assert proc.returncode == 2 and f"no solution JSON in {folder}" in proc.stderr
    assert list(archive_dir.iterdir()) == []  # nothing was evaluated or archived


SLOW_ON_SECOND = '''
import time
import torch
def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    if q.shape[0] == 3:
        time.sleep(600)
    output.zero_(); lse.zero_()
'''


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _submit_until_the_second_workload(tmp_path, archive_dir, tiny_dataset_root) -> subprocess.Popen:
    """`harness submit` of a candidate that hangs on the second workload, once the first one is archived."""
    sol = write(tmp_path, solution_dict(SLOW_ON_SECOND))
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "submit", str(sol), "--archive", str(archive_dir),
                             "--dataset", str(tiny_dataset_root)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    db_path = archive_dir / "archive.db"
    deadline = time.time() + 120
    finished = 0
    while time.time() < deadline and not finished:
        time.sleep(0.5)
        if db_path.exists():
            try:
                finished = sqlite3.connect(db_path).execute("select count(*) from evaluations").fetchone()[0]
            except sqlite3.OperationalError:
                pass
    assert finished == 1, "the first workload's evaluation should be archived before the kill"
    return proc


def test_sigterm_mid_run_archives_the_submission_as_interrupted(tmp_path, archive_dir, tiny_dataset_root):
    """`timeout` and schedulers send SIGTERM: the harness stops its workers and says what happened."""
    proc = _submit_until_the_second_workload(tmp_path, archive_dir, tiny_dataset_root)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    proc.stdout.close()
    said = [line for line in proc.stderr.read().decode(errors="replace").splitlines() if line.strip()]
    proc.stderr.close()
    assert said[-1].startswith("error: terminated by SIGTERM (what finished is archived;"), said[-3:]
    deadline = time.time() + 20
    while time.time() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not [pid for pid in workers if _alive(pid)], "worker processes outlived the harness"
    listed = json.loads(harness("list", "--archive", str(archive_dir), "--json").stdout)
    assert listed[0]["status"] == "INTERRUPTED" and listed[0]["counts"] == {"INCORRECT_NUMERICAL": 1}
    shown = harness("show", str(listed[0]["id"]), "--archive", str(archive_dir))
    assert "stopped (SystemExit) before it finished" in shown.stdout


def test_killing_the_harness_mid_run_leaves_a_readable_archive(tmp_path, archive_dir, tiny_dataset_root):
    proc = _submit_until_the_second_workload(tmp_path, archive_dir, tiny_dataset_root)
    db_path = archive_dir / "archive.db"
    workers = _children(proc.pid)
    assert workers, "the harness should have worker processes (reference, candidate, a spare)"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # The workers run in their own sessions (the kill above never reaches them) and one is stuck in the slow
    # candidate: the parent-death signal must take them down with the harness.
    deadline = time.time() + 20
    while time.time() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not [pid for pid in workers if _alive(pid)], "worker processes outlived the harness"
    con = sqlite3.connect(db_path)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    listed = json.loads(harness("list", "--archive", str(archive_dir), "--json").stdout)
    assert listed[0]["status"] == "RUNNING" and listed[0]["counts"] == {"INCORRECT_NUMERICAL": 1}
    shown = harness("show", str(listed[0]["id"]), "--archive", str(archive_dir))
    assert "tiny_b2_t40" in shown.stdout and "(not finished)" in shown.stdout
    # The next session on this host sees the harness process is gone and closes the record.
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session

    Session(Dataset(tiny_dataset_root), Archive(archive_dir)).close()
    closed = Archive(archive_dir).submission(listed[0]["id"])
    assert closed["status"] == "INTERRUPTED" and f"pid {proc.pid} on" in closed["message"]


def test_show_prints_a_workloads_log(tmp_path, archive_dir, tiny_dataset_root):
    noisy = TORCH_CANDIDATE.replace("    batch, heads, dim = q.shape",
                                    "    print('hello from the candidate')\n    batch, heads, dim = q.shape")
    sol = write(tmp_path, solution_dict(noisy))
    out = json.loads(harness("submit", str(sol), "--archive", str(archive_dir), "--dataset", str(tiny_dataset_root),
                             "--json", "--workloads", "tiny_b2_t40").stdout)
    log = harness("show", str(out["submission_id"]), "--archive", str(archive_dir), "--log", "tiny_b2_t40")
    assert "hello from the candidate" in log.stdout


def test_pack_builds_a_solution_from_a_folder(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "kernel.py").write_text(TORCH_CANDIDATE)
    out = tmp_path / "packed.json"
    proc = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "kernel.py::run", "--language", "python",
                   "--name", "packed", "--author", "me", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["sources"][0]["path"] == "kernel.py" and data["spec"]["destination_passing_style"] is True
    bad = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "main.py::run", "--language", "python",
                  "--name", "packed", "--author", "me")
    assert bad.returncode == 2 and "entry file 'main.py'" in bad.stderr
    (src / "plan.py").write_text("def plan(*inputs):\n    return None\n")
    (src / "helpers.inl").write_text("// an included implementation file\n")
    planned = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "kernel.py::run", "--language",
                      "python", "--name", "packed", "--author", "me", "--setup", "plan.py::plan",
                      "--instruction-claim", "hmma", "-o", str(out))
    assert planned.returncode == 0, planned.stderr
    spec = json.loads(out.read_text())["spec"]
    assert spec["setup"] == "plan.py::plan" and spec["instruction_claims"] == ["hmma"]
    assert "helpers.inl" in {s["path"] for s in json.loads(out.read_text())["sources"]}
    # the text data a module reads at import is packed (red team round 4: a dropped tuning.json made an honest
    # solution a COMPILE_ERROR); the rest is said, and hidden folders and bytecode are not walked
    (src / "tuning.json").write_text('{"BLOCK_N": 64}\n')
    (src / "README.md").write_text("# notes\n")
    (src / ".venv" / "lib").mkdir(parents=True)
    (src / ".venv" / "lib" / "site.py").write_text("x = 1\n")
    data_packed = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "kernel.py::run", "--language",
                          "python", "--name", "packed", "--author", "me", "-o", str(out))
    assert data_packed.returncode == 0, data_packed.stderr
    paths = {s["path"] for s in json.loads(out.read_text())["sources"]}
    assert "tuning.json" in paths and "README.md" not in paths and not any(".venv" in p for p in paths), paths
    assert "left out" in data_packed.stderr and "README.md" in data_packed.stderr
    missing = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "kernel.py::run", "--language",
                      "python", "--name", "packed", "--author", "me", "--setup", "nowhere.py::plan")
    assert missing.returncode == 2 and "setup file 'nowhere.py'" in missing.stderr
    (src / "passwd.py").symlink_to("/etc/passwd")  # a link may point anywhere: never packed
    linked = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "kernel.py::run", "--language",
                     "python", "--name", "packed", "--author", "me")
    assert linked.returncode == 2 and "passwd.py: a link" in linked.stderr and "root:" not in linked.stdout


def test_pack_refuses_language_cuda_with_a_python_entry_point(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text(TORCH_CANDIDATE)
    proc = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "main.py::run", "--language", "cuda",
                   "--name", "packed", "--author", "me", "--binding", "torch")
    assert proc.returncode == 2 and proc.stderr == f"error: {PYTHON_ENTRY}\n" and not proc.stdout
    python = harness("pack", str(src), "--definition", KV8_PS1, "--entry-point", "main.py::run", "--language",
                     "python", "--name", "packed", "--author", "me")
    assert python.returncode == 0, python.stderr


def test_the_time_line_names_the_largest_phases_and_worker_steps():
    from harness.result_view import time_line

    line = time_line(12.34, {"build": 1.0, "timing": 6.0, "correctness": 3.0, "audits": 2.0, "compare": 0.1},
                     {"candidate.time.timer.timed_calls": 4.0, "candidate.run.call": 1.5, "reference.hello.start": 1.2,
                      "candidate.run.inputs": 0.2})
    assert line == ("time: 12.3 s in the harness (timing 6.0, correctness 3.0, audits 2.0, build 1.0); in the workers: "
                    "candidate.time.timer.timed_calls 4.0, candidate.run.call 1.5, reference.hello.start 1.2")
    assert time_line(1.0, {"build": 1.0}, {}) == "time: 1.0 s in the harness (build 1.0)"


def test_names_that_read_as_markup_are_shown_as_written(tmp_path, archive_dir, tiny_dataset_root):
    """A solution's name and author are the submitter's text: rich markup in them must neither crash the CLI
    nor style its output."""
    sol = write(tmp_path, {**solution_dict(TORCH_CANDIDATE), "name": "x[/bold] [/] [link=file:///etc]y[/link]",
                           "author": "[red]me"})
    proc = harness("submit", str(sol), "--archive", str(archive_dir), "--dataset", str(tiny_dataset_root),
                   "-w", "tiny_b2_t40")
    assert proc.returncode == 0, proc.stderr
    listed = harness("list", "--archive", str(archive_dir))
    assert listed.returncode == 0 and "x[/bold]" in listed.stdout and "[red]me" in listed.stdout, listed.stderr
    shown = harness("show", "1", "--archive", str(archive_dir))
    assert shown.returncode == 0 and "[link=file:///etc]" in shown.stdout, shown.stderr
