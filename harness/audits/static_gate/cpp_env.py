"""A C++ helper that reads the variable its caller names: `env_int(const char* name, int dflt) { getenv(name) }`
called only as `env_int("MYKERNEL_BLOCK", 256)` reads MYKERNEL_BLOCK, as `getenv("MYKERNEL_BLOCK")` would (an
env_read warning; cpp.py). Where the parameter is rebound, a call passes anything but a string literal, or the
function is not found, nothing is decided and the read stays env_probe. (Python's: python_env._literal_arguments.)"""

from __future__ import annotations

import re
from typing import Callable, Optional

_NAME_ARGUMENT = re.compile(r"\s*([A-Za-z_]\w*)\s*\)")
_DEFINITION = re.compile(r"\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*(?:const\s*)?(?:noexcept\s*)?\{")
_LITERAL = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"')
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_STATEMENTS = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"})


def _matching_brace(code: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def names_passed_to_parameter(code: str, with_strings: str, end: int, split_arguments: Callable[[str], list[str]],
                              matching_paren: Callable[[str, int], int], elsewhere: str = "") -> Optional[list[str]]:
    """`getenv(name)` whose argument starts at `end`: the literal names every call of the enclosing function passes
    as its parameter `name`, or None. `code` has strings blanked, `with_strings` (same offsets) keeps them;
    `elsewhere`: the solution's other files, where the helper must not be named (a header's callers are unseen).
    The parameter is used only as getenv's argument (no `&name`, no redeclaration), and the helper only called by
    its name (never a function pointer's value nor a macro's argument)."""
    m = _NAME_ARGUMENT.match(code, end)
    if m is None:
        return None
    name = m.group(1)
    enclosing, body_end = None, -1
    for definition in _DEFINITION.finditer(code, 0, end):
        if definition.group(1) in _STATEMENTS:  # `if (v) { ... }` is a block of the function, not one
            continue
        close = _matching_brace(code, definition.end() - 1)
        if close > end:
            enclosing, body_end = definition, close  # the innermost: the last one opened before `end`
    if enclosing is None or re.search(r"[<=]", enclosing.group(2)) or re.search(
            r"^[ \t]*#[ \t]*(?:if|else|elif|endif)", code[enclosing.start():body_end], re.MULTILINE):
        return None  # a default or template argument shifts positions; #if may hide the real enclosing function
    declared = [(_IDENTIFIER.findall(p.split("=")[0]) or [""])[-1] for p in split_arguments(enclosing.group(2))]
    body = code[enclosing.end():body_end]
    uses = len(re.findall(rf"\b{name}\b", body))
    if declared.count(name) != 1 or uses != len(re.findall(rf"\bgetenv\s*\(\s*{name}\s*\)", body)):
        return None
    index, function = declared.index(name), enclosing.group(1)
    if re.search(rf"\b{re.escape(function)}\b", elsewhere):
        return None
    names = []
    for call in re.finditer(rf"\b{re.escape(function)}\b", code):
        if call.start() == enclosing.start(1):
            continue
        if not code.startswith("(", call.end() + len(code[call.end():]) - len(code[call.end():].lstrip())):
            return None  # named without a call: a pointer's value, a macro's argument
        open_at = code.index("(", call.end())
        close = matching_paren(code, open_at)
        arguments = split_arguments(with_strings[open_at + 1:close]) if close > 0 else []
        literal = _LITERAL.fullmatch(arguments[index]) if index < len(arguments) else None
        if literal is None:
            return None
        names.append(literal.group(1))
    return names or None
