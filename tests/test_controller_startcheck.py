"""What `controller loop` checks before a run is created (controller/startcheck.py): a bad --incumbent is one line,
exit 2, with no run row and nothing evaluated."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.store import Store
from harness.archive.database import Archive
from harness.data.schema import SchemaError

from support import EXAMPLES, KV8_PS1
from loop_support import WORKLOAD


def loop_args(root: Path, folder: Path, *extra: str) -> list[str]:
    return ["loop", "-d", KV8_PS1, "--dataset", str(root), "-w", WORKLOAD, "--rounds", "1", "--candidates", "1",
            "--archive", str(folder), *extra]


def no_runs(folder: Path) -> bool:
    return not (folder / "archive.db").exists() or Store(Archive(folder)).runs() == []


def refused(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    line = result.stderr.strip()
    assert "\n" not in line, line
    return line


def other_definitions_solution() -> Path:
    found = [p for p in (EXAMPLES / "gqa_decode_promoted" / "solutions").glob("*.json") if KV8_PS1 not in p.name]
    assert found
    return found[0]


@pytest.mark.parametrize("content, said", [
    ("{bad", "not valid JSON"),
    ('{"name": "x"}', "Field required"),
    ("[1, 2]", ""),
    (None, "not of " + KV8_PS1),  # a solution of another definition
])
def test_a_bad_incumbent_is_one_line_before_any_run_is_created(tiny_dataset_root, tmp_path, content, said):
    folder = tmp_path / "a"
    folder.mkdir()
    path = tmp_path / "incumbent.json"
    if content is None:
        path = other_definitions_solution()
    else:
        path.write_text(content)
    line = refused(CliRunner().invoke(main, loop_args(tiny_dataset_root, folder, "--incumbent", str(path))))
    assert line.startswith("error: --incumbent ") and said in line, line
    assert no_runs(folder)


def test_run_loop_checks_the_incumbent_before_the_run_row(tiny_dataset_root, tmp_path):
    from controller.loop import run_loop

    from loop_support import config

    folder = tmp_path / "a"
    bad = tmp_path / "bad.json"
    bad.write_text("{bad")
    with pytest.raises(SchemaError, match="--incumbent"):
        run_loop(config(tiny_dataset_root, incumbent=str(bad)), folder)
    assert no_runs(folder)


def stub_run_loops(monkeypatch) -> list:
    import controller.cli as cli

    started: list = []
    monkeypatch.setattr(cli, "run_loops", lambda jobs, *a, **k: started.extend(jobs) or [])
    return started


@pytest.mark.parametrize("setup, extra, said", [
    ("missing", (), "replay: no archive at"),  # the archive folder exists, its database does not (none is made)
    ("empty", (), "replay: no earlier run of " + KV8_PS1),
    ("silent", (), "replay: run run-silent has no responses"),  # the latest run of the definition replied nothing
    ("silent", ("--replay-run", "run-nope"), "replay: no run 'run-nope'"),
    ("other", ("--replay-run", "run-other"), "replay: run run-other is of d2"),
])
def test_replay_with_nothing_to_replay_is_one_line_before_the_loop_starts(tiny_dataset_root, tmp_path, monkeypatch,
                                                                         setup, extra, said):
    folder = tmp_path / "a"
    folder.mkdir()
    if setup != "missing":
        store = Store(Archive(folder))
        if setup == "silent":
            store.create_run("run-silent", KV8_PS1, "offline", {})
        if setup == "other":
            store.create_run("run-other", "d2", "offline", {})
    started = stub_run_loops(monkeypatch)
    line = refused(CliRunner().invoke(main, loop_args(tiny_dataset_root, folder, "-p", "replay", *extra)))
    assert said in line, line
    assert started == []  # no run row, no evaluation
    if setup == "missing":
        assert not (folder / "archive.db").exists()
    else:
        assert [r["id"] for r in Store(Archive(folder)).runs()] == {"silent": ["run-silent"],
                                                                     "other": ["run-other"]}.get(setup, [])


def test_run_loop_checks_the_replay_source_before_the_run_row(tiny_dataset_root, tmp_path):
    from controller.loop import run_loop
    from controller.providers.base import ProviderError

    from loop_support import config

    folder = tmp_path / "a"
    with pytest.raises(ProviderError, match="no earlier run"):
        run_loop(config(tiny_dataset_root, provider="replay"), folder)
    assert no_runs(folder)
