"""Where the command lines find the archive: --archive, else $CRUCIBLE_ARCHIVE, else ./artifacts; commands that
only read it never create one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli import main as controller_main
from harness.archive.database import ARCHIVE_DB, Archive, ArchiveMissing, archive_location
from harness.cli import main as harness_main

MISSING_DEFAULT = "no archive at artifacts/archive.db (set --archive or CRUCIBLE_ARCHIVE)"

READ_ONLY = [
    (harness_main, ["list"]),
    (harness_main, ["list", "--json"]),
    (harness_main, ["show", "1"]),
    (harness_main, ["report", "--out", "report"]),
    (harness_main, ["diff", "1", "2"]),
    (harness_main, ["export", "exported"]),
    (harness_main, ["browse", "--search", "kernel"]),
    (harness_main, ["profile", "1"]),
    (controller_main, ["runs"]),
    (controller_main, ["trajectory"]),
]


@pytest.fixture
def in_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CRUCIBLE_ARCHIVE", raising=False)
    return tmp_path


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("main, args", READ_ONLY, ids=[" ".join(a) for _, a in READ_ONLY])
def test_read_only_commands_never_create_an_archive(in_empty_folder, main, args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert one_line(result.stderr) == f"error: {MISSING_DEFAULT}"
    assert not (in_empty_folder / "artifacts").exists()
    (in_empty_folder / "artifacts").mkdir()  # an existing folder without a database is no archive either
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and MISSING_DEFAULT in result.stderr
    assert list((in_empty_folder / "artifacts").iterdir()) == []


def test_archive_location_option_then_environment_then_default(monkeypatch):
    monkeypatch.delenv("CRUCIBLE_ARCHIVE", raising=False)
    assert archive_location(None) == (Path("artifacts"), "default")
    monkeypatch.setenv("CRUCIBLE_ARCHIVE", "/data/arch")
    assert archive_location(None) == (Path("/data/arch"), "env")
    assert archive_location("mine") == (Path("mine"), "option")
    monkeypatch.setenv("CRUCIBLE_ARCHIVE", "")
    assert archive_location(None) == (Path("artifacts"), "default")


def test_open_existing_creates_nothing(tmp_path):
    with pytest.raises(ArchiveMissing, match=f"no archive at {tmp_path / 'nope' / ARCHIVE_DB}"):
        Archive.open_existing(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArchiveMissing):
        Archive.open_existing(tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []
    Archive(tmp_path / "empty")
    assert Archive.open_existing(tmp_path / "empty").folder == tmp_path / "empty"


def test_crucible_archive_is_every_commands_default_and_archive_wins(in_empty_folder, monkeypatch):
    folder = in_empty_folder / "shared"
    Archive(folder)
    monkeypatch.setenv("CRUCIBLE_ARCHIVE", str(folder))
    listed = CliRunner().invoke(harness_main, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []
    runs = CliRunner().invoke(controller_main, ["runs"])
    assert runs.exit_code == 0, runs.output

    other = in_empty_folder / "other"
    result = CliRunner().invoke(harness_main, ["list", "--archive", str(other)])  # --archive wins
    assert result.exit_code == 2 and one_line(result.stderr) == f"error: no archive at {other / ARCHIVE_DB}"
    result = CliRunner().invoke(controller_main, ["runs", "--archive", str(other)])
    assert result.exit_code == 2 and one_line(result.stderr) == f"error: no archive at {other / ARCHIVE_DB}"

    monkeypatch.setenv("CRUCIBLE_ARCHIVE", str(other))  # the variable names a folder that is not there
    result = CliRunner().invoke(harness_main, ["show", "1"])
    assert result.exit_code == 2
    assert one_line(result.stderr) == f"error: no archive at {other / ARCHIVE_DB} (from CRUCIBLE_ARCHIVE)"
    trace_set = in_empty_folder / "trace_set"
    trace_set.mkdir()
    result = CliRunner().invoke(harness_main, ["import", str(trace_set)])  # a writer: the folder must exist
    assert result.exit_code == 2 and "does not exist (from CRUCIBLE_ARCHIVE)" in one_line(result.stderr)
    result = CliRunner().invoke(controller_main, ["loop", "-d", "x"])
    assert result.exit_code == 2 and "does not exist" in result.stderr and "CRUCIBLE_ARCHIVE" in result.stderr
    assert not other.exists() and not (in_empty_folder / "artifacts").exists()

    other.mkdir()  # a writer starts an archive in the folder the variable names, not in ./artifacts
    result = CliRunner().invoke(harness_main, ["import", str(trace_set)])
    assert result.exit_code == 0, result.output
    assert (other / ARCHIVE_DB).is_file() and not (in_empty_folder / "artifacts").exists()


def test_controller_loop_takes_its_archive_from_the_environment(in_empty_folder, monkeypatch):
    from controller import cli

    folder = in_empty_folder / "shared"
    folder.mkdir()
    monkeypatch.setenv("CRUCIBLE_ARCHIVE", str(folder))
    seen = []
    monkeypatch.setattr(cli, "_definitions", lambda values, dataset: ["d1"])
    monkeypatch.setattr(cli, "_gpus_for", lambda jobs, dataset, archive: 0)
    monkeypatch.setattr(cli, "run_loops", lambda jobs, archive, gpus, on_event=None: seen.append(archive) or [])
    result = CliRunner().invoke(controller_main, ["loop", "-d", "d1", "--provider", "offline"])
    assert result.exit_code == 0, result.output
    assert seen == [folder]
    result = CliRunner().invoke(controller_main, ["loop", "-d", "d1", "--provider", "offline",
                                                  "--archive", str(in_empty_folder)])
    assert result.exit_code == 0, result.output
    assert seen[-1] == in_empty_folder
