"""Static gate: FLA's utils idioms in GDN solutions, each honest form beside hostile variants that must still fail.

- The device's torch module looked up by its name (`device_torch_lib = getattr(torch, device)`) is no dynamic_code
  where it is used only for device attributes (python_device_lib); any other use of it, or anything that could reach
  it unseen, keeps the lookup dynamic_code.
- `inspect.signature` (an input guard naming arguments after parameters) is no harness_internals finding; the rest of
  inspect still is, and a signature that evaluates annotations (`eval_str=`) is dynamic_code.
- `sys.platform` and `platform.machine()` (FLA's host checks) are no env_probe; the rest of platform still is.
- A broad `except` around queries of Triton's driver alone (FLA's fallback to "cpu") is no silent_fallback warning;
  around anything else it still is.
- getattr/setattr with unpacked arguments show neither object nor name: dynamic_code, monkeypatch."""

from __future__ import annotations

import textwrap

import pytest

from harness.audits.static_gate import gate_passed, load_policy, scan_sources

from static_gate_support import describe

HEAD = """\
import functools
import torch
import triton


@functools.lru_cache(maxsize=None)
def get_available_device() -> str:
    return triton.runtime.driver.active.get_current_target().backend


device = get_available_device()
"""


def _utils(body: str) -> str:
    return HEAD + "device_torch_lib = getattr(torch, device)\n" + textwrap.dedent(body)


_TAIL = "\n\ndef custom_device_ctx(index: int):\n    return device_torch_lib.device(index)\n"
MAIN_IMPORTS_HELPER = "from .utils import custom_device_ctx\n\n\ndef run(x):\n    with custom_device_ctx(0):\n" \
                      "        return x\n"

# case -> sources. Each must scan with no error at all.
HONEST = {
    "module_level_device_context": {"utils.py": _utils("""
        def custom_device_ctx(index: int):
            return device_torch_lib.device(index)
        """), "main.py": MAIN_IMPORTS_HELPER},
    "queries_and_counts": {"utils.py": _utils("""
        def custom_device_ctx(index: int):
            return device_torch_lib.device(index)


        def shared_mem() -> list:
            if not device_torch_lib.is_available():
                return [-1]
            return [triton.runtime.driver.active.utils.get_device_properties(i)["max_shared_mem"]
                    for i in range(device_torch_lib.device_count())]


        def index() -> int:
            return device_torch_lib.current_device()


        HOPPER = device_torch_lib.is_available() and device_torch_lib.get_device_capability()[0] >= 9
        NAME = device_torch_lib.get_device_name(0) if device_torch_lib.is_available() else ""
        """), "main.py": MAIN_IMPORTS_HELPER},
    # FLA on torch before 2.4: the autocast decorators of the device module
    "old_torch_autocast_decorators": {"utils.py": _utils("""
        autocast_custom_fwd = device_torch_lib.amp.custom_fwd
        autocast_custom_bwd = device_torch_lib.amp.custom_bwd


        def custom_device_ctx(index: int):
            return torch.cuda.device(index)
        """), "main.py": MAIN_IMPORTS_HELPER},
    # prose that names it is no code that could reach it
    "named_in_a_readme": {"utils.py": _utils(_TAIL), "main.py": MAIN_IMPORTS_HELPER,
                          "README.md": "`device_torch_lib` is the device's torch module\n"},
    # bound in a function instead of at module level
    "local_binding": {"main.py": HEAD + textwrap.dedent("""
        def run(x):
            lib = getattr(torch, get_available_device())
            with lib.device(x.device.index):
                return x
        """)},
    # FLA's input guard names each argument after the decorated function's parameters
    "input_guard_signature": {"main.py": textwrap.dedent("""
        import functools
        import inspect
        import torch


        def input_guard(fn):
            names = list(inspect.signature(fn).parameters)

            @functools.wraps(fn)
            def wrapper(*args):
                return fn(*(a.contiguous() if isinstance(a, torch.Tensor) and names[i] != "state" else a
                            for i, a in enumerate(args)))
            return wrapper
        """)},
    # FLA's host checks: the OS and CPU architecture, the metadata of a package named literally
    "host_checks": {"main.py": textwrap.dedent("""
        import platform
        import sys

        IS_ARM = platform.machine().lower() in ("aarch64", "arm64")
        if sys.platform == "win32":
            from importlib.metadata import PackageNotFoundError, metadata
            try:
                metadata("triton-windows")
            except PackageNotFoundError:
                pass
        """)},
    # FLA's precision setting for cards without TF32 (the shipped policy's env_writes)
    "triton_fp32_default": {"main.py": "import os\nimport torch\n\nif torch.cuda.is_available() and "
                                       "torch.cuda.get_device_capability(0)[0] < 8:\n"
                                       "    os.environ['TRITON_F32_DEFAULT'] = 'ieee'\n"},
    "signature_of_a_library_callable": {"main.py": "import inspect\nimport triton\n"
                                                   "CACHE = 'cache_results' in inspect.signature(triton.autotune)"
                                                   ".parameters\nEMPTY = inspect.Parameter.empty\n"},
}

