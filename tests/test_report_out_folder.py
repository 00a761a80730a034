"""`harness report --out DIR` writes into a new or empty folder, or over an earlier report only (its marker file, or
its pages' generator tag): a folder holding anything else (a person's own index.html) is refused on one line, exit 2,
and nothing in it is changed, unless --force."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness.archive.database import Archive
from harness.cli import main
from harness.review.pages import GENERATOR_TAG, MARKER, folder_verdict, out_folder_refusal

MINE = "<html><body>my own page</body></html>"


@pytest.mark.parametrize("entries, marker, head, verdict", [
    ([], False, None, "empty"),
    ([MARKER, "index.html", "candidates", "files"], True, None, "report"),
    ([MARKER], True, None, "report"),
    (["index.html", "candidates"], False, f"<!DOCTYPE html><html><head>{GENERATOR_TAG}<title>x</title>", "report"),
    (["index.html"], False, "<!DOCTYPE html><html><head><title>Crucible report</title>", "report"),  # before markers
    (["index.html"], False, MINE, "foreign"),
    (["index.html"], False, "", "foreign"),
    (["notes.txt"], False, None, "foreign"),
    ([".git"], False, None, "foreign"),
])
def test_folder_verdict(entries, marker, head, verdict):
    assert folder_verdict(entries, marker, head) == verdict


def report(archive, out, *extra):
    return CliRunner().invoke(main, ["report", "--archive", str(archive.folder), "--out", str(out), *extra])


def test_a_persons_index_html_is_never_overwritten_without_force(tmp_path):
    archive = Archive(tmp_path / "a")
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text(MINE)
    result = report(archive, out)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in result.output
    assert "not an earlier report (index.html)" in line and "--force" in line, line
    assert (out / "index.html").read_text() == MINE and sorted(p.name for p in out.iterdir()) == ["index.html"]

    result = report(archive, out, "--force")
    assert result.exit_code == 0, result.output
    assert GENERATOR_TAG in (out / "index.html").read_text() and (out / MARKER).is_file()


def test_a_new_empty_or_earlier_report_folder_is_written(tmp_path):
    archive = Archive(tmp_path / "a")
    out = tmp_path / "new" / "report"
    assert report(archive, out).exit_code == 0
    assert (out / MARKER).is_file() and GENERATOR_TAG in (out / "index.html").read_text()
    assert out_folder_refusal(out) is None
    assert report(archive, out).exit_code == 0  # over its own output
    (out / MARKER).unlink()  # still known by its pages' tag
    assert report(archive, out).exit_code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report(archive, empty).exit_code == 0
