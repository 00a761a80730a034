"""Reading a SKILL.md as Markdown: front matter, fenced blocks, local links, yaml blocks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import yaml

# [text](target) and ![alt](target); the target stops at whitespace or ')' (titles are ignored).
LINK_PATTERN = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL_LINK_PREFIXES = ("http://", "https://", "mailto:", "ftp://", "#")


def one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def split_front_matter(text: str, where: str) -> tuple[dict[str, Any] | None, str, list[str]]:
    """Return (front matter or None, body, problems)."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text, [f"{where}: no front matter (the file must start with a '---' line)"]
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            break
    else:
        return None, text, [f"{where}: front matter is not closed by a second '---' line"]
    raw = "".join(lines[1:end])
    body = "".join(lines[end + 1 :])
    try:
        parsed = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        return None, body, [f"{where}: front matter is not valid YAML: {one_line(error)}"]
    if parsed is None:
        return {}, body, []
    if not isinstance(parsed, dict):
        return None, body, [
            f"{where}: front matter must be a YAML mapping, got {type(parsed).__name__}"
        ]
    return parsed, body, []


def strip_fenced_code(body: str) -> str:
    """The body with fenced code blocks blanked out (a link inside code is not a link)."""
    kept: list[str] = []
    for kind, _info, chunk in fenced_chunks(body):
        kept.append("" if kind == "code" else chunk)
    return "".join(kept)


def fenced_chunks(text: str) -> Iterator[tuple[str, str, str]]:
    """Yield ("text", "", chunk) and ("code", info_string, content) pieces in order.

    A fence is a line starting with at least three backticks or tildes; it is closed by a line of
    the same character at least as long (CommonMark). An unclosed fence runs to the end.
    """
    lines = text.splitlines(keepends=True)
    index = 0
    pending: list[str] = []
    while index < len(lines):
        match = re.match(r"^ {0,3}(`{3,}|~{3,})(.*)$", lines[index].rstrip("\n"))
        if not match:
            pending.append(lines[index])
            index += 1
            continue
        if pending:
            yield "text", "", "".join(pending)
            pending = []
        fence, info = match.group(1), match.group(2).strip()
        content: list[str] = []
        index += 1
        while index < len(lines):
            closing = lines[index].strip()
            if closing.startswith(fence[0] * len(fence)) and set(closing) == {fence[0]}:
                index += 1
                break
            content.append(lines[index])
            index += 1
        yield "code", info, "".join(content)
    if pending:
        yield "text", "", "".join(pending)


def local_links(markdown: str) -> list[str]:
    targets: list[str] = []
    for match in LINK_PATTERN.finditer(strip_fenced_code(markdown)):
        target = match.group(1)
        if target.lower().startswith(EXTERNAL_LINK_PREFIXES):
            continue
        target = target.split("#", 1)[0]
        if target and target not in targets:
            targets.append(target)
    return targets



def resolve_inside(folder: Path, target: str) -> Path | None:
    """The file a relative link points at, or None if the link leaves the skill folder."""
    if target.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", target):
        return None
    resolved = (folder / target).resolve()
    try:
        resolved.relative_to(folder.resolve())
    except ValueError:
        return None
    return resolved



def yaml_block_texts(body: str) -> list[tuple[int, str]]:
    """(1-based body line where the fence opens, block text) for every ```yaml / ```yml block."""
    blocks = []
    line = 1
    for kind, info, chunk in fenced_chunks(body):
        if kind == "code" and info.split()[:1] and info.split()[0].lower() in ("yaml", "yml"):
            blocks.append((line, chunk))
        # a code chunk also spans its two fence lines (an unclosed last fence is off by one, harmless)
        line += chunk.count("\n") + (2 if kind == "code" else 0)
    return blocks
