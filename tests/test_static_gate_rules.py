"""Static gate: every rule has a positive sample (flagged, right rule, right line), for Python and C++ sources,
and through import aliases (C++ in Python strings: test_static_gate_embedded_cpp.py)."""

from __future__ import annotations

import textwrap

import pytest

from harness.audits.static_gate import RULES

from static_gate_support import describe, scan_cpp, scan_py


# --------------------------------------------------------------------------------------------------
# Positive samples: (rule id, expected line, source). Each must produce that rule on that line.

PYTHON_POSITIVES = [
    # timer tampering
    ("timer_tampering", 2, "import torch\ntorch.cuda.synchronize = lambda: None\n"),
    ("timer_tampering", 2, "import torch\nsetattr(torch, name, None)\n"),
    ("timer_tampering", 2, "import torch\nsetattr(torch.cuda.Event, 'elapsed_time', lambda a, b: 0.001)\n"),
    ("timer_tampering", 2, "import time\ntime.perf_counter = lambda: 0.0\n"),
    ("timer_tampering", 2, "import triton.testing\ntriton.testing.do_bench = fake\n"),
    ("timer_tampering", 2, "import flashinfer.testing\nflashinfer.testing.bench_gpu_time_with_cupti = fake\n"),
    ("timer_tampering", 2, "import torch\ntorch.cuda.__dict__['synchronize'] = fake\n"),
    ("timer_tampering", 2, "import torch\ndel torch.cuda.synchronize\n"),
    ("timer_tampering", 2, "from torch.cuda import Event\nEvent.record = fake\n"),
    ("timer_tampering", 2, "import harness.measure.timing\nharness.timing.measure = fake\n"),
    ("timer_tampering", 2, "import cupti\ncupti.activity_enable = fake\n"),
    ("timer_tampering", 2, "import torch\ntorch.cuda.__setattr__('synchronize', fake)\n"),
    # monkeypatching torch and other imported modules
    ("monkeypatch", 2, "import torch\ntorch.matmul = my_matmul\n"),
    ("monkeypatch", 2, "import torch\ntorch.Tensor.__eq__ = lambda a, b: True\n"),
    ("monkeypatch", 2, "import torch.nn.functional as F\nF.softmax = fast_softmax\n"),
    ("monkeypatch", 2, "import torch\ntorch.backends.cuda.matmul = None\n"),
    ("monkeypatch", 2, "import torch\ntorch.backends.cudnn.enabled = False\n"),
    ("monkeypatch", 2, "import torch\ndel torch.backends.cudnn.benchmark\n"),
    ("monkeypatch", 2, "import torch\nsetattr(torch.nn.functional, 'silu', fake)\n"),
    ("monkeypatch", 2, "import torch\nlib = torch.library.Library('aten', 'IMPL')\n"),
    ("monkeypatch", 2, "import torch\nm = torch._C._dispatch_library('IMPL', 'aten', 'CPU', 'f.py', 1)\n"),
    ("monkeypatch", 2, "import torch\ng = torch._C._ExcludeDispatchKeyGuard(keys)\n"),
    ("monkeypatch", 2, "import torch\n@torch.ops.aten.equal.default.py_impl(torch._C.DispatchKey.CPU)\ndef f(a, b):\n    return True\n"),
    # red team round 6: a module handed on loses its name; names imported twice; class patterns; __self__
    ("dynamic_code", 4, "import collections\ndef held(m):\n    return m._sys\nS = held(collections).modules\n"),
    ("dynamic_code", 2, "import os\nenv = dict(_field(os))\n"),
    ("dynamic_code", 2, "import os\n@(lambda _: os)\ndef M():\n    pass\n"),
    ("dynamic_code", 2, "import os\ntext = ('{0.envir' + 'on}').format(os)\n"),
    ("dynamic_code", 2, "import torch\nout = _impl(torch, q, k, v)\n"),
    ("dynamic_code", 2, "import json\nmatch json:\n    case object(__dict__=ns):\n        pass\n"),
    ("harness_internals", 2, "match err:\n    case object(__traceback__=object(tb_frame=fr)):\n        pass\n"),
    ("harness_internals", 3, "import json as S\nimport sys as S\nm = S.modules\n"),
    ("torch_compute", 3, "import math as F\nimport torch.nn.functional as F\no = F.scaled_dot_product_attention(q, k, v)\n"),
    ("harness_internals", 1, "B = getattr(len, '__self__')\n"),
    ("harness_internals", 1, "breakpoint()\n"),
    ("monkeypatch", 1, "from unittest import mock\n"),
    # tensor subclasses / torch function hooks
    ("tensor_subclass", 2, "import torch\nclass Lazy(torch.Tensor):\n    pass\n"),
    ("tensor_subclass", 2, "class Lazy:\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        pass\n"),
    ("tensor_subclass", 2, "import torch\ny = torch.Tensor._make_subclass(Lazy, x)\n"),
    # threads, processes, asyncio, finalizers
    ("concurrency", 1, "import threading\n"),
    ("concurrency", 1, "from concurrent.futures import ThreadPoolExecutor\n"),
    ("concurrency", 1, "import multiprocessing as mp\n"),
    ("concurrency", 1, "import subprocess\n"),
    ("concurrency", 1, "import asyncio\n"),
    ("concurrency", 2, "import os\npid = os.fork()\n"),
    ("concurrency", 2, "import os\nos.system('nvidia-smi')\n"),
    ("concurrency", 2, "class Deferred:\n    def __del__(self):\n        pass\n"),
    # harness internals
    ("harness_internals", 1, "import gc\n"),
    ("harness_internals", 2, "import inspect\nf = inspect.currentframe()\n"),  # inspect.signature alone is no finding
    ("harness_internals", 2, "import sys\nmods = sys.modules\n"),
    ("harness_internals", 2, "import sys\ncaller = sys._getframe(1)\n"),
    ("harness_internals", 1, "x = frame.f_back.f_locals['expected']\n"),
    ("harness_internals", 1, "g = run.__globals__\n"),
    ("harness_internals", 1, "c = run.__code__\n"),
    ("harness_internals", 1, "p = __builtins__['print']\n"),
    ("harness_internals", 1, "import builtins\n"),
    ("harness_internals", 1, "import harness\n"),
    ("harness_internals", 1, "from controller import loop\n"),
    ("harness_internals", 1, "g = globals()\n"),
    ("harness_internals", 3, "import sys\ntry:\n    f = sys.exc_info()[2].tb_frame\nexcept Exception:\n    raise\n"),
    ("harness_internals", 1, "x = getattr(fn, '__globals__')\n"),
    # environment probing
    ("env_probe", 2, "import os\nseed = os.environ[name]\n"),
    ("env_probe", 2, "import os\nhome = os.getenv('HOME')\n"),
    ("env_probe", 1, "from os import environ\n"),
    ("env_probe", 2, "import platform\nh = platform.node()\n"),  # platform.machine() alone is no finding
    ("env_probe", 1, "import socket\n"),
    ("env_probe", 1, "import getpass\n"),
    ("env_probe", 1, "status = open('/proc/self/status').read()\n"),
    ("env_probe", 2, "import sys\nif 'pytest' in sys.modules:\n    pass\n"),
    ("env_probe", 2, "import os\ninterp = os.environ.get('TRITON_INTERPRET')\n"),
    ("env_probe", 1, "key = 'CUDA_VISIBLE_DEVICES'\n"),
    ("env_probe", 2, "import sys\nargs = sys.argv\n"),
    # file caches
    ("file_cache", 1, "f = open(path, 'w')\n"),
    ("file_cache", 1, "f = open(path, mode='ab')\n"),
    ("file_cache", 1, "f = open(path, mode)\n"),
    ("file_cache", 2, "import pathlib\npathlib.Path(p).write_bytes(blob)\n"),
    ("file_cache", 1, "import pickle\n"),
    ("file_cache", 1, "import shelve\n"),
    ("file_cache", 2, "import tempfile\nd = tempfile.mkdtemp()\n"),
    ("file_cache", 1, "import sqlite3\n"),
    ("file_cache", 2, "import torch\ntorch.save(out, 'out.pt')\n"),
    ("file_cache", 2, "import numpy as np\nnp.save('out.npy', a)\n"),
    ("file_cache", 2, "import os\nif os.path.exists(cache_path):\n    pass\n"),
    ("file_cache", 1, "CACHE = '/tmp/crucible_cache'\n"),
    # file reads (warning)
    ("file_read", 1, "src = open(path).read()\n"),
    ("file_read", 2, "from pathlib import Path\nblob = Path(p).read_bytes()\n"),
    ("file_read", 2, "from pathlib import Path\nblob = (Path(__file__).parent / 'answers.bin').read_bytes()\n"),
    # dynamic code
    ("dynamic_code", 1, "exec(code)\n"),
    ("dynamic_code", 1, "y = eval('1 + 1')\n"),
    ("dynamic_code", 1, "c = compile(src, 'x', 'exec')\n"),
    ("dynamic_code", 1, "os_mod = __import__('os')\n"),
    ("dynamic_code", 1, "import importlib\n"),
    # sys.path: only the solution's own folder may go there
    ("harness_internals", 2, "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"),
    ("harness_internals", 2, "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))\n"),
    ("harness_internals", 4, "import os, sys\nHERE = os.path.dirname(__file__)\nHERE = cache\nsys.path.insert(0, HERE)\n"),
    ("harness_internals", 2, "import sys\nsys.path.insert(0, where)\n"),
    ("harness_internals", 2, "import sys\nsys.path[:] = []\n"),
    # importlib's package queries by a literal top-level name only; its loaders never
    ("dynamic_code", 2, "from importlib.metadata import version\nv = version(name)\n"),
    ("dynamic_code", 2, "import importlib.util\ns = importlib.util.find_spec('harness.sandbox')\n"),
    ("dynamic_code", 2, "import importlib.util\ns = importlib.util.spec_from_file_location('m', p)\n"),
    ("dynamic_code", 2, "from importlib.util import find_spec\nf = find_spec\n"),
    ("dynamic_code", 1, "from importlib import import_module\n"),
    ("dynamic_code", 2, "import importlib as il\nm = il.import_module('threading')\n"),
    ("dynamic_code", 2, "import torch\nf = getattr(torch, name)\n"),
    ("dynamic_code", 1, "import runpy\n"),
    # native FFI
    ("native_ffi", 2, "import ctypes\nlib = ctypes.CDLL('libk.so')\n"),
    ("native_ffi", 2, "import ctypes as C\nm = C\n"),
    ("native_ffi", 1, "from ctypes import CDLL\n"),
    # TVM-FFI's builder: a module loaded only as tvm_ffi.cpp.build returned it, from the solution's own files, and
    # what it builds is scanned as load()/load_inline()'s is
    ("native_ffi", 2, "import tvm_ffi\nmod = tvm_ffi.load_module('/opt/prebuilt/k.so')\n"),
    ("native_ffi", 3, "import tvm_ffi\nlib = tvm_ffi.cpp.build(name='k', cuda_files=['k.cu'])\nm = tvm_ffi.load_module(path)\n"),
    ("harness_internals", 2, "import tvm_ffi\nmod = tvm_ffi.cpp.load('k', cuda_files=['/opt/x.cu'])\n"),
    ("env_probe", 2, "import tvm_ffi.cpp\nm = tvm_ffi.cpp.load_inline('k', cuda_sources='int f() { return getenv(\"HOME\") != 0; }')\n"),
    ("timer_tampering", 2, "import tvm_ffi\nm = tvm_ffi.cpp.build(name='k', cuda_files=['k.cu'], extra_ldflags=['-Wl,--wrap=cudaEventRecord'])\n"),
    # cuda-python: a typed handle of the current stream only, never the driver API
    ("native_ffi", 2, "import cuda.bindings.driver as cuda\ncuda.cuCtxSetLimit(1, 2)\n"),
    ("native_ffi", 2, "import cuda.bindings.driver as cuda\ncuda.cuModuleLoadData(image)\n"),
    ("native_ffi", 2, "import cuda.bindings.driver as cuda\nd = cuda\n"),
    ("native_ffi", 1, "import cuda.bindings.runtime as rt\n"),
    ("native_ffi", 1, "from cffi import FFI\n"),
    ("native_ffi", 2, "import torch.utils.cpp_extension as ext\nm = ext._import_module_from_library('m', p, True)\n"),
    ("native_ffi", 1, "from torch.utils.cpp_extension import _jit_compile\n"),
    ("native_ffi", 1, "import cuda.bindings.runtime as cudart\n"),
    ("native_ffi", 1, "import cupy\n"),
    ("native_ffi", 2, "import torch\ntorch.ops.load_library('libx.so')\n"),
    # streams, events, graphs
    ("stream_event_graph", 2, "import torch\ns = torch.cuda.Stream()\n"),
    ("stream_event_graph", 2, "import torch\nwith torch.cuda.stream(s):\n    pass\n"),
    ("stream_event_graph", 2, "import torch\ne = torch.cuda.Event(enable_timing=True)\n"),
    ("stream_event_graph", 2, "import torch\ng = torch.cuda.CUDAGraph()\n"),
    ("stream_event_graph", 2, "import torch\nwith torch.cuda.graph(g):\n    pass\n"),
    ("stream_event_graph", 1, "from torch.cuda import Stream\n"),
    ("stream_event_graph", 2, "import torch\nf = torch.cuda.make_graphed_callables(fn, (x,))\n"),
    ("stream_event_graph", 2, "import torch\ne = getattr(torch, 'cuda').Event()\n"),
    # module-level caches keyed by tensor identity
    ("output_cache", 4, """\
        _cache = {}
        def run(q, k):
            key = q.data_ptr()
            if key in _cache:
                return _cache[key]
            out = compute(q, k)
            _cache[key] = out
            return out
        """),
    ("output_cache", 3, "_seen = {}\ndef run(q):\n    _seen[id(q)] = q\n    return q\n"),
    ("output_cache", 3, "class Op:\n    def __call__(self, q, k):\n        self._results[(q.data_ptr(), k.data_ptr())] = 1\n"),
    ("output_cache", 2, "def run(q, _memo={}):\n    return _memo.setdefault(hash(q), q)\n"),
    # hash() of a tensor, or of what it holds, whatever the shapes beside it
    ("output_cache", 3, "_out = {}\ndef run(q, out):\n    return _out.get(hash((q, q.shape)))\n"),
    ("output_cache", 3, "_out = {}\ndef run(q, out):\n    return _out.get(hash((q.data_ptr(), 3)))\n"),
    ("output_cache", 4, "_out = {}\ndef run(q, out):\n    k = hash(q.sum().item())\n    return _out.get(k)\n"),
    ("output_cache", 4, "_c = {}\ndef run(q):\n    p = q.untyped_storage().data_ptr()\n    out = _c.get((p, q.shape))\n"),
    # torch / library compute fallbacks (warning by default)
    ("torch_compute", 2, "import torch\ns = torch.matmul(q, k)\n"),
    ("torch_compute", 2, "import torch\ns = torch.bmm(q, k)\n"),
    ("torch_compute", 2, "import torch\ns = torch.einsum('bhd,bnd->bhn', q, k)\n"),
    ("torch_compute", 2, "import torch.nn.functional as F\no = F.scaled_dot_product_attention(q, k, v)\n"),
    ("torch_compute", 2, "import torch\np = torch.softmax(s, dim=-1)\n"),
    ("torch_compute", 2, "import torch\ny = torch.nn.functional.silu(x)\n"),
    ("torch_compute", 1, "s = q @ k\n"),
    ("torch_compute", 1, "p = s.softmax(-1)\n"),
    ("torch_compute", 1, "o = p.matmul(v)\n"),
    ("torch_compute", 2, "import flashinfer\no = flashinfer.single_decode_with_kv_cache(q, k, v)\n"),
    ("torch_compute", 2, "from flashinfer import BatchDecodeWithPagedKVCacheWrapper as W\nw = W(ws)\n"),
    ("torch_compute", 2, "import torch\nf = torch.compile(fn)\n"),
    ("torch_compute", 2, "import torch\n@torch.compile\ndef f(x):\n    return x\n"),
    ("torch_compute", 3, "import functools\nimport torch\nmm = functools.partial(torch.matmul, a)\n"),
    ("torch_compute", 2, "import torch\nys = list(map(torch.exp, xs))\n"),
    ("torch_compute", 2, "import torch\nops = [torch.softmax, torch.float32]\n"),
    ("torch_compute", 3, "import torch\nmm = torch.matmul\ny = mm(a, b)\n"),
    ("torch_compute", 2, "import torch\nlengths = torch.diff(kv_indptr)\n"),
    # warnings for state and robustness
    ("memoized_function", 2, "import functools\n@functools.lru_cache(maxsize=None)\ndef f(x):\n    return x\n"),
    ("memoized_function", 2, "from functools import cache\n@cache\ndef f(x):\n    return x\n"),
    # memoised on a tensor (at a call, or through a value derived from one)
    ("memoized_function", 2, ("import functools\n@functools.lru_cache\ndef f(n):\n    return n\n"
                             "def run(q):\n    return f(q)\n")),
    ("memoized_function", 2, ("import functools\n@functools.lru_cache\ndef f(n):\n    return n\n"
                             "def run(q):\n    k = q[0]\n    return f(k.shape[0], k)\n")),
    ("memoized_function", 2, ("import functools\n@functools.lru_cache\ndef f(n):\n    return n\n"
                             "def run(q):\n    f(1)\n    return list(map(f, [q]))\n")),
    ("file_read", 2, "import os\nsrc = open(os.path.join(os.path.dirname(__file__), '..', 'ref', 'k.cu')).read()\n"),
    ("global_state", 3, "_last = None\ndef run(q):\n    global _last\n    _last = q\n"),
    ("global_state", 3, "_calls = 0\ndef run(q):\n    global _calls\n    _calls += 1\n"),
    ("global_state", 3, "_out = None\ndef run(q):\n    global _out\n    if _out is None:\n        _out = q.clone()\n"),
    ("silent_fallback", 3, "try:\n    out = fast(q)\nexcept Exception:\n    out = slow(q)\n"),
    ("silent_fallback", 3, "try:\n    out = fast(q)\nexcept:\n    pass\n"),
    ("clock_read", 2, "import time\nt0 = time.perf_counter()\n"),
    ("clock_read", 1, "from time import perf_counter\n"),
    ("clock_read", 2, "import triton.testing\nms = triton.testing.do_bench(fn)\n"),
    # syntax
    ("syntax", 2, "x = 1\ndef broken(:\n    pass\n"),
    # one variable read by its literal name is recorded; the harness's names, computed names, the whole environment
    # and writes outside the policy's env_writes stay env_probe
    ("env_read", 2, "import os\ndebug = os.environ.get('MYKERNEL_DEBUG', '0') == '1'\n"),
    ("env_probe", 2, "import os\nx = os.environ.get('PYTEST_CURRENT_TEST')\n"),
    ("env_probe", 2, "import os\nx = os.getenv('crucible_mode')\n"),
    ("env_probe", 2, "import os\nfound = 'TRITON_INTERPRET' in os.environ\n"),
    ("env_probe", 2, "import os\nx = os.getenv('MYKERNEL_' + suffix)\n"),
    ("env_probe", 2, "import os\nfor k, v in os.environ.items():\n    pass\n"),
    ("env_probe", 2, "import os\nsnapshot = os.environ.copy()\n"),
    ("env_probe", 2, "import os\nos.environ['TRITON_INTERPRET'] = '1'\n"),
    ("env_probe", 2, "import os\nos.environ['NVCC_APPEND_FLAGS'] = '-lcublas'\n"),
    ("env_probe", 2, "import os\nos.environ.setdefault('CUDA_HOME', root)\n"),
    ("env_probe", 2, "import os\nos.environ.update(extra)\n"),
    # only a message's own words are prose: a literal inside a call in it is not
    ("env_probe", 1, "raise RuntimeError(probe('TRITON_INTERPRET'))\n"),
    ("env_probe", 1, "print(open('/proc/self/status').read())\n"),
    # modules reached as attributes of other modules are those modules
    ("harness_internals", 2, "import torch\nb = torch.sys.modules['builtins'].__dict__['ex' + 'ec']\n"),
    ("harness_internals", 2, "import os\nt = os.sys.modules['threading']\n"),
    ("harness_internals", 2, "import os\nf = os.sys._getframe(1)\n"),
    ("harness_internals", 2, "import os\nos.sys.settrace(tracer)\n"),
    ("harness_internals", 2, "from torch import sys as s\nm = s.modules\n"),
    ("concurrency", 2, "import numpy as np\nnp.os.system('ls')\n"),
    ("env_probe", 2, "import torch\nx = torch.os.environ.copy()\n"),
    # ...and so are the modules a library holds under a private name of its own (red team round 4: looked up in the
    # module as this interpreter has it), or, in a module not looked into, one named `_sys`, `_os`...
    ("harness_internals", 3, "import collections\nS = collections._sys\nf = S._getframe(1)\n"),
    ("harness_internals", 2, "from pprint import _sys\nm = _sys.modules['torch']\n"),
    ("harness_internals", 2, "import somelib\nm = somelib._sys.modules\n"),
    ("env_probe", 2, "import random\nenv = random._os.environ\n"),
    ("concurrency", 2, "import argparse as a\na._os.fork()\n"),
    ("dynamic_code", 2, "import enum\nenum.bltns.exec(src)\n"),
    # package data only from the solution's own package, by a literal name that climbs nowhere
    ("file_read", 3, "import json\nimport pkgutil\nT = json.loads(pkgutil.get_data(__package__ or __name__, 't.json'))\n"),
    ("file_read", 2, "from importlib import resources\nT = resources.files(__package__).joinpath('t.json').read_text()\n"),
    ("dynamic_code", 2, "import pkgutil\nT = pkgutil.get_data('harness', 'archive/schema.sql')\n"),
    ("dynamic_code", 2, "import pkgutil\nT = pkgutil.get_data(__package__, '../../seal.key')\n"),
    ("dynamic_code", 2, "import pkgutil\nT = pkgutil.get_data(__package__, name)\n"),
    ("dynamic_code", 2, "import pkgutil\nm = pkgutil.resolve_name('os')\n"),
    ("dynamic_code", 2, "from importlib import resources\nT = resources.files('torch').joinpath('x').read_text()\n"),
    ("dynamic_code", 2, "from importlib import resources\nfiles = resources.files\n"),
    # imports and attribute chains by name (red team round 5: pydoc.locate("torch." + name) passed unseen)
    ("dynamic_code", 2, "import pydoc\nf = pydoc.locate('torch.' + name)\n"),
    ("dynamic_code", 2, "import logging.config\nlogging.config.dictConfig({'handlers': {'h': {'()': name}}})\n"),
    ("dynamic_code", 2, "import unittest\nunittest.defaultTestLoader.loadTestsFromName(name)\n"),
    ("dynamic_code", 2, "import site\nsite.addsitedir(here)\n"),
    ("dynamic_code", 2, "import torch\nm = torch.package.PackageImporter(here).import_module('x')\n"),
    ("dynamic_code", 2, "import string\ns = string.Formatter().get_field('0.__globals__[sys]', (f,), {})[0]\n"),
    # the `@` operator by any other name, tensor methods reached by name
    ("torch_compute", 2, "import operator\nc = operator.matmul(a, b)\n"),
    ("torch_compute", 1, "c = a.__matmul__(b)\n"),
    ("torch_compute", 1, "S.baddbmm_(Q, K, beta=0.0, alpha=scale)\n"),
    ("torch_compute", 1, "l = P.nansum(-1, keepdim=True)\n"),
    ("torch_compute", 1, "O = O.addcmul_(P, V)\n"),
    ("torch_compute", 1, "mm = getattr(q, 'matmul')\n"),
    ("torch_compute", 3, "import functools\nimport operator\nc = functools.reduce(operator.matmul, mats)\n"),
    ("torch_compute", 2, "import operator\nf = operator.methodcaller('matmul', k)\n"),
    ("dynamic_code", 2, "import operator\nf = operator.methodcaller(name)\n"),
    ("harness_internals", 2, "import operator\nf = operator.attrgetter('f_back.f_locals')\n"),
    ("harness_internals", 1, "x = getattr(f, 'f_' + 'locals')\n"),
    ("harness_internals", 2, "n = 'tb_' + 'frame'\nx = getattr(tb, n)\n"),
    # weak-reference containers are identity-keyed caches
    ("output_cache", 2, "import weakref\n_cache = weakref.WeakKeyDictionary()\n"),
    ("output_cache", 1, "from weakref import WeakValueDictionary\n"),
    # file writes in other spellings; glob and tempfile outside the solution's own folder and a build directory
    ("file_cache", 2, "import io\nf = io.FileIO(p, 'w')\n"),
    ("file_cache", 3, "from pathlib import Path\np = Path(x)\nf = p.open(mode='w')\n"),
    ("file_cache", 3, "import glob\nimport os\nfiles = glob.glob(os.path.join(cache_dir, '*.pt'))\n"),
    ("file_cache", 3, "import glob\nimport os\nfs = glob.glob(os.path.join(os.path.dirname(__file__), '..', '*.cu'))\n"),
    ("file_cache", 1, "from tempfile import *\n"),
    ("file_cache", 2, "import tempfile\nf = tempfile.NamedTemporaryFile()\n"),
    ("file_cache", 3, ("import tempfile\nfrom torch.utils.cpp_extension import load\n"
                       "m = load('k', ['k.cu'], build_directory=tempfile.mkdtemp(dir=shared))\n")),
    # a folder made for load() that is not the solution's own, or made for anything but load()
    ("file_cache", 3, ("import os\nfrom torch.utils.cpp_extension import load\nos.makedirs('/var/cache/k', exist_ok=True)\n"
                       "m = load('k', ['k.cu'], build_directory='/var/cache/k')\n")),
    ("file_cache", 4, ("import os\nfrom torch.utils.cpp_extension import load\n"
                       "B = os.path.join(os.path.dirname(__file__), '..', 'shared')\nos.makedirs(B, exist_ok=True)\n"
                       "m = load('k', ['k.cu'], build_directory=B)\n")),
    ("file_cache", 4, ("import os\nfrom torch.utils.cpp_extension import load\nB = os.path.join(os.path.dirname(__file__), 'b')\n"
                       "os.makedirs(B + '_cache', exist_ok=True)\nm = load('k', ['k.cu'], build_directory=B)\n")),
    ("file_cache", 2, "from pathlib import Path\n(Path(__file__).parent / 'cache').mkdir(exist_ok=True)\n"),
    # monkeypatching a value's class
    ("monkeypatch", 1, "type(q).allclose = lambda *a, **k: True\n"),
    ("monkeypatch", 1, "q.__class__.allclose = fake\n"),
    ("monkeypatch", 1, "setattr(type(q), 'allclose', fake)\n"),
    ("monkeypatch", 2, "import torch\ntype.__setattr__(torch.Tensor, 'allclose', fake)\n"),
    # an imported module's namespace in hand: every name in it by a computed key (builtins, __import__, patches)
    ("monkeypatch", 2, "import json as j\nd = j.__dict__\nb = d['_' * 2 + 'builtins' + '_' * 2]\n"),
    ("monkeypatch", 2, "import torch\ntorch.__dict__.update(equal=lambda a, b: True)\n"),
    ("monkeypatch", 2, "import json\nns = json.encoder.__dict__\n"),
]


