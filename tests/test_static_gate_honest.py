"""Static gate: honest code is not flagged: honest GQA decode samples and the dataset's library baseline,
near misses in Python and C++, constants and attributes, cpp_extension builds, state that cannot carry outputs."""

from __future__ import annotations

import pytest

from harness.audits.static_gate import (
    DEFAULT_POLICY_PATH,
    awaits_attribution,
    builtin_policy,
    declared_library,
    gate_passed,
    policy_from_mapping,
    scan_sources,
)

from static_gate_support import HONEST_CUDA_GQA_DECODE, HONEST_TRITON_GQA_DECODE, describe, scan_cpp, scan_py

# --------------------------------------------------------------------------------------------------
# Honest samples (static_gate_support.py): no finding at all, under the default policy and under the gqa_paged
# op_type and definition layers.


@pytest.mark.parametrize("policy_name", ["policy", "gqa_policy"])
def test_honest_triton_gqa_decode_is_clean(policy_name, request):
    findings = scan_sources({"gqa_decode.py": HONEST_TRITON_GQA_DECODE}, "triton", request.getfixturevalue(policy_name))
    assert findings == [], describe(findings)


def test_the_shipped_library_baseline_only_warns_and_every_other_rule_stands(gqa_policy):
    """FlashInfer baselines call the library by declaration. Under the shipped policy their library findings are
    warnings left to attribution; under a policy that raises library compute to an error, declared_library keeps
    the dataset's own baselines at warnings; other rules still bite."""
    from pathlib import Path

    source = (Path(DEFAULT_POLICY_PATH).parent / "baselines_src" / "flashinfer_gqa_decode.py").read_text()
    findings = scan_sources({"flashinfer_gqa_decode.py": source}, "python", gqa_policy)
    assert findings and gate_passed(findings) and all(awaits_attribution(f) for f in findings), describe(findings)
    declared = [declared_library(f) for f in findings]  # as a baseline it declares the library: nothing to await
    assert gate_passed(declared) and not any(awaits_attribution(f) or awaits_attribution(f.model_dump())
                                             for f in declared)
    assert all(f.message.endswith("(allowed: the dataset's own library baseline)") for f in declared)
    assert [declared_library(f) for f in declared] == declared
    strict = policy_from_mapping({"default": {"rules": {"torch_compute": {"severity": "error"}}}})
    findings = scan_sources({"flashinfer_gqa_decode.py": source}, "python", strict)
    assert {f.rule for f in findings if f.severity == "error"} == {"torch_compute"}, describe(findings)
    allowed = [declared_library(f) for f in findings]
    assert gate_passed(allowed) and all("library baseline" in f.message for f in allowed if f.rule == "torch_compute")
    cheat = source + "\nimport os\nMODE = os.environ.get('CRUCIBLE_MODE')\n"
    findings = [declared_library(f) for f in scan_sources({"b.py": cheat}, "python", strict)]
    assert not gate_passed(findings) and {f.rule for f in findings if f.severity == "error"} == {"env_probe"}


@pytest.mark.parametrize("policy_name", ["policy", "gqa_policy"])
def test_honest_cuda_gqa_decode_is_clean(policy_name, request):
    findings = scan_sources({"gqa_decode.cu": HONEST_CUDA_GQA_DECODE}, "cuda", request.getfixturevalue(policy_name))
    assert findings == [], describe(findings)


# --------------------------------------------------------------------------------------------------
# Near misses: code that looks like a rule but is honest; no finding at all.

