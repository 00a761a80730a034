"""`harness submit` given careless or hostile solution files: each is one line on stderr, exit 2, quickly, with
nothing read past a limit, nothing archived and nothing of the archive changed. Run as the program runs the command
(harness.cli_common.invoke: click's own usage errors are one line too), in a thread that must finish."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli_common import invoke

from support import TORCH_CANDIDATE, solution_dict

GOOD = solution_dict(TORCH_CANDIDATE)
GOOD_TEXT = json.dumps(GOOD)


def put(folder: Path, kind: str) -> Path:
    """A path named like a solution file that is not a good one."""
    path = folder / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder with a fifo":
        (folder / "solutions").mkdir()
        (folder / "solutions" / "good.json").write_text(GOOD_TEXT)
        os.mkfifo(folder / "solutions" / "stuck.json")
        return folder / "solutions"
    elif kind == "dangling link":
        path.symlink_to(folder / "gone.json")
    elif kind == "looping link":
        path.symlink_to(path)
    elif kind == "duplicate key":
        path.write_text(GOOD_TEXT[:-1] + ', "name": "another"}')
    elif kind == "lone surrogate":
        bad = json.loads(GOOD_TEXT)
        bad["sources"][0]["content"] = "\udcff"
        path.write_text(json.dumps(bad))  # written as the escape \udcff: valid JSON, no text
    elif kind == "surrogate key":
        path.write_text(GOOD_TEXT[:-1] + ', "\\udcff": 1}')
    elif kind == "nested deeply":
        path.write_text("[" * 100000 + "]" * 100000)
    elif kind == "not an object":
        path.write_text("[1, 2, 3]")
    elif kind == "NaN":
        path.write_text(GOOD_TEXT[:-1] + ', "x": NaN}')
    elif kind == "not UTF-8":
        path.write_bytes(GOOD_TEXT.replace('"tests"', '"t\\u00e9sts"').encode().replace(b"\\u00e9", b"\xe9"))
    elif kind == "definition with newlines":
        path.write_text(json.dumps({**GOOD, "definition": "no\nsuch\ndefinition"}))
    elif kind == "empty":
        path.write_text("")
    elif kind == "long number":  # red team round 12: past Python's 4300 digits, a traceback
        path.write_text('{"name": ' + "9" * 10_000 + "}")
    else:
        return Path(kind)  # a device
    return path


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind, said", [
    ("/dev/zero", "not a regular file"),
    ("fifo", "not a regular file"),
    ("folder with a fifo", "stuck.json: not a regular file"),
    ("dangling link", "does not exist"),
    ("looping link", ""),
    ("duplicate key", "key 'name' is given twice"),
    ("lone surrogate", "lone surrogate escape (\\udcff)"),
    ("surrogate key", "lone surrogate escape"),
    ("nested deeply", "nested too deeply"),
    ("not an object", "valid dictionary"),
    ("NaN", "x: Extra inputs are not permitted"),
    ("not UTF-8", "not UTF-8 text"),
    ("definition with newlines", "unknown definition"),
    ("empty", "not valid JSON"),
    ("long number", "long number.json: a number of more than 4300 digits"),
])
def test_a_bad_solution_file_is_one_line_and_archives_nothing(tmp_path, tiny_dataset_root, monkeypatch, capsys, kind,
                                                              said):
    """A duplicate key was taken silently (the last one won); a lone surrogate escape in a source was a traceback
    (UnicodeEncodeError) after the submission had begun; /dev/zero and a FIFO blocked for ever."""
    archive = tmp_path / "archive"
    archive.mkdir()
    monkeypatch.setattr(sys, "argv", ["harness", "submit", str(put(tmp_path, kind)), "--archive", str(archive),
                                      "--dataset", str(tiny_dataset_root), "-w", "tiny_b2_t40"])
    line = one_line_within(30, main, capsys)
    assert said in line, line
    assert digest(archive) == {}  # nothing archived, not even an empty database


def one_line_within(seconds: float, command, capsys) -> str:
    """Run ``command`` as the program does (sys.argv set by the caller) in a thread that must end within
    ``seconds``, with exit code 2 and one line on stderr, which is returned."""
    done: dict = {}

    def run() -> None:
        try:
            done["code"] = invoke(command)
        except SystemExit as e:
            done["code"] = e.code

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert "code" in done, f"{sys.argv} still running after {seconds} s"
    got = capsys.readouterr()
    lines = [line for line in got.err.splitlines() if line.strip()]
    assert done["code"] == 2 and len(lines) == 1 and "Traceback" not in got.err, (done, got)
    return lines[0]


def pack_folder(folder: Path, extra: str) -> list[str]:
    """`harness pack` of a folder holding a kernel and one careless extra file."""
    src = folder / "src"
    src.mkdir()
    (src / "kernel.py").write_text("def run():\n    pass\n")
    if extra == "fifo":
        os.mkfifo(src / "stuck.py")  # was left out silently (not a file), so the solution lost it unsaid
    elif extra == "device":
        (src / "zero.py").symlink_to("/dev/zero")
    elif extra == "huge":
        with open(src / "huge.py", "wb") as f:
            f.truncate(17 << 20)  # was read whole (a 2 GiB one took minutes)
    elif extra == "binary":
        (src / "blob.py").write_bytes(b"\xff\xfe\x00")
    return ["pack", str(src), "--definition", "d", "--entry-point", "kernel.py::run", "--language", "python",
            "--name", "n", "--author", "a", "-o", str(folder / "packed.json")]


def rounds_fifo(folder: Path) -> list[str]:
    os.mkfifo(folder / "rounds.json")
    return ["report", "--out", str(folder / "r"), "--rounds", str(folder / "rounds.json")]


CARELESS = {  # name: (the command's arguments for a scratch folder, what its one line says)
    "pack a FIFO": (lambda tmp: pack_folder(tmp, "fifo"), "stuck.py: not a regular file"),
    "pack a link to a device": (lambda tmp: pack_folder(tmp, "device"), "zero.py: a link"),
    "pack a huge file": (lambda tmp: pack_folder(tmp, "huge"), "the sources pass 16 MiB"),
    "pack a binary file": (lambda tmp: pack_folder(tmp, "binary"), "cannot be packed as source text"),
    "report --rounds /dev/zero": (lambda tmp: ["report", "--out", str(tmp / "r"), "--rounds", "/dev/zero"],
                                  "--rounds: /dev/zero: not a regular"),
    "report --rounds a FIFO": (rounds_fifo, "not a regular file"),
    "list --limit -1": (lambda tmp: ["list", "--limit", "-1"], "not in the range x>=1"),
    "import /dev/null": (lambda tmp: ["import", "/dev/null"], "/dev/null: not a folder"),
    "submit --dataset /dev/null": (lambda tmp: ["submit", str(tmp / "x.json"), "--dataset", "/dev/null"],
                                   "/dev/null: not a folder"),
    "report --out a FIFO": (lambda tmp: (os.mkfifo(tmp / "r.fifo"), ["report", "--out", str(tmp / "r.fifo")])[1],
                            "is there and is not a folder"),  # was "File exists"
    "export into a file": (lambda tmp: ["export", str(tmp / "x.json")], "is there and is not a folder"),
    "export into a link to nothing": (lambda tmp: ((tmp / "gone").symlink_to(tmp / "nowhere"),
                                                   ["export", str(tmp / "gone")])[1], "is there and is not a folder"),
}


@pytest.mark.parametrize("case", CARELESS)
def test_careless_paths_and_values_for_harness_commands_are_one_line(tmp_path, monkeypatch, capsys, case):
    """Each hung (a FIFO or /dev/zero read to its end), read gigabytes, was a traceback, or was taken silently (a
    FIFO among the sources left out unsaid, /dev/null imported as "nothing new")."""
    from harness.archive.database import Archive

    archive = tmp_path / "archive"
    Archive(archive).db.conn.close()
    (tmp_path / "x.json").write_text(GOOD_TEXT)
    build, said = CARELESS[case]
    args = build(tmp_path)
    monkeypatch.setattr(sys, "argv", ["harness", *args] + ([] if args[0] == "pack" else ["--archive", str(archive)]))
    line = one_line_within(30, main, capsys)
    assert said in line, line
    assert not (tmp_path / "packed.json").exists() and not (tmp_path / "r").exists()


def test_list_takes_a_limit_past_sqlites_integers(tmp_path):
    """`harness list --limit 99999999999999999999999` was a traceback (sqlite3 datatype mismatch)."""
    from click.testing import CliRunner

    from harness.archive.database import Archive

    Archive(tmp_path / "a").db.conn.close()
    result = CliRunner().invoke(main, ["list", "--limit", "9" * 30, "--json", "--archive", str(tmp_path / "a")])
    assert result.exit_code == 0 and json.loads(result.stdout) == [], result.output


def test_a_provider_option_nested_past_reading_is_taken_as_text(tmp_path, tiny_dataset_root, monkeypatch, capsys):
    """`--provider-option k=[[[[...` was a traceback (RecursionError); now the value is the text, which the provider
    refuses on one line as it refuses any unknown setting."""
    from controller.cli import main as controller

    monkeypatch.setattr(sys, "argv", ["controller", "loop", "-p", "offline", "-d", "gqa_paged_decode_h32_kv8_d128_ps1",
                                      "--dataset",
                                      str(tiny_dataset_root), "--archive", str(tmp_path), "--provider-option",
                                      "k=" + "[" * 100000])
    assert "provider offline" in one_line_within(30, controller, capsys)


@pytest.mark.parametrize("archive", ["/dev/zero", "FILE"])
def test_the_loop_on_an_archive_path_that_is_no_folder_says_so(tmp_path, monkeypatch, capsys, archive):
    """It said "does not exist (create it first)" of /dev/zero and of a file."""
    from controller.cli import main as controller

    if archive == "FILE":
        archive = str(tmp_path / "x.json")
        Path(archive).write_text(GOOD_TEXT)
    monkeypatch.setattr(sys, "argv", ["controller", "loop", "--resume", "unfinished", "--archive", archive])
    assert one_line_within(30, controller, capsys).endswith(f"archive folder {archive} is not a folder")


@pytest.mark.parametrize("program, argv", [
    ("harness", ["submit", "SOLUTION"]), ("harness", ["list"]), ("harness", ["import", "FOLDER"]),
    ("controller", ["loop", "-p", "offline", "-d", "gqa_decode"]), ("controller", ["runs"]),
])
def test_an_archive_name_past_the_systems_limit_is_one_line(tmp_path, monkeypatch, capsys, program, argv):
    """`harness submit` and `controller loop` with a folder name of 300 characters were tracebacks (ENAMETOOLONG
    from a check made before the archive was opened)."""
    from controller.cli import main as controller

    (tmp_path / "x.json").write_text(GOOD_TEXT)
    swap = {"SOLUTION": str(tmp_path / "x.json"), "FOLDER": str(tmp_path)}
    too_long = str(tmp_path / ("d" * 300))
    monkeypatch.setattr(sys, "argv", [program, *[swap.get(a, a) for a in argv], "--archive", too_long])
    line = one_line_within(30, main if program == "harness" else controller, capsys)
    assert "d" * 50 in line, line


@pytest.mark.parametrize("program", ["harness", "controller"])
@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", "1e309"])
def test_a_stack_dump_interval_that_is_no_number_of_seconds_is_one_line(tmp_path, monkeypatch, capsys, program, value):
    """CRUCIBLE_DUMP_STACKS_AFTER_S=abc (or 0, nan, inf) was a traceback from every harness command, and was handed
    to the controller's workers, which could not start with it."""
    from controller.cli import main as controller

    monkeypatch.setenv("CRUCIBLE_DUMP_STACKS_AFTER_S", value)
    monkeypatch.setattr(sys, "argv", [program, "list" if program == "harness" else "runs", "--archive", str(tmp_path)])
    line = one_line_within(30, main if program == "harness" else controller, capsys)
    assert line.startswith(f"error: CRUCIBLE_DUMP_STACKS_AFTER_S='{value}'"), line


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "not UTF-8", "nested deeply"])
def test_a_price_table_that_is_no_file_is_refused_unread(tmp_path, kind):
    """$CRUCIBLE_PRICES=/dev/zero was read until memory ran out, a FIFO for ever."""
    import threading

    from controller.providers.base import ProviderError, load_prices

    path = {"fifo": tmp_path / "p.fifo", "not UTF-8": tmp_path / "p.yaml",
            "nested deeply": tmp_path / "p.yaml"}.get(kind, Path(kind))
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "not UTF-8":
        path.write_bytes(b"model: [1, 2]\n# caf\xe9\n")
    elif kind == "nested deeply":
        path.write_text("[" * 50000 + "]" * 50000)
    done: dict = {}

    def load() -> None:
        try:
            load_prices(path)
        except ProviderError as err:
            done["error"] = str(err)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(30)
    assert "error" in done and "\n" not in done["error"] and done["error"].startswith(f"price table {path}"), done