# case -> (sources, the error rules the gate must report). The lookup stays dynamic_code wherever the module it
# returned could be used for anything but device attributes.
HOSTILE = {
    "compute_on_the_lookup": ({"main.py": HEAD + "def run(a, b):\n    return getattr(torch, device).matmul(a, b)\n"},
                              {"dynamic_code"}),
    "compute_attribute": ({"main.py": _utils("def run(a, b):\n    return device_torch_lib.matmul(a, b)\n")},
                          {"dynamic_code"}),
    "ops_namespace": ({"main.py": _utils("def run(a, b):\n    return device_torch_lib.aten.mm(a, b)\n")},
                      {"dynamic_code"}),
    "aliased": ({"main.py": _utils("ops = device_torch_lib\n\n\ndef run(a, b):\n    return ops.mm(a, b)\n")},
                {"dynamic_code"}),
    "returned": ({"main.py": _utils("def lib():\n    return device_torch_lib\n")}, {"dynamic_code"}),
    "passed_on": ({"main.py": _utils("def run(f, a):\n    return f(device_torch_lib, a)\n")}, {"dynamic_code"}),
    "in_a_container": ({"main.py": _utils("LIBS = [device_torch_lib]\n")}, {"dynamic_code"}),
    "stored_as_attribute": ({"main.py": _utils("class K:\n    pass\n\n\nK.lib = device_torch_lib\n")},
                            {"dynamic_code"}),
    "class_attribute": ({"main.py": HEAD + "class K:\n    lib = getattr(torch, device)\n"}, {"dynamic_code"}),
    "called_directly": ({"main.py": _utils("X = device_torch_lib('mm')\n")}, {"dynamic_code"}),
    "further_computed_lookup": ({"main.py": _utils("def run(n):\n    return getattr(device_torch_lib, n)\n")},
                                {"dynamic_code"}),
    "attribute_assigned": ({"main.py": _utils("device_torch_lib.device = None\n")}, {"dynamic_code"}),
    "rebound_by_a_loop": ({"main.py": _utils("for device_torch_lib in (torch.nn.functional,):\n    pass\n" + _TAIL)},
                          {"dynamic_code"}),
    "shadowed_by_a_parameter": ({"main.py": _utils("def run(device_torch_lib, a):\n    return device_torch_lib.mm(a)\n"
                                                   + _TAIL)}, {"dynamic_code"}),
    "walrus_alias": ({"main.py": _utils("def run(a):\n    return (f := device_torch_lib).mm(a)\n")},
                     {"dynamic_code"}),
    "chained_assignment": ({"main.py": HEAD + "lib = ops = getattr(torch, device)\nX = lib.device(0)\n"},
                           {"dynamic_code"}),
    "named_in_a_string": ({"main.py": _utils("__all__ = ['device_torch_lib']\n" + _TAIL)}, {"dynamic_code"}),
    "through_its_own_module": ({"utils.py": _utils("from . import utils\n\n\ndef run(a, b):\n"
                                                   "    return utils.device_torch_lib.aten.mm(a, b)\n" + _TAIL)},
                               {"dynamic_code"}),
    "matched_through_its_own_module": ({"utils.py": _utils("from . import utils\n\n\ndef run(a, b):\n"
                                                           "    match utils:\n        case object(device_torch_lib=L):\n"
                                                           "            return L.aten.mm(a, b)\n" + _TAIL)},
                                       {"dynamic_code"}),
    "read_past_a_device_attribute": ({"main.py": _utils("def run(a, b):\n    return device_torch_lib.device.mm(a, b)\n")},
                                     {"dynamic_code"}),
    "unused_lookup": ({"main.py": HEAD + "lib = getattr(torch, device)\n"}, {"dynamic_code"}),
    "a_graph_attribute": ({"main.py": _utils("G = device_torch_lib.CUDAGraph()\n")}, {"dynamic_code"}),
    # the name is only ever `torch.ops` spelled by a decoder: no device attribute, so still dynamic code
    "decoded_ops_namespace": ({"main.py": "import codecs\nimport torch\n"
                                          "lib = getattr(torch, codecs.decode('bcf', 'rot13'))\n"
                                          "def run(a, b):\n    return lib.aten.mm(a, b)\n"}, {"dynamic_code"}),
    # another file imports the name and uses it freely
    "imported_elsewhere": ({"utils.py": _utils(_TAIL), "main.py": "from .utils import device_torch_lib as L\n\n\n"
                                                                  "def run(a, b):\n    return L.aten.mm(a, b)\n"},
                           {"dynamic_code"}),
    # another file fetches it by a computed name from the module
    "fetched_by_computed_name": ({"utils.py": _utils(_TAIL), "main.py": "from . import utils\n\n\ndef run(a, b):\n"
                                  "    return getattr(utils, 'device_' + 'torch_lib').aten.mm(a, b)\n"},
                                 {"dynamic_code"}),
    "fetched_by_unpacked_getattr": ({"utils.py": _utils(_TAIL), "main.py": "from . import utils\n\n\n"
                                     "def run(a, b):\n    pair = [utils, 'device_' + 'torch_lib']\n"
                                     "    return getattr(*pair).aten.mm(a, b)\n"}, {"dynamic_code"}),
    # getattr/setattr whose object and name are not shown at all
    "getattr_unpacked": ({"main.py": "import torch\n\n\ndef run(a, b):\n"
                                     "    return getattr(*(torch, 'mat' + 'mul'))(a, b)\n"}, {"dynamic_code"}),
    "setattr_unpacked": ({"main.py": "import torch\nsetattr(*(torch, 'matmul', print))\n"}, {"monkeypatch"}),
    "fetched_through_dict": ({"utils.py": _utils(_TAIL), "main.py": "from . import utils\n\n\ndef run(a, b, n):\n"
                              "    return utils.__dict__[n].aten.mm(a, b)\n"}, {"dynamic_code"}),
    # allowed attributes are judged as torch.cuda's: a side stream is a stream finding, the lookup no longer
    "side_stream": ({"main.py": _utils("S = device_torch_lib.Stream()\n")}, {"stream_event_graph"}),
    "event": ({"main.py": _utils("def run():\n    return device_torch_lib.Event(enable_timing=True)\n")},
              {"stream_event_graph"}),
    # the rest of inspect still reaches frames and the harness
    "inspect_frames": ({"main.py": "import inspect\nF = inspect.currentframe().f_back\n"}, {"harness_internals"}),
    "inspect_members": ({"main.py": "import inspect\nimport torch\nM = dict(inspect.getmembers(torch))\n"},
                        {"harness_internals"}),
    "inspect_handed_on": ({"main.py": "import inspect\n\n\ndef run(f):\n    return f(inspect)\n"},
                          {"harness_internals"}),
    "from_inspect_import": ({"main.py": "from inspect import stack\nS = stack()\n"}, {"harness_internals"}),
    # the rest of platform tells one host from another; a package named by a computed name is dynamic
    "platform_node": ({"main.py": "import platform\nH = platform.node()\n"}, {"env_probe"}),
    "platform_handed_on": ({"main.py": "import platform\n\n\ndef run(f):\n    return f(platform)\n"},
                           {"env_probe"}),
    "platform_reexported": ({"main.py": "import os\nU = os.platform.uname()\n"}, {"env_probe"}),
    "metadata_computed_name": ({"main.py": "from importlib.metadata import metadata\n\n\ndef run(n):\n"
                                           "    return metadata(n)\n"}, {"dynamic_code"}),
    # Triton's other settings stay unwritable (the interpreter, its cache folder)
    "triton_interpret_written": ({"main.py": "import os\nos.environ['TRITON_INTERPRET'] = '1'\n"}, {"env_probe"}),
    # a signature that evaluates string annotations runs code the gate never saw
    "signature_evaluates_annotations": ({"main.py": "import inspect\n\n\ndef f(x: \"__import__('os')\"):\n"
                                         "    pass\n\n\nS = inspect.signature(f, eval_str=True)\n"}, {"dynamic_code"}),
    "signature_keywords_unseen": ({"main.py": "import inspect\n\n\ndef f(x):\n    pass\n\n\n"
                                   "S = inspect.signature(f, **{'eval_str': True})\n"}, {"dynamic_code"}),
}


