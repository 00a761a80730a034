"""A candidate recovered from a model's text answer, when the model ended its conversation without calling
``submit_kernel`` but wrote its kernel into the answer anyway (a code block, a JSON reply, a tool call written out
as prose). Deterministic, so a resumed conversation recovers the same candidate from the archived text.

Which text is the solution: a JSON reply (``{"files": ...}``, or a written-out ``submit_kernel`` call whose
arguments may be a JSON string) first, the last one given; else, per editable file, the last closed code block in
a language that file can hold that defines the entry point's symbol (a draft shown before its revision loses to
the revision). A block is matched to a file by a name in its info string, on its first line, or on the line above
it; with one editable file an unnamed block is that file's. A block in another language (```cuda for a Triton
``kernel.py``) is never taken, and the answer says why nothing was taken.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any, Optional

MAX_SCAN = 2_000_000  # characters of an answer looked at (an enormous answer is cut, not parsed whole)
MAX_JSON_TRIES = 200
LANGUAGES = {  # file suffix -> info-string languages a block for it may carry ("" : untagged)
    ".py": {"", "python", "py", "python3", "triton"},
    ".cu": {"", "cuda", "cu", "c++", "cpp", "c"}, ".cuh": {"", "cuda", "cu", "c++", "cpp", "c"},
    ".cpp": {"", "c++", "cpp", "cxx", "cc", "c", "cuda"}, ".cc": {"", "c++", "cpp", "cxx", "cc", "c"},
    ".h": {"", "c++", "cpp", "c", "cuda"}, ".hpp": {"", "c++", "cpp"},
}
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.M)
TOOL_KEYS = ("arguments", "input", "parameters", "args")


def recover(text: str, editable: list[str], entry_point: str) -> tuple[Optional[dict[str, Any]], str]:
    """(``submit_kernel`` arguments, how they were found) or (None, why nothing could be taken)."""
    text = text[:MAX_SCAN]
    reply = _json_reply(text)
    if reply is not None:
        return {"entry_point": entry_point, **reply}, "a JSON reply in the answer"
    blocks, unclosed = _blocks(text)
    if not blocks:
        why = "no code block in the answer" + (" (one was opened and never closed: cut off?)" if unclosed else "")
        return None, why
    entry_file, _, symbol = entry_point.partition("::")
    files, problems = [], []
    for path in editable:
        content, why = _block_for(path, blocks, symbol if path == entry_file else None, len(editable) == 1)
        if content is None:
            problems.append(why)
        else:
            files.append({"path": path, "content": content})
    if not files:
        return None, "; ".join(problems)
    taken = ", ".join(f["path"] for f in files)
    return {"files": files, "entry_point": entry_point}, f"code block(s) of the answer for {taken}"


def _json_reply(text: str) -> Optional[dict[str, Any]]:
    """The last JSON object in ``text`` that is a reply (``files``) or a written-out submit_kernel call."""
    decoder, found, tries, at = json.JSONDecoder(), None, 0, 0
    while tries < MAX_JSON_TRIES:
        at = text.find("{", at)
        if at < 0:
            break
        tries += 1
        try:
            value, end = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            at += 1
            continue
        reply = _as_reply(value)
        if reply is not None:
            found = reply
        at = end
    return found


def _as_reply(value: Any, depth: int = 0) -> Optional[dict[str, Any]]:
    if not isinstance(value, dict) or depth > 3:
        return None
    if isinstance(value.get("files"), (list, dict)):  # a mapping of path to content is read as files too
        return {k: value[k] for k in ("files", "entry_point", "notes") if k in value}
    name = value.get("name") or value.get("tool") or value.get("tool_name")
    inner = next((value[k] for k in TOOL_KEYS if k in value), None)
    if isinstance(value.get("function"), dict):  # {"type": "function", "function": {"name", "arguments"}}
        return _as_reply(value["function"], depth + 1)
    if name is not None and str(name).rsplit(".", 1)[-1] != "submit_kernel":
        return None
    if isinstance(inner, str):
        try:
            inner = json.loads(inner)
        except ValueError:
            return None
    return _as_reply(inner, depth + 1) if inner is not None else None


def _blocks(text: str) -> tuple[list[tuple[str, str, str]], bool]:
    """([(info, content, the line above the block)], whether a block was left open)."""
    blocks, pos = [], 0
    while True:
        opening = FENCE.search(text, pos)
        if opening is None:
            return blocks, False
        fence = opening["fence"]
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        end = closing.search(text, opening.end())
        if end is None:
            return blocks, True
        above = text[:opening.start()].rstrip("\n").rsplit("\n", 1)[-1]
        blocks.append((opening["info"].strip(), text[opening.end() + 1:end.start()], above))
        pos = end.end()


def _language(info: str) -> str:
    word = info.split()[0] if info.split() else ""
    return word.lower().lstrip("{.").rstrip("}")


def _names(path: str, info: str, content: str, above: str) -> bool:
    """Whether the block is labelled with ``path`` (or its file name)."""
    first = content.lstrip("\n").split("\n", 1)[0]
    label = f"{info} {first} {above}"
    return any(re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w-])", label)
               for name in {path, PurePosixPath(path).name})


def _defines(content: str, symbol: str, suffix: str) -> bool:
    if suffix == ".py":
        return re.search(rf"^\s*(async\s+)?def\s+{re.escape(symbol)}\s*\(", content, re.M) is not None
    return re.search(rf"\b{re.escape(symbol)}\s*\(", content) is not None


def _block_for(path: str, blocks: list[tuple[str, str, str]], symbol: Optional[str],
               only_file: bool) -> tuple[Optional[str], str]:
    """(the content of the block that is ``path``, "") or (None, why there is none). ``symbol``: what the block
    must define (the entry point's file only)."""
    suffix = PurePosixPath(path).suffix
    allowed = LANGUAGES.get(suffix)
    fitting = [b for b in blocks if allowed is None or _language(b[0]) in allowed]
    named = [b for b in fitting if _names(path, *b)]
    pool = named or (fitting if only_file else [])
    if not pool:
        if fitting or not only_file:
            return None, f"no code block is labelled {path}"
        tags = sorted({_language(b[0]) or "untagged" for b in blocks})
        return None, f"code blocks in {', '.join(tags)}, none in a language {path} can hold"
    defining = [b for b in pool if not symbol or _defines(b[1], symbol, suffix)]
    if not defining:
        return None, f"no code block for {path} defines {symbol}()"
    return defining[-1][1], ""