@pytest.mark.parametrize("name, content, said", [
    ("eval_config.yaml", None, "eval_config.yaml: not a regular file (a FIFO, a device or a socket), expected a YAML "
                               "file"),  # a FIFO: every command waited for ever
    ("eval_config.yaml", "[1, 2", "eval_config.yaml: not valid YAML"),  # was a traceback (yaml's ParserError)
    ("eval_config.yaml", "- a list\n", "eval_config.yaml: expected a mapping"),  # was a traceback later on
    ("audit_policy.yaml", None, "not a regular file"),  # the static gate waited for ever
    ("audit_policy.yaml", "[1, 2", "cannot be read as the audit policy"),  # a traceback mid-submission
    ("audit_policy.yaml", "- a list\n", "expected a mapping at top level"),  # the same
    ("audit_policy.yaml", "default: {rules: {no_such_rule: error}}\n", "unknown rule id 'no_such_rule'"),
])
def test_a_datasets_yaml_that_cannot_be_read_is_one_line_before_anything_runs(tmp_path, tiny_dataset_root,
                                                                               monkeypatch, capsys, name, content,
                                                                               said):
    import shutil

    dataset = tmp_path / "dataset"
    shutil.copytree(tiny_dataset_root, dataset)
    (dataset / name).unlink(missing_ok=True)
    if content is None:
        os.mkfifo(dataset / name)
    else:
        (dataset / name).write_text(content)
    (tmp_path / "x.json").write_text(GOOD_TEXT)
    (tmp_path / "archive").mkdir()
    monkeypatch.setattr(sys, "argv", ["harness", "submit", str(tmp_path / "x.json"), "--dataset", str(dataset),
                                      "-w", "tiny_b2_t40", "--archive", str(tmp_path / "archive")])
    assert said in one_line_within(30, main, capsys)
    assert list((tmp_path / "archive").iterdir()) == []  # refused before the archive was opened


