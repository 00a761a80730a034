"""Files a sandboxed run hands back to the harness, and nothing else.

A profiler (ncu) must run inside the candidate's sandbox, since it runs the candidate, yet its report has to
reach the harness. No host folder is ever writable by a candidate; instead the namespace's first process (the
init script, root of the namespace, which the candidate cannot signal or ptrace) does the hand-over:

1. before ``pivot_root`` it binds the harness's outbox folder into the new root and at once mounts an empty,
   read-only tmpfs over it: the candidate, with no capabilities, cannot unmount the cover and sees nothing;
2. the command runs with its stdout and stderr in a file of its private work folder (bounded by the tmpfs);
3. when the command ends, the init kills every other process in the namespace (``kill -9 -1``), so nothing of
   the candidate's runs while its files are read, unmounts the cover, and copies the requested files
   (shell patterns under the work folder's ``out/``) into the outbox: regular files only (never a link, a
   fifo or a device), at most ``outbox_bytes`` each, with a manifest of their full sizes.

The harness then reads only that manifest's files from a folder the candidate never saw. What the files say
is still the candidate's to forge (ncu runs as the candidate's user, as it must): a profile is evidence for the
controller, never a verdict.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

WORK_INSIDE = "/tmp/work"  # the candidate's work folder, as the candidate sees it
OUT_INSIDE = f"{WORK_INSIDE}/out"  # where a walled command writes what it hands back
OUTBOX_INSIDE = "/.crucible-outbox"  # the outbox's mount point in the new root, covered while the command runs
CONSOLE = ".console"  # the command's stdout and stderr, kept under OUT_INSIDE and handed back (its tail)
MANIFEST = ".manifest"  # "SIZE NAME" per copied file, written by the init
CONSOLE_BYTES = 1 << 20


def outbox_mount_lines(outbox: Optional[str], uid: Optional[int]) -> list[str]:
    """Before ``pivot_root`` (cwd: the new root, its /tmp mounted): the out folder, the outbox and its cover."""
    if not outbox:
        return []
    owner = [f"chown {uid}:{uid} .{OUT_INSIDE}"] if uid is not None else []
    return [f"mkdir -p .{OUT_INSIDE}", *owner, f"mkdir -p .{OUTBOX_INSIDE}",
            f"mount --bind {shlex.quote(outbox)} .{OUTBOX_INSIDE}",
            f"mount -t tmpfs -o ro,size=4k,mode=0000,nosuid,nodev,noexec crucible-cover .{OUTBOX_INSIDE}"]


def outbox_run_lines(outbox: Optional[str], patterns: list[str], max_bytes: int) -> list[str]:
    """The last lines of the init script: run the command, then hand its files over (or just run it)."""
    if not outbox:
        return ['"$@" || exit $?']
    for p in patterns:
        if not p or p.startswith("/") or ".." in p.split("/") or any(c in p for c in "'\"`$\\\n;&|<> "):
            raise ValueError(f"outbox pattern {p!r}: a plain relative name (with * or ?) under {OUT_INSIDE}")
    box, console = OUTBOX_INSIDE, f"{OUT_INSIDE}/{CONSOLE}"  # the console: opened by the init, before the command
    globs = " ".join(patterns)
    # The candidate owns its work folder and could have swapped it, or out/, for a link to a folder it cannot
    # read: the init (root) then reads only from the real out/ (pwd -P after cd -P), never through a link.
    return [f'rc=0; "$@" > {console} 2>&1 || rc=$?',
            "kill -9 -1 2>/dev/null || true",
            f"umount {box}",
            f': > {box}/{MANIFEST}',
            f'if cd -P {OUT_INSIDE} 2>/dev/null && [ "$(pwd -P)" = {OUT_INSIDE} ]; then',
            f"  if [ -f {CONSOLE} ] && [ ! -L {CONSOLE} ]; then",
            f"    tail -c {CONSOLE_BYTES} {CONSOLE} > {box}/{CONSOLE}",
            "  fi",
            f"  for f in {globs}; do",
            '    d="${f%/*}"  # a pattern with a folder: the folder may not be a link either',
            '    if [ -f "$f" ] && [ ! -L "$f" ] && { [ "$d" = "$f" ] || [ ! -L "$d" ]; }; then',
            '      n="${f##*/}"',
            f'      echo "$(wc -c < "$f") $n" >> {box}/{MANIFEST}',
            f'      head -c {max_bytes} "$f" > "{box}/$n"',
            "    fi",
            "  done",
            "fi",
            "exit $rc"]


def read_outbox(folder: Path, max_bytes: int) -> tuple[dict[str, bytes], str, list[str]]:
    """(files by name, the console's tail, notes on files over ``max_bytes``) from an outbox the init filled."""
    files: dict[str, bytes] = {}
    notes: list[str] = []
    manifest = folder / MANIFEST
    lines = manifest.read_text(errors="replace").splitlines() if manifest.is_file() else []
    for line in lines:
        size, _, name = line.strip().partition(" ")
        if not name or "/" in name or name in (MANIFEST, CONSOLE) or not size.isdigit():
            continue
        if int(size) > max_bytes:
            notes.append(f"{name}: {int(size)} bytes, over the {max_bytes} bytes handed back; left out")
            continue
        try:
            files[name] = (folder / name).read_bytes()
        except OSError:
            continue
    console = folder / CONSOLE
    text = console.read_text(errors="replace") if console.is_file() else ""
    return files, text, notes