@pytest.mark.parametrize(("rule", "line", "source"), PYTHON_POSITIVES,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(PYTHON_POSITIVES)])
def test_python_rule_is_flagged(rule, line, source, policy):
    findings = scan_py(source, policy)
    assert any(f.rule == rule and f.line == line for f in findings), describe(findings)
    hit = next(f for f in findings if f.rule == rule and f.line == line)
    assert hit.severity == RULES[rule].default_severity
    assert hit.snippet == textwrap.dedent(source).splitlines()[line - 1].rstrip()
    assert hit.message and hit.col >= 1


CPP_POSITIVES = [
    # kernels for PyTorch's own operators, or fallbacks for all of them (red team round 4)
    ("monkeypatch", 2, '#include <torch/library.h>\nTORCH_LIBRARY_IMPL(aten, CUDA, m) {\n  m.impl("zero_", &f);\n}\n'),
    ("monkeypatch", 1, 'TORCH_LIBRARY_IMPL(_, CUDA, m) { m.fallback(torch::CppFunction::makeFallthrough()); }\n'),
    ("monkeypatch", 2, '#define NS prims\nTORCH_LIBRARY_FRAGMENT(NS, m) {}\n'),
    ("monkeypatch", 1, 'auto& d = c10::Dispatcher::singleton();\n'),
    # red team round 6: the dispatcher by other spellings, the environment, files and clocks, the interpreter's C API
    ("monkeypatch", 1, 'using Lib = torch::Library;\nauto* l = new Lib(Lib::Kind::IMPL, "aten", c10::DispatchKey::CPU, "f", 1);\n'),
    ("monkeypatch", 1, 'auto& d = c10::Dispatcher::realSingleton();\n'),
    ("torch_compute", 1, 'auto s = ::at::matmul(a, b);\n'),
    ("torch_compute", 1, 'auto v = p.topk(4).values.sum();\n'),
    ("env_probe", 1, 'extern char** __environ;\n'),
    ("file_cache", 1, 'int fd = openat(AT_FDCWD, "cache.bin", O_WRONLY | O_CREAT, 0644);\n'),
    ("file_cache", 1, 'std::basic_ofstream<char> out("cache.bin");\n'),
    ("clock_read", 1, 'auto t0 = std::chrono::steady_clock::now();\n'),
    ("clock_read", 1, 'struct timespec ts; void f() { clock_gettime(CLOCK_MONOTONIC, &ts); }\n'),
    ("harness_internals", 1, 'PyObject* m = PySys_GetObject("modules");\n'),
    ("harness_internals", 1, 'PyFrameObject* f = PyThreadState_GetFrame(PyThreadState_Get());\n'),
    # streams, events, graphs
    ("stream_event_graph", 3, "void f() {\n  cudaStream_t s;\n  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n}\n"),
    ("stream_event_graph", 1, "cudaEvent_t e; void f() { cudaEventCreate(&e); }\n"),
    ("stream_event_graph", 2, "void f(cudaGraphExec_t g, cudaStream_t s) {\n  cudaGraphLaunch(g, s);\n}\n"),
    ("stream_event_graph", 2, "void f() {\n  auto side = at::cuda::getStreamFromPool();\n}\n"),
    ("stream_event_graph", 2, "void f() {\n  k<<<g, b, 0, cudaStreamPerThread>>>();\n}\n"),
    # host concurrency
    ("concurrency", 2, "void f() {\n  std::thread t(worker);\n  t.detach();\n}\n"),
    ("concurrency", 2, "void f() {\n  pthread_create(&tid, nullptr, fn, nullptr);\n}\n"),
    ("concurrency", 2, "void f() {\n  system(\"nvidia-smi\");\n}\n"),
    ("concurrency", 2, "void f() {\n  pid_t p = fork();\n}\n"),
    ("concurrency", 1, "#pragma omp parallel for\nfor (int i = 0; i < n; ++i) {}\n"),
    # environment probing
    ("env_probe", 2, "void f() {\n  const char* s = getenv(\"HOME\");\n}\n"),
    ("env_probe", 2, "void f(const char* name) {\n  const char* s = std::getenv(name);\n}\n"),
    ("env_probe", 2, "void f() {\n  setenv(\"MYKERNEL_DEBUG\", \"1\", 1);\n}\n"),
    ("env_read", 2, "void f() {\n  const char* s = std::getenv(\"MYKERNEL_DEBUG\");\n}\n"),
    ("env_probe", 2, "void f() {\n  FILE* p = fopen(\"/proc/self/maps\", \"r\");\n}\n"),
    ("env_probe", 1, "extern char** environ;\n"),
    # file caches / reads
    ("file_cache", 2, "void f() {\n  FILE* fp = fopen(path, \"wb\");\n}\n"),
    ("file_cache", 2, "void f() {\n  FILE* fp = fopen(path, mode);\n}\n"),
    ("file_cache", 2, "void f() {\n  std::ofstream out(\"cache.bin\");\n}\n"),
    ("file_cache", 2, "void f() {\n  int fd = open(path, O_WRONLY | O_CREAT, 0644);\n}\n"),
    ("file_cache", 2, "void f() {\n  int fd = mkstemp(tmpl);\n}\n"),
    ("file_cache", 1, "const char* kCache = \"/tmp/kernel_cache.bin\";\n"),
    ("file_read", 2, "void f() {\n  FILE* fp = fopen(path, \"rb\");\n}\n"),
    ("file_read", 2, "void f() {\n  std::ifstream in(path);\n}\n"),
    # native FFI and dynamic code
    ("native_ffi", 2, "void f() {\n  void* h = dlopen(\"libcuda.so\", RTLD_NOW);\n}\n"),
    ("native_ffi", 2, "void f() {\n  auto real = dlsym(RTLD_NEXT, \"cudaLaunchKernel\");\n}\n"),
    ("native_ffi", 1, "#include <dlfcn.h>\n"),
    # a driver entry point by any name but a tensor-map encoder's literal one (a computed name, a copy function)
    ("native_ffi", 2, "void f() {\n  cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &st);\n}\n"),
    ("native_ffi", 2, "void f() {\n  cudaGetDriverEntryPoint(\"cuMemcpyDtoH\", &fn, cudaEnableDefault, &st);\n}\n"),
    ("native_ffi", 2, "void f() {\n  cuGetProcAddress(\"cuTensorMapEncodeTiled\" \"X\", &fn, 12000, 0, nullptr);\n}\n"),
    ("native_ffi", 2, "void f() {\n  setenv(\"LD_PRELOAD\", \"libhook.so\", 1);\n}\n"),
    ("dynamic_code", 2, "void f() {\n  nvrtcCreateProgram(&prog, src, \"k.cu\", 0, nullptr, nullptr);\n}\n"),
    ("dynamic_code", 2, "void f() {\n  cuModuleLoadData(&mod, ptx);\n}\n"),
    ("dynamic_code", 2, "void f() {\n  PyRun_SimpleString(\"import os\");\n}\n"),
    # device-wide state tampering
    ("device_state_tamper", 2, "void f() {\n  cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, bytes);\n}\n"),
    ("device_state_tamper", 2, "void f() {\n  cudaCtxResetPersistingL2Cache();\n}\n"),
    ("device_state_tamper", 2, "void f(cudaStreamAttrValue a) {\n  a.accessPolicyWindow.base_ptr = p;\n}\n"),
    ("device_state_tamper", 2, "void f() {\n  cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &a);\n}\n"),
    ("device_state_tamper", 2, "void f() {\n  cudaDeviceReset();\n}\n"),
    # timer tampering: CUPTI, symbol interposition
    ("timer_tampering", 1, "#include <cupti.h>\n"),
    ("timer_tampering", 2, "void f() {\n  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_KERNEL);\n}\n"),
    ("timer_tampering", 2, "extern \"C\"\ncudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {\n  return cudaSuccess;\n}\n"),
    ("timer_tampering", 1, "cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }\n"),
    # harness internals
    ("harness_internals", 1, "#include \"../../harness/reference.h\"\n"),
    ("harness_internals", 1, "#include \"/work/main/harness/secret.h\"\n"),
    # ATen compute (warning by default)
    ("torch_compute", 2, "torch::Tensor f(torch::Tensor q, torch::Tensor k) {\n  return torch::matmul(q, k.transpose(0, 1));\n}\n"),
    ("torch_compute", 2, "at::Tensor f(at::Tensor s) {\n  return at::softmax(s, -1);\n}\n"),
    ("torch_compute", 2, "at::Tensor f(at::Tensor q, at::Tensor k) {\n  return q.matmul(k);\n}\n"),
    # library use (warning by default)
    ("library_fallback", 1, "#include <cublas_v2.h>\n"),
    ("library_fallback", 1, "#include \"cutlass/gemm/device/gemm.h\"\n"),
    ("library_fallback", 1, "#include <cudnn.h>\n"),
    ("library_fallback", 2, "void f() {\n  cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &a, A, t, m, B, t, k, &b, C, t, m, ct, algo);\n}\n"),
    ("library_fallback", 1, "using Gemm = cutlass::gemm::device::Gemm<float, Layout, float, Layout, float, Layout>;\n"),
    ("library_fallback", 2, "void f() {\n  auto h = at::cuda::getCurrentCUDABlasHandle();\n}\n"),
    # persistent state (warning)
    ("static_buffer", 2, "void f() {\n  static float* workspace = nullptr;\n}\n"),
    ("static_buffer", 1, "__device__ int call_count = 0;\n"),
    ("static_buffer", 1, "__device__ float g_out[1024];\n"),
    ("static_buffer", 1, "static std::unordered_map<void*, torch::Tensor> cache;\n"),
]


