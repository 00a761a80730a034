"""Static gate: honest idioms that must pass it (self-tests under a main guard, build settings in the environment,
debug flags, error messages that name the environment, non-compute torch calls, ops registered in Python, globbed
sources and a temporary build folder), and names reached through the solution's own modules, which are what those
modules imported."""

from __future__ import annotations

import textwrap

import pytest

from harness.audits.static_gate import (
    awaits_attribution,
    builtin_policy,
    gate_passed,
    policy_from_mapping,
    scan_sources,
)
from harness.audits.verdicts import promotion_blockers
from harness.data.statuses import EvaluationStatus

from static_gate_support import describe, scan_py

# --------------------------------------------------------------------------------------------------
# Honest idioms: no finding at all. The policy's (its env_writes and torch_calls lists) under the shipped policy; the
# gate's own under the catalogue (empty allow-lists) too.

POLICY_IDIOMS = [
    # build settings written before load_inline
    "import os\nos.environ['TORCH_CUDA_ARCH_LIST'] = '9.0a'\n",
    "import os\nos.environ.setdefault('TORCH_CUDA_ARCH_LIST', '9.0a')\nos.environ.update(MAX_JOBS='4')\n",
    "import os\nos.environ['TVM_FFI_CUDA_ARCH_LIST'] = '9.0a'  # before tvm_ffi.cpp.load_inline\n",
    # a CuTe DSL kernel's launch on the current stream (FlashInfer's GDN kernels, vendored)
    ("import cuda.bindings.driver as cuda\nimport torch\n\n\ndef launch(stream: cuda.CUstream = None):\n"
     "    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)\n"),
    # an op registered in Python is the solution's own
    ("import torch\n@torch.library.custom_op('mylib::decode', mutates_args=('out',))\n"
     "def decode(q: torch.Tensor, out: torch.Tensor) -> None:\n    pass\n"
     "def run(q, out):\n    torch.ops.mylib.decode(q, out)\n"),
]


@pytest.mark.parametrize("source", POLICY_IDIOMS)
def test_honest_idioms_of_the_policy_are_not_flagged(source, policy):
    findings = scan_py(source, policy)
    assert findings == [], describe(findings)


