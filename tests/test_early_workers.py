"""`harness submit` launches the reference worker and the first candidate before it imports torch, and its Session
adopts them (harness.pipeline.early_workers): what is launched, when, what is taken, and that nothing outlives the
command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from support import ROOT, TORCH_CANDIDATE, solution_dict


def _gone(pid: int) -> bool:
    """No process of this group runs any more (a zombie nobody reaps counts as gone)."""
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pid and fields[0] != "Z":  # fields: state, ppid, pgrp
            return False
    return True


def test_the_launch_path_and_the_cli_import_no_torch():
    code = ("import sys, harness.cli, harness.sandbox.runner, harness.pipeline.early_workers, "
            "harness.pipeline.worker_options; assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_submit_launches_its_workers_before_torch_and_the_session_adopts_them(tmp_path, tiny_dataset_root):
    sol = tmp_path / "solution.json"
    sol.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    log = tmp_path / "launches.json"
    (tmp_path / "archive").mkdir()
    script = textwrap.dedent(f"""
        import atexit, json, sys
        from harness.sandbox import runner

        launches = []
        original = runner.WorkerProcess.launch

        def launch(self):
            original(self)
            launches.append([self.options.role, "torch" in sys.modules, self.proc.pid])

        runner.WorkerProcess.launch = launch
        atexit.register(lambda: open({str(log)!r}, "w").write(json.dumps(launches)))
        from harness.cli import main
        main(["submit", {str(sol)!r}, "--archive", {str(tmp_path / "archive")!r}, "--dataset",
              {str(tiny_dataset_root)!r}, "--json", "-w", "0"])
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "PASSED"
    launches = json.loads(log.read_text())
    # one reference and one candidate, both launched before the harness imported torch: the session launched none
    assert [(role, torch) for role, torch, _ in launches] == [("reference", False), ("candidate", False)]
    assert all(_gone(pid) for _, _, pid in launches)


def test_early_workers_whose_options_differ_are_not_taken_and_are_stopped(tmp_path, tiny_dataset_root, monkeypatch):
    from harness.cli import main
    from harness.pipeline import early_workers
    from harness.sandbox import runner

    launched: list[runner.WorkerProcess] = []
    original = runner.WorkerProcess.launch

    def launch(self):
        original(self)
        launched.append(self)

    monkeypatch.setattr(runner.WorkerProcess, "launch", launch)
    real = early_workers.launch
    # options the session will not compute: network isolation the other way round
    monkeypatch.setattr(early_workers, "launch", lambda options_for_role: real(
        lambda role, cpu_only: replace(options_for_role(role, cpu_only),
                                       isolate_network=not options_for_role(role, cpu_only).isolate_network)))
    sol = tmp_path / "solution.json"
    sol.write_text(json.dumps(solution_dict(TORCH_CANDIDATE)))
    (tmp_path / "archive").mkdir()
    result = CliRunner().invoke(main, ["submit", str(sol), "--archive", str(tmp_path / "archive"), "--dataset",
                                       str(tiny_dataset_root), "--json", "-w", "0"])
    assert result.exit_code == 0, result.output
    early, session = launched[:2], launched[2:]
    assert [w.options.role for w in early] == ["reference", "candidate"]
    assert [w.options.role for w in session] == ["reference", "candidate"]  # the session launched its own
    assert all(w.options.spent is None for w in early)  # never taken: not in the session's accounting
    assert early_workers.pending() == []
    for worker in launched:
        assert not worker.alive and _gone(worker.proc.pid)


def test_take_compares_options_but_not_spent_and_stale_removal_spares_them(tmp_path, tiny_dataset_root):
    from harness.data.options import SubmitOptions
    from harness.pipeline import early_workers
    from harness.pipeline.worker_options import worker_options_for
    from harness.sandbox.isolation import SandboxPolicy
    from harness.sandbox.stale import remove_stale

    options = SubmitOptions()
    policy = SandboxPolicy()

    def options_for(role: str, cpu_only: bool, spent=None):
        return worker_options_for(role, options, policy, tiny_dataset_root, tmp_path / "archive", cpu_only, spent)

    workers = early_workers.launch(options_for)
    try:
        assert [w.options.role for w in workers] == ["reference", "candidate"]
        folders = [w.sandbox.folder for w in workers]
        remove_stale()  # this process runs: its early workers' folders stay
        assert all(Path(f).is_dir() for f in folders)
        assert early_workers.take(replace(options_for("reference", False), sandbox=False)) is None
        assert early_workers.take(options_for("reference", True)) is None  # cpu_only differs
        spent: dict[str, float] = {}
        taken = early_workers.take(options_for("reference", False, spent))
        assert taken is workers[0] and taken.options.spent is spent
        assert early_workers.take(options_for("reference", False)) is None  # taken once
        assert early_workers.pending() == [workers[1]]
        early_workers.stop_all()
        assert early_workers.pending() == [] and not workers[1].alive and not Path(folders[1]).exists()
        assert taken.alive  # the taker's to stop
    finally:
        early_workers.stop_all()
        for worker in workers:
            worker.stop(graceful=False)
    assert not any(w.alive for w in workers)
    assert all(_gone(w.proc.pid) for w in workers)


@pytest.mark.parametrize("guessed, probed", [(0, False), (1, False), (2, True)])
def test_several_solutions_probe_the_gpus_only_where_the_host_may_have_several(monkeypatch, guessed, probed):
    """The probe is a whole worker's start: skipped where one lane is certain (it would take the early workers)."""
    from harness.data.options import SubmitOptions
    from harness.pipeline import parallel

    calls = []
    from harness.pipeline import worker_options

    monkeypatch.setattr(worker_options, "gpus_guessed", lambda: guessed)
    monkeypatch.setattr(parallel, "visible_gpu_count", lambda *a: calls.append(a) or 1)
    monkeypatch.setattr(parallel, "run_lanes", lambda items, lanes, serve: calls.append(("lanes", lanes)))
    parallel.submit_all(["a", "b"], None, Path("/nonexistent"), SubmitOptions())
    assert (len(calls) == 2) == probed and calls[-1] == ("lanes", 1)


def test_a_session_that_requires_the_sandbox_says_why_the_host_cannot_give_it(monkeypatch, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.data.options import SubmitOptions
    from harness.pipeline.evaluate import SandboxUnavailable, Session
    from harness.sandbox import isolation

    monkeypatch.setattr(isolation, "probe", lambda: (False, "user namespaces are off"))
    for sandbox, why in ((True, "this host cannot give the full sandbox: user namespaces are off"),
                         (False, "the sandbox is switched off (--no-sandbox)")):
        session = Session(Dataset(), Archive(tmp_path / f"a{sandbox}"),
                          SubmitOptions(require_sandbox=True, sandbox=sandbox))
        try:
            session.reference_worker()
            raise AssertionError("no error")
        except SandboxUnavailable as err:
            assert str(err) == f"--require-sandbox: {why}"
        finally:
            session.close()
