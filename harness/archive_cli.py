"""`harness list` (the archive's submissions) and `harness copy-archive` (an archive made small enough to carry to
another host: harness.archive.travel)."""

from __future__ import annotations

import json
from typing import Optional

import click

from .cli_common import ARCHIVE_HELP


def dataset_names(definition: str, dataset: Optional[str]) -> list[str]:
    """The definitions ``definition`` names in the dataset: itself, or an alias's. Where it names none, one line
    and exit 2 with the known names, as `harness submit` says it (Dataset.resolve)."""
    from .cli_common import fail
    from .data.dataset import Dataset
    from .data.schema import SchemaError

    try:
        return Dataset(dataset).resolve(definition)
    except (SchemaError, ValueError) as e:  # also a dataset that is missing or malformed
        fail(" ".join(str(e).split()))
    raise AssertionError


def listed_definitions(db: object, definition: str, dataset: Optional[str]) -> list[str]:
    """The definitions a `--definition` filter of a listing means: the name itself where the archive holds
    submissions of it (an archive can outlive the dataset that defined them), else what the dataset calls by it
    (an alias: several). A name neither knows is one line naming the known ones, never an empty table that
    reads as "nothing was submitted"."""
    from .archive.queries import definition_submitted

    return [definition] if definition_submitted(db, definition) else dataset_names(definition, dataset)


@click.command("list")
@click.option("--archive", "archive_path", type=click.Path(), help=ARCHIVE_HELP)
@click.option("--definition", help="Only this definition (or alias).")
@click.option("--dataset", type=click.Path(),
              help="Trace-set folder that knows the definitions (read only for a --definition the archive has not "
                   "got).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True)
def list_cmd(archive_path: Optional[str], definition: Optional[str], dataset: Optional[str], limit: int,
             as_json: bool) -> None:
    """List submissions, newest first."""
    from rich.markup import escape
    from rich.table import Table

    from .archive.seal import MODIFIED_WARNING
    from .cli_common import open_archive, out, styled

    archive = open_archive(archive_path, reading=True)
    limit = min(limit, (1 << 63) - 1)  # SQLite's largest
    names = [None] if definition is None else listed_definitions(archive.db, definition, dataset)
    rows = sorted((r for name in names for r in archive.submissions(limit=limit, definition=name)),
                  key=lambda r: r["id"], reverse=True)[:limit]
    for r in rows:
        check = archive.verify_seal(r["id"])
        r["seal_state"], r["seal_detail"] = check.state, check.detail
    if as_json:
        out.print_json(json.dumps(rows, default=str))
        return
    table = Table()
    for col in ("id", "solution", "definition", "author", "status", "workloads", "created"):
        table.add_column(col)
    for r in rows:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(r["counts"].items()))
        status = styled(r["status"])
        if r["seal_state"] == "modified":
            status += f" [bold red]! {MODIFIED_WARNING}[/]"
        table.add_row(str(r["id"]), escape(r["solution_name"]), escape(r["definition"]), escape(r["author"]), status,
                      counts, (r["created_at"] or "")[:19])
    out.print(table)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@click.command("copy-archive")
@click.argument("dest", type=click.Path(file_okay=False))
@click.option("--archive", "archive_path", type=click.Path(),
              help="Archive folder to copy (default: $CRUCIBLE_ARCHIVE, else ./artifacts).")
@click.option("--with-outputs", is_flag=True, help="Also copy the reference's cached outputs (large; recomputed "
                                                   "on the next host when left out).")
@click.option("--with-jit", is_flag=True, help="Also copy FlashInfer's JIT modules kept in the archive "
                                              "(cache/flashinfer), their .so files alone: the next host loads "
                                              "them instead of compiling.")
@click.option("--json", "as_json", is_flag=True, help="Print what was copied as JSON.")
def copy_archive(dest: str, archive_path: Optional[str], with_outputs: bool, with_jit: bool, as_json: bool) -> None:
    """Copy the archive into DEST (a new or empty folder) to carry to another host: every submission, evaluation,
    baseline and reference figure, blob and the seal key; the reference's cached outputs and FlashInfer's JIT
    modules only when asked. Seals still verify in the copy."""
    import sqlite3

    from .archive.database import ArchiveError
    from .archive.storage import storage_failure, storage_where
    from .archive.travel import travel_copy
    from .cli_common import fail, open_archive, out

    source = open_archive(archive_path, reading=True)
    try:
        copy = travel_copy(source, dest, with_outputs=with_outputs, with_jit=with_jit)
    except (ArchiveError, OSError, sqlite3.Error) as e:  # nothing of a failed copy is left in DEST
        full = storage_failure(e)
        fail(f"cannot copy the archive: {full} (writing {storage_where(e, dest)}); nothing was left in {dest}"
             if full else f"cannot copy the archive: {e}")
        return
    if as_json:
        click.echo(json.dumps(copy.model_dump()))
        return
    out.print(f"copied to {copy.folder}: database {_mb(copy.database_bytes)}, {copy.blobs_copied} blobs "
              f"({_mb(copy.blob_bytes)})" + (f", FlashInfer JIT {_mb(copy.jit_bytes)}" if copy.jit_bytes else ""))
    if copy.outputs_left_out:
        out.print(f"left out: {copy.outputs_left_out} cached reference outputs ({_mb(copy.output_bytes_left_out)}), "
                  "recomputed where needed")