GATE_IDIOMS = [
    # the environment named in the words of an error, an assertion, a print, a warning or a log line
    "raise RuntimeError('no GPU: use TRITON_INTERPRET=1 to debug on CPU')\n",
    "def f(x):\n    assert x.is_cuda, 'set CUDA_VISIBLE_DEVICES to a GPU'\n",
    "def f(x):\n    assert x.is_cuda, f'set CUDA_VISIBLE_DEVICES to a GPU, got {x.device}'\n",
    "raise ValueError('run under pytest with %s' % 'TRITON_INTERPRET=1')\n",
    "raise ValueError('TRITON_INTERPRET={} is not supported'.format(mode))\n",
    "print('CUDA_VISIBLE_DEVICES selects the GPU')\n",
    "import warnings\nwarnings.warn('TRITON_INTERPRET is slow')\n",
    "import logging\nlog = logging.getLogger('k')\nlog.warning('CUDA_VISIBLE_DEVICES is unset')\nlogging.info('pytest')\n",
    # read-only queries and calls that launch no compute
    "import torch\ncapturing = torch.cuda.is_current_stream_capturing()\n",
    ("import torch\ntorch.manual_seed(0)\ntorch._assert(x.dim() == 3, 'q is [B, H, D]')\n"
     "major = int(torch.__version__.split('.')[0])\n"),
    ("import torch\nwith torch.cuda.nvtx.range('decode'):\n    torch.cuda.nvtx.range_push('a')\n"
     "    torch.cuda.nvtx.range_pop()\nwith torch.profiler.record_function('decode'):\n    pass\n"),
    ("import torch\nif not torch.compiler.is_compiling():\n    torch.cuda.empty_cache()\n"
     "torch.set_float32_matmul_precision('high')\n"),
    # the solution's own sources listed next to the module, and a build folder of the build's own
    ("import glob\nimport os\nimport tempfile\nfrom torch.utils.cpp_extension import load\n"
     "_HERE = os.path.dirname(os.path.abspath(__file__))\n"
     "ext = load(name='k', sources=glob.glob(os.path.join(_HERE, 'csrc', '*.cu')), build_directory=tempfile.mkdtemp())\n"),
    ("from glob import glob\nfrom pathlib import Path\nfrom tempfile import mkdtemp\nimport torch.utils.cpp_extension as ce\n"
     "SRC = sorted(glob(str(Path(__file__).parent / 'kernels' / '*.cu')))\nBUILD = mkdtemp(prefix='k_')\n"
     "ext = ce.load('k', SRC, build_directory=BUILD)\n"),
    ("import tempfile\nfrom torch.utils.cpp_extension import load_inline\n"
     "with tempfile.TemporaryDirectory() as d:\n"
     "    ext = load_inline('k', '', '__global__ void k() {}', build_directory=d)\n"),
    # TVM-FFI's builder (the contest's default binding) on the solution's own .cu, and the module it built
    ("from pathlib import Path\nimport tvm_ffi\nSRC = str(Path(__file__).with_name('k.cu'))\n"
     "lib = tvm_ffi.cpp.build(name='k', cuda_files=[SRC], extra_cuda_cflags=['-O3', '--use_fast_math'])\n"
     "mod = tvm_ffi.load_module(lib)\n"),
    "import tvm_ffi.cpp\nmod = tvm_ffi.cpp.load_inline('k', cuda_sources='__global__ void k(float* x) {}', functions=['k'])\n",
    # the contest starter kit's CUDA binding template: ctypes imported, never used
    ("import ctypes\nfrom tvm.ffi import register_func\n\n\n@register_func('flashinfer.kernel')\ndef kernel():\n"
     "    pass\n"),
    # queries (cuDNN's presence, the allocator's statistics) and DLPack handles: no kernel
    ("import torch\nfrom torch.utils.dlpack import from_dlpack, to_dlpack\nCUDNN = torch.backends.cudnn.is_available()\n"
     "def f(x):\n    free = torch.cuda.mem_get_info()[0] - torch.cuda.memory_reserved()\n"
     "    return from_dlpack(to_dlpack(x)), torch.from_dlpack(x), free\n"),
    # torch's precision switches set as attributes, as set_float32_matmul_precision('high') sets them by a call
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True\n"
     "torch.backends.cudnn.benchmark = True\n"),
    # a plan cache keyed by the hash of shapes and dtypes: they hash by value
    ("_plans = {}\ndef plan(q, indptr):\n    B, H = q.shape[0], q.shape[1]\n    key = hash((B, H, q.dtype))\n"
     "    if key not in _plans:\n        _plans[key] = object()\n    return _plans[key]\n"),
    "_ws = {}\ndef ws(x):\n    return _ws.setdefault(hash(tuple(x.shape)), x.new_empty(4))\n",
    # TVM-FFI's build handed to load_module as a string; the solution's own sources checked one by one before a build
    ("import os\nimport tvm_ffi\nimport tvm_ffi.cpp\nHERE = os.path.dirname(os.path.abspath(__file__))\n"
     "def _module():\n    so = tvm_ffi.cpp.build('m', cuda_files=[os.path.join(HERE, 'k.cu')])\n"
     "    return tvm_ffi.load_module(str(so))\n"),
    ("import pathlib\nfrom torch.utils.cpp_extension import load\nHERE = pathlib.Path(__file__).parent\n"
     "SOURCES = [str(HERE / 'main.cpp'), str(HERE / 'kernel.cu')]\nfor src in SOURCES:\n"
     "    if not pathlib.Path(src).exists():\n        raise RuntimeError(src)\nmod = load(name='k', sources=SOURCES)\n"),
    # compiled launchers cached per kernel: id() of the function launched, or of a def of the module
    ("_launchers = {}\ndef launch(fn, grid, *args, key=0):\n    k = (id(fn), key)\n    hit = _launchers.get(k)\n"
     "    if hit is not None:\n        return hit(*args)\n    compiled = fn[grid](*args)\n    _launchers[k] = compiled\n"
     "    return compiled\n"),
    ("import triton\n@triton.jit\ndef _k(x):\n    pass\n_plans = {}\ndef run(q):\n"
     "    return _plans.setdefault((id(_k), q.shape[0]), 1)\n"),
    # the solution's own folder on sys.path, for absolute imports of its own modules
    "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n",
    ("import os\nimport sys\nHERE = os.path.dirname(os.path.realpath(__file__))\nif HERE not in sys.path:\n"
     "    sys.path.append(HERE)\n"),
    "import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).resolve().parent))\n",
    # which version of a package is installed, or whether one is, asked by its literal name
    ("from importlib.metadata import version, PackageNotFoundError\ntry:\n    TRITON = version('triton')\n"
     "except PackageNotFoundError:\n    TRITON = None\n"),
    "import importlib.util\nHAS_FLASHINFER = importlib.util.find_spec('flashinfer') is not None\n",
    # a build folder next to the module, made first (load() and load_inline() write into it, never create it)
    ("import os\nfrom torch.utils.cpp_extension import load_inline\n"
     "HERE = os.path.dirname(os.path.abspath(__file__))\nBUILD = os.path.join(HERE, 'build')\n"
     "if not os.path.exists(BUILD):\n    os.makedirs(BUILD, exist_ok=True)\n"
     "ext = load_inline('k', '', '__global__ void k() {}', build_directory=BUILD)\n"),
    ("from pathlib import Path\nfrom torch.utils.cpp_extension import load\n"
     "BUILD = Path(__file__).resolve().parent / '_build'\nBUILD.mkdir(parents=True, exist_ok=True)\n"
     "ext = load('k', sources=[str(Path(__file__).parent / 'k.cu')], build_directory=str(BUILD))\n"),
]


