"""The extensions a solution built (torch's and TVM-FFI's), kept for its next evaluation.

A Python solution that calls ``torch.utils.cpp_extension.load_inline`` (or ``load``) at import compiles with nvcc in
its worker's private ``TORCH_EXTENSIONS_DIR``; one that calls ``tvm_ffi.cpp.load_inline`` (``build_inline``, ``load``,
``build``) without a ``build_directory`` compiles in ``TVM_FFI_CACHE_DIR`` (tvm_ffi's own variable; unset, it would be
``~/.cache/tvm-ffi``), which the harness sets to a private folder of the worker as well (``EXTENSION_FOLDERS``,
``folder_environment``). Every worker is new: the same source is compiled again for each screening rung, the full
evaluation, the full-audit evaluation and any later submission. On the H200 that was 52-64 s each time for the skill's
CUDA template, 178 s of a 267 s loop round spent compiling one unchanged source three times (run 13). So the worker
hands the folders back right after the build, before it has seen any workload, and the harness keeps them (one tar,
each folder under its label) under a key of the solution's content hash and the toolchain; the next worker of the
same solution on the same toolchain gets them back before the import, and ninja finds nothing to do.

What a folder may carry is bounded on both sides: only the build's own file kinds (sources, objects, the library,
ninja's files), no links, no path outside the folder, at most ``MAX_BYTES``. It is written by a worker that ran the
candidate's import, so it is the candidate's own data: it is only ever handed to a later evaluation of the same
solution (the key holds its content hash), never to another solution, and it is taken before any workload ran, so it
cannot hold the outputs of one. A sandboxed worker builds in the same folders every time (under ``/tmp/work``), which
is what lets ninja reuse the build; without the sandbox the folder differs per worker and ninja compiles again
(harmless).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Union

if TYPE_CHECKING:  # the harness side imports this module before torch
    import torch

MAX_BYTES = 512 << 20  # a CUDA extension's objects and library are a few MB; FlashInfer-sized ones stay under this
MAX_TOTAL_BYTES = 4 << 30  # the whole store: the least recently used copies go first (many candidates, one disk)
# What a torch or TVM-FFI extension build folder holds: ninja's files, the sources load_inline writes, objects, the
# cubins tvm_ffi's embed_cubin writes, the library.
KEPT_SUFFIXES = (".ninja", ".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".o", ".so", ".d", ".cubin")
KEPT_NAMES = (".ninja_log", ".ninja_deps")
MTIMES = ".crucible-mtimes.json"  # the files' modification times in nanoseconds
LAYOUT = "2"  # the copies' layout (each folder under its label), in the key: copies of another layout are never read

# The folders a worker's extension builders write into: the label of each in a kept copy, the variable that names it
# (set for every worker by harness.sandbox.runner.scrubbed_environment), and its folder under the worker's home.
EXTENSION_FOLDERS = (("torch", "TORCH_EXTENSIONS_DIR", ".torch_extensions"),
                     ("tvm-ffi", "TVM_FFI_CACHE_DIR", ".tvm_ffi"))
Folders = Union[Path, Mapping[str, Path]]


def folder_environment(home: Path) -> dict[str, str]:
    """The variables that put each builder's folder under ``home`` (the worker's own folder)."""
    return {variable: str(home / name) for _, variable, name in EXTENSION_FOLDERS}


def extension_folders(workdir: Path, environ: Optional[Mapping[str, str]] = None) -> dict[str, Path]:
    """This worker's extension folders by label: where its environment names them, else under ``workdir``."""
    environ = os.environ if environ is None else environ
    return {label: Path(environ.get(variable) or Path(workdir) / name) for label, variable, name in EXTENSION_FOLDERS}


def _kept(path: Path) -> bool:
    return path.name in KEPT_NAMES or path.suffix in KEPT_SUFFIXES


def _labelled(folders: Folders) -> dict[str, Path]:
    """Label -> folder; one folder alone is the tar's root (label "")."""
    return {"": Path(folders)} if isinstance(folders, (str, os.PathLike)) else {k: Path(v) for k, v in folders.items()}


