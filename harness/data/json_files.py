"""JSON (and YAML) files as a person hands them to the harness: read only when they are regular files of bounded
size in UTF-8, parsed with every key given once, no lone surrogate and no number past Python's digit limit; each
failure a SchemaError of one line naming the file."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Union


class SchemaError(ValueError):
    """A data file that does not follow the schema. The message names the file and the field."""


JSON_READ_LIMIT = 256 << 20  # bytes of a JSON file read at most: a device or a runaway file is refused, not read


def _read_text(path: Path, limit: int = JSON_READ_LIMIT) -> str:
    """A JSON file's text, or a SchemaError saying why it cannot be read (one line, never a traceback). Only a
    regular file is read, and no further than ``limit`` bytes: a FIFO would wait for a writer for ever, /dev/zero
    never ends, /dev/urandom is not text."""
    what = {".json": "JSON", ".jsonl": "JSON", ".yaml": "YAML", ".yml": "YAML"}.get(path.suffix.lower(), "text")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once, and is refused below
    except FileNotFoundError:
        raise SchemaError(f"{path}: no such file" + (" (a link to nothing)" if path.is_symlink() else "")) from None
    except OSError as err:
        raise SchemaError(f"{path}: cannot be read: {err.strerror or err}") from None
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            raise SchemaError(f"{path}: is a folder, expected a {what} file")
        if not stat.S_ISREG(kind):
            raise SchemaError(f"{path}: not a regular file (a FIFO, a device or a socket), expected a {what} file")
        if os.fstat(fd).st_size > limit:  # refused unread
            raise SchemaError(f"{path}: over the {_mib(limit)} a {what} file may have here")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise SchemaError(f"{path}: cannot be read: {err.strerror or err}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while read
        raise SchemaError(f"{path}: over the {_mib(limit)} a {what} file may have here")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SchemaError(f"{path}: not UTF-8 text (byte {err.start}): {what} files are UTF-8") from None


class _DuplicateKey(ValueError):
    pass


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are each given once: with a key twice, json keeps the last silently, and which one the
    author meant (a second "sources", "name" or "entry_point") cannot be told."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


def _parse_json(text: str, where: str) -> Any:
    try:
        data = json.loads(text, object_pairs_hook=_one_value_per_key)
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # a lone surrogate escape ("\udcff") is no text
    except json.JSONDecodeError as err:
        raise SchemaError(f"{where}: not valid JSON: line {err.lineno} column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise SchemaError(f"{where}: not valid JSON here: nested too deeply") from None
    except _DuplicateKey as err:
        key = " ".join(str(err).split())[:80]
        raise SchemaError(f"{where}: key {key!r} is given twice in one object (which one is meant cannot be told)"
                          ) from None
    except UnicodeEncodeError as err:
        raise SchemaError(f"{where}: a string holds a lone surrogate escape (\\u{ord(err.object[err.start]):04x}),"
                          " which is no text") from None
    except ValueError as err:  # Python's limit on an integer's digits: a number too long to be meant
        if "integer string conversion" not in str(err):
            raise
        raise SchemaError(f"{where}: a number of more than {sys.get_int_max_str_digits()} digits") from None
    return data


def read_text(path: Union[str, Path], limit: int = JSON_READ_LIMIT) -> str:
    """A text file other than JSON (a YAML table a person names) read as JSON files are: a regular file of at most
    ``limit`` bytes, UTF-8; SchemaError on one line otherwise."""
    return _read_text(Path(path), limit)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


def load_json(path: Union[str, Path], limit: int = JSON_READ_LIMIT) -> Any:
    path = Path(path)
    return _parse_json(_read_text(path, limit), str(path))
