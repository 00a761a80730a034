"""Red team round 12 (V12, V13): options that were taken silently though they could not apply, and definitions
no dataset knows that were answered with an empty table or a solution for nothing. Each is one line on stderr
and exit 2 now, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli import main as controller_main
from controller.store import Store
from harness.archive.database import Archive
from harness.cli import main as harness_main

from support import KV8_PS1

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "triton_gqa_decode" / "solutions" / f"{KV8_PS1}.json"
KNOWN = "known: dsa_sparse_attention"  # the start of the dataset's list of names, as `harness submit` gives it


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def refused(main, args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    return one_line(result)


# -- harness submit: cluster options with the local executor -------------------------------------------------------

@pytest.mark.parametrize("flag, value", [("--lanes", "4"), ("--address", "1.2.3.4:1")])
def test_submit_refuses_a_ray_option_with_the_local_executor(tmp_path, flag, value):
    """Both were ignored without a word (rc 0); `controller loop` already refused --address the same way."""
    archive = tmp_path / "archive"
    line = refused(harness_main, ["submit", str(EXAMPLE), flag, value, "--archive", str(archive)])
    assert line == f"error: {flag} is for --executor ray only (it would be ignored)"
    assert not archive.exists()  # refused before anything was evaluated or archived


# -- harness pack ----------------------------------------------------------------------------------------------------

def pack_args(tmp_path: Path, *extra: str, definition: str = KV8_PS1, language: str = "triton") -> list[str]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "kernel.py").write_text("def run(q, k, v, out):\n    pass\n")
    return ["pack", str(src), "--definition", definition, "--entry-point", "kernel.py::run", "--language", language,
            "--name", "n", "--author", "a", "-o", str(tmp_path / "packed.json"), *extra]


@pytest.mark.parametrize("language", ["triton", "python"])
def test_pack_refuses_a_binding_for_a_python_language(tmp_path, language):
    """`--language triton --binding tvm-ffi` wrote a solution whose binding nothing reads."""
    line = refused(harness_main, pack_args(tmp_path, "--binding", "tvm-ffi", language=language))
    assert line.startswith("error: --binding is for --language cuda or cpp only")
    assert not (tmp_path / "packed.json").exists()


@pytest.mark.parametrize("target", ["", "  "])
def test_pack_refuses_an_empty_target(tmp_path, target):
    """`--target ''` wrote "target_hardware": [""]."""
    line = refused(harness_main, pack_args(tmp_path, "--target", "H100", "--target", target))
    assert line.startswith("error: --target names no hardware")
    assert not (tmp_path / "packed.json").exists()


def test_pack_refuses_an_unknown_definition_naming_the_known_ones(tmp_path):
    """It wrote a solution for a definition that does not exist (rc 0)."""
    line = refused(harness_main, pack_args(tmp_path, definition="nope"))
    assert line.startswith("error: unknown definition 'nope'; known: ") and KV8_PS1 in line
    assert not (tmp_path / "packed.json").exists()


def test_pack_refuses_an_alias_a_solution_cannot_name(tmp_path):
    line = refused(harness_main, pack_args(tmp_path, definition="gqa_decode"))
    assert line.startswith("error: --definition 'gqa_decode' is an alias of ") and KV8_PS1 in line
    assert not (tmp_path / "packed.json").exists()


def test_pack_still_writes_a_solution_for_a_known_definition(tmp_path):
    result = CliRunner().invoke(harness_main, pack_args(tmp_path, "--target", "H100"))
    assert result.exit_code == 0, result.output
    packed = json.loads((tmp_path / "packed.json").read_text())
    assert packed["definition"] == KV8_PS1 and packed["spec"]["target_hardware"] == ["H100"]
    assert packed["spec"]["binding"] is None


# -- harness list, controller runs: --definition ---------------------------------------------------------------------

RETIRED = "gqa_paged_decode_retired"  # a definition the archive holds submissions of, the dataset no longer has


@pytest.fixture
def archive_folder(tmp_path) -> Path:
    archive = Archive(tmp_path / "archive")
    for name, definition in (("a", KV8_PS1), ("b", RETIRED), ("c", "gqa_paged_decode_h32_kv4_d128_ps1")):
        archive.put_solution({"name": name, "definition": definition, "author": "tests",
                              "spec": {"language": "python", "entry_point": "kernel.py::run"}, "sources": []},
                             f"hash-{name}")
        archive.start_submission(f"hash-{name}", name, definition, "tests", {}, None)
    store = Store(archive)
    store.create_run("run-kv8", KV8_PS1, "offline", {})
    store.create_run("run-retired", RETIRED, "offline", {})
    archive.db.conn.close()
    return tmp_path / "archive"


def listed(main, args: list[str]) -> list:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", ["nope", ""])
def test_list_refuses_a_definition_neither_the_archive_nor_the_dataset_knows(archive_folder, name):
    """`harness list --definition nope` printed an empty table (rc 0), as if nothing had been submitted."""
    line = refused(harness_main, ["list", "--definition", name, "--archive", str(archive_folder)])
    assert line.startswith(f"error: unknown definition {name!r}; {KNOWN}") and KV8_PS1 in line


def test_list_by_a_definition_the_archive_holds_or_an_alias(archive_folder):
    by_name = listed(harness_main, ["list", "--definition", KV8_PS1, "--archive", str(archive_folder)])
    assert [r["solution_name"] for r in by_name] == ["a"]
    # an archive can outlive the dataset that defined its submissions: they are still listed
    retired = listed(harness_main, ["list", "--definition", RETIRED, "--archive", str(archive_folder)])
    assert [r["solution_name"] for r in retired] == ["b"]
    alias = listed(harness_main, ["list", "--definition", "gqa_decode", "--archive", str(archive_folder)])
    assert [r["solution_name"] for r in alias] == ["c", "a"]  # its definitions' submissions, newest first
    assert listed(harness_main, ["list", "--definition", "gqa_decode", "--limit", "1",
                                 "--archive", str(archive_folder)])[0]["solution_name"] == "c"


@pytest.mark.parametrize("name", ["nope", ""])
def test_runs_refuses_a_definition_neither_the_archive_nor_the_dataset_knows(archive_folder, name):
    """`controller runs -d nope` printed an empty table (rc 0)."""
    line = refused(controller_main, ["runs", "-d", name, "--archive", str(archive_folder)])
    assert line.startswith(f"error: unknown definition {name!r}; {KNOWN}") and KV8_PS1 in line


def test_runs_by_a_definition_the_archive_holds_or_the_dataset_knows(archive_folder):
    runs = ["runs", "--archive", str(archive_folder), "-d"]
    assert [r["run_id"] for r in listed(controller_main, [*runs, RETIRED])] == ["run-retired"]
    assert [r["run_id"] for r in listed(controller_main, [*runs, "gqa_decode"])] == ["run-kv8"]
    assert listed(controller_main, [*runs, "gqa_paged_decode_h32_kv8_d128_ps64"]) == []  # known, never run


# -- controller trajectory RUN_ID --all ------------------------------------------------------------------------------

def test_trajectory_refuses_a_run_id_with_all(archive_folder, tmp_path):
    """`--all` was ignored when a RUN_ID was given (rc 0, one run's trajectory)."""
    out = tmp_path / "out"
    line = refused(controller_main, ["trajectory", "run-kv8", "--all", "--archive", str(archive_folder),
                                     "--out", str(out)])
    assert line == "error: give RUN_ID or --all, not both (--all shows every run; RUN_ID only that one)"
    assert not out.exists()
    result = CliRunner().invoke(controller_main, ["trajectory", "--all", "--archive", str(archive_folder)])
    assert result.exit_code == 0 and "run-kv8" in result.stdout and "run-retired" in result.stdout


# -- harness diff: unreadable sources (V9), --definition (V10) ---------------------------------------------------------

def blob_path(folder: Path, solution_hash: str) -> Path:
    archive = Archive.open_existing(folder)
    digest = archive.db.execute("select blob from solutions where hash = ?", [solution_hash]).fetchone()[0]
    archive.db.conn.close()
    return folder / "blobs" / digest[:2] / digest[2:]


@pytest.mark.parametrize("damage, said", [("missing", "No such file"), ("garbage", "not a solution's JSON")])
def test_diff_never_calls_unreadable_sources_identical(archive_folder, damage, said):
    """`harness diff 1 2` printed "sources: identical" for two different solutions whose blobs were gone."""
    path = blob_path(archive_folder, "hash-a")
    path.unlink() if damage == "missing" else path.write_text("garbage")
    result = CliRunner().invoke(harness_main, ["diff", "1", "2", "--archive", str(archive_folder)])
    assert result.exit_code == 0, result.output
    assert "identical" not in result.stdout
    line = next(line for line in result.stdout.splitlines() if line.startswith("sources:"))
    assert line.startswith("sources: cannot be read: A (submission 1): solution blob ") and said in line
    shown = json.loads(CliRunner().invoke(harness_main, ["diff", "1", "2", "--json", "--archive",
                                                         str(archive_folder)]).stdout)
    assert shown["same_source"] is None and len(shown["unreadable_sources"]) == 1 and shown["files"] == []


def test_diff_by_definition_blames_the_definition_not_the_submission(archive_folder):
    """`harness diff 1 2 --definition nope` said "no submission ... '1'" though submission 1 exists."""
    diff = ["diff", "--archive", str(archive_folder)]
    line = refused(harness_main, [*diff, "1", "2", "--definition", "nope"])
    assert line.startswith("error: no submission of definition 'nope' in ") and KV8_PS1 in line
    kv4 = "gqa_paged_decode_h32_kv4_d128_ps1"
    line = refused(harness_main, [*diff, "1", "3", "--definition", kv4])
    assert line == f"error: submission 1 is of definition {KV8_PS1}, not {kv4}"
    line = refused(harness_main, [*diff, "a", "c", "--definition", kv4])
    assert line == f"error: 'a' names no submission of definition {kv4}, only of {KV8_PS1}"
    line = refused(harness_main, [*diff, "999", "3", "--definition", kv4])  # a reference to nothing is still that
    assert line.startswith("error: no submission, solution name or solution hash '999'")


# -- harness profile: out-of-range values (V12) ------------------------------------------------------------------------

@pytest.mark.parametrize("option, value, said", [
    ("--timeout", "-5", "-5.0 is not in the range x>0"), ("--timeout", "nan", "not a finite number"),
    ("--max-bytes", "-1", "-1 is not in the range x>=256"), ("--arch", "sm_bogus", "'sm_bogus' is no architecture")])
def test_profile_refuses_out_of_range_options(archive_folder, monkeypatch, capsys, option, value, said):
    """Each ran (rc 3) with the value as given: a negative time limit, "[evidence truncated]" alone, a made-up
    architecture's metric table picked by its digits. A usage error is one line as the program says it."""
    import sys

    from harness.cli_common import invoke

    monkeypatch.setattr(sys, "argv", ["harness", "profile", "1", option, value, "--archive", str(archive_folder)])
    assert invoke(harness_main) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: Invalid value for '{option}': ") and said in line
