"""Static gate, honest round three: idioms of honest solutions written by strangers that the gate once flagged,
each beside a hostile neighbour that must still be caught (tests/gate_corpus/honest/ holds the whole solutions).

A planner memoised on the module's own Enum (`arch: Arch`, picked by GPU generation) keys its cache by one of a
fixed set of members, never by a tensor's identity; a class that is no Enum, an Enum's name with a tensor beside
it, or an Enum of another module is still a memoised function of unknown arguments. The module's folder kept in a
name and converted where it is used (`sys.path.append(str(HERE))`, HERE = Path(__file__).parent) is the folder
itself, as `str(Path(__file__).parent)` inline was; its parent, a child, a fixed path or a name bound to anything
else still reaches the interpreter's import path. A .cu file of the solution read in a with-statement (`with
open(HERE / "k.cu") as f: SRC = f.read()`) folds into load_inline's sources as `open(...).read()` did; a file from
elsewhere, a name also bound otherwise, or a file the solution does not ship is still C++ the gate cannot read; so
does an own helper called with the file's literal name (`_read("k.cu")`, opening os.path.join(HERE, name)), while
one called with another path, a computed name, or one that rebinds its parameter or returns other text does not.
threading imported for its locks alone (a lazily built extension under `threading.Lock()`) starts no work; an
import with no use, a Thread or Timer beside the lock, or the module handed on or looked up by getattr still is
concurrency. A torch.library.Library of the solution's own namespace ("DEF" or "FRAGMENT", the older op API) only
defines its ops; "IMPL", PyTorch's namespaces (aten, prims), a computed namespace, or the class handed on can
replace the ops the harness computes with, and stay monkeypatch. Asking whether a file under the module's folder
exists (vLLM's configs/E=..,N=..,device_name=...json lookup) tells no more than opening it would; a path
elsewhere, one climbing out, or one in an unknown variable is still a file-system probe."""

from __future__ import annotations

import pytest

from harness.audits.static_gate import scan_sources

from static_gate_support import describe

ENUM = "import enum\nimport functools\n\n\nclass Arch(enum.Enum):\n    AMPERE = 80\n    HOPPER = 90\n\n\n"

PATH = "import sys\nfrom pathlib import Path\n"

BUILD = ("import os\nfrom torch.utils.cpp_extension import load_inline\n"
         "HERE = os.path.dirname(os.path.abspath(__file__))\n")
LOAD = "ext = load_inline('k', cpp_sources='', cuda_sources=[SRC])\n"
KERNEL = {"k.cu": "__global__ void k(float* y) { y[0] = 1.f; }\n"}

LOCKED = "import threading\n_lock = threading.Lock()\n"

READ = "def _read(name):\n    with open(os.path.join(HERE, name)) as f:\n        return f.read()\n"

# honest, but its open() of a computed path is a file_read warning (blocks nothing): no error is what matters
NO_ERROR = {
    "helper_reads_named_file": BUILD + READ + "SRC = _read('k.cu')\n" + LOAD,
    "helper_without_arguments": BUILD + "def _src():\n    with open(os.path.join(HERE, 'k.cu')) as fh:\n"
                                        "        return fh.read()\nSRC = _src()\n" + LOAD,
}

