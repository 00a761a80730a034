"""Modules a library holds under a name of its own (harness/audits/static_gate/python_held_modules.py): looked up in
the module as this interpreter has it, and resolved only where the gate judges the module held."""

from __future__ import annotations

import pytest

from harness.audits.static_gate import scan_sources
from harness.audits.static_gate.policy import load_policy
from harness.audits.static_gate.python_held_modules import held_module


@pytest.mark.parametrize("owner, attr, held", [
    ("collections", "_sys", "sys"),
    ("random", "_os", "os"),
    ("enum", "bltns", "builtins"),
    ("argparse", "_os", "os"),
    # a real submodule is itself, and a module held under another name that the gate does not judge keeps its name
    ("os", "path", None),
    ("torch", "nn", None),
    ("collections", "abc", None),
    # not a module, not there, a module that acts when imported (never imported to look), a library not imported
    ("collections", "OrderedDict", None),
    ("collections", "_nothing_here", None),
    ("antigravity", "webbrowser", None),
    ("somelib", "_sys", "sys"),
    ("somelib", "_time_", "time"),
    ("somelib", "helpers", None),
])
def test_a_module_held_under_another_name_is_that_module(owner, attr, held):
    assert held_module(owner, attr) == held


@pytest.mark.parametrize("source", [
    "import os\nHERE = os.path.dirname(os.path.abspath(__file__))\np = os.path.join(HERE, 'k.cu')\n",
    "import torch.nn.functional as F\nimport collections\nd = collections.OrderedDict()\n",
    # the solution's own module holding `_sys` is judged by what it binds there, not by the name
    "from . import helpers\nx = helpers._sys + 1\n",
])
def test_honest_names_stay_clean(source):
    errors = [f for f in scan_sources({"main.py": source, "helpers.py": "_sys = 3\n"}, "triton", load_policy())
              if f.severity == "error"]
    assert errors == []
