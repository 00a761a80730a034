"""The harness's bytecode folder (harness.sandbox.bytecode): chosen by setting and installation, refused where others
could write it, filled by the harness's own imports, read and never written by its workers."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.sandbox import bytecode
from harness.sandbox.bytecode import choose_folder, safe_folder


@pytest.mark.parametrize("setting, compiled, expected", [
    (None, False, "default"),       # torch without bytecode beside it: the harness keeps its own
    (None, True, None),             # a compiled installation: Python as it is
    (None, None, None),             # torch not installed: nothing to gain
    ("", False, "default"),
    ("off", False, None),
    ("OFF", True, None),
    ("0", False, None),
    ("/srv/bytecode", True, "/srv/bytecode"),  # a folder named: always used
    ("/srv/bytecode", False, "/srv/bytecode"),
])
def test_the_folder_follows_the_setting_and_the_installation(setting, compiled, expected, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    chosen = choose_folder(setting, compiled)
    if expected == "default":
        assert chosen == tmp_path / "crucible" / "bytecode"
    else:
        assert chosen == (Path(expected) if expected else None)


def test_a_folder_others_could_write_is_refused(tmp_path):
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    assert safe_folder(own) is None
    os.chmod(own, 0o775)
    assert "others may write" in safe_folder(own)
    os.chmod(own, 0o755)
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    os.chmod(open_parent, 0o777)  # anyone could rename the folder away and put theirs in its place
    inside = open_parent / "bytecode"
    inside.mkdir(mode=0o755)
    assert "writable by them" in safe_folder(inside)
    os.chmod(open_parent, 0o1777)  # sticky, as /tmp: only the owner may rename what is in it
    assert safe_folder(inside) is None
    assert "not a folder" in safe_folder(_file(tmp_path / "f"))
    assert "cannot use" in safe_folder(tmp_path / "missing")


def _file(path: Path) -> Path:
    path.write_text("")
    return path


def _python(code: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _clean_env(**extra: str) -> dict:
    """This environment without a bytecode prefix, writing no bytecode beside the sources (the repository's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def test_the_harness_fills_the_folder_with_what_it_imports_before_and_after(tmp_path):
    """A command whose imports came first (the controller's bring torch in) has them stored when the prefix is set;
    what it imports afterwards is written by Python itself, even where PYTHONDONTWRITEBYTECODE is set."""
    folder, modules = tmp_path / "bytecode", tmp_path / "mods"
    modules.mkdir()
    (modules / "early_mod.py").write_text("X = 1\n")
    (modules / "late_mod.py").write_text("Y = 2\n")
    run = _python(f"""
        import sys, json
        sys.path.insert(0, {str(modules)!r})
        import early_mod
        from harness.sandbox.bytecode import use_bytecode_cache, worker_bytecode
        chosen = use_bytecode_cache()
        import late_mod
        print(json.dumps([str(chosen), worker_bytecode()]))
    """, _clean_env(CRUCIBLE_BYTECODE_CACHE=str(folder), PYTHONDONTWRITEBYTECODE="1"), tmp_path)
    assert run.returncode == 0, run.stderr
    chosen, (env, readable) = json.loads(run.stdout)
    assert chosen == str(folder) and readable == [str(folder)]
    assert env == {"PYTHONPYCACHEPREFIX": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    stored = {p.name.split(".")[0] for p in folder.rglob("*.pyc")}
    assert {"early_mod", "late_mod", "bytecode"} <= stored, sorted(stored)[:20]
    assert not (modules / "__pycache__").exists()  # nothing beside the sources


def test_a_worker_reads_the_folder_and_never_writes_it(tmp_path, monkeypatch):
    """With the workers' environment a process loads the harness's bytecode (here bytecode that, unlike its source,
    says 2: proof it came from the folder) and writes none of its own."""
    folder, modules = tmp_path / "bytecode", tmp_path / "mods"
    folder.mkdir()
    modules.mkdir()
    source = modules / "shared_mod.py"
    source.write_text("VALUE = 1\n")
    other = tmp_path / "other.py"
    other.write_text("VALUE = 2\n")
    monkeypatch.setattr(sys, "pycache_prefix", str(folder))  # where an importer with that prefix looks
    target = Path(importlib.util.cache_from_source(str(source)))
    target.parent.mkdir(parents=True)
    py_compile.compile(str(other), cfile=str(target), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    (modules / "unshared_mod.py").write_text("OTHER = 3\n")
    before = sorted(folder.rglob("*"))
    run = _python(f"""
        import sys
        sys.path.insert(0, {str(modules)!r})
        import shared_mod, unshared_mod
        print(shared_mod.VALUE, unshared_mod.OTHER)
    """, _clean_env(PYTHONPYCACHEPREFIX=str(folder), PYTHONDONTWRITEBYTECODE="1"), tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["2", "3"]
    assert sorted(folder.rglob("*")) == before and not (modules / "__pycache__").exists()


def test_without_a_folder_the_workers_are_left_as_they_were(monkeypatch):
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert bytecode.worker_bytecode() == ({}, [])


def test_a_prefix_the_user_chose_is_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    monkeypatch.setenv("CRUCIBLE_BYTECODE_CACHE", "off")
    assert bytecode.use_bytecode_cache() == tmp_path
    assert bytecode.worker_bytecode()[1] == [str(tmp_path)]


@pytest.mark.parametrize("package", ["harness", "controller"])
def test_the_programs_set_the_folder_before_their_imports(package, tmp_path):
    """`harness` / `controller` (console scripts, `python -m`): the folder is chosen while none of the command's
    heavy imports is loaded yet, so they too are read from it."""
    run = _python(f"""
        import sys
        import harness.sandbox.bytecode as chosen
        heavy = ("harness.cli", "controller.cli", "torch", "pydantic", "rich", "click")
        chosen.use_bytecode_cache = lambda: print("loaded:", [m for m in heavy if m in sys.modules], flush=True)
        sys.argv = ["{package}", "--help"]
        import {package}.__main__ as program
        program.main()
    """, _clean_env(), tmp_path)
    assert "loaded: []" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Usage:" in run.stdout


def test_a_folder_that_cannot_be_made_leaves_python_as_it_is(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setenv("CRUCIBLE_BYTECODE_CACHE", str(blocker / "bytecode"))  # under a file: mkdir fails
    assert bytecode.use_bytecode_cache() is None and sys.pycache_prefix is None
    os.chmod(tmp_path, 0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # others may write it: never used
    monkeypatch.setenv("CRUCIBLE_BYTECODE_CACHE", str(shared))
    assert bytecode.use_bytecode_cache() is None and sys.pycache_prefix is None
