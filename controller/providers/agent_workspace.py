"""The private workspace a coding agent (Claude Code, Codex) works in, and how its changes are judged.

One folder per candidate, next to (never inside) a private agent home where one is needed:

    crucible-<agent>-XXXX/
        workspace/   REQUEST.md, AGENTS.md, the skills where the agent looks, ./crucible-check, the editable files
        home/        a private CODEX_HOME (Codex only): no config.toml, so no user MCP servers, hooks or
                     AGENTS.md; auth.json is a link to the user's, so their login stays reachable and is never
                     copied into the workspace

After the run every file is compared with its state before. Build debris (caches, compiled objects, the
wrapper's own outputs, agent state) is ignored and never becomes part of a candidate; anything else that
changed outside the editable files rejects the candidate, with the paths. Files the controller installed
(REQUEST.md, AGENTS.md, the wrapper, the skills' copies) are never debris: changing them rejects.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any, Optional

import harness

REQUEST_FILE = "REQUEST.md"
INSTRUCTIONS_FILE = "AGENTS.md"
CHECK_SCRIPT = "crucible-check"
CHECK_OUTPUTS = ".crucible-check"  # the wrapper writes the solution JSON it submits here
REPO_ROOT = Path(harness.__file__).resolve().parent.parent  # on PYTHONPATH for the wrapper's harness run

# Folder names anywhere in a path, and file-name patterns, that are build debris or agent state.
DEBRIS_DIRS = frozenset({"__pycache__", ".pytest_cache", ".triton", ".mypy_cache", ".ruff_cache", CHECK_OUTPUTS,
                         ".claude", ".codex"})
DEBRIS_FILES = ("*.pyc", "*.pyo", "*.so", "*.o")


HASHED_BYTES = 64 << 20  # a bigger file is known by its size and modification time (hashing it would take long)
MAX_EDITED_BYTES = 16 << 20  # an editable file larger than this is refused, never read (the harness's own limit)


def _fingerprint(path: Path) -> str:
    """What a file is now: a link's target, a special file's kind (a FIFO would block a read forever), a large
    file's size and time, else its content's hash, read in chunks."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return "link:" + os.readlink(path)
    if not stat.S_ISREG(info.st_mode):
        return f"special:{stat.S_IFMT(info.st_mode):o}"
    if info.st_size > HASHED_BYTES:
        return f"large:{info.st_size}:{info.st_mtime_ns}"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def snapshot(root: Path) -> dict[str, str]:
    """relative path -> fingerprint (content hash; symlinks by target; special files by kind) for every file
    under root."""
    state: dict[str, str] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in files + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            try:
                state[rel] = _fingerprint(path)
            except OSError as err:  # gone, or unreadable: a change all the same
                state[rel] = f"unreadable:{err.errno}"
    return state


def changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def is_debris(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return any(part in DEBRIS_DIRS for part in parts[:-1]) or any(fnmatch(parts[-1], p) for p in DEBRIS_FILES)


def judge_changes(before: dict[str, str], after: dict[str, str], editable: list[str]) -> tuple[list[str], list[str]]:
    """(forbidden, ignored): changed paths outside the editable files that reject the candidate, and the
    debris that does not. A file the controller installed is never debris, whatever its name."""
    forbidden, ignored = [], []
    for path in changed_paths(before, after):
        if path in editable:
            continue
        (ignored if path not in before and is_debris(path) else forbidden).append(path)
    return forbidden, ignored


def outside_entries(parent: Path) -> set[str]:
    """The names beside the workspace in its private parent folder (the workspace and the agent's home are the
    only ones the controller makes): one more after a run was written outside the workspace."""
    try:
        return {p.name for p in parent.iterdir()} - {"workspace", "home"}
    except OSError:
        return set()


def read_edited(root: Path, editable: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(path -> content of each editable file that is there, path -> why an editable file that is there is not
    read). A link (or a hard link, or a path through a linked folder) would have the candidate carry a file from
    outside the workspace, a credential say; a FIFO would block the read; a huge file would fill memory."""
    edited, refused = {}, {}
    top = root.resolve()
    for path in editable:
        target = root / path
        if not target.exists() and not target.is_symlink():
            continue
        try:
            info = os.lstat(target)
            inside = top in target.resolve().parents
        except (OSError, RuntimeError):
            refused[path] = "cannot be read"
            continue
        if stat.S_ISLNK(info.st_mode) or not inside or info.st_nlink > 1:
            refused[path] = "not a plain file of the workspace (a link, or a hard link to a file elsewhere)"
        elif not stat.S_ISREG(info.st_mode):
            refused[path] = "not a regular file"
        elif info.st_size > MAX_EDITED_BYTES:
            refused[path] = f"{info.st_size} bytes, over the {MAX_EDITED_BYTES >> 20} MiB a candidate file may have"
        else:
            edited[path] = target.read_text(errors="replace")
    return edited, refused


# -- the harness check the agent may run --------------------------------------------------------------------

CHECK_TEMPLATE = r'''#!{python}
"""./crucible-check: evaluate this workspace's candidate with the contest harness (`harness submit`), on the
request's workloads and limits. Takes no arguments. Written by the Crucible controller; do not edit."""
import json
import os
import subprocess
import sys
from pathlib import Path

CONFIG = json.loads({config!r})
here = Path(__file__).resolve().parent
if CONFIG.get("unavailable"):
    sys.exit("crucible-check is unavailable: " + CONFIG["unavailable"])
if sys.argv[1:]:
    sys.exit("crucible-check takes no arguments: it submits " + ", ".join(CONFIG["editable"]) + " as they are now")
solution = CONFIG["solution"]
for source in solution["sources"]:
    if source["path"] in CONFIG["editable"]:
        if not (here / source["path"]).is_file():
            sys.exit("crucible-check: " + source["path"] + " is missing")
        source["content"] = (here / source["path"]).read_text()
out = here / {outputs!r}
out.mkdir(exist_ok=True)
n = len(list(out.glob("candidate-*.json")))
if CONFIG["max_checks"] is not None and n >= CONFIG["max_checks"]:
    sys.exit("crucible-check: the request allows " + str(CONFIG["max_checks"]) + " evaluation(s), all used")
solution["name"] = solution["name"] + "-check" + str(n)
path = out / ("candidate-" + str(n) + ".json")
path.write_text(json.dumps(solution, indent=1))
argv = CONFIG["argv"][:CONFIG["at"]] + [str(path)] + CONFIG["argv"][CONFIG["at"]:]
env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (CONFIG["pythonpath"], os.environ.get("PYTHONPATH")) if p))
print("$ " + " ".join(argv), flush=True)
sys.exit(subprocess.call(argv, env=env))
'''


def check_argv(check: Optional[dict[str, Any]]) -> tuple[Optional[list[str]], int, str]:
    """(argv with the solution's place, that place, why unavailable) of the wrapper's harness run.

    ``check``: archive (required), dataset, workloads, timeout_s, python (default: this interpreter), module
    (default: harness.cli). A test passes a fake python to see the command without a real submission."""
    if not check or not check.get("archive"):
        return None, 0, ("no archive was given to the provider (controller loop passes its --archive); "
                         "the controller evaluates your candidate after you stop")
    argv = [str(check.get("python") or sys.executable), "-m", str(check.get("module") or "harness.cli"), "submit"]
    at = len(argv)
    argv += ["--archive", str(check["archive"])]
    if check.get("dataset"):
        argv += ["--dataset", str(check["dataset"])]
    if check.get("workloads"):
        argv += ["--workloads", ",".join(check["workloads"])]
    if check.get("timeout_s"):
        argv += ["--timeout", f"{float(check['timeout_s']):g}"]
    return argv, at, ""


def write_check_script(root: Path, check: Optional[dict[str, Any]], solution: Optional[dict[str, Any]],
                       editable: list[str], max_checks: Optional[int]) -> None:
    argv, at, why = check_argv(check)
    if argv is not None and solution is None:
        argv, why = None, "the starting solution is not a valid solution JSON"
    if argv is not None and max_checks == 0:
        argv, why = None, "the request allows no evaluations"
    # The count of checks lives in the workspace (the wrapper runs inside the agent's sandbox, which can write
    # nowhere else); the wall time bounds the checks whatever the agent does to it.
    config = {"argv": argv, "at": at, "unavailable": why, "solution": solution, "editable": editable,
              "pythonpath": str(REPO_ROOT), "max_checks": max_checks}
    script = root / CHECK_SCRIPT
    # The wrapper itself runs on this interpreter; check["python"] is only the one that runs the harness.
    script.write_text(CHECK_TEMPLATE.format(python=sys.executable, config=json.dumps(config), outputs=CHECK_OUTPUTS))
    script.chmod(0o755)


# -- building the workspace ---------------------------------------------------------------------------------


def workspace_notes(editable: list[str], check_available: bool, max_checks: Optional[int]) -> str:
    most = f" at most {max_checks} time(s)" if max_checks is not None else ""
    check = (f"Run `./crucible-check` (no arguments){most} to evaluate your candidate with the contest harness on "
             "this request's workloads and limits; it prints the harness's table and exits 0 only when every "
             "workload passed." if check_available else
             "`./crucible-check` is unavailable here (it says why); the controller evaluates your candidate "
             "after you stop.")
    return (f"\n## Your workspace\n\nEdit only {', '.join(editable)} in place. Creating, changing or deleting "
            "any other file rejects your candidate (caches such as `__pycache__/` are ignored). "
            f"{check} You have file tools (read, edit, write, search) and `./crucible-check`; no other commands, "
            "no network.\n")


def agents_md(skills_dirs: list[str]) -> str:
    return ("# Instructions\n\nRead REQUEST.md and do what it asks: it is the generation request, with the files "
            "you may edit, the constraints and how the candidate is judged.\n\nSkills (SKILL.md files with their "
            f"data) are under {' and '.join(f'`{d}/`' for d in skills_dirs)}: read the ones REQUEST.md names.\n\n"
            "Check your candidate with `./crucible-check` before you stop.\n")


def build_workspace(agent: str, spec: dict[str, Any], skills_root: Path, request_md: str,
                    files: dict[str, str], solution: Optional[dict[str, Any]],
                    check: Optional[dict[str, Any]], max_checks: Optional[int] = None,
                    ) -> tuple[Path, Path, Optional[Path]]:
    """(parent folder, workspace, private home or None). ``files``: editable path -> starting content;
    ``request_md``: the rendered request (its closing "## Answer" section, meant for one-shot JSON replies, is
    replaced by how this workspace works)."""
    parent = Path(tempfile.mkdtemp(prefix=f"crucible-{agent}-"))
    root = parent / "workspace"
    root.mkdir()
    editable = list(files)
    request_md = request_md.split("\n## Answer\n")[0].rstrip("\n") + "\n"
    available = check_argv(check)[0] is not None and max_checks != 0
    (root / REQUEST_FILE).write_text(request_md + workspace_notes(editable, available, max_checks))
    if spec.get("instructions"):
        (root / spec["instructions"]).write_text(agents_md(spec["skills_dirs"]))
    for folder in spec["skills_dirs"]:
        # A copy, not a link: an agent that edits a skill must not change the repository's skills.
        shutil.copytree(skills_root, root / folder, symlinks=False,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    write_check_script(root, check, solution, editable, max_checks)
    home = private_home(parent, spec.get("private_home"))
    return parent, root, home


def private_home(parent: Path, spec: Optional[dict[str, Any]]) -> Optional[Path]:
    """A private config folder holding only links to the user's credential files (``spec['link']``, found in
    $``spec['env']`` or ``spec['default']``); None when the agent needs none."""
    if not spec:
        return None
    home = parent / "home"
    home.mkdir()
    user = Path(os.environ.get(spec["env"]) or Path(spec["default"]).expanduser())
    for name in spec.get("link", []):
        if (user / name).exists():
            (home / name).symlink_to((user / name).resolve())
    return home
