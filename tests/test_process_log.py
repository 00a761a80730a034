"""The worker's process log (harness/sandbox/process_log.py): what the candidate starts is seen as it starts, a
library's own toolchain is not the candidate's."""

from __future__ import annotations

import sys
import textwrap

from support import run_interpreted

STARTS = textwrap.dedent('''
    import json, os, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import process_log
    process_log.install()
    import torch
    from torch._inductor import cpp_builder

    out = {}

    def after(name, fn):
        before = len(process_log.STARTED)
        try:
            fn()
        except Exception:
            pass
        out[name] = process_log.STARTED[before:]

    after("subprocess from the candidate's file", lambda: subprocess.run(["true"]))
    after("os.system", lambda: os.system("true"))
    after("a shell through a library helper", lambda: cpp_builder.run_compile_cmd("sh -c 'exit 0'", "."))
    after("a library's own program", lambda: cpp_builder.run_compile_cmd("true", "."))
    import functools, uuid
    job = functools.partial(uuid._get_command_stdout, sys.executable, "-c", "pass")
    after("a callback run by library code", lambda: torch.no_grad()(job)())
    after("Triton's ldconfig", lambda: __import__("triton.backends.nvidia.driver", fromlist=["x"]).libcuda_dirs())
    print(json.dumps(out))
''')


def test_starts_are_told_apart_by_who_asked_and_what_runs(tmp_path):
    got = run_interpreted(tmp_path, STARTS)
    assert [s.split(" from ")[0] for s in got["subprocess from the candidate's file"]] == ["`true`"]
    assert got["subprocess from the candidate's file"][0].endswith(f"kernels.py:{_line('subprocess.run')}")
    assert got["os.system"] == [f"`sh -c 'true'` from kernels.py:{_line('os.system')}"]
    assert [s.split(" from ")[0] for s in got["a shell through a library helper"]] == ["`sh -c exit 0`"]
    assert got["a library's own program"] == []
    # torch's frame ran it, but that module never builds anything: the candidate's callback (red team round 9c)
    (callback,) = got["a callback run by library code"]
    assert callback.startswith(f"`{sys.executable} -c pass` from _contextlib.py:"), callback
    assert got["Triton's ldconfig"] == []


def _line(text: str) -> int:
    """The line of kernels.py (STARTS, as written) that starts ``text``."""
    return next(i for i, line in enumerate(STARTS.splitlines(), 1) if text in line and "after(" in line)


def test_the_recheck_names_a_process_that_came_and_went(tiny_dataset_root, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.data.schema import Solution
    from harness.pipeline.evaluate import Session

    from support import TORCH_CANDIDATE, solution_dict

    # The library helper's name is spelled so the static gate cannot resolve it: only the run-time log can see it.
    source = ("import importlib\nimport torch\n"
              "_b = importlib.import_module('torch._inductor.' + 'cpp_' + 'builder')\n"
              "def _start():\n    try:\n        _b.run_compile_cmd(\"sh -c 'exit 0'\", '.')\n    except Exception:\n"
              "        pass\n" + TORCH_CANDIDATE.replace("def run(", "def _run(") +
              "\ndef run(*args, **kwargs):\n    _start()\n    return _run(*args, **kwargs)\n")
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=300)) as s:
        result = s.submit(Solution.model_validate(solution_dict(source, name="starts"))).workloads[0]
    audits = {a.name: a for a in result.audits}
    assert result.status == "PASSED", result.message
    assert not audits["thread_creation"].passed
    assert "started `sh -c exit 0`" in audits["thread_creation"].detail, audits["thread_creation"].detail



COMPILES_WITHOUT_A_PASSWD_ENTRY = '''
import pwd

def _no_entry(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")

pwd.getpwuid = _no_entry  # the sandbox's user id on a host that maps it (an H100 host, 2026-12-07)
import getpass
import torch

@torch.compile(fullgraph=True)
def twice(x):
    return x * 2

print(getpass.getuser(), float(twice(torch.ones(2)).sum()))
'''