HONEST = {
    "exists_of_shipped_config": BUILD + "ok = os.path.exists(os.path.join(HERE, 'configs', f'E={E},N={N}.json'))\n",
    "pathlib_is_file_of_shipped_config": BUILD + "from pathlib import Path\nok = (Path(HERE) / 'c.json').is_file()\n",
    "own_library_def": ("import torch\nlib = torch.library.Library('mylib', 'DEF')\n"
                        "lib.define('f(Tensor x) -> Tensor')\n"),
    "own_library_op_called": ("import torch\nlib = torch.library.Library('mylib', 'DEF')\n"
                              "lib.define('f(Tensor x) -> Tensor')\ndef run(x):\n    return torch.ops.mylib.f(x)\n"),
    "own_library_fragment_by_keyword": "import torch\nlib = torch.library.Library(ns='mylib', kind='FRAGMENT')\n",
    "own_library_imported": "from torch.library import Library\nlib = Library('mylib', 'DEF')\n",
    "lock_guards_lazy_build": LOCKED + "_ext = None\ndef ext():\n    global _ext\n    with _lock:\n"
                                       "        if _ext is None:\n            _ext = 1\n    return _ext\n",
    "rlock_imported_from": "from threading import RLock\n_lock = RLock()\n",
    "with_open_read_into_load_inline": BUILD + "with open(os.path.join(HERE, 'k.cu')) as f:\n    SRC = f.read()\n" + LOAD,
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
    "exists_in_tmp": ("file_cache", BUILD + "ok = os.path.exists('/tmp/cache.pt')\n"),
    "exists_climbing_out": ("file_cache", BUILD + "ok = os.path.exists(os.path.join(HERE, '..', 'cache.pt'))\n"),
    "exists_absolute_join": ("file_cache", BUILD + "ok = os.path.isfile(os.path.join(HERE, '/tmp/c.pt'))\n"),
    "exists_of_variable": ("file_cache", BUILD + "ok = os.path.exists(path)\n"),
    "pathlib_exists_elsewhere": ("file_cache", BUILD + "from pathlib import Path\nok = Path('/dev/shm/x').exists()\n"),
    "library_aten_impl": ("monkeypatch", "import torch\nlib = torch.library.Library('aten', 'IMPL')\n"),
    "library_aten_fragment": ("monkeypatch", "import torch\nlib = torch.library.Library('aten', 'FRAGMENT')\n"),
    "library_prims_def": ("monkeypatch", "import torch\nlib = torch.library.Library('prims', 'DEF')\n"),
    "library_own_impl": ("monkeypatch", "import torch\nlib = torch.library.Library('mylib', 'IMPL', 'CUDA')\n"),
    "library_computed_namespace": ("monkeypatch", "import torch\nlib = torch.library.Library(NS, 'DEF')\n"),
    "library_aliased": ("monkeypatch", "import torch\nL = torch.library.Library\nlib = L('mylib', 'DEF')\n"),
    "library_imported_beside_aten": ("monkeypatch", "from torch.library import Library\nok = Library('mylib', 'DEF')\n"
                                                    "bad = Library('aten', 'IMPL')\n"),
    "library_imported_unused": ("monkeypatch", "from torch.library import Library\n"),
    "helper_reads_elsewhere": ("dynamic_code", BUILD + READ + "SRC = _read('/etc/hosts')\n" + LOAD),
    "helper_climbs_out": ("dynamic_code", BUILD + READ + "SRC = _read('../x.cu')\n" + LOAD),
    "helper_computed_name": ("dynamic_code", BUILD + READ + "SRC = _read(NAME)\n" + LOAD),
    "helper_rebinds_parameter": ("dynamic_code", BUILD + "def _read(name):\n    name = '/etc/hosts'\n"
                                                         "    with open(name) as f:\n        return f.read()\n"
                                                         "SRC = _read('k.cu')\n" + LOAD),
    "helper_returns_text_too": ("dynamic_code", BUILD + "def _read(name):\n    if name:\n        return 'x'\n"
                                                        "    with open(os.path.join(HERE, name)) as f:\n"
                                                        "        return f.read()\nSRC = _read('k.cu')\n" + LOAD),
    "helper_text_added": ("dynamic_code", BUILD + READ + "SRC = _read('k.cu') + EVIL\n" + LOAD),
    "threading_unused": ("concurrency", "import threading\n"),
    "thread_beside_lock": ("concurrency", LOCKED + "threading.Thread(target=print).start()\n"),
    "timer_beside_lock": ("concurrency", LOCKED + "threading.Timer(1.0, print).start()\n"),
    "thread_imported_beside_lock": ("concurrency", "from threading import Lock, Thread\n"),
    "threading_by_getattr": ("concurrency", LOCKED + "T = getattr(threading, 'Thread')\n"),
    "threading_handed_on": ("concurrency", LOCKED + "start(threading)\n"),
    # C++ read from outside the solution, through a name bound otherwise too, or from a file it does not ship
    "with_open_elsewhere": ("dynamic_code", BUILD + "with open('/etc/hosts') as f:\n    SRC = f.read()\n" + LOAD),
    "with_open_then_rebound": ("dynamic_code", BUILD + "import io\nwith open(os.path.join(HERE, 'k.cu')) as f:\n"
                                                       "    pass\nf = io.StringIO('x')\nSRC = f.read()\n" + LOAD),
    "with_open_twice": ("dynamic_code", BUILD + "with open(os.path.join(HERE, 'k.cu')) as f:\n    pass\n"
                                                "with open('/opt/x.cu') as f:\n    SRC = f.read()\n" + LOAD),
    "with_open_not_shipped": ("dynamic_code", BUILD + "with open(os.path.join(HERE, 'k.txt')) as f:\n"
                                                      "    SRC = f.read()\n" + LOAD),
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
    findings = scan_sources({"main.py": HONEST[name], **KERNEL}, "python", request.getfixturevalue(policy_name))
    assert findings == [], describe(findings)


@pytest.mark.parametrize("name", sorted(NO_ERROR))
def test_honest_idiom_is_no_error(name, gqa_policy):
    findings = scan_sources({"main.py": NO_ERROR[name], **KERNEL}, "python", gqa_policy)
    assert not [f for f in findings if f.severity == "error"], describe(findings)
    assert {f.rule for f in findings} <= {"file_read"}, describe(findings)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_neighbour_is_still_caught(name, gqa_policy):
    rule, source = HOSTILE[name]
    findings = scan_sources({"main.py": source, **KERNEL}, "python", gqa_policy)
    assert rule in {f.rule for f in findings}, describe(findings)
