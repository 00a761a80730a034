"""No class over 300 lines, no module over 500.

Past those sizes a class or module is read in pieces and changed without seeing the rest of it; the limit keeps
each one small enough to hold in mind, and makes a growing one split into cohesive parts (mixins, helper modules
of pure functions) before it becomes a knot. Read statically (ast), like test_import_graph: nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "controller")
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 500


def _sources(root: Path) -> list[Path]:
    return [path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))]


def oversized(root: Path = ROOT) -> list[str]:
    """Every class and module over its limit, as `path: what (N lines > limit)`, in path order."""
    offenders = []
    for path in _sources(root):
        source = path.read_text(encoding="utf-8")
        relative = path.relative_to(root).as_posix()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{relative}: module ({lines} lines > {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(source, filename=relative)):
            if isinstance(node, ast.ClassDef):
                # From the `class` line to the last line of the body: decorators are not the class's bulk.
                length = node.end_lineno - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    offenders.append(f"{relative}: class {node.name} (line {node.lineno}, "
                                     f"{length} lines > {MAX_CLASS_LINES})")
    return offenders


def test_the_packages_are_found():
    # A wrong root would pass the size test by finding nothing.
    modules = {path.relative_to(ROOT).as_posix() for path in _sources(ROOT)}
    assert "harness/pipeline/evaluate.py" in modules and "controller/loop.py" in modules


def test_no_class_or_module_is_too_long():
    offenders = oversized()
    assert not offenders, "too long (split into cohesive parts):\n" + "\n".join(offenders)


def test_an_offender_is_named(tmp_path):
    package = tmp_path / "harness"
    package.mkdir()
    (tmp_path / "controller").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES))
    (package / "big.py").write_text("class Big:\n" + body + "\n" * (MAX_MODULE_LINES - MAX_CLASS_LINES))
    (package / "small.py").write_text("class Small:\n    pass\n")
    assert oversized(tmp_path) == [
        f"harness/big.py: module ({MAX_MODULE_LINES + 1} lines > {MAX_MODULE_LINES})",
        f"harness/big.py: class Big (line 1, {MAX_CLASS_LINES + 1} lines > {MAX_CLASS_LINES})",
    ]
