"""`harness report` pages for a solution's sources whose names fight the file system (red-team round, 2026-12-05).

Each source was written to ``source/<slug>.txt``, the slug flattening folders to ``_``: ``pkg/kernel.py`` and a
decoy ``pkg_kernel.py`` shared one page (the later one's text was shown for both, the real kernel hidden from a
reviewer), and a long path that any file system holds (1000 characters in folders of 200) became one file name past
255 bytes, which failed the whole report ("File name too long").
"""

from __future__ import annotations

from click.testing import CliRunner

from harness.archive.database import Archive
from harness.cli import main
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from harness.pipeline.evaluate import Session, SubmitOptions

from support import TORCH_CANDIDATE, solution_dict

LONG = "/".join(["d" * 199] * 5) + ".py"


def test_every_source_has_a_page_of_its_own(tiny_dataset_root, tmp_path):
    solution = solution_dict(TORCH_CANDIDATE, entry="pkg/kernel.py::run",
                             extra_sources={"pkg_kernel.py": "# decoy: nothing to see here\n", LONG: "# long\n"})
    archive = Archive(tmp_path / "archive")
    with Session(Dataset(tiny_dataset_root), archive, SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=120)) as s:
        s.submit(Solution.model_validate(solution))
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["report", "--archive", str(tmp_path / "archive"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    pages = {p.name: p.read_text() for p in out.rglob("source/*.txt")}
    assert len(pages) == 3, sorted(pages)
    assert sum("def run(" in t for t in pages.values()) == 1 and sum("decoy" in t for t in pages.values()) == 1
    assert all(len(name.encode()) <= 255 for name in pages)
    assert "pkg_kernel.py.txt" in pages  # a name that is a file name already keeps it
