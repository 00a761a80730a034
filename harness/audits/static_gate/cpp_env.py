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
                              matching_paren: Callable[[str, int], int]) -> Optional[list[str]]:
    """`getenv(name)` whose argument starts at `end`: the literal names every call of the enclosing function passes
    as its parameter `name`, or None. `code` has strings blanked, `with_strings` (same offsets) keeps them."""
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
    if enclosing is None:
        return None
    declared = [(_IDENTIFIER.findall(p.split("=")[0]) or [""])[-1] for p in split_arguments(enclosing.group(2))]
    if declared.count(name) != 1 or re.search(rf"\b{name}\s*(?:[-+*/|&^]?=(?!=)|\+\+|--)",
                                              code[enclosing.end():body_end]):
        return None
    index, function = declared.index(name), enclosing.group(1)
    names = []
    for call in re.finditer(rf"\b{re.escape(function)}\s*\(", code):
        if call.start() == enclosing.start(1):
            continue
        close = matching_paren(code, call.end() - 1)
        arguments = split_arguments(with_strings[call.end():close]) if close > 0 else []
        literal = _LITERAL.fullmatch(arguments[index]) if index < len(arguments) else None
        if literal is None:
            return None
        names.append(literal.group(1))
    return names or None