def test_torch_compile_works_in_the_workers_environment_without_a_passwd_entry(tmp_path):
    import subprocess
    import sys

    from harness.sandbox.runner import scrubbed_environment

    proc = subprocess.run([sys.executable, "-c", COMPILES_WITHOUT_A_PASSWD_ENTRY], capture_output=True, text=True,
                          timeout=300, env=scrubbed_environment(home=tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["worker", "4.0"]


NINJA = textwrap.dedent('''
    import json, os, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import process_log
    process_log.install()
    from torch.utils import cpp_extension

    out = {}
    for name, flags in (("honest", ["-O3", '-DVERSION="1.0"', "-I/opt/inc"]),
                        ("backticks", ["-O2 `python3 -c 'print(1)'`"]),
                        ("a second command", ["-O2; python3 -c pass"]),
                        ("an escaped substitution", ["-O2 $$(id)"])):
        folder = tempfile.mkdtemp()
        open(os.path.join(folder, "main.cpp"), "w").write("int x;")
        cpp_extension._write_ninja_file_to_build_library(
            path=os.path.join(folder, "build.ninja"), name="ext", sources=[os.path.join(folder, "main.cpp")],
            extra_cflags=flags, extra_cuda_cflags=[], extra_sycl_cflags=[], extra_ldflags=[], extra_include_paths=[],
            with_cuda=False, with_sycl=False, is_standalone=False)
        before = len(process_log.STARTED)
        try:
            cpp_extension._run_ninja_build(folder, verbose=False, error_prefix="build")  # torch's own start of ninja
            error = ""
        except BaseException as e:
            error = f"{type(e).__name__}: {e}"
        out[name] = [error, process_log.STARTED[before:]]
    print(json.dumps(out))
''')


def test_shell_syntax_in_a_build_file_is_refused_before_ninja_runs_it(tmp_path):
    """Red team round 10: flags written into build.ninja as they are, and ninja runs each line in a shell: a command
    in backticks ran unseen (the shell's child is no start of Python's). The start is refused and logged."""
    got = run_interpreted(tmp_path, NINJA)
    error, started = got["honest"]
    assert started == [] and "ShellInBuild" not in error, got["honest"]  # built (or failed to compile), not refused
    for name in ("backticks", "a second command", "an escaped substitution"):
        error, started = got[name]
        assert "ShellInBuild" in error and "shell syntax" in error, (name, error)
        assert len(started) == 1 and "refused: shell syntax" in started[0], (name, started)


NINJA_RACE = textwrap.dedent('''
    import json, os, subprocess, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import build_file_check, process_log
    process_log.install()
    from torch.utils import cpp_extension

    EVIL = "rule evil\\n  command = touch {marker}\\nbuild {marker}: evil\\ndefault {marker}\\n"
    out = {}

    def build(folder):
        try:
            cpp_extension._run_ninja_build(folder, verbose=False, error_prefix="build")  # torch's own start
            return ""
        except BaseException as e:
            return f"{type(e).__name__}"

    # 1. the file rewritten between the check and ninja's read of it (a thread of the candidate's wins the race)
    folder = tempfile.mkdtemp()
    marker = os.path.join(folder, "raced")
    open(os.path.join(folder, "main.cpp"), "w").write("int x;")
    cpp_extension._write_ninja_file_to_build_library(
        path=os.path.join(folder, "build.ninja"), name="ext", sources=[os.path.join(folder, "main.cpp")],
        extra_cflags=["-O2"], extra_cuda_cflags=[], extra_sycl_cflags=[], extra_ldflags=[], extra_include_paths=[],
        with_cuda=False, with_sycl=False, is_standalone=False)
    checked = build_file_check.problem

    def check_then_rewrite(text):
        verdict = checked(text)
        with open(os.path.join(folder, "build.ninja"), "w") as f:
            f.write(EVIL.format(marker=marker))
        return verdict

    build_file_check.problem = check_then_rewrite
    error = build(folder)
    build_file_check.problem = checked
    out["raced"] = [os.path.exists(marker), error, process_log.STARTED[:]]

    # 2. a file past what the check reads, its command after the part read
    folder = tempfile.mkdtemp()
    marker = os.path.join(folder, "tail")
    with open(os.path.join(folder, "build.ninja"), "w") as f:
        f.write("# padding\\n" * (500 * 1024))
        f.write(EVIL.format(marker=marker))
    error = build(folder)
    out["tail"] = [os.path.exists(marker), error]
    print(json.dumps(out))
''')


def test_ninja_runs_the_build_file_that_was_checked(tmp_path):
    """The build file is read once, checked, and ninja is pointed at a sealed copy of those bytes: rewriting the file
    after the check (a thread or process of the candidate's racing the build) or past the part the check reads
    runs nothing of the rewrite."""
    got = run_interpreted(tmp_path, NINJA_RACE)
    ran, error, started = got["raced"]
    assert not ran and started == [], got["raced"]
    ran, error = got["tail"]
    assert not ran, got["tail"]


REDIRECTED = textwrap.dedent('''
    import json, os, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from harness.sandbox import process_log
    process_log.install()
    from torch.utils import cpp_extension
    from torch._inductor import cpp_builder

    def build():
        folder = tempfile.mkdtemp()
        open(os.path.join(folder, "main.cpp"), "w").write("int x;")
        cpp_extension._write_ninja_file_to_build_library(
            path=os.path.join(folder, "build.ninja"), name="ext", sources=[os.path.join(folder, "main.cpp")],
            extra_cflags=["-O2"], extra_cuda_cflags=[], extra_sycl_cflags=[], extra_ldflags=[],
            extra_include_paths=[], with_cuda=False, with_sycl=False, is_standalone=False)
        cpp_extension._run_ninja_build(folder, verbose=False, error_prefix="build")

    out = {}
    for name, variable, value in (("as started", None, None), ("a variable of its own", "MYKERNEL_BLOCK", "64"),
                                  ("gcc's parts from elsewhere", "GCC_EXEC_PREFIX", "/tmp/x/"),
                                  ("a preload", "LD_PRELOAD", "/tmp/x.so"),
                                  ("nvcc's flags", "NVCC_PREPEND_FLAGS", "-ccbin /tmp/x")):
        if variable:
            os.environ[variable] = value
        before = len(process_log.STARTED)
        errors = []
        for start in (build, lambda: cpp_builder.run_compile_cmd("true", ".")):
            try:
                start()
                errors.append("")
            except BaseException as e:
                errors.append(f"{type(e).__name__}: {e}")
        out[name] = [errors, process_log.STARTED[before:]]
        if variable:
            del os.environ[variable]
    print(json.dumps(out))
''')


def test_a_toolchain_redirected_by_the_environment_does_not_start(tmp_path):
    """Red team round 11: `triton.knobs.setenv` wrote any variable past the gate's list; set after the worker started,
    one that makes a toolchain program run another (gcc's `-B` as a variable, a preload, nvcc's extra flags) stops
    every start it would reach, each logged; a variable of the solution's own changes nothing."""
    got = run_interpreted(tmp_path, REDIRECTED)
    for name in ("as started", "a variable of its own"):
        errors, started = got[name]
        assert not any("ShellInBuild" in e for e in errors) and started == [], (name, got[name])
    for name, variable in (("gcc's parts from elsewhere", "GCC_EXEC_PREFIX"), ("a preload", "LD_PRELOAD"),
                           ("nvcc's flags", "NVCC_PREPEND_FLAGS")):
        errors, started = got[name]
        assert all("ShellInBuild" in e and f"{variable} changed" in e for e in errors), (name, errors)
        assert len(started) == 2 and all("the environment redirects the toolchain" in s for s in started), started
