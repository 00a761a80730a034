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
    ([MARKER, "index.html"], True, MINE, "foreign"),  # a marker does not make a person's index.html a report's
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


def test_a_marker_beside_a_persons_index_html_does_not_let_it_be_overwritten(tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    (out / MARKER).write_text("")
    (out / "index.html").write_text(MINE)
    result = report(Archive(tmp_path / "a"), out)
    assert result.exit_code == 2 and "not an earlier report" in result.stderr, result.output
    assert (out / "index.html").read_text() == MINE


@pytest.mark.parametrize("planted", [MARKER, "index.html"])
def test_a_link_planted_in_the_report_folder_is_never_written_through(tmp_path, planted):
    """A link as the marker made the folder read as a report and the marker was written through it, over the file
    it points to (a linked index.html likewise); with --force the link itself is replaced."""
    archive = Archive(tmp_path / "a")
    out, victim = tmp_path / "site", tmp_path / "victim.html"
    out.mkdir()
    victim.write_text("<html><head><title>Crucible report</title></head>precious</html>")
    if planted == "index.html":
        (out / MARKER).write_text("")
    (out / planted).symlink_to(victim)
    result = report(archive, out)
    assert result.exit_code == 2 and "not an earlier report" in result.stderr, result.output
    result = report(archive, out, "--force")
    assert result.exit_code == 0, result.output
    assert "precious" in victim.read_text() and not (out / planted).is_symlink()
    assert GENERATOR_TAG in (out / "index.html").read_text()


def test_a_linked_folder_of_the_report_is_refused_before_anything_is_written(tmp_path):
    archive = Archive(tmp_path / "a")
    out, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    report(archive, out)
    (out / "index.html").unlink()
    (out / "candidates").rmdir() if (out / "candidates").exists() else None
    (out / "candidates").symlink_to(elsewhere)
    for extra in ((), ("--force",)):
        result = report(archive, out, *extra)
        assert result.exit_code == 2 and "candidates/ is a link" in result.stderr, result.output
        assert list(elsewhere.iterdir()) == [] and not (out / "index.html").exists()