PYTHON_NEGATIVES = [
    "import re\nPATTERN = re.compile('x+')\n",
    "name = 'a-b'.replace('-', '_')\n",
    "class Config:\n    def __init__(self):\n        self.block = 64\n",
    ("from dataclasses import dataclass\n@dataclass(frozen=True)\nclass C:\n    x: int\n    def with_x(self, x):\n"
    "        object.__setattr__(self, 'x', x)\n"),
    # a shape-keyed config cache is not an identity-keyed output cache
    ("_configs = {}\ndef config_for(q):\n    key = (q.shape[0], q.dtype)\n    if key not in _configs:\n"
    "        _configs[key] = 64\n    return _configs[key]\n"),
    # a local dict keyed by data_ptr does not outlive the call
    "def dedupe(xs):\n    seen = {}\n    for x in xs:\n        seen[x.data_ptr()] = x\n    return list(seen.values())\n",
    "import torch\nprops = torch.cuda.get_device_properties(0).multi_processor_count\n",
    "import torch\nstream = torch.cuda.current_stream()\n",
    "import os\nhere = os.path.join(os.path.dirname(__file__), 'kernel.cu')\n",
    # dtype and shape arithmetic launches nothing (round 5)
    ("import torch\nassert torch.promote_types(q.dtype, torch.float32) == torch.float32\n"
     "assert torch.broadcast_shapes(q.shape[:2], k.shape[:2]) == torch.Size([B, T])\n"
     "assert torch.result_type(q, 1.0) == torch.bfloat16 and torch.can_cast(torch.bfloat16, torch.float32)\n"),
    # the solution's own package data through the standard library (red team round 4), a source of its own
    "import pkgutil\nSRC = pkgutil.get_data(__package__, 'kernel.cu')\n",
    "from importlib import resources\nSRC = resources.read_text(__spec__.parent, 'helpers.cuh')\n",
    "def f():\n    '''Mentions pytest, /proc/self and TRITON_INTERPRET in prose only.'''\n    return 1\n",
    "try:\n    x = int(s)\nexcept ValueError:\n    x = 0\n",
    "try:\n    run()\nexcept Exception as exc:\n    raise RuntimeError('kernel failed') from exc\n",
    "items = [3, 1, 2]\nitems.sort()\nitems.append(4)\n",
    "import torch\ndef run(q: torch.Tensor) -> torch.Tensor:\n    return q.view(-1).reshape(q.shape).contiguous()\n",
    "from . import helpers\nhelpers.BLOCK = 64\n",  # the candidate's own module may be configured
    ("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr, N: tl.constexpr):\n"
    "    x = tl.load(x_ptr + tl.arange(0, N))\n    tl.store(x_ptr, x.sum(axis=0))\n"),
    "import torch\nx = torch.zeros((4, 4), dtype=torch.float32, device='cuda')\n",
]


@pytest.mark.parametrize("source", PYTHON_NEGATIVES)
def test_python_near_misses_are_not_flagged(source, policy):
    findings = scan_py(source, policy)
    assert findings == [], describe(findings)


CPP_NEGATIVES = [
    "// cudaStreamCreate(&s); getenv(\"X\"); system(\"ls\");\nint x = 1;\n",
    "/* std::thread t; fopen(p, \"w\"); */\nint y = 2;\n",
    "void f() { TORCH_CHECK(false, \"cudaStreamCreate and cublasGemmEx are not used\"); }\n",
    "#define cudaCheck(x) do { cudaError_t e = (x); if (e != cudaSuccess) abort(); } while (0)\n",
    "void cudaCheck(cudaError_t e) { if (e != cudaSuccess) abort(); }\n",
    "static constexpr int kN = 4;\nstatic const float kScale = 0.5f;\n",
    "static __device__ __forceinline__ float sq(float x) { return x * x; }\n",
    "__device__ __forceinline__ float twice(float x) { return 2.f * x; }\n",
    "float g(float x) { return static_cast<float>(x); }\n",
    "at::Tensor f(at::Tensor x) { return x.clone(); }\n",
    "void f() { cudaError_t e = cudaGetLastError(); if (e != cudaSuccess) { abort(); } }\n",
    "void f(torch::Tensor q) { auto o = torch::empty({q.size(0)}, q.options()); }\n",
    "void f() { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024); }\n",
    "struct Acc { float sum(float a) { return a; } };\nint my_environ = 0;\nvoid g(Logger* l) { l->system(1); }\n",
    # a TMA descriptor built the CUDA guide's way: the tensor-map encoder fetched by its literal name
    "void* fn = nullptr;\ncudaDriverEntryPointQueryResult st;\n"
    "cudaGetDriverEntryPoint(\"cuTensorMapEncodeTiled\", &fn, cudaEnableDefault, &st);\n",
    "cuGetProcAddress( \"cuTensorMapEncodeIm2col\" , &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);\n",
    # ...or through the loader, from the driver the process has loaded already
    ("#include <dlfcn.h>\nvoid* enc() {\n  void* h = dlopen(\"libcuda.so.1\", RTLD_NOW | RTLD_GLOBAL);\n"
     "  if (!h) { return nullptr; }\n  void* fn = dlsym(h, \"cuTensorMapEncodeTiled\");\n  dlerror();\n  return fn;\n}\n"),
    "CUtensorMap m;\nvoid f() { cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, d, s, b, e,\n"
    "  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,\n"
    "  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE); }\n",
]


