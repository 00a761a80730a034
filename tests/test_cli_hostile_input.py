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
])
def test_a_bad_solution_file_is_one_line_and_archives_nothing(tmp_path, tiny_dataset_root, monkeypatch, capsys, kind,
                                                              said):
    """A duplicate key was taken silently (the last one won); a lone surrogate escape in a source was a traceback
    (UnicodeEncodeError) after the submission had begun; /dev/zero and a FIFO blocked for ever."""
    archive = tmp_path / "archive"
    archive.mkdir()
    monkeypatch.setattr(sys, "argv", ["harness", "submit", str(put(tmp_path, kind)), "--archive", str(archive),
                                      "--dataset", str(tiny_dataset_root), "-w", "tiny_b2_t40"])
    done: dict = {}

    def run() -> None:
        try:
            done["code"] = invoke(main)
        except SystemExit as e:
            done["code"] = e.code

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert "code" in done, f"harness submit of {kind} still running after 30 s"
    got = capsys.readouterr()
    lines = [line for line in got.err.splitlines() if line.strip()]
    assert done["code"] == 2 and len(lines) == 1 and said in lines[0] and "Traceback" not in got.err, got
    assert digest(archive) == {}  # nothing archived, not even an empty database