@pytest.mark.parametrize("source", GATE_IDIOMS)
@pytest.mark.parametrize("policy_name", ["policy", "catalogue"])
def test_honest_idioms_are_not_flagged(source, policy_name, request):
    chosen = builtin_policy() if policy_name == "catalogue" else request.getfixturevalue(policy_name)
    findings = scan_py(source, chosen)
    assert findings == [], describe(findings)


# --------------------------------------------------------------------------------------------------
# A debug flag read by its literal name: an env_read warning that blocks neither the gate nor promotion.

ENV_READS = [
    "import os\nDEBUG = os.environ.get('MYKERNEL_DEBUG', '0') == '1'\n",
    "import os\nDEBUG = os.getenv('MYKERNEL_DEBUG')\n",
    "from os import getenv\nDEBUG = getenv(key='MYKERNEL_DEBUG')\n",
    # a tuning helper every call hands a literal name (real contestants' `_get_env_int(name, default, lo, hi)`)
    ("import os\ndef _env_int(name, default):\n    v = os.environ.get(name)\n    return int(v) if v else default\n"
     "def run(q):\n    return _env_int('MYK_BLOCK', 64) + _env_int(name='MYK_WARPS', default=4)\n"),
    "import os\nDEBUG = os.environ['MYKERNEL_DEBUG'] if 'MYKERNEL_DEBUG' in os.environ else '0'\n",
]


@pytest.mark.parametrize("source", ENV_READS)
def test_a_debug_flag_is_a_warning_that_blocks_nothing(source, policy):
    findings = scan_py(source, policy)
    assert findings and {(f.rule, f.severity) for f in findings} == {("env_read", "warning")}, describe(findings)
    assert gate_passed(findings) and not any(awaits_attribution(f) for f in findings)
    passed = [{"label": "w0", "status": EvaluationStatus.PASSED, "audits": []}]  # CPU: no attribution audit ran
    assert promotion_blockers(passed, [f.model_dump() for f in findings]) == []
    compute = scan_py("import torch\ny = torch.matmul(a, b)\n", policy)  # the control: a library warning blocks
    assert promotion_blockers(passed, [f.model_dump() for f in compute])



def test_an_env_helper_another_file_calls_is_judged_by_no_literal(policy):
    """Red team: the helper's file calls it with a harmless name, another file with one that reveals the harness."""
    util = "import os\ndef env(name):\n    return os.environ.get(name)\nBLOCK = env('MYKERNEL_BLOCK')\n"
    alone = scan_sources({"util.py": util}, "triton", policy)
    assert [(f.rule, f.severity) for f in alone] == [("env_read", "warning")], describe(alone)
    both = scan_sources({"util.py": util, "kernel.py": "from .util import env\nT = env('PYTEST_CURRENT_TEST')\n"},
                        "triton", policy)
    assert any(f.rule == "env_probe" and f.severity == "error" and f.path == "util.py" for f in both), describe(both)


