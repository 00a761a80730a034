"""Static gate: names that look like torch compute and are not. A field of the module's own object whose name is a
tensor method's (`shapes.topk` of a NamedTuple, `self.topk` of a launcher, `cfg.topk` of a dataclass, `stats.sum(...)`
of its own class) is that object's, not a tensor's method taken to be called later; `torch.compiler.disable`
(keeping a launcher out of torch.compile's graphs) and torch.use_deterministic_algorithms launch nothing. Each has a hostile counterpart that the gate
still judges: the same attribute read from a parameter, a rebound name, a loop variable, a walrus target, `self`
bound to a tensor through the class, and a torch callable handed to `torch.compiler.disable`."""

from __future__ import annotations

import pytest

from harness.audits.static_gate import awaits_attribution, gate_passed, scan_sources

from static_gate_support import describe, scan_py

HONEST = {
    "namedtuple_field": '''
        from typing import NamedTuple
        class Shapes(NamedTuple):
            batch: int
            topk: int
        def run(q, out):
            shapes = Shapes(q.shape[0], out.shape[1])
            kernel[(shapes.batch,)](q, out, TOPK=shapes.topk)
        ''',
    "launcher_self": '''
        class Launcher:
            def __init__(self, topk):
                self.topk = topk
                self.mean = 0.5
            def __call__(self, q, out):
                kernel[(1,)](q, out, TOPK=self.topk, M=self.mean)
                k = self.topk
                return k
        _LAUNCH = Launcher(2048)
        def run(q, out):
            _LAUNCH(q, out)
        ''',
    "dataclass_config": '''
        from dataclasses import dataclass
        @dataclass(frozen=True)
        class Cfg:
            topk: int = 2048
            @classmethod
            def default(cls):
                return cls()
        CFG = Cfg()
        def run(q, out):
            kernel[(1,)](q, out, TOPK=CFG.topk)
            return Cfg.default()
        ''',
    "own_method_call": '''
        class Stats:
            def sum(self, xs):
                return 0
        STATS = Stats()
        def run(q):
            return STATS.sum([1, 2])
        ''',
    "compiler_disable": '''
        import torch
        HAS_COMPILER = hasattr(torch, "compiler") and hasattr(torch.compiler, "disable")
        @torch.compiler.disable
        def run(q, out):
            kernel[(1,)](q, out)
        @torch._dynamo.disable
        def run2(q, out):
            kernel[(1,)](q, out)
        ''',
    "autocast_decorators": '''
        import functools
        import torch
        autocast_custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
        autocast_custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="cuda")
        def run(q, out):
            with torch.autocast("cuda", enabled=False):
                kernel[(1,)](q, out)
        ''',
    "collections_namedtuple": '''
        import collections
        Shapes = collections.namedtuple("Shapes", ["batch", "topk"])
        def run(q, out):
            s = Shapes(q.shape[0], out.shape[1])
            kernel[(1,)](q, out, TOPK=s.topk)
        ''',
    "simple_namespace": '''
        from types import SimpleNamespace
        cfg = SimpleNamespace(topk=2048, mean=0.0)
        def run(q, out):
            kernel[(1,)](q, out, TOPK=cfg.topk, M=cfg.mean)
        ''',
    "deterministic_switch": '''
        import torch
        torch.use_deterministic_algorithms(False)
        DETERMINISTIC = torch.are_deterministic_algorithms_enabled()
        ''',
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_fields_and_decorators_of_the_solution_are_not_torch_compute(name, policy):
    findings = scan_py(HONEST[name], policy)
    assert findings == [], describe(findings)


HOSTILE = {
    "parameter": '''
        from typing import NamedTuple
        class Shapes(NamedTuple):
            topk: int
        def run(q, out):
            f = q.topk
            return f(4)
        ''',
    "rebound_name": '''
        from typing import NamedTuple
        class Shapes(NamedTuple):
            topk: int
        shapes = Shapes(1)
        def run(q, out):
            shapes = q
            f = shapes.topk
            return f(4)
        ''',
    "loop_variable": '''
        class Shapes:
            topk = 1
        s = Shapes()
        def run(q, out):
            for s in [q]:
                f = s.topk
            return f(4)
        ''',
    "walrus": '''
        class A:
            pass
        a = A()
        def run(q, out):
            if (a := q) is not None:
                f = a.topk
            return f(4)
        ''',
    "self_bound_through_the_class": '''
        class A:
            topk: int = 0
            def grab(self):
                return self.topk
        def run(q, out):
            return A.grab(q)(4)
        ''',
    "class_handed_on": '''
        class A:
            topk: int = 0
            def grab(self):
                return self.topk
        def run(q, out):
            g = getattr(A, "grab")
            return g(q)(4)
        ''',
    "tensor_field_method": '''
        class Holder:
            def __init__(self, w):
                self.w = w
        H = Holder(None)
        def run(q, out):
            return H.w.sum()
        ''',
    "field_set_from_a_tensor_method": '''
        class Holder:
            def __init__(self, q):
                self.topk = q.topk
        def run(q, out):
            return Holder(q).topk(4)
        ''',
    "namedtuple_type_rebound": '''
        import collections
        Shapes = collections.namedtuple("Shapes", ["topk"])
        def run(q, out):
            Shapes = type(q)
            s = Shapes(q)
            f = s.topk
            return f(4)
        ''',
    "namedtuple_made_from_a_tensor_method": '''
        import collections
        Shapes = collections.namedtuple("Shapes", ["topk"])
        def run(q, out):
            s = Shapes(q.topk)
            return s.topk(4)
        ''',
    "namespace_reassigned": '''
        from types import SimpleNamespace
        cfg = SimpleNamespace(topk=1)
        def run(q, out):
            for cfg in (q,):
                f = cfg.topk
            return f(4)
        ''',
    "compiler_disable_of_a_torch_callable": '''
        import torch
        mm = torch.compiler.disable(torch.matmul)
        def run(a, b, out):
            out.copy_(mm(a, b))
        ''',
    "autocast_decorator_of_a_torch_callable": '''
        import torch
        mm = torch.amp.custom_fwd(torch.matmul, device_type="cuda")
        def run(a, b, out):
            out.copy_(mm(a, b))
        ''',
    "compiler_disable_of_torch_in_the_body": '''
        import torch
        @torch.compiler.disable
        def run(a, out):
            out.copy_(torch.softmax(a, -1))
        ''',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_tensor_methods_and_torch_callables_beside_them_are_still_judged(name, policy):
    findings = scan_py(HOSTILE[name], policy)
    compute = [f for f in findings if f.rule == "torch_compute"]
    assert compute, describe(findings)
    assert all(awaits_attribution(f) for f in compute) and gate_passed(compute)


# --------------------------------------------------------------------------------------------------
# The solution's own files named like standard modules, reached relatively: `from . import signal` in a package is
# its own signal.py (the solution is imported as a package; only an absolute `import signal` is the standard one).

OWN_FILES = {
    "root_file": {"main.py": "from . import signal as sig\nfrom .platform import NUM_SMS\n"
                             "def run(q, out):\n    return sig.BLOCK * NUM_SMS\n",
                  "signal.py": "BLOCK = 64\n", "platform.py": "NUM_SMS = 132\n"},
    "package_file": {"main.py": "from .pkg import shapes\nfrom .pkg.inspect import shapes as s2\n"
                                "def run(q, out):\n    return shapes(q), s2(q)\n",
                     "pkg/__init__.py": "from .inspect import shapes\n",
                     "pkg/inspect.py": "def shapes(x):\n    return x.shape\n"},
}


@pytest.mark.parametrize("name", sorted(OWN_FILES))
def test_own_files_named_like_standard_modules_are_own_when_imported_relatively(name, policy):
    findings = scan_sources(OWN_FILES[name], "triton", policy)
    assert findings == [], describe(findings)


OWN_FILES_HOSTILE = {
    # the root package's __init__ binds the standard module: `from . import signal` then gets it, not a file
    "root_init_binds_it": {"__init__.py": "import signal\n", "main.py": "from . import signal\n"
                           "def run(q, out):\n    signal.alarm(1)\n"},
    "package_init_binds_it": {"pkg/__init__.py": "import inspect\n", "main.py": "from .pkg import inspect\n"
                              "def run(q, out):\n    return inspect.currentframe()\n"},
    "own_module_reexports_it": {"helpers.py": "import signal as _s\nalarm = _s.alarm\n",
                                "main.py": "from . import helpers\ndef run(q, out):\n    helpers.alarm(1)\n"},
    "absolute_import_beside_a_namesake": {"signal.py": "BLOCK = 64\n",
                                          "main.py": "import signal\ndef run(q, out):\n    signal.alarm(1)\n"},
}


@pytest.mark.parametrize("name", sorted(OWN_FILES_HOSTILE))
def test_standard_modules_reached_beside_own_namesakes_are_still_judged(name, policy):
    findings = scan_sources(OWN_FILES_HOSTILE[name], "triton", policy)
    assert not gate_passed(findings), describe(findings)


def test_a_relative_import_out_of_the_solution_is_judged_by_its_name(policy):
    """`from .. import signal` from the solution's root climbs out of its package: never one of its files."""
    findings = scan_sources({"main.py": "from .. import signal\ndef run(q, out):\n    signal.alarm(1)\n",
                             "signal.py": "BLOCK = 64\n"}, "triton", policy)
    assert not gate_passed(findings), describe(findings)


# Classes of another of the solution's modules: made there, read here; reached through the class from another module,
# their `self` is not trusted in the module that defines them.

_SHAPES = "from typing import NamedTuple\nclass Shapes(NamedTuple):\n    batch: int\n    topk: int\n"
_LAUNCHER = ("class Launcher:\n    def __init__(self, topk):\n        self.topk = topk\n"
             "    def grab(self):\n        return self.topk\n")
CROSS_MODULE_HONEST = {
    "imported_namedtuple": {"pkg/types.py": _SHAPES, "pkg/__init__.py": "",
                            "main.py": "from .pkg.types import Shapes\ndef run(q, out):\n"
                                       "    shapes = Shapes(q.shape[0], out.shape[1])\n"
                                       "    kernel[(1,)](q, out, TOPK=shapes.topk)\n"},
    "imported_launcher": {"launcher.py": _LAUNCHER,
                          "main.py": "from .launcher import Launcher\nL = Launcher(2048)\ndef run(q, out):\n"
                                     "    kernel[(1,)](q, out, TOPK=L.topk)\n    return L.grab()\n"},
}
CROSS_MODULE_HOSTILE = {
    "unbound_through_the_import": {"launcher.py": _LAUNCHER, "main.py": "from .launcher import Launcher\n"
                                   "def run(q, out):\n    return Launcher.grab(q)(4)\n"},
    "unbound_through_the_module": {"launcher.py": _LAUNCHER, "main.py": "from . import launcher as L\n"
                                   "def run(q, out):\n    return L.Launcher.grab(q)(4)\n"},
    "class_handed_on": {"launcher.py": _LAUNCHER, "main.py": "from .launcher import Launcher as B\n"
                        "def run(q, out):\n    g = B\n    return g.grab(q)(4)\n"},
    "instance_rebound": {"pkg/types.py": _SHAPES, "pkg/__init__.py": "",
                         "main.py": "from .pkg.types import Shapes\nshapes = Shapes(1, 2)\ndef run(q, out):\n"
                                    "    shapes = q\n    f = shapes.topk\n    return f(4)\n"},
}


@pytest.mark.parametrize("name", sorted(CROSS_MODULE_HONEST))
def test_fields_of_classes_from_other_modules_are_not_torch_compute(name, policy):
    findings = scan_sources(CROSS_MODULE_HONEST[name], "triton", policy)
    assert findings == [], describe(findings)


@pytest.mark.parametrize("name", sorted(CROSS_MODULE_HOSTILE))
def test_tensor_methods_through_classes_of_other_modules_are_still_judged(name, policy):
    findings = scan_sources(CROSS_MODULE_HOSTILE[name], "triton", policy)
    assert any(f.rule == "torch_compute" for f in findings), describe(findings)
