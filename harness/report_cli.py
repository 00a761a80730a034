"""`harness report`, `harness browse`, `harness diff`: review commands over the archive.

Standalone click commands; ``harness.cli`` registers them on its group::

    from .report_cli import browse, diff, report
    main.add_command(report); main.add_command(browse); main.add_command(diff)

Their shared helpers (consoles, errors, opening the archive) come from ``harness.cli_common``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Optional

import click


@click.command()
@click.option("--archive", "archive_path", type=click.Path(),
              help="Archive folder (default: $CRUCIBLE_ARCHIVE, else ./artifacts).")
@click.option("--definition", help="Only this definition.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="report", show_default=True,
              help="Folder to write index.html and its linked files into.")
@click.option("--rounds", "rounds_file", type=click.Path(exists=True, dir_okay=False),
              help="JSON list of controller rounds (run, round, best_latency_ms, spend_usd, candidates, definition).")
@click.option("--dataset", type=click.Path(), help="Trace-set folder, for the workloads' bytes and flops (roofline).")
@click.option("--plots", type=click.Choice(["auto", "matplotlib", "builtin"]), default="auto", show_default=True,
              help="auto: matplotlib when installed, else the built-in SVG renderer.")
@click.option("--open", "open_browser", is_flag=True, help="Open the report in a browser when written.")
@click.option("--force", is_flag=True,
              help="Write into --out even where it holds files that are not an earlier report (they may be "
                   "overwritten).")
def report(archive_path: Optional[str], definition: Optional[str], out_dir: str, rounds_file: Optional[str],
           dataset: Optional[str], plots: str, open_browser: bool, force: bool) -> None:
    """Write a self-contained HTML report: leaderboards, per-workload plots, roofline, controller trajectory.
    --out must be new, empty or an earlier report (its marker file or page tag): nothing else is overwritten."""
    from .cli_common import NOT_A_FOLDER, fail, open_archive, out
    from .review import gather_report, load_rounds_file, write_report
    from .review.pages import out_folder_refusal

    refusal = None if force else out_folder_refusal(out_dir)
    if refusal:
        fail(refusal)
    if plots == "matplotlib":
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            fail("--plots matplotlib needs matplotlib (pip install 'crucible[report]')")
    archive = open_archive(archive_path, reading=True)
    if definition is not None:  # a name neither the archive nor the dataset knows: said, not an empty report
        from .archive_cli import listed_definitions

        listed_definitions(archive.db, definition, dataset)
    rounds = None
    if rounds_file:
        try:
            rounds = load_rounds_file(rounds_file)
        except (ValueError, json.JSONDecodeError) as e:
            fail(f"--rounds: {e}")
    ds = None
    try:
        from .data.dataset import Dataset

        ds = Dataset(dataset)
    except Exception as e:  # the roofline falls back to the floors; a bad --dataset is still an error
        if dataset:
            fail(str(e))
    data = gather_report(archive, definition=definition, rounds=rounds, dataset=ds)
    try:
        index = write_report(archive, out_dir, data=data, backend=plots)
    except OSError as e:
        fail(f"cannot write the report to {out_dir}: "
             + (NOT_A_FOLDER if isinstance(e, FileExistsError) else str(e.strerror or e)))
    n = sum(len(s.submissions) for s in data.sections)
    out.print(f"wrote {index} ({len(data.sections)} definitions, {n} submissions)", highlight=False)
    for notice in data.notices:
        out.print(f"[yellow]notice:[/] {notice}", highlight=False)
    if open_browser:
        import webbrowser

        webbrowser.open(index.resolve().as_uri())


@click.command()
@click.option("--archive", "archive_path", type=click.Path(),
              help="Archive folder (default: $CRUCIBLE_ARCHIVE, else ./artifacts).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8001, show_default=True, type=click.IntRange(0, 65535))
@click.option("--no-open", is_flag=True, help="Do not open a browser.")
@click.option("--search", "search_text", help="Search sources, logs and transcripts here and print the hits instead.")
def browse(archive_path: Optional[str], host: str, port: int, no_open: bool, search_text: Optional[str]) -> None:
    """Open the archive in datasette: candidates, evaluations, audits, transcripts, full-text search."""
    from rich.markup import escape
    from rich.table import Table

    from .cli_common import fail, open_archive, out
    from .archive.queries import database_file
    from .archive.views import (datasette_command, datasette_metadata, has_review_tables, search_documents,
                                sync_documents)

    if search_text is not None and not search_text.strip():  # `--search ''` would start the server instead
        fail("--search names nothing to search for (give one or more words)")
    archive = open_archive(archive_path, reading=True)
    if not has_review_tables(archive.db):
        fail("this archive has no review views (the m005_review_views migration is not registered)")
    added = sync_documents(archive.db, archive.blob_dir)
    if added:
        out.print(f"indexed {added} new documents", highlight=False)
    if search_text:
        hits = search_documents(archive.db, search_text)
        table = Table()
        for col in ("kind", "title", "submission", "snippet"):
            table.add_column(col)
        for h in hits:
            table.add_row(h["kind"], escape(h["title"] or ""), str(h["submission_id"] or ""),
                          escape((h["snippet"] or "").replace("\n", " ")[:160]))
        out.print(table)
        return
    try:
        import datasette  # noqa: F401
    except ImportError:
        fail("harness browse needs datasette: pip install 'crucible[browse]'")
    db_path = Path(database_file(archive.db))
    with tempfile.TemporaryDirectory(prefix="crucible-browse-") as tmp:
        meta = Path(tmp) / "metadata.json"
        meta.write_text(json.dumps(datasette_metadata(db_path.stem), indent=2))
        cmd = datasette_command(db_path, meta, host=host, port=port, open_browser=not no_open)
        out.print(f"datasette on http://{host}:{port}/{db_path.stem} (Ctrl-C stops it)", highlight=False)
        code = _run_until_stopped(cmd)
    sys.exit(code)


def _run_until_stopped(cmd: list[str]) -> int:
    """Run the server; Ctrl-C, SIGTERM or SIGHUP here stops it too (no orphaned datasette)."""
    import signal
    import subprocess

    proc = subprocess.Popen(cmd)

    def stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4g}"


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--archive", "archive_path", type=click.Path(),
              help="Archive folder (default: $CRUCIBLE_ARCHIVE, else ./artifacts).")
@click.option("--definition", help="Pick the solutions' submissions for this definition.")
@click.option("--context", "-U", default=3, show_default=True, type=click.IntRange(0, 10_000),
              help="Lines of context in the source diff.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--stat", is_flag=True, help="Only the changed files' line counts, not the diff itself.")
def diff(a: str, b: str, archive_path: Optional[str], definition: Optional[str], context: int, as_json: bool,
         stat: bool) -> None:
    """Compare solutions A and B: source diff and per-workload latency change.

    A and B are submission ids, solution hashes, solution names (their latest submission) or solution hash
    prefixes (6 or more hex characters). An id or a whole hash wins; a reference that is both a solution's name
    and a prefix of another solution's hash is an error that lists both.
    """
    from rich.markup import escape
    from rich.table import Table

    from .archive.database import ArchiveError
    from .cli_common import fail, open_archive, out, styled
    from .review import diff_submissions

    archive = open_archive(archive_path, reading=True)
    try:
        d = diff_submissions(archive, a, b, definition=definition, context=context)
    except ArchiveError as e:
        fail(str(e))
    if as_json:
        out.print_json(json.dumps(d.to_json(), default=str))
        return
    out.print(f"[bold]A[/] submission {d.a.submission_id}: {escape(d.a.solution_name)} ({d.a.solution_hash[:12]}) "
              f"{styled(d.a.status)}", highlight=False)
    out.print(f"[bold]B[/] submission {d.b.submission_id}: {escape(d.b.solution_name)} ({d.b.solution_hash[:12]}) "
              f"{styled(d.b.status)}", highlight=False)
    if d.a.definition != d.b.definition:
        out.print(f"[yellow]notice:[/] different definitions: {d.a.definition} vs {d.b.definition}", highlight=False)
    if d.unreadable_sources:  # a missing or damaged blob: the sources are unknown, never "identical"
        out.print(f"[yellow]sources: cannot be read:[/] {escape('; '.join(d.unreadable_sources))}", highlight=False)
    elif d.same_source:
        out.print("sources: identical", highlight=False)
    for f in d.files:
        if f.change == "unchanged":
            continue
        out.print(f"[bold]{escape(f.path)}[/]: {f.change}, [green]+{f.added}[/] [red]-{f.removed}[/]", highlight=False)
        if stat:
            continue
        for line in f.lines:
            style = ("bold" if line.startswith(("+++", "---")) else "green" if line.startswith("+")
                     else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else "")
            out.print(f"[{style}]{escape(line)}[/]" if style else escape(line), highlight=False, soft_wrap=True)
    table = Table(title="latency per workload (ms; speedup = A / B, above 1x: B is faster)", title_justify="left")
    for col in ("workload", "A status", "B status", "A ms", "B ms", "change", "speedup"):
        table.add_column(col, justify="right" if col in ("A ms", "B ms", "change", "speedup") else "left",
                         no_wrap=True)
    for w in d.workloads:
        change = "-" if w.change is None else f"{100 * w.change:+.1f}%"
        color = "" if w.change is None else ("green" if w.change < -0.01 else "red" if w.change > 0.01 else "")
        table.add_row(w.label, styled(w.a_status) if w.a_status else "-", styled(w.b_status) if w.b_status else "-",
                      _fmt(w.a_ms), _fmt(w.b_ms), f"[{color}]{change}[/]" if color else change,
                      "-" if w.speedup is None else f"{w.speedup:.3g}x")
    out.print(table)
    g = d.geomean_speedup
    if g is not None:
        out.print(f"geometric mean speedup of B over A on {sum(1 for w in d.workloads if w.speedup)} workloads: "
                  f"{g:.3g}x", highlight=False)
    for key, name in (("vs_reference", "score vs reference"), ("vs_flashinfer_official", "score vs FI official")):
        sa, sb = d.a.score(key), d.b.score(key)
        if sa is not None or sb is not None:
            out.print(f"{name}: A {_fmt(sa)}x, B {_fmt(sb)}x", highlight=False)