# The same debug flag in C++ (a .cu beside the solution, or the CUDA text given to load_inline); a name that reveals
# the harness, a computed name or a write stays env_probe.
CPP_FLAG = 'static bool debug() { const char* v = std::getenv("MOE_DEBUG"); return v && v[0] == \'1\'; }\n'
CPP_HELPER = ('static int env_int(const char* name, int dflt) {\n  if (dflt) { const char* v = std::getenv(name); '
              'if (v && *v) return atoi(v); }\n  return dflt;\n}\n'
              'int block() { return env_int("MYK_BLOCK", 256) * env_int("MYK_SPLIT", 1); }\n')
CPP_PROBES = ['bool f() { return std::getenv("PYTEST_CURRENT_TEST") != nullptr; }\n',
              'bool f(const char* n) { return getenv(n) != nullptr; }\n',
              # a helper's parameter: one call passes a computed name, one a revealing one, or it is rebound
              CPP_HELPER + 'int g(const char* k) { return env_int(k, 1); }\n',
              CPP_HELPER.replace('"MYK_SPLIT"', '"PYTEST_CURRENT_TEST"'),
              CPP_HELPER.replace("if (dflt) {", "if (dflt) { name = \"X\";"),
              # red team: the helper as a function pointer's value or a macro's argument, its parameter written
              # through its address or redeclared in a block
              CPP_HELPER + 'static int (*probe)(const char*, int) = env_int;\nint h() { return probe("PYTEST_X", 0); }\n',
              CPP_HELPER + '#define CALL(f, a) f(a, 0)\nint h() { return CALL(env_int, "PYTEST_X"); }\n',
              CPP_HELPER.replace("if (dflt) {", "if (dflt) { const char** p = &name; *p = \"PYTEST_X\";"),
              CPP_HELPER.replace("if (dflt) {", "if (dflt) { const char* name{\"PYTEST_X\"};"),
              # a template or defaulted parameter shifts positions; #if 0 hides the function the read is in
              ('static const char* env_str(std::pair<int, int> w, const char* name, const char* note = nullptr) '
               '{ return getenv(name); }\nconst char* g(const char* k) { return env_str(std::make_pair(0, 0), k, '
               '"MYK_DEBUG"); }\n'),
              ('static const char* probe(const char* name) {\n#if 0\n}\nstatic const char* env_str(const char* name) '
               '{\n#endif\n  return getenv(name);\n}\n#if 0\nint a() { env_str("MYK_X"); }\n#endif\n'
               'const char* b(const char* k) { return probe(k); }\n'),
              'void f() { setenv("MOE_DEBUG", "1", 1); }\n']


def test_a_debug_flag_read_in_cpp_is_a_warning(policy):
    inline = ("from torch.utils.cpp_extension import load_inline\nCUDA = r\"\"\"\n" + CPP_FLAG + "\"\"\"\n"
              "ext = load_inline('moe', cpp_sources='', cuda_sources=CUDA)\n")
    for sources, language in (({"kernel.cu": CPP_FLAG}, "cuda"), ({"main.py": inline}, "python"),
                              ({"kernel.cu": CPP_HELPER}, "cuda")):
        findings = scan_sources(sources, language, policy)
        assert [(f.rule, f.severity) for f in findings] == [("env_read", "warning")], describe(findings)
        assert gate_passed(findings)
    for probe in CPP_PROBES:
        findings = scan_sources({"kernel.cu": probe}, "cuda", policy)
        assert "env_probe" in {f.rule for f in findings} and not gate_passed(findings), describe(findings)