@pytest.mark.parametrize(("rule", "line", "source"), CPP_POSITIVES,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(CPP_POSITIVES)])
def test_cpp_rule_is_flagged(rule, line, source, policy):
    findings = scan_cpp(source, policy)
    assert any(f.rule == rule and f.line == line for f in findings), describe(findings)
    hit = next(f for f in findings if f.rule == rule and f.line == line)
    assert hit.severity == RULES[rule].default_severity
    assert hit.snippet == textwrap.dedent(source).splitlines()[line - 1].rstrip()


def test_every_rule_has_a_positive_sample():
    covered = {rule for rule, _, _ in PYTHON_POSITIVES} | {rule for rule, _, _ in CPP_POSITIVES}
    assert covered == set(RULES)


# --------------------------------------------------------------------------------------------------
# Import alias resolution

ALIAS_CASES = [
    ("import torch as t\nt.cuda.synchronize = fake\n", "timer_tampering", 2),
    ("from torch import cuda\ns = cuda.Stream()\n", "stream_event_graph", 2),
    ("from torch import cuda as c\nc.Event.elapsed_time = fake\n", "timer_tampering", 2),
    ("from os import environ as env\nx = env['CRUCIBLE_MODE']\n", "env_probe", 2),
    ("import torch\nEvent = torch.cuda.Event\ne = Event()\n", "stream_event_graph", 3),
    ("import os\nenv = os.environ\nseed = env.get('PYTEST_CURRENT_TEST')\n", "env_probe", 3),
    ("import torch.nn.functional as F\no = F.scaled_dot_product_attention(q, k, v)\n", "torch_compute", 2),
    ("from torch.nn import functional\np = functional.softmax(s, -1)\n", "torch_compute", 2),
    ("from torch import matmul as mm\no = mm(a, b)\n", "torch_compute", 2),
    ("import time as clock\nclock.time = fake\n", "timer_tampering", 2),
    ("w = open\nf = w(path, 'wb')\n", "file_cache", 2),
    ("run_code = exec\nrun_code(src)\n", "dynamic_code", 2),
]


@pytest.mark.parametrize(("source", "rule", "line"), ALIAS_CASES)
def test_aliases_are_resolved(source, rule, line, policy):
    findings = scan_py(source, policy)
    assert any(f.rule == rule and f.line == line for f in findings), describe(findings)


def test_alias_message_names_the_canonical_target(policy):
    (finding,) = [f for f in scan_py("import torch as t\nt.cuda.synchronize = fake\n", policy)
                  if f.rule == "timer_tampering"]
    assert "torch.cuda.synchronize" in finding.message


def test_rebinding_a_builtin_name_is_not_the_builtin(policy):
    source = "def compile(src):\n    return src\nout = compile('x')\n"
    assert scan_py(source, policy) == []
