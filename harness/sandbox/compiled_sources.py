"""The C++/CUDA sources a worker's import actually compiled, read back for the static gate (worker side).

The static gate judges ``load_inline`` sources by folding the Python that makes them; a source decoded at run time
(through a helper's parameter, base64, rot13, ``bytes.fromhex``, a data file) folds to nothing the gate can read,
and is ``dynamic_code`` only where the gate sees the call. What the builders wrote is the ground truth: torch's
``load_inline`` writes ``main.cpp`` and ``cuda.cu`` into its build folder, TVM-FFI's the same, and each build's
``build.ninja`` names every source it compiles (``load(sources=[path])`` included, wherever the file lies) with the
flags' ``-D`` macros. So after the import the worker reads them back as text and hands them to the harness, which
judges them with the C++ rules in its own process (``harness.audits.compiled_gate``): no candidate code runs there.

What is read: every ``build.ninja`` under the worker's folder (its ``TMPDIR`` too, so a ``tempfile`` build folder is
found) and under the extension builders' folders, each compile input it names, the source files of those folders,
and the ``#include``s of what was read: quoted ones from the including file's folder, then (quoted or in angle
brackets) from the build's ``-I`` folders that lie in the worker's own folders or the scratch folders (``/tmp``,
``/dev/shm``, ``/var/tmp``), where a header written at run time can be put; but not in the interpreter's prefix, its
site-packages or a ``PYTHONPATH`` folder, where libraries are installed (a virtual environment or packages unpacked
under ``/tmp``: a toolkit's or a library's include folder is not the candidate's text). Not under the worker's caches
(``.cache``: FlashInfer's own JIT; ``.triton``). A source a ``build.ninja`` names that is gone, or text past the
bounds, is reported as unread: the harness cannot clear what it could not read.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

SOURCE_SUFFIXES = frozenset({".cpp", ".cc", ".cxx", ".c", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc"})
MAX_FILE_BYTES = 4 << 20  # the largest generated cuda.cu of an honest extension is well under a megabyte
MAX_TOTAL_BYTES = 24 << 20  # the reply's header is at most 64 MiB (harness.sandbox.protocol.MAX_HEADER)
MAX_FILES = 400
MAX_WALKED = 50_000  # entries looked at while looking for build.ninja files
SKIPPED_FOLDERS = frozenset({".cache", ".triton", "__pycache__"})  # library JIT caches, not the candidate's builds
SCRATCH_FOLDERS = ("/tmp", "/dev/shm", "/var/tmp")  # writable by any process, but a library may be installed there
_COMPILE_RULE_RE = re.compile(r"^build\s+(.+?)(?<!\$):\s*(\w*compile\w*)\s+(.*)$")
_FLAGS_RE = re.compile(r"^\s*(\w*flags)\s*=(.*)$")
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)


def _ninja_paths(text: str) -> list[str]:
    """The paths of a ninja path list (``$ `` an escaped blank, ``$:`` a colon, ``|`` the end of the inputs)."""
    paths, current, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text):
            current += text[i + 1]
            i += 2
            continue
        if c in " \t":
            if current:
                paths.append(current)
            current = ""
        elif c == "|":
            break
        else:
            current += c
        i += 1
    return paths + ([current] if current else [])


def _defines(flags: str) -> dict[str, str]:
    """The ``-D`` macros of a flags line (``-DNAME``, ``-DNAME=VALUE``, ``-D NAME``)."""
    try:
        words = shlex.split(flags)
    except ValueError:
        words = flags.split()
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        text = word[2:] if word.startswith("-D") and len(word) > 2 else (
            words[i + 1] if word == "-D" and i + 1 < len(words) else None)
        if text:
            name, _, value = text.partition("=")
            if re.fullmatch(r"[A-Za-z_]\w*", name):
                found[name] = value if "=" in text else "1"
    return found


def _include_flags(flags: str) -> list[str]:
    """The ``-I`` folders of a flags line (``-Ipath``, ``-I path``), in order."""
    try:
        words = shlex.split(flags)
    except ValueError:
        words = flags.split()
    return [word[2:] if len(word) > 2 else words[i + 1] for i, word in enumerate(words)
            if word.startswith("-I") and (len(word) > 2 or i + 1 < len(words))]


def include_folders(path: Path) -> list[Path]:
    """The ``-I`` folders of a ``build.ninja``'s flags lines (absolute; relative ones from its folder), in order."""
    folders: list[Path] = []
    for line in path.read_text(errors="replace").splitlines():
        flags = _FLAGS_RE.match(line)
        if flags:
            folders += [path.parent / f for f in _include_flags(flags.group(2)) if path.parent / f not in folders]
    return folders


def read_ninja(path: Path) -> tuple[list[tuple[Path, Path]], dict[str, str]]:
    """The (source, object) pairs a ``build.ninja`` compiles (absolute paths) and the ``-D`` macros of its flags."""
    sources: list[tuple[Path, Path]] = []
    defines: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        flags = _FLAGS_RE.match(line)
        if flags:
            defines.update(_defines(flags.group(2)))
            continue
        rule = _COMPILE_RULE_RE.match(line)
        if rule:
            outputs = _ninja_paths(rule.group(1))
            sources += [(path.parent / p, path.parent / outputs[0]) for p in _ninja_paths(rule.group(3)) if outputs]
    return sources, defines


