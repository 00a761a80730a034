"""Static gate: the caller's stack read by spellings other than frames (red-team round, 2026-12-05).

A candidate that knows who called it tells the official timer's calls (harness/measure/timing.py) from the checked
ones and skips the work only where nothing is checked. traceback.extract_stack and sys._getframe were errors; these
reached the same file and function names unflagged. Processes started by library helpers, finalizers by weak-reference
callbacks and a profiler of the candidate's own (a second CUPTI session in the timed process) likewise.
"""

from __future__ import annotations

import textwrap

import pytest

from static_gate_support import describe, scan_py

PROBES = {
    "format_stack": ("from traceback import format_stack\n"
                     "def run(q, out):\n    if 'timing.py' in ''.join(format_stack()):\n        return\n",
                     "harness_internals"),
    "print_stack": ("import traceback, io\n"
                    "def run(q, out):\n    s = io.StringIO()\n    traceback.print_stack(file=s)\n",
                    "harness_internals"),
    "logging_findcaller": ("import logging\n"
                           "def run(q, out):\n    _, _, func, _ = logging.getLogger('k').findCaller(stacklevel=2)\n",
                           "harness_internals"),
    "logging_currentframe": "import logging\ndef run(q, out):\n    f = logging.currentframe()\n",
    "logging_stacklevel": ("import logging, io\n_s = io.StringIO()\n_l = logging.getLogger('k')\n"
                           "_l.addHandler(logging.StreamHandler(_s))\n"
                           "def run(q, out):\n    _l.warning('x', stacklevel=2)\n", "harness_internals"),
    "warnings_record": ("import warnings\n"
                        "def run(q, out):\n    with warnings.catch_warnings(record=True) as w:\n"
                        "        warnings.warn('p', stacklevel=3)\n    return w[0].filename\n", "harness_internals"),
    "warnings_module_filter": ("import warnings\n"
                               "def run(q, out):\n    warnings.filterwarnings('error', module='harness.measure.timing')\n"
                               "    warnings.warn('p', stacklevel=2)\n", "harness_internals"),
    "warnings_c_module": ("import _warnings\n"
                         "def run(q, out):\n    _warnings.filterwarnings('error', module='harness')\n",
                         "harness_internals"),
    "redirect_stderr": ("import contextlib, io, warnings\n"
                        "def run(q, out):\n    s = io.StringIO()\n    with contextlib.redirect_stderr(s):\n"
                        "        warnings.warn('p', stacklevel=2)\n", "harness_internals"),
    "tracemalloc": ("import tracemalloc\n"
                    "def run(q, out):\n    tracemalloc.start(10)\n    x = [1]\n"
                    "    return tracemalloc.get_object_traceback(x).format()\n", "harness_internals"),
    "cprofile": "import cProfile\n_p = cProfile.Profile()\ndef run(q, out):\n    _p.enable()\n",
    "lsprof": "import _lsprof\n",
    "bdb": "import bdb\n",
    "torch_captured_traceback": ("from torch.utils._traceback import CapturedTraceback\n"
                                 "def run(q, out):\n    return CapturedTraceback.extract().summary()\n",
                                 "harness_internals"),
    "torch_gather_traceback": ("import torch\n"
                               "def run(q, out):\n    return torch._C._profiler.gather_traceback(True, False, False)\n",
                               "harness_internals"),
    "torch_fx_traceback": "import torch.fx.traceback as ft\ndef run(q, out):\n    return ft.format_stack()\n",
    "torch_profiler": ("import torch\n"
                       "def run(q, out):\n    with torch.profiler.profile(with_stack=True):\n        pass\n",
                       "timer_tampering"),
    "weakref_callback": ("import weakref\n_keep = []\n"
                         "def run(q, out):\n    _keep.append(weakref.ref(q, lambda r: out.zero_()))\n", "concurrency"),
    "pydoc_pager": "import pydoc\ndef run(q, out):\n    pydoc.pipepager('x', 'sleep 100 &')\n",
    "distutils_spawn": "from distutils.spawn import spawn\ndef run(q, out):\n    spawn(['sleep', '100'])\n",
    "dataloader": ("from torch.utils.data import DataLoader\n"
                   "def run(q, out):\n    it = iter(DataLoader(range(4), num_workers=1))\n", "concurrency"),
    "collect_env": "from torch.utils.collect_env import run as r\ndef run(q, out):\n    r('sleep 100 &')\n",
    "torch_jit_fork": "import torch\ndef run(q, out):\n    torch.jit.fork(out.zero_)\n",
}
DEFAULT_RULE = {"logging_currentframe": "harness_internals", "cprofile": "harness_internals",
                "lsprof": "harness_internals", "bdb": "harness_internals", "torch_fx_traceback": "harness_internals",
                "pydoc_pager": "concurrency", "distutils_spawn": "concurrency", "collect_env": "concurrency",
                "torch_jit_fork": "concurrency"}


