"""An archive small enough to carry to the next host: every row and blob except the reference's cached outputs.

The records a team keeps across hosts (submissions, evaluations, baseline and reference figures keyed by GPU
model, the seal key) are a few MB; what makes an archive large is the trusted reference's cached outputs
(harness.pipeline.reference_cache, up to 16 MB per workload and seed), which a new host recomputes in seconds,
and FlashInfer's JIT modules (``cache/flashinfer``), which it would recompile in about half a minute. A travel
copy leaves both out unless asked, so a GPU host that can carry only tens of MB can continue a record another
host started, and reuse its baseline figures after a spot check. Asked for, the JIT modules travel as their
``.so`` files alone (a fifth of the folder; FlashInfer loads them as prebuilt modules there:
harness/sandbox/flashinfer_prebuilt), without the objects and build files, which only a rebuild would read.

The copy is made with SQLite's online backup (consistent while another process writes the source), then the
cached outputs' rows are deleted from the copy and the file vacuumed. Seals cover submissions, evaluations
and their timing, never the cache, so every seal still verifies in the copy.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from pathlib import Path

from pydantic import BaseModel, Field

from .database import ARCHIVE_DB, BLOBS, Archive, ArchiveError
from .seal import SEAL_KEY

_BLOB_NAME = re.compile(r"[0-9a-f]{64}")  # blobs/ab/cdef...: a SHA-256 split after two characters
OUTPUTS_KIND = "trusted_outputs"  # the blob kind of the reference's cached outputs
JIT_CACHE = Path("cache") / "flashinfer"


class TravelCopy(BaseModel):
    """What a travel copy holds and what it left out."""

    folder: str = Field(description="the new archive folder")
    database_bytes: int = Field(description="size of the copied archive.db after vacuum")
    blobs_copied: int = Field(description="content-addressed blobs copied (solutions, logs, builds...)")
    blob_bytes: int = Field(description="their total size")
    outputs_left_out: int = Field(description="cached reference outputs not copied (recomputed on the next host)")
    output_bytes_left_out: int = Field(description="their total size")
    jit_bytes: int = Field(0, description="FlashInfer JIT modules (their .so files) copied (0 unless asked)")


def _copy_jit_modules(source: Path, dest: Path) -> int:
    """Copy each compiled module of FlashInfer's JIT folder, ``<version>/<archs>/cached_ops/<name>/<name>.so``, to
    the same place under ``dest``; the bytes copied."""
    copied = 0
    for module in sorted(source.glob("**/cached_ops/*/*.so")) if source.is_dir() else []:
        if module.stem != module.parent.name or not module.is_file():
            continue  # FlashInfer loads <name>/<name>.so only
        target = dest / module.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(module, target)
        copied += target.stat().st_size
    return copied


def travel_copy(source: Archive, dest: Path | str, with_outputs: bool = False, with_jit: bool = False) -> TravelCopy:
    """Copy ``source`` into the new folder ``dest`` (absent or empty), leaving out the reference's cached
    outputs (unless ``with_outputs``) and FlashInfer's JIT modules (unless ``with_jit``).

    All or nothing: the database is written under a temporary name and given its own last, so a copy cut short
    (a full disk, a kill) never looks like an archive; one that fails is removed, ``dest`` left as it was."""
    dest = Path(dest)
    if dest.is_symlink() and not dest.exists():
        raise ArchiveError(f"{dest} is a link to nothing ({os.readlink(dest)}); name a new or empty folder")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ArchiveError(f"{dest} exists and is not an empty folder")
    if dest.resolve() == source.folder.resolve():
        raise ArchiveError("the copy must go to another folder")
    made = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _copy_into(source, dest, with_outputs, with_jit)
    except BaseException:
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        else:  # it was empty: emptied again
            for child in list(dest.iterdir()):
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
        raise


def _copy_into(source: Archive, dest: Path, with_outputs: bool, with_jit: bool) -> TravelCopy:
    db_path = dest / ARCHIVE_DB
    partial = dest / f"{ARCHIVE_DB}.partial"
    target = sqlite3.connect(partial)
    try:
        source.db.conn.backup(target)
        left_out: set[str] = set()
        if not with_outputs:
            # Blobs are content-addressed and filed under the kind they were first stored as; a cached output is
            # a safetensors file of one (workload, seed)'s reference outputs, bytes nothing else stores.
            left_out = {row[0] for row in target.execute("SELECT sha256 FROM blobs WHERE kind = ?", [OUTPUTS_KIND])}
            target.execute("DELETE FROM trusted_outputs")
            target.execute("DELETE FROM blobs WHERE kind = ?", [OUTPUTS_KIND])
            target.commit()
        target.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, no -wal beside it
        target.execute("VACUUM")
    finally:
        target.close()
    copied = copied_bytes = skipped_bytes = 0
    for blob in (source.folder / BLOBS).glob("*/*"):
        digest = blob.parent.name + blob.name
        if not (_BLOB_NAME.fullmatch(digest) and blob.is_file()):  # a .tmp being written; files not blobs (a copy
            continue  # made inside blobs/ itself)
        if digest in left_out:
            skipped_bytes += blob.stat().st_size
            continue
        (dest / BLOBS / blob.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(blob, dest / BLOBS / blob.parent.name / blob.name)
        copied += 1
        copied_bytes += blob.stat().st_size
    key = source.folder / SEAL_KEY
    if key.is_file():
        shutil.copy2(key, dest / SEAL_KEY)  # the seals verify on the next host, and the seed secret is the same
    jit = _copy_jit_modules(source.folder / JIT_CACHE, dest / JIT_CACHE) if with_jit else 0
    os.replace(partial, db_path)  # last: only a whole copy is an archive
    return TravelCopy(folder=str(dest), database_bytes=db_path.stat().st_size, blobs_copied=copied,
                      blob_bytes=copied_bytes, outputs_left_out=len(left_out), output_bytes_left_out=skipped_bytes,
                      jit_bytes=jit)
