"""`harness copy-archive`: an archive made small enough to carry to another host (harness.archive.travel)."""

from __future__ import annotations

import json
from typing import Optional

import click


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