def _source_and_rule(name: str) -> tuple[str, str]:
    probe = PROBES[name]
    return (probe, DEFAULT_RULE[name]) if isinstance(probe, str) else probe


@pytest.mark.parametrize("name", sorted(PROBES))
def test_stack_probe_is_an_error(policy, name):
    source, rule = _source_and_rule(name)
    findings = scan_py(source, policy)
    assert any(f.rule == rule and f.severity == "error" for f in findings), f"{name}: {describe(findings)}"


HONEST = [
    # a warning pointed at the solution's own caller, printed and never read back (tests/gate_corpus)
    'import warnings\ndef _check(x):\n    warnings.warn("not contiguous; copying", RuntimeWarning, stacklevel=3)\n',
    'import warnings\nwarnings.filterwarnings("ignore", category=UserWarning, module="triton")\n',
    'import warnings\ndef run(q):\n    with warnings.catch_warnings():\n        warnings.simplefilter("ignore")\n',
    'import torch\ndef run(q):\n    with torch.profiler.record_function("decode"):\n        pass\n',
    'import logging\nlog = logging.getLogger("k")\ndef run(q):\n    log.debug("launch %d", 3)\n',
    'import weakref\n_cache = weakref.ref(object)\n',
]


@pytest.mark.parametrize("source", HONEST)
def test_honest_uses_are_not_flagged(policy, source):
    findings = scan_py(textwrap.dedent(source), policy)
    assert not [f for f in findings if f.severity == "error"], describe(findings)


# A tensor subclass by spellings the gate missed (the worker now refuses any output that is not a plain tensor:
# tests/test_redteam_runtime.py); each runs the candidate's code where the harness reads the output.
SUBCLASSES = {
    "type_of_value": "def run(q, out):\n    class L(type(out)):\n        pass\n",
    "class_of_value": "def run(q, out):\n    class L(out.__class__):\n        pass\n",
    "mro_item": "import torch\nclass L(torch.nn.Parameter.__mro__[1]):\n    pass\n",
    "buffer": "import torch\nclass L(torch.nn.Buffer):\n    pass\n",
    "uninitialized": "import torch\nclass L(torch.nn.parameter.UninitializedBuffer):\n    pass\n",
    "masked": "import torch\nclass L(torch.masked.MaskedTensor):\n    pass\n",
    "type_call": "import torch\nL = type('L', (torch.Tensor,), {})\n",
    "new_class": "import types, torch\nL = types.new_class('L', (torch.Tensor,))\n",
    "class_store": "def run(q, out, cls):\n    out.__class__ = cls\n",
    "class_setattr": "def run(q, out, cls):\n    object.__setattr__(out, '__class__', cls)\n",
}


@pytest.mark.parametrize("name", sorted(SUBCLASSES))
def test_tensor_subclass_by_another_spelling(policy, name):
    findings = scan_py(SUBCLASSES[name], policy)
    assert any(f.rule == "tensor_subclass" and f.severity == "error" for f in findings), describe(findings)


