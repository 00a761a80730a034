"""The sandbox around a profiler's run: ncu runs the candidate, so ncu runs where candidates run.

``Wall`` gives each profiler command (the collecting run, and the ``--import`` that reads the report back) the
candidate worker's sandbox (harness.sandbox.isolation: its own PID, mount, network and IPC namespaces, an
unprivileged user, the cgroup and rlimits), with what a profile needs and nothing more in view:

- an inbox, read-only: the solution file and a one-workload copy of the trace set (its definition file, the
  workload's line and label, a link to the dataset's ``blob/``), so the rest of the dataset and the archive
  stay out of view as they do for a worker;
- the profiler's own installation (read-only) where it is not under the system folders;
- the files the command writes under its work folder's ``out/``, handed back by the sandbox's first process
  (harness.sandbox.outbox): no host folder is writable by the candidate.

Where the host cannot give the full sandbox, the command runs as before (scrubbed environment, no network,
rlimits) and the profile says ``sandbox: reduced (why)``; ``sandbox=False`` on the request does that on purpose.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..sandbox.isolation import SYSTEM_DIRS, Sandbox, load_sandbox_policy, make_sandbox
from ..sandbox.outbox import read_outbox
from .model import ProfileRequest
from .process import _Run, run_bounded
from .tools import _tool_environment

OUTPUT_BYTES = 256 << 20  # the most of one file handed back (an ncu report of one call is a few MiB)


@dataclass
class Walled:
    """One command's run inside the wall: its process, the files it handed back, and the sandbox it had."""

    run: _Run
    command: list[str] = field(default_factory=list)  # as it ran (inside the sandbox: its paths there)
    files: dict[str, bytes] = field(default_factory=dict)
    sandbox: str = ""
    notes: list[str] = field(default_factory=list)


