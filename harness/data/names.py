"""Names that become file names: a solution named after its parameters can outgrow the 255 bytes a file name holds."""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath
from typing import Optional

NAME_MAX = 200  # room left for prefixes (`r12_`, `sweep3_`) and suffixes (`.json`) within 255 bytes


def bounded(name: str, limit: int = NAME_MAX, key: Optional[str] = None) -> str:
    """``name`` itself up to ``limit`` characters; longer, its readable start and an 8-hex digest of ``key`` (default:
    the whole name), so two long names that differ only past the cut stay different."""
    if len(name) <= limit:
        return name
    return name[:limit - 9].rstrip("_") + "_" + hashlib.sha256((key or name).encode()).hexdigest()[:8]


SOURCE_PATH_CHARS, SOURCE_PATH_DEPTH = 1024, 32  # a solution's source path: what any file system holds


def source_path_problem(path: str) -> Optional[str]:
    """Why a solution's source path cannot be written under its folder, or None: one that climbs out of it, or one
    no file system holds (the latter was the worker's own error, archived as the candidate's RUNTIME_ERROR: a NUL byte
    a ValueError, 2000 nested folders a RecursionError while writing them)."""
    parts = PurePosixPath(path).parts
    if not path or PurePosixPath(path).is_absolute() or path.startswith("\\") or ".." in parts or "\\" in path:
        return f"source path {path!r} must be relative and stay inside the solution folder"
    if (any(not c.isprintable() for c in path) or len(path) > SOURCE_PATH_CHARS or len(parts) > SOURCE_PATH_DEPTH
            or any(len(part.encode(errors="surrogatepass")) > 255 for part in parts)):
        return (f"source path {path[:80]!r}: printable characters only, at most {SOURCE_PATH_CHARS} characters, "
                f"{SOURCE_PATH_DEPTH} folders deep, 255 bytes a name")
    return None


def source_paths_problem(paths: list[str]) -> Optional[str]:
    """Two sources written to one file (``./kernel.py`` and ``kernel.py``), or a name that is a file and another
    source's folder (``kernel.py`` and ``kernel.py/x.py``)."""
    seen: set[str] = set()
    if dupes := sorted({p for p in paths if p in seen or seen.add(p)}):
        return f"duplicate source paths: {dupes}"
    if clash := sorted(seen & {q.as_posix() for p in paths for q in PurePosixPath(p).parents}):
        return f"source paths used both as a file and as a folder: {clash[:5]}"
    return None