@pytest.fixture(scope="module")
def shipped():
    return load_policy()


@pytest.mark.parametrize("case", sorted(HONEST))
def test_honest_fla_idiom_has_no_gate_error(case, shipped):
    findings = scan_sources(HONEST[case], "triton", shipped)
    assert gate_passed(findings), describe(findings)
    assert not [f for f in findings if f.rule in ("dynamic_code", "harness_internals")], describe(findings)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_variant_is_still_an_error(case, shipped):
    sources, rules = HOSTILE[case]
    findings = scan_sources(sources, "triton", shipped)
    assert {f.rule for f in findings if f.severity == "error"} == rules, describe(findings)


def test_the_exemption_names_no_compute_attribute():
    """The device attributes are queries, contexts, streams and events: none of torch.cuda's compute or graphs."""
    from harness.audits.static_gate.python_device_lib import DEVICE_ATTRS

    assert not DEVICE_ATTRS & {"graph", "CUDAGraph", "make_graphed_callables", "set_stream", "comm", "jiterator",
                               "_sleep", "random", "manual_seed", "memory", "nvtx", "profiler", "amp"}


_PROBE = "import torch\nimport triton\n\n\ndef probe(index=0):\n    try:\n{body}    except {caught}:\n" \
         "        return {fallback}\n"
# case -> (try body, caught, fallback, whether silent_fallback is reported)
SILENT = {
    "backend": ("        return triton.runtime.driver.active.get_current_target().backend\n", "BaseException", "'cpu'",
                False),
    "sm_count": ("        props = triton.runtime.driver.active.utils.get_device_properties(index)\n"
                 "        return props['multiprocessor_count']\n", "Exception", "1", False),
    "kernel_launch": ("        triton.runtime.driver.active.get_current_target()\n        kernel[(1,)](index)\n",
                      "Exception", "None", True),
    "torch_fallback": ("        return triton.runtime.driver.active.get_current_target().backend + index.sum()\n",
                       "Exception", "torch.matmul(index, index)", True),
    "no_call": ("        return index[0]\n", "Exception", "0", True),
}


@pytest.mark.parametrize("case", sorted(SILENT))
def test_broad_except_around_driver_queries_alone_is_no_silent_fallback(case, shipped):
    body, caught, fallback, flagged = SILENT[case]
    findings = scan_sources({"main.py": _PROBE.format(body=body, caught=caught, fallback=fallback)}, "triton", shipped)
    assert any(f.rule == "silent_fallback" for f in findings) == flagged, describe(findings)