def _ninja_files(roots: Iterable[Path]) -> tuple[list[Path], bool]:
    """The build.ninja files under ``roots``, and whether all were looked through (a folder padded with files could
    otherwise put a build past the bound)."""
    found, walked = [], 0
    for root in roots:
        for folder, subfolders, files in os.walk(root):
            walked += len(subfolders) + len(files)
            if walked > MAX_WALKED:
                return found, False
            subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED_FOLDERS)
            if "build.ninja" in files:
                found.append(Path(folder) / "build.ninja")
    return found, True


class _Reader:
    def __init__(self, seen: dict[str, Any]) -> None:
        self.files: dict[str, dict[str, Any]] = {}
        self.unread: list[str] = []
        self.total = 0
        self.seen = seen  # path -> (size, mtime) of what an earlier collect reported: not sent again unchanged
        self.search: dict[str, list[Path]] = {}  # path -> the -I folders its build searched (the worker's own)

    def read(self, path: Path, defines: Mapping[str, str], why: str, search: Iterable[Path] = ()) -> None:
        key = os.path.abspath(path)
        folders = self.search.setdefault(key, [])
        folders += [f for f in search if f not in folders]
        if key in self.files:
            self.files[key]["defines"].update(defines)
            return
        if not path.is_file():
            if self.seen.get(key, ()) is not None:
                self.seen[key] = None
                self.unread.append(f"{key} ({why}) is gone: it was compiled, then removed")
            return
        stat = path.stat()
        size = stat.st_size
        if self.seen.get(key) == (size, stat.st_mtime_ns):
            return
        self.seen[key] = (size, stat.st_mtime_ns)
        if size > MAX_FILE_BYTES or self.total + size > MAX_TOTAL_BYTES or len(self.files) >= MAX_FILES:
            self.unread.append(f"{key} ({why}): past the {MAX_TOTAL_BYTES >> 20} MiB / {MAX_FILES} files read back")
            return
        self.total += size
        self.files[key] = {"path": key, "text": path.read_text(errors="replace"), "defines": dict(defines)}

    def changed_after(self, source: Path, built: Path) -> None:
        """A source written after its object was compiled is not what was compiled (rewritten to look honest)."""
        try:
            later = source.stat().st_mtime_ns > built.stat().st_mtime_ns
        except OSError:
            return  # gone (said by read) or not built (a failed build: the build's error)
        key = f"(changed) {os.path.abspath(source)}"
        if later and self.seen.get(key) is None:
            self.seen[key] = True
            self.unread.append(f"{os.path.abspath(source)} (compiled into {built}) changed after it was compiled")

    def follow_includes(self) -> None:
        """The ``#include``s of what was read, as the compiler finds them: a quoted one from the including file's
        folder first, then either kind from the build's -I folders in order (a header written beside a source at
        import time, or into a folder the build was pointed at, is compiled into it). An include found nowhere here
        is a toolkit's or a library's header."""
        queue = list(self.files.values())
        while queue:
            entry = queue.pop()
            search = self.search.get(entry["path"], [])
            for quoted, angled in _INCLUDE_RE.findall(entry["text"]):
                name = (quoted or angled).strip()
                folders = ([Path(entry["path"]).parent] if quoted else []) + search
                target = next((f / name for f in folders if (f / name).is_file()), None)
                if target is None or os.path.abspath(target) in self.files:
                    continue
                self.read(target, {}, f"included by {entry['path']}", search)
                added = self.files.get(os.path.abspath(target))
                if added is not None:
                    queue.append(added)


def _library_roots() -> list[str]:
    """Where this interpreter's packages are installed: its prefixes, site-packages and ``PYTHONPATH`` folders (the
    environment's, which the static gate keeps a candidate from rewriting)."""
    import site
    import sys

    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()]
    roots += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [r for r in roots if r and os.path.isdir(r)]


def _inside(folder: Path, roots: Iterable[Path]) -> bool:
    """Is ``folder`` (links resolved) one of ``roots`` or under one: the worker's folders, not a library's."""
    real = Path(os.path.realpath(folder))
    return any(real == Path(os.path.realpath(r)) or Path(os.path.realpath(r)) in real.parents for r in roots)


def collect(workdir: Path, folders: Mapping[str, Path], seen: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``{"files": [{"path", "text", "defines"}], "unread": [why]}``: what this worker's builds compiled; ``seen``
    (kept by the caller between calls): what an earlier call reported, left out unless it changed (a load_inline
    made at the candidate's first call is read after the workload, the import's build not sent again)."""
    reader = _Reader({} if seen is None else seen)
    roots = [Path(workdir), *(f for f in folders.values() if Path(workdir) not in Path(f).parents)]
    ninjas, complete = _ninja_files(r for r in roots if Path(r).is_dir())
    if not complete and reader.seen.get("(walk)") is None:
        reader.seen["(walk)"] = True
        reader.unread.append(f"{workdir} (over {MAX_WALKED} entries): not every build in it could be found")
    libraries = _library_roots()  # once: the interpreter's, not the build's
    for ninja in ninjas:
        try:
            sources, defines = read_ninja(ninja)
            search = [f for f in include_folders(ninja)
                      if _inside(f, roots) or _inside(f, SCRATCH_FOLDERS) and not _inside(f, libraries)]
        except OSError as err:
            reader.unread.append(f"{ninja}: {err}")
            continue
        for source, built in sources:
            if source.suffix.lower() in SOURCE_SUFFIXES:
                reader.read(source, defines, f"compiled by {ninja}", search)
                reader.changed_after(source, built)
    for folder in folders.values():
        folder = Path(folder)
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.suffix.lower() in SOURCE_SUFFIXES and path.is_file():
                    reader.read(path, {}, f"in the build folder {folder}")
    reader.follow_includes()
    return {"files": list(reader.files.values()), "unread": reader.unread}
