"""What `controller loop` checks before a run is created or resumed (controller/startcheck.py): a bad --incumbent,
a replay with nothing to replay, options of which one would be ignored: each one line, exit 2, with no run row and
nothing evaluated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.startcheck import conflicting_options
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


def hostile_incumbent(tmp_path: Path, kind: str) -> str:
    """A path that is no solution file: what a careless or hostile --incumbent names."""
    import os

    path = tmp_path / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading waits for a writer; reading it waits for data
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(3 << 30)  # 3 GiB, sparse: read whole, it would take seconds and gigabytes
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "gone.json")
    elif kind == "latin1":
        path.write_bytes(b'{"name": "caf\xe9"}')
    elif kind == "folder":
        path.mkdir()
    else:
        return kind  # a device
    return str(path)


@pytest.mark.parametrize("kind, said", [
    ("/dev/zero", "not a regular file"),
    ("/dev/urandom", "not a regular file"),
    ("fifo", "not a regular file"),
    ("huge", "over the 16 MiB"),
    ("loop", ""),
    ("dangling", ""),
    ("latin1", "not UTF-8"),
    ("folder", ""),
])
def test_an_incumbent_that_is_no_file_is_refused_on_one_line_without_reading_it(tiny_dataset_root, tmp_path, kind,
                                                                                said, monkeypatch, capsys):
    """/dev/zero and a FIFO blocked the loop for ever (read to the end before parsing). As the program runs it
    (harness.cli_common.invoke: click's usage errors are one line too)."""
    import sys
    import threading

    from harness.cli_common import invoke

    folder = tmp_path / "a"
    folder.mkdir()
    monkeypatch.setattr(sys, "argv", ["controller", *loop_args(tiny_dataset_root, folder, "--incumbent",
                                                                hostile_incumbent(tmp_path, kind))])
    done: dict = {}

    def run() -> None:
        try:
            done["code"] = invoke(main)
        except SystemExit as e:
            done["code"] = e.code

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert "code" in done, f"--incumbent {kind} still running after 30 s"
    got = capsys.readouterr()
    lines = [line for line in (got.out + got.err).splitlines() if line.strip()]
    assert done["code"] == 2 and len(lines) == 1 and "--incumbent" in lines[0] and said in lines[0], got
    assert no_runs(folder) and not (folder / "locks").exists()


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


@pytest.mark.parametrize("given, resume, provider, executor, said", [
    (set(), False, None, "local", None),
    ({"definition", "provider", "rounds"}, False, "offline", "local", None),
    ({"rounds", "budget_wall_s", "budget_tokens", "budget_cost", "archive_path", "as_json"}, True, None, "local",
     None),
    ({"executor", "address"}, True, None, "ray", None),
    ({"definition"}, True, None, "local", "--definition would be ignored"),
    ({"provider"}, True, "anthropic", "local", "--provider would be ignored"),
    ({"incumbent", "rounds"}, True, None, "local", "--incumbent would be ignored"),
    ({"dry_run"}, True, None, "local", "--dry-run would be ignored"),
    ({"definition", "model", "provider_option"}, True, None, "local", "--definition, --model, --provider-option"),
    ({"workloads", "dataset", "hint", "timeout_s"}, True, None, "local", "--dataset, --workloads, --timeout-s, --hint"),
    ({"replay_run"}, False, "offline", "local", "--replay-run is for --provider replay only"),
    ({"replay_run"}, False, None, "local", "--replay-run is for --provider replay only"),
    ({"replay_run", "provider"}, False, "replay", "local", None),
    ({"address"}, False, None, "local", "--address is for --executor ray only"),
    ({"address", "executor"}, False, None, "ray", None),
])
def test_conflicting_options(given, resume, provider, executor, said):
    refusal = conflicting_options(given, resume, provider, executor)
    assert (refusal is None) if said is None else (said in refusal), refusal


def test_every_loop_option_is_either_used_by_a_resume_or_refused_with_it():
    """A new option of `controller loop` must be classed: used by a resume, or one that would be ignored."""
    from controller.startcheck import STORED_SETTINGS

    used = {"resume", "rounds", "budget_wall_s", "budget_tokens", "budget_cost", "archive_path", "executor",
            "address", "as_json"}
    names = {p.name for p in main.commands["loop"].params} - {"help"}
    assert names == used | set(STORED_SETTINGS)


@pytest.mark.parametrize("extra", [("-d", KV8_PS1), ("-p", "anthropic"), ("--incumbent", "__file__"),
                                   ("--dry-run",), ("--replay-run", "run-1")])
def test_resume_with_an_option_it_would_ignore_is_one_line(tmp_path, monkeypatch, extra):
    folder = tmp_path / "a"
    Store(Archive(folder)).create_run("run-1", KV8_PS1, "offline", {})
    started = stub_run_loops(monkeypatch)
    extra = tuple(__file__ if e == "__file__" else e for e in extra)
    line = refused(CliRunner().invoke(main, ["loop", "--resume", "run-1", "--archive", str(folder), *extra]))
    flag = {"-d": "--definition", "-p": "--provider"}.get(extra[0], extra[0])
    assert line.startswith("error: --resume continues a run with its stored settings: " + flag), line
    assert started == []


@pytest.mark.parametrize("given, provider, keys, said", [
    ({"provider_option"}, "anthropic", ["effort", "thinking_budget"], None),
    ({"provider_option", "provider"}, "replay", ["run"], None),  # the other spelling of --replay-run, alone
    ({"provider_option"}, "anthropic", ["effort", "effort"], "--provider-option effort= is given more than once"),
    ({"provider_option", "model"}, "anthropic", ["model"], "--provider-option model= and --model"),
    ({"provider_option", "replay_run", "provider"}, "replay", ["run"], "--provider-option run= and --replay-run"),
])
def test_a_provider_setting_given_twice_is_refused(given, provider, keys, said):
    """--model X --provider-option model=Y ran with Y; --replay-run A --provider-option run=B replayed A; a key
    repeated kept its last value: each silently ignored one of them."""
    refusal = conflicting_options(given, False, provider, "local", keys)
    assert (refusal is None) if said is None else (said in refusal), refusal


def test_a_provider_setting_given_twice_is_one_line_on_the_command_line(tiny_dataset_root, tmp_path, monkeypatch):
    started = stub_run_loops(monkeypatch)
    (tmp_path / "a").mkdir()
    line = refused(CliRunner().invoke(main, loop_args(tiny_dataset_root, tmp_path / "a", "-p", "anthropic", "--model",
                                                      "m1", "--provider-option", "model=m2")))
    assert "--provider-option model= and --model" in line and started == []


@pytest.mark.parametrize("value", ["[1]", '{"a": 1}', "3"])
def test_a_replay_run_that_is_no_run_id_is_one_line(tiny_dataset_root, tmp_path, monkeypatch, value):
    """--provider-option run=[1] reached the archive query as a list: a traceback."""
    folder = tmp_path / "a"
    Store(Archive(folder)).create_run("run-1", KV8_PS1, "offline", {})
    started = stub_run_loops(monkeypatch)
    line = refused(CliRunner().invoke(main, loop_args(tiny_dataset_root, folder, "-p", "replay", "--provider-option",
                                                      f"run={value}")))
    assert "replay: " in line and started == []


@pytest.mark.parametrize("extra", [("-p", "replay"), ("--resume", "unfinished"), ("--resume", "run-1")])
def test_an_archive_that_is_no_database_is_one_line_for_the_loop(tiny_dataset_root, tmp_path, monkeypatch, extra):
    """A file that is not an SQLite database as archive.db: the loop's replay check and --resume were tracebacks."""
    import os

    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "archive.db").write_bytes(os.urandom(8192))
    before = (folder / "archive.db").read_bytes()
    stub_run_loops(monkeypatch)
    args = loop_args(tiny_dataset_root, folder, *extra) if extra[0] == "-p" else ["loop", "--archive", str(folder),
                                                                                 *extra]
    line = refused(CliRunner().invoke(main, args))
    assert "file is not a database" in line and (folder / "archive.db").read_bytes() == before