def pack(folders: Folders, max_bytes: int = MAX_BYTES) -> tuple[Optional[bytes], str]:
    """A tar of the build files of ``folders`` (one folder, or label -> folder: each under its label), modification
    times kept (ninja compares them), or None and why not."""
    present = {label: folder for label, folder in _labelled(folders).items() if folder.is_dir()}
    if not present:
        return None, "no extension folder"
    files = {(f"{label}/" if label else "") + p.relative_to(folder).as_posix(): p
             for label, folder in present.items()
             for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink() and _kept(p)}
    if not files:
        return None, "nothing built"
    total = sum(p.stat().st_size for p in files.values())
    if total > max_bytes:
        return None, f"{total / 2**20:.0f} MiB of build files, over the {max_bytes / 2**20:.0f} MiB kept"
    buffer = io.BytesIO()
    # Nanoseconds, not tar's float seconds: ninja's deps log holds each object's time to the nanosecond and calls
    # an object whose time came back even 1 ns later "out of date", compiling everything again.
    times = {name: p.stat().st_mtime_ns for name, p in files.items()}
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        manifest = json.dumps(times).encode()
        info = tarfile.TarInfo(MTIMES)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for name, path in files.items():
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue(), f"{len(files)} files, {total / 2**20:.1f} MiB"


def unpack(data: bytes, folders: Folders) -> int:
    """Extract a ``pack`` into ``folders`` (as packed: one folder, or label -> folder, a member under a label no
    folder has is skipped): regular files of the kept kinds only, each inside its own folder (tarfile's ``data``
    filter refuses absolute paths, ``..``, links and devices). Returns the files written."""
    targets = _labelled(folders)
    written, times = [], {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            if member.name == MTIMES and member.isfile():
                times = json.loads(tar.extractfile(member).read())
            if not member.isfile() or not _kept(Path(member.name)):
                continue
            label, _, rest = member.name.partition("/") if "" not in targets else ("", "", member.name)
            folder = targets.get(label)
            if folder is None or not rest:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            tar.extract(member.replace(name=rest, deep=False), folder, filter="data")
            written.append((member.name, folder / rest, folder))
    for name, target, folder in written:
        ns = times.get(name) if isinstance(times, dict) else None
        if isinstance(ns, int) and folder.resolve() in target.resolve().parents:
            os.utime(target, ns=(ns, ns), follow_symlinks=False)
    return len(written)


def as_tensor(data: bytes) -> "torch.Tensor":
    """A packed folder as the protocol carries it (a uint8 tensor in the safetensors payload)."""
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def as_bytes(tensor: "torch.Tensor") -> bytes:
    return tensor.numpy().tobytes()


class ExtensionCache:
    """The harness's store of built extension folders (the archive's ``cache/extensions``; never a worker's)."""

    def __init__(self, folder: Path, max_bytes: int = MAX_BYTES, max_total_bytes: int = MAX_TOTAL_BYTES):
        self.folder = Path(folder)
        self.max_bytes, self.max_total_bytes = max_bytes, max_total_bytes

    @staticmethod
    def key(solution_hash: str, toolchain: str) -> str:
        return hashlib.sha256(f"{solution_hash}\n{toolchain}\nlayout {LAYOUT}".encode()).hexdigest()[:32]

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.tar"

    def get(self, key: str) -> Optional[bytes]:
        path = self._path(key)
        try:
            data = path.read_bytes() if path.is_file() else None
            if data is not None:
                os.utime(path)  # used now: the last to be evicted
            return data
        except OSError:
            return None

    def put(self, key: str, data: bytes) -> bool:
        """Keep ``data`` under ``key`` (a newer build replaces an older one) unless it is too large; written whole
        or not at all; then the least recently used copies go past the store's limit."""
        path = self._path(key)
        if not data or len(data) > self.max_bytes:
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            partial.write_bytes(data)
            os.replace(partial, path)
        except OSError:
            partial.unlink(missing_ok=True)
            return False
        self._evict(keep=path)
        return True

    def _evict(self, keep: Path) -> None:
        entries = []
        for entry in self.folder.glob("*.tar"):
            try:
                stat = entry.stat()
            except OSError:
                continue
            entries.append((stat.st_mtime, stat.st_size, entry))
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_total_bytes:
                break
            if entry != keep:
                entry.unlink(missing_ok=True)
                total -= size