@pytest.mark.parametrize("source", CPP_NEGATIVES)
def test_cpp_near_misses_are_not_flagged(source, policy):
    findings = scan_cpp(source, policy)
    assert findings == [], describe(findings)


# --------------------------------------------------------------------------------------------------
# Constants and attributes are never findings: dtypes, memory formats, layouts, finfo/iinfo, device
# queries, tensor metadata, views, allocation, triton helpers, math on numbers. Judged under the catalogue
# defaults with empty allow-lists too, so this is the gate's own knowledge, not the policy's.

CONSTANT_NEGATIVES = [
    "import torch\nout = torch.empty_like(output, memory_format=torch.contiguous_format)\n",
    "import torch\nx = torch.empty((4, 8), dtype=torch.float8_e4m3fn, device='cuda', layout=torch.strided)\n",
    "import torch\nfmt = torch.channels_last\nok = x.is_contiguous(memory_format=torch.channels_last_3d)\n",
    "import torch\nlo = torch.finfo(torch.bfloat16).min\nhi = torch.iinfo(torch.int32).max\n",
    "import torch\nn = torch.cuda.get_device_properties(q.device).multi_processor_count\ndev = torch.cuda.current_device()\n",
    ("import torch\nif torch.cuda.is_available() and torch.cuda.device_count() > 0:\n"
    "    major, minor = torch.cuda.get_device_capability()\n"),
    "import torch\nassert q.dtype in (torch.float16, torch.bfloat16) and q.layout == torch.strided\n",
    ("import torch\ndef run(q: torch.Tensor) -> torch.Tensor:\n    B, H, D = q.shape\n"
    "    qv = q.view(B, 8, H // 8, D).transpose(1, 2).contiguous().flatten(0, 1).unsqueeze(0).expand(2, -1, -1, -1)\n"
    "    meta = (q.stride(0), q.size(1), q.dim(), q.ndim, q.numel(), q.element_size(), q.is_contiguous(), q.device)\n"
    "    return torch.empty(B, H, D, dtype=torch.float32, device=q.device)\n"),
    ("import torch\nz = torch.zeros_like(x)\no = torch.ones(3, device=x.device)\n"
    "f = torch.full((2,), -torch.inf, dtype=torch.float32)\nw = x.new_empty((4,))\nv = x.new_zeros(4)\n"),
    ("import math\nimport torch\nimport triton\nscale = 1 / math.sqrt(128) * math.log2(math.e)\n"
    "grid = (triton.cdiv(1000, 64), triton.next_power_of_2(5))\ncfg = triton.Config({'BLOCK': 64}, num_warps=4)\n"
    "neg = -torch.inf\n"),
    "import torch\nE8M0 = getattr(torch, 'float8_e8m0fnu', None)\nok = x.dtype == E8M0\n",
    ("import torch\nfrom typing import Optional\n"
    "def f(g: Optional[torch.Generator] = None, fmt: torch.memory_format = torch.preserve_format) -> torch.Size:\n"
    "    return torch.Size([1])\n"),
    "import torch\nok = isinstance(x, (torch.Tensor, torch.nn.Parameter))\n",
    "import torch\ntf32 = torch.backends.cuda.matmul.allow_tf32\n",
    "from torch import uint16, contiguous_format\nz = y.to(uint16, memory_format=contiguous_format)\n",
    "import torch\nwith torch.cuda.device_of(q):\n    n = torch.cuda.mem_get_info()[0]\n",
    "import torch\nlengths = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)\nptr = q.data_ptr()\n",
]


@pytest.mark.parametrize("source", CONSTANT_NEGATIVES)
@pytest.mark.parametrize("policy_name", ["policy", "gqa_policy", "catalogue"])
def test_constants_and_attributes_are_never_findings(source, policy_name, request):
    chosen = builtin_policy() if policy_name == "catalogue" else request.getfixturevalue(policy_name)
    findings = scan_py(source, chosen)
    assert findings == [], describe(findings)


# --------------------------------------------------------------------------------------------------
# torch.utils.cpp_extension load/load_inline: the supported build path (no native_ffi); the C++ they compile
# is scanned instead, at the line of the string in the .py file.