@pytest.mark.parametrize("kind, said", [
    ("huge", "over the 64 KiB a hint may have"),
    ("latin1", "cannot read it ('utf-8' codec can't decode"),
    ("name past the limit", None),  # no file of that name can exist: the text itself
    ("text", None),
])
def test_a_hint_file_is_read_only_when_small_text(tmp_path, kind, said):
    """A 3 GiB --hint file was read whole (22 GB of memory, minutes) and sent in every request; a name past the
    system's limit was a traceback (ENAMETOOLONG)."""
    from controller.startcheck import read_hint

    value = {"huge": str(tmp_path / "hint.txt"), "latin1": str(tmp_path / "hint.txt"),
             "name past the limit": "d" * 300, "text": "try wider tiles"}[kind]
    if kind == "huge":
        with open(value, "wb") as f:
            f.truncate(3 << 30)
    elif kind == "latin1":
        Path(value).write_bytes(b"caf\xe9")
    if said is None:
        assert read_hint(value) == value
    else:
        with pytest.raises(SchemaError, match=re.escape(said)):
            read_hint(value)


def test_a_huge_hint_file_is_one_line_for_the_loop(tiny_dataset_root, tmp_path):
    folder = tmp_path / "a"
    folder.mkdir()
    with open(tmp_path / "hint.txt", "wb") as f:
        f.truncate(3 << 30)
    line = refused(CliRunner().invoke(main, loop_args(tiny_dataset_root, folder, "--hint", str(tmp_path / "hint.txt"),
                                                      "--dry-run")))
    assert "over the 64 KiB" in line and no_runs(folder), line
