"""Only the archive package (harness/archive/) speaks SQL.

Every module of `harness` and `controller` outside harness/archive/ is read statically (ast): no string constant or
f-string of it may hold SQL text (a statement, or a where clause with a ``?`` parameter), and no call may run SQL on
any object (``.execute(``, ``.executescript(``, ``.query(``, ``.rows_where(``...). Such a module asks the archive
for what it needs through a named function (harness/archive/queries.py, harness/archive/controller_tables.py,
harness/archive/profiles.py, the ``Archive`` class). Docstrings are prose and are not read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "controller")
ARCHIVE = ROOT / "harness" / "archive"

# The shapes of SQL, not its words alone: "select" needs a column list and "from", "create" needs "table"...
# (prose such as "select the best one from the list" or "update the table" does not match).
_COLUMN = r"(?:\*|\d+\b|[\w.]+\s*\(|[\w.]+(?:\s+as\s+\w+)?\s*(?:,|\bfrom\b))"
SQL_PATTERNS = [
    re.compile(rf"\bselect\s+(?:distinct\s+)?{_COLUMN}", re.I),
    re.compile(r"\binsert\s+(?:or\s+\w+\s+)?into\s+\w+", re.I),
    re.compile(r"\breplace\s+into\s+\w+", re.I),
    re.compile(r"\bupdate\s+\w+\s+set\s+\w+\s*=", re.I),
    re.compile(r"\bdelete\s+from\s+\w+", re.I),
    re.compile(r"\bcreate\s+(?:unique\s+|virtual\s+|temp\s+|temporary\s+)*(?:table|index|view|trigger)\b", re.I),
    re.compile(r"\b(?:alter|drop)\s+(?:table|index|view|trigger)\b", re.I),
    re.compile(r"(?<![#\w])\s*\bpragma\s+\w+\s*(?:=|\(|$)", re.I),
    re.compile(r"\b(?:begin|commit|rollback)\s+(?:immediate|exclusive|deferred|transaction)\b", re.I),
    # a where clause's fragment with a parameter: "solution_hash = ?", "id in (?", "name like ?"
    re.compile(r"\b\w+\s*(?:=|!=|<>|<=|>=|\blike|\bin)\s*\(?\s*\?", re.I),
]
# Calls that run SQL (sqlite3, sqlite-utils), on any object.
SQL_CALLS = {"execute", "executemany", "executescript", "query", "rows_where", "count_where", "delete_where"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.add(id(body[0].value))
    return found


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # an f-string: its literal parts, each placeholder as a name
        return "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
    return None


def sql_findings(source: str, name: str = "<string>") -> list[str]:
    """Where ``source`` holds SQL text or runs SQL: "name:line: why" each."""
    tree = ast.parse(source, name)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
            found.append(f"{name}:{node.lineno}: calls .{node.func.attr}(")
            continue
        if id(node) in skip:
            continue
        text = _text(node)
        if text is None:
            continue
        for pattern in SQL_PATTERNS:
            m = pattern.search(text)
            if m:
                found.append(f"{name}:{node.lineno}: SQL text {m.group(0).strip()!r}")
                break
    return sorted(set(found), key=lambda f: (f.split(":")[0], int(f.split(":")[1])))


def _modules() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            if ARCHIVE not in p.parents]


def test_no_sql_outside_the_archive() -> None:
    found = [f for path in _modules() for f in sql_findings(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "SQL outside harness/archive/ (move it into a named function there):\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    'db.execute("select 1")',
    'x.query(sql, [1])',
    'db["runs"].rows_where("id = ?", [1])',
    'sql = "select id, definition from submissions where solution_name = ?"',
    'sql = "select * from profiles"',
    'sql = f"select * from submissions {where} order by id desc"',
    'sql = "select coalesce(max(id), 0) from submissions"',
    'sql = "PRAGMA database_list"',
    'sql = "insert or ignore into blobs values (?)"',
    'sql = "update submissions set seal = ? where id = ?"',
    'sql = "delete from runs"',
    'sql = "CREATE INDEX ix ON runs(id)"',
    'sql = "drop table runs"',
    'where = "solution_hash = ? and status != \'RUNNING\'"',
])
def test_finds_sql(source: str) -> None:
    assert sql_findings(source)


@pytest.mark.parametrize("source", [
    'def f():\n    """Select the rows from the archive: select * from submissions."""\n',
    'help = "Select one of the lanes to update the table of results from the archive"',
    'msg = "create a new run, then drop into the shell"',
    'rule = r"#[ \\t]*pragma[ \\t]+omp\\b"',
    'src = "#pragma unroll"',
    'text = f"deleted from {where} the rows"',
    'x = "the report (select a definition)"',
])
def test_leaves_prose_alone(source: str) -> None:
    assert not sql_findings(source)
