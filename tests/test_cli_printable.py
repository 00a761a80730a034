"""What a candidate wrote (its log, its error message) reaches the terminal as text, never as terminal control:
the CLIs' consoles show control characters instead of obeying them (harness.cli_common.SafeConsole)."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from harness.cli_common import SafeConsole, printable


@pytest.mark.parametrize("raw, shown", [
    ("plain text\nsecond line\ttab", "plain text\nsecond line\ttab"),
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear screen, cursor home
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # retitle the terminal
    ("over\rwrite", "over\\x0dwrite"),
    ("\x9b31m", "\\x9b31m"),  # the one-byte CSI
    ("back\x08space\x7f", "back\\x08space\\x7f"),
    ("ünïcødé ✓", "ünïcødé ✓"),
])
def test_printable(raw, shown):
    assert printable(raw) == shown


def test_a_table_cell_and_a_printed_log_cannot_move_the_cursor():
    buffer = io.StringIO()
    console = SafeConsole(file=buffer, force_terminal=True, color_system="standard", width=120, highlight=False)
    table = Table()
    table.add_column("note")
    table.add_row("\x1b[1A\x1b[2K\x1b[32m PASSED (all audits clean)")
    console.print(table)
    console.print("log: \x1b[2J\x1b]0;pwned\x07", markup=False)
    console.print("[red]FAILED[/]")
    text = buffer.getvalue()
    assert "\x1b[1A" not in text and "\x1b[2K" not in text and "\x1b[2J" not in text and "\x1b]0;" not in text
    assert "\\x1b[1A" in text and "\\x1b]0;pwned\\x07" in text
    assert "\x1b[31m" in text  # the console's own styling still reaches the terminal


def test_a_findings_line_number_is_not_an_emoji_and_no_finding_is_dropped_silently(monkeypatch):
    import harness.result_view as view

    buffer = io.StringIO()
    monkeypatch.setattr(view, "out", SafeConsole(file=buffer, width=200, highlight=False))
    findings = [{"severity": "warning", "rule": "torch_compute", "path": "fused_moe.py", "line": 100,
                 "message": f"calls torch.cumsum ({i})"} for i in range(12)]
    view.print_promotability(["static gate: torch_compute unconfirmed"], findings)
    text = buffer.getvalue()
    assert "fused_moe.py:100:" in text and "💯" not in text
    assert "and 2 more static finding(s)" in text


def test_broken_markup_in_candidate_text_is_printed_not_raised():
    buffer = io.StringIO()
    console = SafeConsole(file=buffer, width=120, highlight=False)
    table = Table()
    table.add_column("decision")
    table.add_row("rejected: [/bold]x.py")  # a model's file name, as the controller's round table shows it
    console.print(table)
    console.print("candidate [/] said")
    assert "[/bold]x.py" in buffer.getvalue() and "candidate [/] said" in buffer.getvalue()


def test_an_enormous_name_or_author_is_refused_before_anything_is_archived(tiny_dataset_root, tmp_path):
    """Every command that lists a submission prints its name and author: a 3 MB name took `harness show` 16 s and
    6 MB of terminal. Both are bounded (NAME_CHARS); past it, `harness submit` says so, exit 2, nothing archived."""
    import json

    from click.testing import CliRunner

    from harness.cli import main as harness_cli
    from harness.data.schema import NAME_CHARS
    from sandbox_attacks import hostile_solution

    for field in ("name", "author"):
        solution = hostile_solution("enormous", [])
        solution[field] = "N" * 3_000_000
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps(solution))
        archive = tmp_path / f"archive-{field}"
        archive.mkdir()
        res = CliRunner().invoke(harness_cli, ["submit", str(path), "--archive", str(archive), "--dataset",
                                               str(tiny_dataset_root)])
        assert res.exit_code == 2, res.output[-500:]
        assert f"{field}: String should have at most {NAME_CHARS} characters" in res.output
        assert len(res.output) < 1000 and list(archive.iterdir()) == []