def test_digraphs_and_another_files_macros_are_the_preprocessors(policy):
    """Red team: `%:define` and `%:%:` paste as `#define` and `##` do; a macro of a header pastes in the file that
    includes it; a helper a header defines is called from files its own scan never sees."""
    digraph = "%:define CAT(a, b) a %:%: b\nvoid f() { void* h = CAT(dl, open)(\"libc.so.6\", 2); }\n"
    assert "native_ffi" in {f.rule for f in scan_sources({"kernel.cu": digraph}, "cuda", policy)}
    header = "#pragma once\n#define CAT(a, b) a##b\n"
    use = '#include "util.h"\nvoid f() { void* h = CAT(dl, open)("libc.so.6", 2); }\n'
    found = scan_sources({"util.h": header, "kernel.cu": use}, "cuda", policy)
    assert any(f.rule == "native_ffi" and f.path == "kernel.cu" for f in found), describe(found)
    helper = CPP_HELPER.replace("int block()", "inline int block()")
    other = '#include "env.h"\nint g() { return env_int("PYTEST_CURRENT_TEST", 0); }\n'
    both = scan_sources({"env.h": helper, "kernel.cu": other}, "cuda", policy)
    assert any(f.rule == "env_probe" and f.path == "env.h" for f in both), describe(both)


def test_a_header_of_the_solutions_own_folders_may_be_included_by_a_relative_path(policy):
    """csrc/kernels/attn.cu including "../common/utils.cuh" stays in the solution; a path that climbs out of it, an
    absolute one, and `..` in C++ held in a Python string (compiled in a build folder) do not."""
    sources = {"csrc/kernels/attn.cu": '#include "../common/utils.cuh"\n#include "../../include/api.h"\n'
                                       '__global__ void attn(float* x) {}\n',
               "csrc/common/utils.cuh": "#pragma once\n", "include/api.h": "#pragma once\n",
               "csrc/binding.cpp": '#include "kernels/../common/utils.cuh"\n'}
    assert scan_sources(sources, "cuda", policy) == []
    out = {"csrc/kernels/attn.cu": '#include "../../../etc/secret.h"\n#include "/usr/include/x.h"\n',
           "kernel.cu": '#include "../harness/reference.h"\n',
           "main.py": "from torch.utils.cpp_extension import load_inline\n"
                      "m = load_inline('k', '', '#include \"../common/utils.cuh\"\\n__global__ void k() {}')\n"}
    findings = scan_sources(out, "python", policy)
    assert sorted((f.path, f.line, f.rule) for f in findings) == [
        ("csrc/kernels/attn.cu", 1, "harness_internals"), ("csrc/kernels/attn.cu", 2, "harness_internals"),
        ("kernel.cu", 1, "harness_internals"), ("main.py", 2, "harness_internals")], describe(findings)

def test_ops_registered_in_python_are_the_solutions_own(policy):
    call = "import torch\ndef run(q):\n    return torch.ops.mylib.decode(q)\n"
    assert [f.rule for f in scan_py(call, policy)] == ["torch_compute"]
    registered = {"main.py": call, "ops.py": "import torch\n@torch.library.custom_op(\"mylib::decode\", mutates_args=())\n"
                                              "def decode(q: torch.Tensor) -> torch.Tensor:\n    return q\n"}
    assert scan_sources(registered, "python", policy) == []
    aten = {**registered, "ops.py": "import torch\ntorch.library.define('aten::decode', '(Tensor q) -> Tensor')\n"}
    assert "torch_compute" in {f.rule for f in scan_sources(aten, "python", policy) if f.path == "main.py"}


