"""`harness` as a program leaves without Python's finalisation (harness.cli_common.run_as_program): the exit status
and everything printed are kept, whatever way the command ends."""

import os
import subprocess
import sys
import textwrap

import pytest
from pathlib import Path

PROGRAM = textwrap.dedent("""
    import atexit, sys
    import click
    from harness.cli_common import run_as_program

    atexit.register(lambda: print("finalised", file=sys.stderr))  # skipped by the quick exit

    @click.command()
    @click.argument("how")
    def main(how):
        print("printed before the end", end="")  # no newline: still flushed
        if how == "code":
            sys.exit(3)
        if how == "message":
            sys.exit("a message")
        if how == "raise":
            raise RuntimeError("boom")

    run_as_program(main)
""")


@pytest.mark.parametrize("how, status, stderr_has, quick", [
    ("ok", 0, "", True),
    ("code", 3, "", True),
    ("message", 1, "a message", True),
    ("", 2, "Missing argument", True),  # click's usage error
    ("raise", 1, "RuntimeError: boom", False),  # a harness fault: its traceback, and Python's own exit
])
def test_the_status_and_the_output_survive_the_quick_exit(how, status, stderr_has, quick):
    args = [sys.executable, "-c", PROGRAM] + ([how] if how else [])
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == status
    assert stderr_has in done.stderr and ("finalised" not in done.stderr) == quick
    if how != "":
        assert done.stdout == "printed before the end"


def test_the_console_script_is_the_program():
    import tomllib
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    # through harness/__main__.py (the bytecode folder first, harness.sandbox.bytecode), as `python -m harness` is
    assert scripts["harness"] == "harness.__main__:main" and scripts["controller"] == "controller.__main__:main"


@pytest.mark.parametrize("args, words", [
    (["harness", "submit"], "Missing argument"),
    (["harness", "submit", "x.json", "--timeout", "nan"], "is not a finite number"),
    (["harness", "submit", "x.json", "--timeout", "0"], "not in the range x>0"),
    (["harness", "submit", "x.json", "--lanes", "0"], "not in the range x>=1"),
    (["controller", "loop", "-d", "x", "--budget-wall-s", "inf"], "is not a finite number"),
])
def test_a_usage_error_is_one_line_and_exit_code_2(args, words):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and words in lines[0] and "--help" in lines[0]


def test_a_read_only_archive_is_said_before_anything_runs(tmp_path, monkeypatch):
    import os

    from harness import cli_common

    (tmp_path / "a").mkdir()
    real = os.access
    monkeypatch.setattr(cli_common.os, "access", lambda p, mode: False if str(p) == str(tmp_path / "a") else
                        real(p, mode))
    with pytest.raises(SystemExit) as done:
        cli_common.open_archive(str(tmp_path / "a"))
    assert done.value.code == 2


def test_a_file_that_is_not_an_archive_is_one_line_for_the_controller_too(tmp_path):
    import subprocess
    import sys

    (tmp_path / "archive.db").write_bytes(os.urandom(10000))
    proc = subprocess.run([sys.executable, "-m", "controller", "runs", "--archive", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "cannot open the archive" in proc.stderr and "not a database" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [
    ["harness", "submit", "examples/triton_gqa_decode/solutions/gqa_paged_decode_h32_kv8_d128_ps1.json", "-w", ""],
    ["controller", "loop", "-d", "gqa_paged_decode_h32_kv8_d128_ps1", "-w", ",", "--provider", "offline"],
])
def test_an_empty_workload_selection_is_refused_not_read_as_all(args, tmp_path):
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", *args, "--archive", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=root)
    assert proc.returncode == 2 and ("names no" in proc.stderr or "names nothing" in proc.stderr), proc.stderr
    assert not (tmp_path / "archive.db").exists() or "RUNNING" not in proc.stdout


def test_a_loop_whose_workloads_select_nothing_archives_no_run(tmp_path):
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "controller", "loop", "-d", "gqa_paged_decode_h32_kv8_d128_ps1",
                           "-w", "nope", "--provider", "offline", "--archive", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 2 and "no workload 'nope'" in proc.stderr, proc.stderr
    runs = subprocess.run([sys.executable, "-m", "controller", "runs", "--archive", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert runs.returncode in (0, 2) and "RUNNING" not in runs.stdout


def test_a_link_to_nothing_among_the_solutions_is_one_line(tmp_path):
    (tmp_path / "sols").mkdir()
    (tmp_path / "sols" / "gone.json").symlink_to(tmp_path / "nowhere.json")
    (tmp_path / "a").mkdir()
    proc = subprocess.run([sys.executable, "-m", "harness", "submit", str(tmp_path / "sols"), "--archive",
                           str(tmp_path / "a")], capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "gone.json" in lines[0], proc.stderr


@pytest.mark.parametrize("search", ["", "   ", "\t"])
def test_an_empty_browse_search_is_refused_not_read_as_no_search(search, tmp_path):
    """`harness browse --search ''` started the datasette server; an empty search is refused as `-w ''` is."""
    proc = subprocess.run([sys.executable, "-m", "harness", "browse", "--search", search, "--no-open",
                           "--archive", str(tmp_path)], capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "--search names nothing" in lines[0], proc.stderr
    assert "datasette" not in proc.stdout + proc.stderr