def test_a_trajectory_out_that_is_no_folder_says_so(tmp_path, monkeypatch, capsys):
    """It said "File exists" of a FIFO, /dev/null or a file given as --out."""
    from controller.cli import main as controller
    from controller.store import Store
    from harness.archive.database import Archive

    store = Store(Archive(tmp_path / "a"))
    store.create_run("run-1", "gqa_paged_decode_h32_kv8_d128_ps1", "offline", {"rounds": 1})
    os.mkfifo(tmp_path / "out")
    monkeypatch.setattr(sys, "argv", ["controller", "trajectory", "run-1", "--out", str(tmp_path / "out"),
                                      "--archive", str(tmp_path / "a")])
    assert "it is there and is not a folder" in one_line_within(30, controller, capsys)


@pytest.mark.parametrize("port", ["99999999", "-1", "65536"])
def test_a_browse_port_out_of_range_is_one_line_before_datasette_starts(tmp_path, monkeypatch, capsys, port):
    """It was handed to datasette, which printed its own usage (three lines) after the harness's first line."""
    from harness.archive.database import Archive

    Archive(tmp_path / "a").db.conn.close()
    monkeypatch.setattr(sys, "argv", ["harness", "browse", "--port", port, "--no-open", "--archive",
                                      str(tmp_path / "a")])
    assert "--port" in one_line_within(30, main, capsys)