class Wall:
    """The inbox of one profile request, and a fresh sandbox for each command run for it."""

    def __init__(self, request: ProfileRequest, tool: Optional[str] = None):
        self.request = request
        self.tool_dirs = _tool_dirs(tool)
        self.inbox = Path(tempfile.mkdtemp(prefix="crucible-profile-in-"))
        self.inbox.chmod(0o755)  # the sandbox's user reads it (read-only bound; nothing secret in it)
        self.solution = self.inbox / "solution.json"
        self.dataset = self.inbox / "dataset"
        try:
            self.workload = _write_inbox(request, self.solution, self.dataset)  # the uuid the target is given
        except BaseException:  # nothing left behind by a request that cannot be prepared
            self.close()
            raise

    def put(self, name: str, data: bytes) -> Path:
        """A file the next command reads (the report for ``ncu --import``), in the read-only inbox."""
        path = self.inbox / name
        path.write_bytes(data)
        path.chmod(0o644)
        return path

    def run(self, argv: Callable[[Path], list[str]], outputs: Sequence[str], timeout_s: float,
            env_extra: Optional[dict[str, str]] = None, gpu: bool = True) -> Walled:
        """``argv(out_dir)`` run in a fresh sandbox; ``outputs`` (patterns under ``out_dir``) handed back."""
        request = self.request
        hidden = [str(Path(h).resolve()) for h in request.hidden]
        readable = [str(Path(__file__).resolve().parents[1]), str(self.inbox), *self.tool_dirs, *_blob_dirs(request)]
        readable += _bytecode_folders()
        box = make_sandbox(load_sandbox_policy(request.dataset_root), "candidate", readable, hidden,
                           os.environ.get("PYTHONPATH", ""), gpu=gpu and not request.allow_cpu,
                           enabled=request.sandbox, network=not request.isolate_network, outbox=list(outputs))
        try:
            return self._run_in(box, argv, outputs, timeout_s, env_extra or {})
        finally:
            box.close()

    def _run_in(self, box: Sandbox, argv: Callable[[Path], list[str]], outputs: Sequence[str], timeout_s: float,
                env_extra: dict[str, str]) -> Walled:
        from ..sandbox.bytecode import worker_bytecode
        from ..sandbox.runner import network_isolation

        out_dir = box.workdir_inside / "out"
        env = _tool_environment({**worker_bytecode()[0], **env_extra}, home=box.workdir_inside)
        prefix: tuple[str, ...] = ()
        if not box.full and self.request.isolate_network:
            prefix = network_isolation()[0]
        command = argv(out_dir)
        run = run_bounded([*prefix, *box.command(command)], env, box.folder if box.full else out_dir.parent, timeout_s)
        limit = box.exit_reason(run.returncode)
        if limit:
            run.stderr += f"\nsandbox: {limit}"
        if box.full:
            files, console, notes = read_outbox(box.folder / "outbox", OUTPUT_BYTES)
            run.stdout = console + run.stdout
        else:
            files, notes = _read_reduced(box.folder / "work" / "out", outputs)
        self._keep(files)
        return Walled(run, command, files, box.level, notes)

    def _keep(self, files: dict[str, bytes]) -> None:
        """``keep_workdir``: what the profile's commands handed back, for the user to open (ncu-ui)."""
        keep = self.request.keep_workdir
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                (keep / name).write_bytes(data)

    def close(self) -> None:
        shutil.rmtree(self.inbox, ignore_errors=True)

    def __enter__(self) -> "Wall":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_inbox(request: ProfileRequest, solution: Path, dataset: Path) -> str:
    """The solution and a trace set of one definition and one workload (the target's ``--dataset``)."""
    from ..data.dataset import Dataset
    from ..data.schema import Solution, load_model

    shutil.copyfile(request.solution_path, solution)
    name = load_model(Solution, request.solution_path).definition
    source = Dataset(request.dataset_root)
    definition_file = source.definition_files.get(name)
    if definition_file is None:
        raise ValueError(f"definition {name!r} is not in {source.root}")
    workloads = source.workloads_for(name, [request.workload_uuid])
    if len(workloads) != 1:
        raise ValueError(f"{request.workload_uuid!r} selects {len(workloads)} workloads of {name}; give a uuid")
    uuid = workloads[0].uuid
    (dataset / "definitions").mkdir(parents=True)
    (dataset / "workloads").mkdir()
    shutil.copyfile(definition_file, dataset / "definitions" / definition_file.name)
    (dataset / "workloads" / f"{name}.jsonl").write_text(source.workload_lines[(name, uuid)] + "\n")
    (dataset / "workloads" / "labels.json").write_text(json.dumps({uuid: source.label(workloads[0])}))
    blob = (source.root / "blob").resolve()
    if blob.is_dir():
        (dataset / "blob").symlink_to(blob)  # bound read-only at the same path inside (``_blob_dirs``)
    for folder, _, names in os.walk(solution.parent):
        os.chmod(folder, 0o755)
        for n in names:
            if not os.path.islink(os.path.join(folder, n)):
                os.chmod(os.path.join(folder, n), 0o644)
    return uuid


def _blob_dirs(request: ProfileRequest) -> list[str]:
    blob = Path(request.dataset_root) / "blob"
    return [str(blob), str(blob.resolve())] if blob.is_dir() else []


def _bytecode_folders() -> list[str]:
    from ..sandbox.bytecode import worker_bytecode

    return list(worker_bytecode()[1])


def _tool_dirs(tool: Optional[str]) -> list[str]:
    """The profiler's folder where the system folders do not hold it; the installation above its ``bin`` only
    where that is a CUDA or Nsight folder (ncu's wrapper runs binaries next to it), never a home folder."""
    if not tool:
        return []
    real = Path(os.path.realpath(tool))
    if any(str(real).startswith(d + "/") for d in (*SYSTEM_DIRS, sys.prefix)):
        return []
    install = real.parent.parent
    if real.parent.name == "bin" and any(k in install.name.lower() for k in ("cuda", "nsight")):
        return [str(install)]
    return [str(real.parent)]


def _read_reduced(out: Path, patterns: Sequence[str]) -> tuple[dict[str, bytes], list[str]]:
    """Without the full sandbox the files lie in the worker's folder: regular files only, never a link."""
    files: dict[str, bytes] = {}
    notes: list[str] = []
    for pattern in patterns:
        for path in sorted(out.glob(pattern)):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    continue
                data = f.read(OUTPUT_BYTES + 1)
            if len(data) > OUTPUT_BYTES:
                notes.append(f"{path.name}: over the {OUTPUT_BYTES} bytes handed back; left out")
                continue
            files[path.name] = data
    return files, notes
