"""Static gate, honest round three: idioms of honest solutions written by strangers that the gate once flagged,
each beside a hostile neighbour that must still be caught (tests/gate_corpus/honest/ holds the whole solutions).

A planner memoised on the module's own Enum (`arch: Arch`, picked by GPU generation) keys its cache by one of a
fixed set of members, never by a tensor's identity; a class that is no Enum, an Enum's name with a tensor beside
it, or an Enum of another module is still a memoised function of unknown arguments. The module's folder kept in a
name and converted where it is used (`sys.path.append(str(HERE))`, HERE = Path(__file__).parent) is the folder
itself, as `str(Path(__file__).parent)` inline was; its parent, a child, a fixed path or a name bound to anything
else still reaches the interpreter's import path."""

from __future__ import annotations

import pytest

from static_gate_support import describe, scan_py

ENUM = "import enum\nimport functools\n\n\nclass Arch(enum.Enum):\n    AMPERE = 80\n    HOPPER = 90\n\n\n"

PATH = "import sys\nfrom pathlib import Path\n"

HONEST = {
    "own_folder_name_str": PATH + "HERE = Path(__file__).parent\nif str(HERE) not in sys.path:\n"
                                  "    sys.path.append(str(HERE))\n",
    "own_folder_resolved_name": PATH + "HERE = Path(__file__).resolve().parent\nsys.path.insert(0, str(HERE))\n",
    "enum_annotation": ENUM + "@functools.lru_cache(maxsize=None)\ndef plan(n: int, arch: Arch) -> int:\n"
                              "    return n * arch.value\n",
    "enum_annotation_as_string": ENUM + "@functools.cache\ndef plan(n: int, arch: 'Arch'):\n    return n\n",
    "int_enum": ("import enum\nimport functools\nfrom enum import IntEnum\n\n\nclass Kind(IntEnum):\n    A = 1\n\n\n"
                 "@functools.lru_cache\ndef plan(kind: Kind, warps: int):\n    return kind * warps\n"),
}

HOSTILE = {
    # a folder above the solution's, one below it, a fixed one, a name rebound: the interpreter's own paths
    "path_parent_of_folder": ("harness_internals", PATH + "HERE = Path(__file__).parent.parent\n"
                                                          "sys.path.insert(0, str(HERE))\n"),
    "path_child": ("harness_internals", PATH + "HERE = Path(__file__).parent / 'x'\nsys.path.insert(0, str(HERE))\n"),
    "path_fixed": ("harness_internals", PATH + "HERE = Path('/usr/lib/python3')\nsys.path.append(str(HERE))\n"),
    "path_rebound": ("harness_internals", PATH + "HERE = Path(__file__).parent\nHERE = Path('/opt')\n"
                                                 "sys.path.insert(0, str(HERE))\n"),
    # a class of the module that is no Enum: its instances may carry anything
    "plain_class": ("memoized_function", "import functools\n\n\nclass Arch:\n    pass\n\n\n"
                    "@functools.lru_cache\ndef plan(arch: Arch):\n    return arch\n"),
    # a base that is not enum's (an Enum subclass needs enum's own bases here)
    "non_enum_base": ("memoized_function", "import enum\nimport functools\n\n\nclass Arch(dict):\n    pass\n\n\n"
                      "@functools.lru_cache\ndef plan(arch: Arch):\n    return arch\n"),
    # the Enum is fine, the unannotated argument beside it is not
    "enum_and_tensor": ("memoized_function", ENUM + "@functools.lru_cache\ndef plan(arch: Arch, q):\n    return q * 2\n"),
    # an Enum-looking name imported from elsewhere is not known to be one
    "imported_name": ("memoized_function", "import functools\nfrom .config import Arch\n\n\n"
                      "@functools.lru_cache\ndef plan(arch: Arch):\n    return arch\n"),
}


@pytest.mark.parametrize("policy_name", ["policy", "gqa_policy"])
@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_idiom_is_no_finding(name, policy_name, request):
    findings = scan_py(HONEST[name], request.getfixturevalue(policy_name))
    assert findings == [], describe(findings)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_neighbour_is_still_caught(name, gqa_policy):
    rule, source = HOSTILE[name]
    findings = scan_py(source, gqa_policy)
    assert [f.rule for f in findings] == [rule], describe(findings)
