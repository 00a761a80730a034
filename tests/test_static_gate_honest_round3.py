"""Static gate, honest round three: idioms of honest solutions written by strangers that the gate once flagged,
each beside a hostile neighbour that must still be caught (tests/gate_corpus/honest/ holds the whole solutions).

A planner memoised on the module's own Enum (`arch: Arch`, picked by GPU generation) keys its cache by one of a
fixed set of members, never by a tensor's identity; a class that is no Enum, an Enum's name with a tensor beside
it, or an Enum of another module is still a memoised function of unknown arguments."""

from __future__ import annotations

import pytest

from static_gate_support import describe, scan_py

ENUM = "import enum\nimport functools\n\n\nclass Arch(enum.Enum):\n    AMPERE = 80\n    HOPPER = 90\n\n\n"

HONEST = {
    "enum_annotation": ENUM + "@functools.lru_cache(maxsize=None)\ndef plan(n: int, arch: Arch) -> int:\n"
                              "    return n * arch.value\n",
    "enum_annotation_as_string": ENUM + "@functools.cache\ndef plan(n: int, arch: 'Arch'):\n    return n\n",
    "int_enum": ("import enum\nimport functools\nfrom enum import IntEnum\n\n\nclass Kind(IntEnum):\n    A = 1\n\n\n"
                 "@functools.lru_cache\ndef plan(kind: Kind, warps: int):\n    return kind * warps\n"),
}

HOSTILE = {
    # a class of the module that is no Enum: its instances may carry anything
    "plain_class": ("import functools\n\n\nclass Arch:\n    pass\n\n\n"
                    "@functools.lru_cache\ndef plan(arch: Arch):\n    return arch\n"),
    # a base that is not enum's (an Enum subclass needs enum's own bases here)
    "non_enum_base": ("import enum\nimport functools\n\n\nclass Arch(dict):\n    pass\n\n\n"
                      "@functools.lru_cache\ndef plan(arch: Arch):\n    return arch\n"),
    # the Enum is fine, the unannotated argument beside it is not
    "enum_and_tensor": ENUM + "@functools.lru_cache\ndef plan(arch: Arch, q):\n    return q * 2\n",
    # an Enum-looking name imported from elsewhere is not known to be one
    "imported_name": ("import functools\nfrom .config import Arch\n\n\n"
                      "@functools.lru_cache\ndef plan(arch: Arch):\n    return arch\n"),
}


@pytest.mark.parametrize("policy_name", ["policy", "gqa_policy"])
@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_idiom_is_no_finding(name, policy_name, request):
    findings = scan_py(HONEST[name], request.getfixturevalue(policy_name))
    assert findings == [], describe(findings)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_neighbour_is_still_caught(name, gqa_policy):
    findings = scan_py(HOSTILE[name], gqa_policy)
    assert [f.rule for f in findings] == ["memoized_function"], describe(findings)
