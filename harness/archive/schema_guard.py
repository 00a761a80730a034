"""What an archive's database may carry besides what its migrations made, checked before anything is written.

A trigger runs inside the harness's own transactions: one added to archive.db by a person or another program
(``after insert on evaluations ... set status = 'PASSED'``) would rewrite or redirect what a submission records,
and the seal, taken over the rows as written, would then vouch for them. So the archive's only triggers are its
own (the full-text index's, made by its migrations, with exactly their text); any other, or one of those names
with another body, makes the archive refuse to open on one line, leaving the file as it is. Tables and views of
another program's beside the archive's are left alone: nothing the harness writes or reports reads them.

A database whose ``_migrations`` names a migration this code does not know was written by a newer Crucible: its
tables may have moved on, so it is refused too (open it with that version) rather than read or written wrongly.

An archive in a folder this process cannot write (a read-only mount, a carried copy) is read through a read-only
connection, never migrated: one that needs a migration of this version is refused on one line.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from pathlib import Path
from typing import Callable, Sequence

import sqlite_utils


def _normal(sql: str) -> str:
    """A trigger's text compared as SQLite reads it: whitespace, case and how identifiers are quoted do not count
    (sqlite-utils 3 wrote the full-text index's triggers with [brackets], 4 with "double quotes": an archive made
    by either is the archive's own)."""
    return " ".join(re.sub(r'[\[\]"`]', "", sql or "").split()).lower()


def shown_name(name: object) -> str:
    """A name from the database as one short line shows it (a name may hold newlines or be very long)."""
    text = " ".join(str(name).split())
    return text if len(text) <= 60 else text[:57] + "..."


@functools.lru_cache(maxsize=4)
def _own_schema(migrations: tuple[Callable[[sqlite_utils.Database], None], ...]
                ) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """The archive's own triggers (name -> normalised text) and tables (name -> columns), as its migrations make
    them in an empty database."""
    db = sqlite_utils.Database(memory=True)
    try:
        for migration in migrations:
            migration(db)
        rows = db.execute("select name, sql from sqlite_master where type = 'trigger'").fetchall()
        tables = {name: _columns(db.conn, name) for name, in
                  db.execute("select name from sqlite_master where type = 'table' and name not like 'sqlite_%'")}
    finally:
        db.close()
    return {name: _normal(sql) for name, sql in rows}, tables


def _columns(conn: sqlite3.Connection, table: str) -> frozenset[str]:
    return frozenset(str(r[1]) for r in conn.execute("select * from pragma_table_info(?)", [table]).fetchall())


def missing_columns(conn: sqlite3.Connection, migrations: Sequence[Callable[[sqlite_utils.Database], None]]) -> str:
    """Once migrated, why the archive's tables are not what its migrations made ("" where they are): a table
    dropped or a column renamed or dropped by another program, which every later read or write would trip on."""
    _, tables = _own_schema(tuple(migrations))
    for table, columns in sorted(tables.items()):
        lacking = sorted(columns - _columns(conn, table))
        if lacking:
            what = "lacks its table " + table if lacking == sorted(columns) else \
                f"lacks column(s) {', '.join(lacking[:4])} of its table {table}"
            return f"{what} (changed outside the harness)"
    return ""


def foreign_schema(conn: sqlite3.Connection, migrations: Sequence[Callable[[sqlite_utils.Database], None]]) -> str:
    """Why the archive's database must not be used ("" where it may): a trigger that is not its own, or a migration
    of a newer version."""
    own = _own_schema(tuple(migrations))[0]
    rows = conn.execute("select name, tbl_name, sql from sqlite_master where type = 'trigger'").fetchall()
    foreign = sorted((name, table) for name, table, sql in rows if own.get(name) != _normal(sql))
    if foreign:
        shown = ", ".join(f"{shown_name(name)} on {shown_name(table)}" for name, table in foreign[:3])
        shown += ", ..." if len(foreign) > 3 else ""
        return (f"carries {len(foreign)} trigger(s) that are not the archive's own ({shown}): a trigger runs inside "
                "the harness's writes and could change what is recorded")
    has_log = conn.execute("select 1 from sqlite_master where type = 'table' and name = '_migrations'").fetchone()
    if not has_log:
        return ""
    try:
        done = {str(r[0]) for r in conn.execute("select name from _migrations").fetchall()}
    except sqlite3.Error:  # another shape: database_kind has already called such a file another program's
        return ""
    known = {m.__name__ for m in migrations}
    newer = sorted(done - known)
    if newer:
        shown = ", ".join(shown_name(name) for name in newer[:3]) + (", ..." if len(newer) > 3 else "")
        return (f"was written by a newer version of Crucible (migration(s) {shown} unknown to this one); open it "
                "with that version")
    return ""


def read_only_connection(db_path: Path) -> sqlite3.Connection:
    """A connection that never writes, for an archive whose folder cannot be written: SQLite could not make the
    WAL's index beside it, so where the read-only one cannot open, the file is read as immutable (nobody can
    write it there either)."""
    uri = db_path.resolve().as_uri()
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30, check_same_thread=False)
        conn.execute("select count(*) from sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        wal = Path(f"{db_path}-wal")
        if wal.exists() and wal.stat().st_size > 0:  # read as immutable, the writes held there would be left out
            raise sqlite3.OperationalError(f"{wal.name} beside it holds writes not yet in {db_path.name}, which SQLite "
                                           "cannot read in a read-only folder; copy the folder somewhere writable")
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)


def pending_migrations(conn: sqlite3.Connection, migrations: Sequence[Callable[[sqlite_utils.Database], None]]) -> str:
    """Why a read-only archive cannot be read by this version ("" where it can): migrations of it not yet applied."""
    try:
        done = {str(r[0]) for r in conn.execute("select name from _migrations").fetchall()}
    except sqlite3.Error:
        done = set()
    pending = [m.__name__ for m in migrations if m.__name__ not in done]
    if not pending:
        return ""
    return (f"needs migrating to this version ({', '.join(pending[:3])}{', ...' if len(pending) > 3 else ''}), "
            "which its read-only folder cannot take: open it with the version that wrote it, or copy it somewhere "
            "writable")


def refusal(db_path: Path, why: str) -> str:
    """The one line an archive refused for ``why`` is said in."""
    return f"{db_path} {why}; it was left as it is (give another --archive)"
