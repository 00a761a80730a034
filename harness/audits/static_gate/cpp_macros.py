"""Macros in the C++ scanner: a call the source never spells, made by the preprocessor.

``#define CAT(a, b) a##b`` then ``CAT(sys, tem)("...")`` calls ``system`` while no token of the file reads
``system``. The token rules see the file as written, so each use of a macro is expanded here as the preprocessor
would (its arguments put in, ``##`` pasting them, the macros it uses expanded in turn, a few levels deep) and the
expansion is scanned by the same rules, its findings placed at the use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Optional

_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\([^)\n]*\))?([^\n]*)", re.MULTILINE)
_PASTE_RE = re.compile(r"\s*##\s*")
_STRINGIFY_RE = re.compile(r"(?<!#)#\s*(?=\w)")
_WORD_RE = re.compile(r"\w+")
_DEPTH, _LENGTH = 6, 20000
# What one file's expansions may make in all: macros that each use the one below many times grow as a power of the
# depth (six levels of sixty uses: 60**6 texts), so past this budget the rest is not expanded and the file is
# unreadable to the gate (red team round 8: the harness's process ran out of memory).
EXPANSION_BUDGET = 2_000_000
TOO_LARGE = None  # what expansions() yields as the text of a use past the budget


def digraphs(source: str) -> str:
    """The preprocessor's digraphs in their usual spelling, offsets kept: `%:` is `#` and `%:%:` is `##`
    (`%:define CAT(a, b) a %:%: b` pastes as `#define CAT(a, b) a ## b` does)."""
    return source.replace("%:%:", "##  ").replace("%:", "# ") if "%:" in source else source


def _parse(code: str) -> tuple[dict[str, tuple[list[str], str]], dict[str, str], list[tuple[int, int]]]:
    """Function-like macros (name -> (parameters, body)), object-like ones (name -> body), and the spans of the
    #define lines (their bodies are judged through their uses, not as code of their own)."""
    functions: dict[str, tuple[list[str], str]] = {}
    objects: dict[str, str] = {}
    spans = []
    for m in _DEFINE_RE.finditer(code):
        name, params, body = m.group(1), m.group(2), m.group(3).strip()
        spans.append(m.span())
        if params is not None:
            functions[name] = ([p.strip() for p in params[1:-1].split(",") if p.strip()], body)
        else:
            objects[name] = body
    return functions, objects, spans


def object_macros(code: str) -> dict[str, str]:
    """Object-like macros: name -> body."""
    return _parse(code)[1]


def _substitute(params: list[str], body: str, args: list[str]) -> str:
    values = dict(zip(params, args))
    if "..." in params:
        values["__VA_ARGS__"] = ", ".join(args[len(params) - 1:])
    text = _WORD_RE.sub(lambda w: values.get(w.group(0), w.group(0)), body)
    return _PASTE_RE.sub("", _STRINGIFY_RE.sub("", text))


def expansions(code: str, split_args: Callable[[str], list[str]], matching_paren: Callable[[str, int], int],
               elsewhere: str = "") -> Iterator[tuple[int, str, Optional[str]]]:
    """(offset of a macro's use, the macro's name, what the use expands to) for every use that expands to other text
    (a pasted name, ``##`` in the macro or one it uses, or an argument or body put in). ``code``: comments and
    literals blanked; ``elsewhere``: the solution's other files, whose macros a header may bring in. Past the file's
    EXPANSION_BUDGET the last use yields TOO_LARGE as its text, and nothing more is expanded."""
    functions, objects, spans = _parse(code)
    if "define" in elsewhere:
        more_functions, more_objects, _ = _parse(digraphs(elsewhere))
        functions, objects = {**more_functions, **functions}, {**more_objects, **objects}
    if not functions and not objects:
        return
    pasted: list[bool] = []
    budget = [EXPANSION_BUDGET]  # characters made and macros expanded, for the whole file

    class _Spent(Exception):
        pass

    def call_end(text: str, after: int) -> tuple[int, int]:
        open_at = after + len(text[after:]) - len(text[after:].lstrip())
        return open_at, (matching_paren(text, open_at) if text[open_at:open_at + 1] == "(" else -1)

    def expand(text: str, depth: int) -> str:
        budget[0] -= len(text) + 1
        if budget[0] < 0:
            raise _Spent
        if depth >= _DEPTH or len(text) > _LENGTH:
            return text
        out, pos = [], 0
        for w in _WORD_RE.finditer(text):
            name = w.group(0)
            if w.start() < pos or (name not in objects and name not in functions):
                continue
            if name in objects:
                body, end = objects[name], w.end()
            else:
                open_at, close = call_end(text, w.end())
                if close < 0:
                    continue
                params, raw = functions[name]
                body = _substitute(params, raw, [expand(a, depth + 1) for a in split_args(text[open_at + 1:close])])
                end = close + 1
            if "##" in (functions[name][1] if name in functions else objects[name]):
                pasted.append(True)
                body = _PASTE_RE.sub("", body)
            out += [text[pos:w.start()], expand(body[:_LENGTH], depth + 1)]
            pos = end
        return "".join(out) + text[pos:]

    for w in _WORD_RE.finditer(code):
        name = w.group(0)
        if (name in functions or name in objects) and not any(a <= w.start() < b for a, b in spans):
            rest = code[w.start():w.start() + 4000]
            close = call_end(rest, len(name))[1] if name in functions else -1
            use = rest[:close + 1] if close > 0 else name
            pasted.clear()
            try:
                expanded = expand(use, 0)
            except _Spent:
                yield w.start(), name, TOO_LARGE
                return
            if pasted or expanded != use:  # pasted, or a name put in (`#define S system`, `RUN(system, x)`)
                yield w.start(), name, expanded + rest[len(use):len(use) + 40]
