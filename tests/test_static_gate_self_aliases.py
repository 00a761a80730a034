"""Lower-case aliases of a module's own flags through `sys.modules[__name__]` (FLA's utils, vendored into GDN
solutions): honest when the gate proves what the loop binds (harness/audits/static_gate/python_self_aliases.py), and
`sys.modules` stays harness_internals in every neighbour that could reach something else."""

from __future__ import annotations

import pytest

from harness.audits.static_gate import scan_sources
from harness.audits.static_gate.policy import load_policy

HEAD = '''
import os
import sys

import torch
import triton

backend = "cuda"
ON_NVIDIA = (backend == "cuda")
ON_HOPPER = ON_NVIDIA and torch.cuda.get_device_capability()[0] == 9
HAS_GATHER = hasattr(triton.language, "gather")
WANTS_GRAPHS = (ON_NVIDIA and os.environ.get("MY_KERNELS_GRAPHS", "0") == "1")
NOT_ARM = not (backend == "arm")
'''
LOOP = '''

def _lowercase_aliases():
    this = sys.modules[__name__]
    for flag in (KEYS):
        if hasattr(this, flag):
            setattr(this, TARGET, VALUE)


_lowercase_aliases()
del _lowercase_aliases
'''
KEYS = '"ON_NVIDIA", "ON_HOPPER", "HAS_GATHER", "WANTS_GRAPHS", "NOT_ARM"'
KERNEL = "from .utils import on_hopper, has_gather\n\n\ndef run(x):\n    return x if on_hopper or has_gather else x\n"


def utils(keys: str = KEYS, target: str = "flag.lower()", value: str = "getattr(this, flag)", head: str = "",
          tail: str = "", loop: str = LOOP) -> str:
    return HEAD + head + loop.replace("KEYS", keys).replace("TARGET", target).replace("VALUE", value) + tail


def errors(source: str, extra: dict[str, str] | None = None) -> list[tuple[str, str, int]]:
    sources = {"utils.py": source, "kernel.py": KERNEL, **(extra or {})}
    return [(f.rule, f.path, f.line) for f in scan_sources(sources, "triton", load_policy()) if f.severity == "error"]


def test_the_flags_aliases_are_honest():
    assert errors(utils()) == []
    assert errors(utils(keys='"on_gpu",', target="flag.upper()", head='on_gpu = backend in ("cuda", "hip")\n')) == []
    # upper-casing an upper-case flag rebinds the flag itself: not an alias
    assert SYS_MODULES in [(r, p) for r, p, _ in errors(utils(target="flag.upper()"))]
    assert errors(utils(loop=LOOP.replace("        if hasattr(this, flag):\n    ", "    "))) == []  # no guard


SYS_MODULES = ("harness_internals", "utils.py")


def test_next_to_a_device_module_looked_up_by_name_both_stay_honest():
    """FLA's utils has both: the loop's getattr calls read only the proven flags, so they do not withdraw the
    device module's exemption (python_device_lib counts computed lookups)."""
    head = ("device = triton.runtime.driver.active.get_current_target().backend\n"
            "device_torch_lib = getattr(torch, device)\n\n\ndef current():\n"
            "    return device_torch_lib.current_device()\n")
    assert errors(utils(head=head)) == []


@pytest.mark.parametrize("source", [
    # a "flag" that is a module: `X and torch` is torch, its alias a torch nobody sees
    utils(keys='"T",', head="T = ON_NVIDIA and torch\n"),
    utils(keys='"T",', head="T = torch\n"),
    utils(keys='"T",', head="T = ON_NVIDIA\nT = torch\n"),
    utils(keys='"F",', head="def F():\n    return torch\n"),
    utils(keys='"T",', head="import torch as T\n"),
    utils(keys='"T",', head="T = torch.cuda.is_available()\n"),  # any call may return anything
    # an alias that rebinds a name the module has
    utils(keys='"ON_NVIDIA",', head="on_nvidia = 3\n"),
    utils(keys='"ON_NVIDIA", "ON_HOPPER"', target='"same"'),
    utils(keys='"HAS_CLASS__",', target="'__' + flag.lower()", head="HAS_CLASS__ = True\n"),
    utils(keys='"__DOC__",', head="__DOC__ = True\n"),
    # keys or values the gate cannot read
    utils(keys='"ON_" + "NVIDIA",'),
    utils(keys="NAMES", head='NAMES = ("ON_NVIDIA",)\n'),
    utils(value="torch"),
    utils(value="getattr(torch, flag)"),
    utils(value="getattr(this, flag.lower())"),
    # the module itself leaving the loop, or more done with it
    utils(loop=LOOP.replace("del _lowercase_aliases", "del _lowercase_aliases\n") + "",
          tail="\n\ndef grab():\n    this = sys.modules[__name__]\n    return this\n"),
    utils(loop=LOOP.replace("            setattr(this, TARGET, VALUE)\n",
                            "            setattr(this, TARGET, VALUE)\n    this.extra = torch\n")),
    utils(loop=LOOP.replace("    for flag", "    helper = this\n    for flag")),
    utils(loop=LOOP.replace("            setattr(this, TARGET, VALUE)\n",
                            "            setattr(this, TARGET, VALUE)\n    else:\n        pass\n")),
    # __name__ or a builtin rebound: `sys.modules[__name__]` is then another module, `hasattr` another function
    utils(head="__name__ = 'harness.sandbox.worker'\n"),
    utils(tail="\n\ndef setattr(obj, name, value):\n    return None\n"),
    # at module level (the holder a global others could read): not the function form proven
    HEAD + "\nthis = sys.modules[__name__]\nfor flag in (" + KEYS + "):\n"
           "    setattr(this, flag.lower(), getattr(this, flag))\n",
])
def test_sys_modules_stays_harness_internals_wherever_the_loop_is_not_proven(source):
    assert SYS_MODULES in [(rule, path) for rule, path, _ in errors(source)], source


def test_a_module_elsewhere_reading_sys_modules_is_still_caught():
    assert ("harness_internals", "other.py", 3) in errors(utils(), {"other.py": "import sys\n\nm = sys.modules\n"})


@pytest.mark.parametrize("other", [
    # stored into a flag before the loop runs (a module the holder imports first): the alias would be torch
    "from . import utils\n\nutils.ON_HOPPER = __import__('torch')\n",
    "import utils\n\nutils.ON_HOPPER  = 1\n",
    "import utils\n\nutils.ON_HOPPER |= True\n",
    # names set or read unseen elsewhere
    "import utils\n\nsetattr(utils, 'ON_' + 'HOPPER', None)\n",
    "import utils\n\nutils.__dict__['ON_HOPPER'] = None\n",
    "import utils\n\nvars(utils)['ON_HOPPER'] = None\n",
])
def test_another_file_that_could_change_a_flag_withdraws_the_exemption(other):
    assert SYS_MODULES in [(rule, path) for rule, path, _ in errors(utils(), {"other.py": other})], other


def test_other_files_reading_the_flags_and_their_aliases_keep_it():
    reader = ("from .utils import ON_HOPPER, on_hopper\n\n\ndef pick(x):\n"
              "    return x if ON_HOPPER == on_hopper else x\n")
    assert errors(utils(), {"pick.py": reader}) == []