BUILD_PATH_NEGATIVES = [
    ("from torch.utils.cpp_extension import load_inline\n"
    "m = load_inline(name='k', cpp_sources='void f(float* x);', cuda_sources=SRC, functions=['f'])\n"
    "SRC = '__global__ void k(float* x) { x[threadIdx.x] = 0.f; }'\n"),
    ("import os\nimport torch.utils.cpp_extension\nHERE = os.path.dirname(os.path.abspath(__file__))\n"
    "ext = torch.utils.cpp_extension.load(name='k', sources=[os.path.join(HERE, 'k.cu')],\n"
    "                                     extra_cuda_cflags=['-O3', '-lineinfo', '--use_fast_math'])\n"),
    ("from torch.utils import cpp_extension\n"
    "ext = cpp_extension.load_inline('k', [CPP], [CUDA], functions=['run'], extra_ldflags=['-lcuda'])\n"
    "CPP = 'void run();'\nCUDA = '''\n#include <cuda.h>\n__global__ void k() {}\nvoid run() { k<<<1, 1>>>(); }\n'''\n"),
    ("import torch.utils.cpp_extension as cpp\nfrom pathlib import Path\n"
    "SRC = (Path(__file__).parent / 'kernel.cu').read_text()\n"
    "mod = cpp.load_inline(name='k', cpp_sources='', cuda_sources=SRC, is_python_module=False)\n"),
    "import os\nwith open(os.path.join(os.path.dirname(__file__), 'kernel.cu')) as f:\n    SRC = f.read()\n",
    ("import functools\nfrom torch.utils.cpp_extension import load_inline\n@functools.lru_cache(maxsize=None)\n"
    "def _ext():\n    return load_inline(name='k', cpp_sources='', cuda_sources='__global__ void k() {}')\n"),
    ("import torch.utils.cpp_extension as ce\n_mod = None\ndef get():\n    global _mod\n    if _mod is None:\n"
    "        _mod = ce.load_inline(name='k', cpp_sources='', cuda_sources='')\n    return _mod\n"),
    # a C++ comment is not Python prose either: `pytest` in it is not a probe
    ("from torch.utils.cpp_extension import load_inline\n"
    "CUDA = '// not a pytest helper, never reads /proc\\n__global__ void k() {}\\n'\n"
    "m = load_inline(name='k', cpp_sources='', cuda_sources=CUDA)\n"),
    "import torch.utils.cpp_extension\nroot = torch.utils.cpp_extension.CUDA_HOME\n",
]


@pytest.mark.parametrize("source", BUILD_PATH_NEGATIVES)
def test_cpp_extension_builds_are_not_native_ffi(source, gqa_policy):
    findings = scan_py(source, gqa_policy)
    assert findings == [], describe(findings)


# --------------------------------------------------------------------------------------------------
# State that cannot carry outputs: memoised on scalars, globals rebound to values independent of the call,
# files of the solution read next to the module.

STATE_NEGATIVES = [
    ("import functools\nimport torch\n@functools.lru_cache(maxsize=None)\n"
    "def cfg(group: int, head_dim: int, dtype: torch.dtype) -> tuple:\n    return (64, 4)\n"),
    '''\
        import functools
        import torch
        @functools.lru_cache(maxsize=None)
        def num_sms(index):
            return torch.cuda.get_device_properties(index).multi_processor_count
        def run(q, out):
            index = q.device.index if q.device.index is not None else torch.cuda.current_device()
            B, H, D = q.shape
            cfg = pick(B * H, D, num_sms(index), q.size(-1), q.dtype)
        @functools.cache
        def pick(rows, d, sms, width, dtype):
            return min(rows, sms), d
        ''',
    "import functools\n@functools.cache\ndef ext():\n    return 1\n",
    ("import functools\nfrom typing import Literal, Optional\n@functools.lru_cache\n"
    "def f(mode: Literal['a', 'b'], n: Optional[int] = None, t: int | None = None):\n    return n\n"),
    "_ready = False\ndef f():\n    global _ready\n    _ready = True\n",
    ("import torch\n_SMS = None\ndef sms():\n    global _SMS\n    if _SMS is None:\n"
    "        _SMS = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count\n"
    "    return _SMS\n"),
    "from pathlib import Path\nSRC = Path(__file__).with_name('kernel.cu').read_text()\n",
    # memoised on scalars, called through a name that is also assigned: every call still takes scalars
    "import functools\n@functools.cache\ndef f(n: int):\n    return n\ng = f\n",
]


@pytest.mark.parametrize("source", STATE_NEGATIVES)
def test_state_that_cannot_carry_outputs_is_not_flagged(source, policy):
    findings = scan_py(source, policy)
    assert findings == [], describe(findings)
