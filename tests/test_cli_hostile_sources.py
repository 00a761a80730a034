"""Source paths the file system cannot hold are refused on one line, nothing archived (red-team round, 2026-12-05).

They were written out by the worker, whose own error (ValueError for a NUL byte, RecursionError for 2000 nested
folders, FileExistsError for ``kernel.py`` next to ``kernel.py/x.py``) was archived as the candidate's RUNTIME_ERROR.
"""

from __future__ import annotations

import json
import sys

import pytest

from harness.cli import main

from support import TORCH_CANDIDATE, solution_dict
from test_cli_hostile_input import digest, one_line_within


@pytest.mark.parametrize("extra, said", [
    ("kernel.py/x.py", "both as a file and as a folder: ['kernel.py']"),
    ("a\u0000b.py", "printable characters only"),
    ("bell\u0007.py", "printable characters only"),
    ("a/" * 2000 + "x.py", "32 folders deep"),
    ("n" * 300 + ".py", "255 bytes a name"),
])
def test_a_source_path_no_file_system_holds_is_one_line(tmp_path, tiny_dataset_root, monkeypatch, capsys, extra,
                                                       said):
    solution = solution_dict(TORCH_CANDIDATE, extra_sources={extra: "x = 1\n"})
    path = tmp_path / "solution.json"
    path.write_text(json.dumps(solution))
    archive = tmp_path / "archive"
    archive.mkdir()
    monkeypatch.setattr(sys, "argv", ["harness", "submit", str(path), "--archive", str(archive),
                                      "--dataset", str(tiny_dataset_root), "-w", "tiny_b2_t40"])
    line = one_line_within(30, main, capsys)
    assert said in line, line
    assert digest(archive) == {}


def test_folders_and_dot_files_of_a_solution_are_still_taken():
    from harness.data.schema import Solution

    solution = solution_dict(TORCH_CANDIDATE, extra_sources={"csrc/kernels/a.cuh": "", ".clang-format": "",
                                                             "./notes/read me.txt": ""})
    assert len(Solution.model_validate(solution).sources) == 4