def test_env_writes_is_a_policy_allow_list(policy):
    source = "import os\nos.environ['CUDA_MODULE_LOADING'] = 'LAZY'\n"
    assert [f.rule for f in scan_py(source, builtin_policy())] == ["env_probe"]
    layered = policy_from_mapping({"definition": {"d": {"allow": {"env_writes": ["CUDA_MODULE_LOADING"]}}}},
                                  definition="d")
    assert scan_py(source, layered) == []
    assert [f.rule for f in scan_py("import os\nos.environ['TORCH_CUDA_ARCH_LIST'] = '9.0a'\n",
                                    builtin_policy())] == ["env_probe"]  # the shipped list is the YAML's
    for folder in ("TVM_FFI_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):  # a build folder that outlives the worker
        assert "env_probe" in {f.rule for f in scan_py(f"import os\nos.environ['{folder}'] = 'build'\n", policy)}


# --------------------------------------------------------------------------------------------------
# `if __name__ == "__main__":` never runs in the harness (the solution is imported as a package module): its body is
# not scanned, unless something in the solution could make `__name__` "__main__".

SELF_TEST = '''\
    import torch
    def run(q):
        return q
    if __name__ == "__main__":
        import sys
        import time
        import triton.testing
        torch.manual_seed(int(sys.argv[1]))
        q = torch.randn(4, 8, device="cuda")
        start = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        print(triton.testing.do_bench(lambda: run(q)), time.perf_counter() - t0)
        torch.testing.assert_close(run(q), q @ torch.eye(8, device="cuda"))
    '''

MAIN_GUARD_CASES = [
    # (what is added to the solution, is the block scanned?)
    ({}, False),
    ({"main.py": "__name__ = '__main__'\n"}, True),
    ({"main.py": "globals()['__na' + 'me__'] = '__main__'\n"}, True),
    ({"main.py": "for __name__ in ['__main__']:\n    pass\n"}, True),
    ({"main.py": "(__name__ := '__main__')\n"}, True),
    ({"main.py": "from os import sep as __name__\n"}, True),
    ({"main.py": "def f(__name__='__main__'):\n    return __name__\n"}, True),
    ({"helper.py": "global __name__\n__name__ += ''\n"}, True),
    ({"main.py": "match '__main__':\n    case __name__:\n        pass\n"}, True),
    ({"main.py": "match ['__main__']:\n    case [*__name__]:\n        pass\n"}, True),
    ({"main.py": "match {}:\n    case {**__name__}:\n        pass\n"}, True),
    ({"main.py": "try:\n    pass\nexcept ValueError as __name__:\n    pass\n"}, True),
    ({"main.py": "from . import main as me\nsetattr(me, '__na' + 'me__', '__main__')\n"}, True),
    ({"main.py": "from . import main as me\nme.__dict__['__na' + 'me__'] = '__main__'\n"}, True),
    ({"main.py": "from . import main as me\nme.__init__('__main__')\n"}, True),
    ({"main.py": "from . import main as me\ngetattr(me, '__set' + 'attr__')('__na' + 'me__', '__main__')\n"}, True),
    ({"main.py": "__loader__.name = '__main__'\n"}, True),
    ({"helper.py": "from . import main\nmain.__name__ = '__main__'\n"}, True),
    ({"helper.py": "import types\nm = types.ModuleType('x')\n"}, True),
    # honest neighbours keep the block unscanned
    ({"helper.py": "class K:\n    def __init__(self):\n        super().__init__()\n"
                   "if __name__ == '__main__':\n    pass\n"}, False),
    ({"main.py": "BLOCK = getattr(torch, 'float8_e4m3fn', None)\n"}, False),
    # reading `__name__` changes nothing: a logger named after the module, a message, a docstring
    ({"helper.py": "import logging\nlogger = logging.getLogger(__name__)\n"}, False),
    ({"main.py": "print(__name__)\n"}, False),
    ({"main.py": "'''a docstring naming __name__'''\n"}, False),
]


@pytest.mark.parametrize(("extra", "scanned"), MAIN_GUARD_CASES)
def test_a_main_guard_body_is_scanned_only_where_it_could_run(extra, scanned, policy):
    main = textwrap.dedent(SELF_TEST)
    added = extra.get("main.py")
    sources = {**extra, "main.py": (added + main) if added else main}
    findings = scan_sources(sources, "triton", policy)
    in_block = [f for f in findings if f.path == "main.py" and "torch.cuda.Event" in f.snippet]
    assert bool(in_block) == scanned, describe(findings)
    if not scanned:
        assert not [f for f in findings if f.path == "main.py"], describe(findings)


def test_the_else_of_a_main_guard_is_scanned_and_the_body_binds_nothing(policy):
    source = ("import torch\nif __name__ == '__main__':\n    import numpy as torch\nelse:\n"
              "    e = torch.cuda.Event()\ny = torch.matmul(a, b)\n")
    assert {(f.rule, f.line) for f in scan_py(source, policy)} == {("stream_event_graph", 5), ("torch_compute", 6)}


# --------------------------------------------------------------------------------------------------
# A name reached through the solution's own modules is what those modules imported.

OWN_MODULE_CASES = [
    ({"main.py": "from . import honest\nT = honest.torch\ndef run(a, b):\n    return T.matmul(a, b)\n",
      "honest.py": "import torch\n"}, ("main.py", 4, "torch_compute")),
    ({"main.py": "from . import honest\ndef run(x):\n    return honest.torch.softmax(x, -1)\n",
      "honest.py": "import torch\n"}, ("main.py", 3, "torch_compute")),
    ({"main.py": "from .honest import torch as T\ny = T.matmul(a, b)\n", "honest.py": "import torch\n"},
     ("main.py", 2, "torch_compute")),
    ({"main.py": "from . import honest\ny = honest.F.softmax(x)\n", "honest.py": "import torch.nn.functional as F\n"},
     ("main.py", 2, "torch_compute")),
    ({"main.py": "from . import honest\ny = honest.T.matmul(x, x)\n", "honest.py": "import torch\nT = torch\n"},
     ("main.py", 2, "torch_compute")),
    ({"main.py": "import torch\nfrom . import helpers\nhelpers.T = torch\ny = helpers.T.matmul(x, x)\n",
      "helpers.py": "BLOCK = 3\n"}, ("main.py", 4, "torch_compute")),
    ({"main.py": "from .pkg import inner\ny = inner.torch.softmax(x)\n", "pkg/inner.py": "import torch\n",
      "pkg/__init__.py": ""}, ("main.py", 2, "torch_compute")),
    ({"pkg/main.py": "from . import inner\nm = inner.sys.modules\n", "pkg/inner.py": "import sys\n"},
     ("pkg/main.py", 2, "harness_internals")),
    ({"main.py": "from . import honest\nhonest.torch.cuda.synchronize = f\n", "honest.py": "import torch\n"},
     ("main.py", 2, "timer_tampering")),
    # a file of the solution named like a real module does not make that module its own: the solution is imported
    # as a package, so `import torch` / `import sys` / `import time` are the real ones whatever it ships
    ({"main.py": "import torch\ndef run(a, b, out):\n    out.copy_(torch.matmul(a, b))\n", "torch.py": "X = 1\n"},
     ("main.py", 3, "torch_compute")),
    ({"main.py": "import sys\nm = sys.modules\n", "sys.py": ""}, ("main.py", 2, "harness_internals")),
    ({"main.py": "import time\ntime.perf_counter = lambda: 0\n", "time/__init__.py": ""},
     ("main.py", 2, "timer_tampering")),
    # and with its folder on sys.path such a file would shadow the real module for whoever imports it next
    ({"main.py": "import os, sys\nsys.path.insert(0, os.path.dirname(__file__))\n", "statistics.py": "X = 0\n"},
     ("main.py", 2, "harness_internals")),
]


@pytest.mark.parametrize(("sources", "expected"), OWN_MODULE_CASES)
def test_names_through_own_modules_are_what_they_imported(sources, expected, policy):
    findings = scan_sources(sources, "python", policy)
    assert expected in {(f.path, f.line, f.rule) for f in findings}, describe(findings)


def test_what_own_modules_define_stays_their_own(policy):
    sources = {"main.py": ("from . import honest\nfrom .honest import run_kernel\nhonest.BLOCK = 64\n"
                           "def run(x):\n    return run_kernel(x, honest.cfg(x), honest.BLOCK)\n"),
               "honest.py": "import torch\nBLOCK = 4\ndef run_kernel(x, c, b):\n    return x\ndef cfg(x):\n    return 1\n"}
    assert scan_sources(sources, "python", policy) == []


def test_what_an_include_names_is_cpp_and_a_python_comment_names_nothing():
    from harness.audits.static_gate import included_files

    assert included_files({"k.cu": '#include "notes.txt"\n', "notes.txt": "", "README.md": ""}) == {"notes.txt"}
    assert included_files({"k.py": 'CUDA = """\n#include "h.cuh"\n"""\n', "h.cuh": ""}) == {"h.cuh"}
    assert included_files({"k.cu": "#include HEADER\n", "notes.txt": ""}) == {"k.cu", "notes.txt"}  # any file
    assert included_files({"k.py": "# include the bias\nx = 1\n", "README.md": "getenv"}) == set()