def test_plain_classes_and_type_queries_are_not_flagged(policy):
    source = ("import torch\nclass Config(dict):\n    pass\nPoint = type('Point', (object,), {})\n"
              "def run(q):\n    return type(q).__name__, q.__class__ is torch.Tensor\n")
    findings = scan_py(source, policy)
    assert not [f for f in findings if f.severity == "error"], describe(findings)


# Native work that runs later on another thread, or a handler that does: what std::thread and pthread_create were.
DEFERRED_CPP = {
    "at_launch": "#include <ATen/Parallel.h>\nvoid run(float* o) { at::launch([o] { o[0] = 1; }); }\n",
    "intraop_launch": "#include <ATen/Parallel.h>\nvoid run(float* o) { at::intraop_launch([o] { o[0] = 1; }); }\n",
    "c10_thread_pool": "#include <c10/core/thread_pool.h>\nvoid run(float* o) { c10::ThreadPool p(1); }\n",
    "host_func": ("#include <cuda_runtime.h>\nvoid CUDART_CB cb(void* p) { ((float*)p)[0] = 1; }\n"
                  "void run(float* o, cudaStream_t s) { cudaLaunchHostFunc(s, cb, o); }\n"),
    "stream_callback": ("#include <cuda_runtime.h>\nvoid CUDART_CB cb(cudaStream_t, cudaError_t, void*) {}\n"
                        "void run(cudaStream_t s) { cudaStreamAddCallback(s, cb, 0, 0); }\n"),
    "timer_thread": ("#include <signal.h>\n#include <time.h>\nvoid run() { timer_t t; sigevent e{};\n"
                     "  e.sigev_notify = SIGEV_THREAD; timer_create(CLOCK_REALTIME, &e, &t); }\n"),
    "signal_alarm": "#include <signal.h>\n#include <unistd.h>\nvoid h(int) {}\nvoid run() { signal(SIGALRM, h); alarm(1); }\n",
    "atexit": "#include <stdlib.h>\nvoid h() {}\nvoid run() { atexit(h); }\n",
}


@pytest.mark.parametrize("name", sorted(DEFERRED_CPP))
def test_native_deferred_work_is_concurrency(policy, name):
    from static_gate_support import scan_cpp

    findings = scan_cpp(DEFERRED_CPP[name], policy)
    assert any(f.rule == "concurrency" and f.severity == "error" for f in findings), describe(findings)


def test_native_names_that_only_look_alike_are_not_flagged(policy):
    from static_gate_support import scan_cpp

    source = ("#include <ATen/Parallel.h>\nstruct S { void signal(int); };\n"
              "__device__ void signal(int* flag) { atomicExch(flag, 1); }\n"
              "void run(S& s, float* o, int n) { s.signal(1); at::parallel_for(0, n, 1, [&](int64_t a, int64_t b) {});\n"
              "  int alarm_count = 0; (void)alarm_count; }\n")
    findings = scan_cpp(source, policy)
    assert not [f for f in findings if f.severity == "error"], describe(findings)



# A finalizer or the torch-function protocol bound without `def __del__` / `def __torch_function__`.
HOOKS = {
    "type_dict": "def _f(self):\n    pass\nK = type('K', (), {'__del__': _f})\n",
    "assigned_after": "class K:\n    pass\ndef _f(self):\n    pass\nK.__del__ = _f\n",
    "setattr": "class K:\n    pass\nsetattr(K, '__del__', lambda self: None)\n",
    "class_body": "class K:\n    __del__ = lambda self: None\n",
    "torch_function_assigned": "class K:\n    pass\nK.__torch_function__ = classmethod(lambda *a: None)\n",
}


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_hooks_bound_by_other_spellings(policy, name):
    findings = scan_py(HOOKS[name], policy)
    rule = "tensor_subclass" if "torch_function" in name else "concurrency"
    assert any(f.rule == rule and f.severity == "error" for f in findings), describe(findings)
