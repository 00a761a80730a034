"""Static gate: annotations kept as strings are evaluated later (typing.get_type_hints, pydantic models,
torch.library's schema inference call eval on them), so a string annotation must be type syntax and its names are
judged as code (python_annotations). Honest forward references pass; code hidden in one is dynamic_code, and so
are the evaluators of forward references themselves (typing.get_type_hints, typing.ForwardRef)."""

from __future__ import annotations

import pytest

from harness.audits.static_gate import gate_passed, load_policy, scan_sources

from static_gate_support import describe

HONEST = {
    "forward_references": "import torch\nfrom typing import Optional\n\n\n"
                          "def run(q: 'torch.Tensor', s: 'Optional[torch.Tensor]' = None) -> 'torch.Tensor':\n"
                          "    return q\n",
    "unions_and_generics": "def f(x: 'int | None', y: 'dict[str, list[int]]', z: 'tuple[int, ...]') -> 'None':\n"
                           "    pass\n",
    "literal_values_are_not_code": "from typing import Literal\n\n\ndef f(mode: Literal['a(b)', 'x + y'] = 'a(b)'):\n"
                                   "    pass\n",
    "annotated_metadata_are_values": "from typing import Annotated\n\n\n"
                                     "def f(x: \"Annotated['int', 'ge(0)']\"):\n    pass\n",
    "class_fields": "from dataclasses import dataclass\n\n\n@dataclass\nclass Plan:\n    blocks: 'list[int]'\n"
                    "    name: 'str' = 'p'\n",
    "nested_forward_reference": "from typing import Optional\n\n\ndef f(x: \"Optional['Plan']\"):\n    pass\n",
    "not_python_at_all": "def f(x: 'a tensor of shape [B, H]'):\n    pass\n",  # raises before running anything
}

HOSTILE = {
    "call_in_annotation": ("import typing\n\n\ndef f(x: \"__import__('os').system('id')\"):\n    pass\n\n\n"
                           "H = typing.get_type_hints(f)\n", {"dynamic_code"}),
    "lambda_in_annotation": ("def f(x: 'lambda: 0'):\n    pass\n", {"dynamic_code"}),
    "call_in_return": ("def f() -> 'open(path, \"w\")':\n    pass\n", {"dynamic_code"}),
    "call_in_class_field": ("class M:\n    x: 'print(1) or int'\n", {"dynamic_code"}),
    "call_nested_in_a_generic": ("from typing import Optional\n\n\ndef f(x: \"Optional['exec(s)']\"):\n    pass\n",
                                 {"dynamic_code"}),
    "call_as_annotated_type": ("from typing import Annotated\n\n\ndef f(x: \"Annotated[exec(s), 'ok']\"):\n"
                               "    pass\n", {"dynamic_code"}),
    "comprehension": ("def f(x: '[a for a in b]'):\n    pass\n", {"dynamic_code"}),
    # the evaluators of forward references themselves: a ForwardRef made by hand, or nested in an alias, is no
    # string annotation the gate reads
    "forward_ref_by_hand": ("import typing\n\n\ndef f(x: typing.ForwardRef('exec(s)')):\n    pass\n",
                            {"dynamic_code"}),
    "type_hints_of_an_alias": ("import typing\nfrom typing import Optional\nX = Optional['exec(s)']\n\n\n"
                               "def f(x: X):\n    pass\n\n\nH = typing.get_type_hints(f)\n", {"dynamic_code"}),
    "watched_name": ("import sys\n\n\ndef f(x: 'sys.modules'):\n    pass\n", {"harness_internals"}),
    "watched_name_nested": ("import sys\nfrom typing import Optional\n\n\n"
                            "def f(x: \"Optional['sys.modules']\"):\n    pass\n", {"harness_internals"}),
    "frame_attribute": ("def f(x: 'run.__globals__'):\n    pass\n", {"harness_internals"}),
}


@pytest.fixture(scope="module")
def shipped():
    return load_policy()


@pytest.mark.parametrize("case", sorted(HONEST))
def test_type_syntax_in_a_string_annotation_is_no_finding(case, shipped):
    findings = scan_sources({"main.py": HONEST[case]}, "triton", shipped)
    assert gate_passed(findings) and not findings, describe(findings)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_code_in_a_string_annotation_is_an_error(case, shipped):
    source, rules = HOSTILE[case]
    findings = scan_sources({"main.py": source}, "triton", shipped)
    assert {f.rule for f in findings if f.severity == "error"} == rules, describe(findings)
