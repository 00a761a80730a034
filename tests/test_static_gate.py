"""Static gate: every rule has a positive sample (flagged, right rule, right line); honest code is not flagged."""

from __future__ import annotations

import textwrap
import time

import pytest
import yaml

from harness.static_gate import (
    DEFAULT_POLICY_PATH,
    LIBRARY_RULES,
    RULES,
    Finding,
    GatePolicy,
    PolicyError,
    awaits_attribution,
    builtin_policy,
    declared_library,
    gate_passed,
    load_policy,
    policy_from_mapping,
    scan_sources,
)

# --------------------------------------------------------------------------------------------------
# Honest samples: must produce no finding at all, under the default policy and under the gqa_paged
# op_type and definition layers.

HONEST_TRITON_GQA_DECODE = '''\
"""GQA paged decode in Triton: one program per (batch, kv head) serves all query heads of its group.

Not a pytest helper; reads nothing from /proc. (Docstrings are prose, so words here are not findings.)
"""
import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _gqa_paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr, lse_ptr,
    sm_scale_log2,
    stride_qb, stride_qh,
    stride_kp, stride_ks, stride_kh,
    stride_vp, stride_vs, stride_vh,
    stride_ob, stride_oh,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
):
    batch = tl.program_id(0)
    kv_head = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    g_mask = offs_g < GROUP
    q_heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + batch * stride_qb + q_heads[:, None] * stride_qh + offs_d[None, :],
                mask=g_mask[:, None], other=0.0)
    page_begin = tl.load(kv_indptr_ptr + batch)
    page_end = tl.load(kv_indptr_ptr + batch + 1)
    seq_len = (page_end - page_begin) * PAGE_SIZE
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        tok = start + offs_n
        valid = tok < seq_len
        page = tl.load(kv_indices_ptr + page_begin + tok // PAGE_SIZE, mask=valid, other=0)
        slot = tok % PAGE_SIZE
        k_off = page[:, None] * stride_kp + slot[:, None] * stride_ks + kv_head * stride_kh + offs_d[None, :]
        k = tl.load(k_cache_ptr + k_off, mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale_log2
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        v_off = page[:, None] * stride_vp + slot[:, None] * stride_vs + kv_head * stride_vh + offs_d[None, :]
        v = tl.load(v_cache_ptr + v_off, mask=valid[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    out_off = batch * stride_ob + q_heads[:, None] * stride_oh + offs_d[None, :]
    tl.store(out_ptr + out_off, out.to(out_ptr.dtype.element_ty), mask=g_mask[:, None])
    lse = (m_i + tl.log2(l_i)) / LOG2E
    tl.store(lse_ptr + batch * GROUP * tl.num_programs(1) + q_heads, lse, mask=g_mask)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale=None):
    """Destination-style wrapper: q [batch, num_qo_heads, head_dim], caches [pages, page_size, kv_heads, d]."""
    batch, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    group = num_qo_heads // num_kv_heads
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty_like(q)
    lse = torch.empty((batch, num_qo_heads), dtype=torch.float32, device=q.device)
    block_g = max(16, triton.next_power_of_2(group))
    block_n = max(16, min(64, triton.next_power_of_2(page_size)))
    num_warps = 4 if triton.cdiv(head_dim, 64) <= 2 else 8
    grid = (batch, num_kv_heads)
    _gqa_paged_decode_kernel[grid](
        q, k_cache, v_cache, kv_indptr, kv_indices, out, lse,
        sm_scale * LOG2E,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1),
        GROUP=group, BLOCK_G=block_g, HEAD_DIM=head_dim, PAGE_SIZE=page_size, BLOCK_N=block_n,
        num_warps=num_warps,
    )
    return out, lse
'''

HONEST_CUDA_GQA_DECODE = r'''// GQA paged decode: one block per (batch, kv head). Never calls cudaStreamCreate(): it launches on
// the caller's current stream. /* cublasGemmEx is not used either. */
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kHeadDim = 128;
constexpr int kWarpSize = 32;
constexpr int kThreads = 128;

__device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffff, x, offset);
  return x;
}

template <int GROUP, int PAGE_SIZE>
__global__ void gqa_paged_decode_kernel(const __nv_bfloat16* __restrict__ q,
                                        const __nv_bfloat16* __restrict__ k_cache,
                                        const __nv_bfloat16* __restrict__ v_cache,
                                        const int* __restrict__ kv_indptr,
                                        const int* __restrict__ kv_indices,
                                        __nv_bfloat16* __restrict__ out, float sm_scale, int num_kv_heads) {
  __shared__ float scores[GROUP][kWarpSize];
  const int batch = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int page_begin = kv_indptr[batch];
  const int seq_len = (kv_indptr[batch + 1] - page_begin) * PAGE_SIZE;
  float acc[kHeadDim / kWarpSize] = {0.f};
  float m = -INFINITY, l = 0.f;
  for (int tok = warp; tok < seq_len; tok += kThreads / kWarpSize) {
    const int page = kv_indices[page_begin + tok / PAGE_SIZE];
    const long kv_off = ((long)page * PAGE_SIZE + tok % PAGE_SIZE) * num_kv_heads * kHeadDim + kv_head * kHeadDim;
    float dot = 0.f;
    for (int d = lane; d < kHeadDim; d += kWarpSize) {
      dot += __bfloat162float(q[(batch * num_kv_heads * GROUP + kv_head * GROUP) * kHeadDim + d]) *
             __bfloat162float(k_cache[kv_off + d]);
    }
    const float s = warp_reduce_sum(dot) * sm_scale;
    const float m_new = fmaxf(m, s);
    const float alpha = __expf(m - m_new), p = __expf(s - m_new);
    l = l * alpha + p;
    for (int i = 0; i < kHeadDim / kWarpSize; ++i)
      acc[i] = acc[i] * alpha + p * __bfloat162float(v_cache[kv_off + lane + i * kWarpSize]);
    m = m_new;
  }
  scores[0][lane] = l;
  __syncthreads();
  for (int i = 0; i < kHeadDim / kWarpSize; ++i)
    out[(batch * num_kv_heads + kv_head) * GROUP * kHeadDim + lane + i * kWarpSize] = __float2bfloat16(acc[i] / l);
}

}  // namespace

torch::Tensor run(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor kv_indptr,
                  torch::Tensor kv_indices, double sm_scale) {
  TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor (cudaStreamCreate is not needed here)");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16, "q must be bfloat16");
  const at::cuda::OptionalCUDAGuard device_guard(q.device());
  auto out = torch::empty_like(q);
  const int batch = q.size(0);
  const int num_kv_heads = k_cache.size(2);
  dim3 grid(batch, num_kv_heads);
  dim3 block(kThreads);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  gqa_paged_decode_kernel<4, 16><<<grid, block, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(k_cache.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(v_cache.data_ptr<at::BFloat16>()),
      kv_indptr.data_ptr<int>(), kv_indices.data_ptr<int>(),
      reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()), static_cast<float>(sm_scale), num_kv_heads);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "GQA paged decode (bf16)"); }
'''


@pytest.fixture(scope="module")
def policy() -> GatePolicy:
    return load_policy()


@pytest.fixture(scope="module")
def gqa_policy() -> GatePolicy:
    return load_policy(op_type="gqa_paged", definition="gqa_paged_decode_h32_kv8_d128_ps1")


def scan_py(source: str, policy: GatePolicy, path: str = "main.py") -> list[Finding]:
    return scan_sources({path: textwrap.dedent(source)}, "triton", policy)


def scan_cpp(source: str, policy: GatePolicy, path: str = "kernel.cu") -> list[Finding]:
    return scan_sources({path: textwrap.dedent(source)}, "cuda", policy)


def describe(findings: list[Finding]) -> str:
    return "\n".join(f"{f.path}:{f.line}:{f.col} {f.rule} [{f.severity}] {f.message}" for f in findings)


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
    ("timer_tampering", 2, "import harness.timing\nharness.timing.measure = fake\n"),
    ("timer_tampering", 2, "import cupti\ncupti.activity_enable = fake\n"),
    ("timer_tampering", 2, "import torch\ntorch.cuda.__setattr__('synchronize', fake)\n"),
    # monkeypatching torch and other imported modules
    ("monkeypatch", 2, "import torch\ntorch.matmul = my_matmul\n"),
    ("monkeypatch", 2, "import torch\ntorch.Tensor.__eq__ = lambda a, b: True\n"),
    ("monkeypatch", 2, "import torch.nn.functional as F\nF.softmax = fast_softmax\n"),
    ("monkeypatch", 2, "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"),
    ("monkeypatch", 2, "import torch\nsetattr(torch.nn.functional, 'silu', fake)\n"),
    ("monkeypatch", 2, "import torch\nlib = torch.library.Library('aten', 'IMPL')\n"),
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
    ("harness_internals", 1, "import inspect\n"),
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
    ("env_probe", 2, "import os\nseed = os.environ['SEED']\n"),
    ("env_probe", 2, "import os\nhome = os.getenv('HOME')\n"),
    ("env_probe", 1, "from os import environ\n"),
    ("env_probe", 1, "import platform\n"),
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
    ("file_cache", 1, "import tempfile\n"),
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
    ("dynamic_code", 2, "import importlib as il\nm = il.import_module('threading')\n"),
    ("dynamic_code", 2, "import torch\nf = getattr(torch, name)\n"),
    ("dynamic_code", 1, "import runpy\n"),
    # native FFI
    ("native_ffi", 1, "import ctypes\n"),
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
    ("env_probe", 2, "void f() {\n  const char* s = getenv(\"SEED\");\n}\n"),
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


EMBEDDED_CPP_POSITIVES = [
    # a module constant (raw triple-quoted) given in a list: the finding is at the C++ line
    ("stream_event_graph", 5, '''\
        from torch.utils.cpp_extension import load_inline
        CUDA = r"""
        #include <torch/extension.h>
        void run(torch::Tensor x) {
          cudaStream_t s; cudaStreamCreate(&s);
        }
        """
        mod = load_inline(name="k", cpp_sources="void run(torch::Tensor x);", cuda_sources=[CUDA], functions=["run"])
        '''),
    ("timer_tampering", 4, '''\
        import torch.utils.cpp_extension as ext
        mod = ext.load_inline(
            name="k", cpp_sources="", cuda_sources="""
        #include <cupti.h>
        __global__ void k() {}
        """)
        '''),
    ("device_state_tamper", 2, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "", f"void f() {{ cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, {N}); }}")
        '''),
    ("concurrency", 4, '''\
        from torch.utils.cpp_extension import load_inline
        TEMPLATE = """
        void launch() {{
          std::thread t([] {{ work(); }}); t.detach();
        }}
        constexpr int kBlock = {block};
        """
        m = load_inline("k", "", TEMPLATE.format(block=128))
        '''),
    ("env_probe", 3, '''\
        import torch.utils.cpp_extension as ext
        def source(n):
            return "int f() { return getenv(\\"SEED\\") != nullptr; }"
        m = ext.load_inline("k", source(3), "")
        '''),
    ("file_cache", 2, '''\
        from torch.utils.cpp_extension import load_inline
        BODY = "void save(const float* o) { FILE* f = fopen(\\"out.bin\\", \\"wb\\"); }"
        m = load_inline("k", "", HEADER + BODY)
        HEADER = "#include <cstdio>\\n"
        '''),
    ("library_fallback", 3, '''\
        from torch.utils.cpp_extension import load_inline
        SRC = """
        void gemm() { cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &a, A, t, m, B, t, k, &b, C, t, m, ct, al); }
        """
        m = load_inline("k", "", SRC)
        '''),
    ("harness_internals", 2, '''\
        from torch.utils.cpp_extension import load_inline
        CPP = '#include "../../harness/reference.h"\\nvoid f();'
        m = load_inline("k", CPP, "")
        '''),
    ("timer_tampering", 2, '''\
        from torch.utils.cpp_extension import load_inline
        SRC = 'extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaSuccess; }'
        m = load_inline("k", "", SRC)
        '''),
    ("library_fallback", 3, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "", "__global__ void k() {}",
                        extra_ldflags=["-lcublas"])
        '''),
    ("timer_tampering", 2, '''\
        from torch.utils.cpp_extension import load_inline
        FLAGS = ["-O3", "-Wl,--wrap=cudaEventRecord"]
        m = load_inline("k", "", "__global__ void k() {}", extra_ldflags=FLAGS)
        '''),
    ("dynamic_code", 2, '''\
        import torch.utils.cpp_extension
        ext = torch.utils.cpp_extension.load("k", ["k.cu"], extra_ldflags=["-lnvrtc"])
        '''),
    ("native_ffi", 3, '''\
        import torch.utils.cpp_extension
        ext = torch.utils.cpp_extension.load("k", ["k.cu"], extra_cuda_cflags=["-lineinfo"],
                                             extra_ldflags=["-lcuda", "-L/opt/hooks", "-lhook"])
        '''),
    ("native_ffi", 2, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "", "__global__ void k() {}", extra_ldflags=["prebuilt/libkernels.so"])
        '''),
    ("concurrency", 2, '''\
        from torch.utils.cpp_extension import load_inline
        m = load_inline("k", "void f();", "", extra_cflags=["-O3", "-fopenmp"])
        '''),
    ("harness_internals", 3, '''\
        import os
        import torch.utils.cpp_extension
        ext = torch.utils.cpp_extension.load("k", [os.path.join(HERE, "..", "shared", "kernel.cu")])
        '''),
    ("harness_internals", 2, '''\
        from torch.utils.cpp_extension import load
        ext = load("k", sources=["/work/main/harness/kernel.cu"])
        '''),
    # options spread into the call
    ("concurrency", 2, '''\
        from torch.utils.cpp_extension import load_inline
        OPTIONS = dict(name="k", cpp_sources="", cuda_sources="void f() { system(\\"nvidia-smi\\"); }")
        m = load_inline(**OPTIONS)
        '''),
    # a string that looks like C++ is still checked as a Python string outside C++ comments
    ("env_probe", 1, "P = '/proc/self/status // __global__'\n"),
    ("file_cache", 1, "CACHE = '__global__ x; /tmp/answers.bin'\n"),
    # C++ source in a string, whatever compiles it
    ("stream_event_graph", 1, '''\
        SRC = "__global__ void k() {}\\nvoid g(cudaGraphExec_t g, cudaStream_t s) { cudaGraphLaunch(g, s); }"
        '''),
]


@pytest.mark.parametrize(("rule", "line", "source"), EMBEDDED_CPP_POSITIVES,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(EMBEDDED_CPP_POSITIVES)])
def test_cpp_in_python_strings_gets_the_cpp_rules(rule, line, source, gqa_policy):
    findings = scan_py(source, gqa_policy)
    hit = next((f for f in findings if f.rule == rule and f.line == line), None)
    assert hit is not None, describe(findings)
    assert hit.severity == RULES[rule].default_severity
    assert gate_passed(findings) == (hit.severity == "warning" and gate_passed([f for f in findings if f is not hit]))
    assert not any("`torch.utils.cpp_extension" in f.message for f in findings), describe(findings)  # the build call


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


# --------------------------------------------------------------------------------------------------
# Import alias resolution

ALIAS_CASES = [
    ("import torch as t\nt.cuda.synchronize = fake\n", "timer_tampering", 2),
    ("from torch import cuda\ns = cuda.Stream()\n", "stream_event_graph", 2),
    ("from torch import cuda as c\nc.Event.elapsed_time = fake\n", "timer_tampering", 2),
    ("from os import environ as env\nx = env['SEED']\n", "env_probe", 2),
    ("import torch\nEvent = torch.cuda.Event\ne = Event()\n", "stream_event_graph", 3),
    ("import os\nenv = os.environ\nseed = env.get('SEED')\n", "env_probe", 3),
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


# --------------------------------------------------------------------------------------------------
# Syntax errors and result shape


def test_syntax_error_is_a_single_finding_not_an_exception(policy):
    findings = scan_py("import torch\n\ndef run(q:\n    return q\n", policy)
    assert [f.rule for f in findings] == ["syntax"]
    assert findings[0].line == 3 and findings[0].severity == "error"
    assert not gate_passed(findings)


def test_findings_are_sorted_by_path_then_line(policy):
    sources = {
        "b.py": "import threading\nimport gc\n",
        "a.py": "x = 1\nimport ctypes\nimport subprocess\n",
        "k.cu": "void f() {\n  cudaDeviceReset();\n}\n",
    }
    findings = scan_sources(sources, "python", policy)
    keys = [(f.path, f.line) for f in findings]
    assert keys == sorted(keys)
    assert [f.path for f in findings] == ["a.py", "a.py", "b.py", "b.py", "k.cu"]


def test_finding_round_trips_through_json(policy):
    (finding,) = scan_py("import gc\n", policy)
    assert Finding.model_validate_json(finding.model_dump_json()) == finding
    assert set(finding.model_dump()) == {"rule", "severity", "path", "line", "col", "message", "snippet"}
    assert "gc" in finding.message and "harness" in finding.message


def test_gate_passed_ignores_warnings(policy):
    warnings_only = scan_py("import torch\ns = torch.matmul(q, k)\n", policy)
    assert warnings_only and gate_passed(warnings_only)
    assert not gate_passed(scan_py("import threading\n", policy))
    assert gate_passed([])


def test_language_decides_unknown_suffixes(policy):
    hidden = {"table.inc.txt": "int x;\n", "impl.inl": "void f() { cudaDeviceReset(); }\n",
              "notes.md": "We call system( nothing ) here.\n", "payload": "void f() { system(\"ls\"); }\n"}
    cuda_rules = {(f.path, f.rule) for f in scan_sources(hidden, "cuda", policy)}
    assert cuda_rules == {("impl.inl", "device_state_tamper"), ("payload", "concurrency")}
    python_rules = {(f.path, f.rule) for f in scan_sources(hidden, "python", policy)}
    assert python_rules == {("impl.inl", "device_state_tamper")}


def test_torch_ops_registered_by_the_candidate_are_its_own(gqa_policy):
    sources = {
        "binding.cpp": "TORCH_LIBRARY(crucible_gqa, m) { m.def(\"run(Tensor q) -> Tensor\"); }\n",
        "main.py": "import torch\ndef run(q):\n    return torch.ops.crucible_gqa.run(q)\n",
    }
    assert scan_sources(sources, "cuda", gqa_policy) == []
    foreign = {"main.py": "import torch\ndef run(q):\n    return torch.ops.aten.mm(q, q)\n"}
    assert [f.rule for f in scan_sources(foreign, "python", gqa_policy)] == ["torch_compute"]


def test_candidates_own_modules_are_not_foreign(policy):
    sources = {"main.py": "import helpers\nhelpers.BLOCK = 64\n", "helpers.py": "BLOCK = 32\n"}
    assert scan_sources(sources, "python", policy) == []


# --------------------------------------------------------------------------------------------------
# Policy: YAML defaults, layering default -> op_type -> definition, allow-lists


def test_yaml_defaults_match_the_rule_catalogue():
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    defaults = data["default"]["rules"]
    assert set(defaults) == set(RULES)
    for rule_id, spec in RULES.items():
        assert defaults[rule_id]["severity"] == spec.default_severity, rule_id
    assert data["definition"] == {}


def test_shipped_policy_leaves_library_compute_to_attribution_on_every_layer():
    """No layer of the shipped policy raises torch_compute/library_fallback: they stay warnings that run-time
    attribution confirms or clears (awaits_attribution), for every op_type and definition it names."""
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    layers = [(None, None), ("gqa_paged", "gqa_paged_decode_h32_kv8_d128_ps1"),
              *((op, None) for op in data.get("op_type") or {}), *((None, d) for d in data.get("definition") or {})]
    for op_type, definition in layers:
        policy = load_policy(op_type=op_type, definition=definition)
        assert {policy.setting(rule).severity for rule in LIBRARY_RULES} == {"warning"}, (op_type, definition)
    gqa = load_policy(op_type="gqa_paged", definition="gqa_paged_decode_h32_kv8_d128_ps1")
    findings = scan_py("import torch\ns = torch.matmul(q, k)\n", gqa)
    assert [(f.rule, f.severity) for f in findings] == [("torch_compute", "warning")] and gate_passed(findings)
    assert all(awaits_attribution(f) and awaits_attribution(f.model_dump()) for f in findings)
    assert LIBRARY_RULES == {"torch_compute", "library_fallback"}
    # a user's policy may still make them errors, and then they do not await attribution: they block
    strict = policy_from_mapping({"op_type": {"gqa_paged": {"rules": {"torch_compute": {"severity": "error"}}}}},
                                 op_type="gqa_paged")
    findings = scan_py("import torch\ns = torch.matmul(q, k)\n", strict)
    assert not gate_passed(findings) and not any(awaits_attribution(f) for f in findings)
    assert not awaits_attribution({"rule": "stream_event_graph", "severity": "warning"})


LAYERED = {
    "default": {
        "rules": {"torch_compute": {"severity": "warning"}, "file_read": {"severity": "warning"},
                  "clock_read": {"severity": "warning"}},
        "allow": {"torch_calls": ["torch.empty"]},
    },
    "op_type": {
        "gqa_paged": {
            "rules": {"torch_compute": {"severity": "error"}, "file_read": {"severity": "error"},
                      "clock_read": {"severity": "error"}},
            "allow": {"torch_calls": ["torch.arange"]},
        },
    },
    "definition": {
        "gqa_special": {
            "rules": {"torch_compute": {"severity": "warning"}, "file_read": False},
            "allow": {"torch_calls": ["torch.cumsum"], "tensor_methods": ["sum"]},
        },
    },
}


def test_layering_definition_beats_op_type_beats_default():
    default = policy_from_mapping(LAYERED)
    op = policy_from_mapping(LAYERED, op_type="gqa_paged")
    full = policy_from_mapping(LAYERED, op_type="gqa_paged", definition="gqa_special")
    assert default.setting("torch_compute").severity == "warning"
    assert op.setting("torch_compute").severity == "error"
    assert full.setting("torch_compute").severity == "warning"  # definition wins over op_type
    assert full.setting("clock_read").severity == "error"  # op_type wins over default where definition is silent
    assert op.setting("file_read").enabled and not full.setting("file_read").enabled
    assert full.layers == ("default", "op_type:gqa_paged", "definition:gqa_special")
    # allow-lists are extended layer by layer, never replaced
    assert default.torch_calls == ("torch.empty",)
    assert full.torch_calls == ("torch.empty", "torch.arange", "torch.cumsum")
    # unknown op_type / definition names simply add nothing
    assert policy_from_mapping(LAYERED, op_type="nope", definition="nope").layers == ("default",)


def test_layered_policy_changes_what_is_reported():
    source = "import torch\nc = torch.cumsum(x, 0)\ns = x.sum()\nf = open(p)\n"
    op = policy_from_mapping(LAYERED, op_type="gqa_paged")
    full = policy_from_mapping(LAYERED, op_type="gqa_paged", definition="gqa_special")
    op_findings = scan_py(source, op)
    assert {(f.rule, f.line, f.severity) for f in op_findings} == {
        ("torch_compute", 2, "error"), ("torch_compute", 3, "error"), ("file_read", 4, "error")}
    assert scan_py(source, full) == []  # cumsum and .sum() allowed, file_read switched off


def test_load_policy_reads_a_given_file(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(LAYERED))
    policy = load_policy(path, definition="gqa_special", op_type="gqa_paged")
    assert policy.setting("torch_compute").severity == "warning"
    assert not policy.setting("file_read").enabled


def test_policy_python_names_escape_hatch():
    policy = policy_from_mapping({"definition": {"d": {"allow": {"python_names": ["torch.cuda.Event"]}}}},
                                 definition="d")
    assert scan_py("import torch\ne = torch.cuda.Event()\n", policy) == []


@pytest.mark.parametrize("bad", [
    {"default": {"rules": {"no_such_rule": {"severity": "error"}}}},
    {"default": {"rules": {"torch_compute": {"severity": "fatal"}}}},
    {"default": {"rules": {"torch_compute": {"level": "error"}}}},
    {"default": {"allow": {"no_such_list": []}}},
    {"default": {"allow": {"torch_calls": "torch.empty"}}},
    {"default": {"rulez": {}}},
    {"defaults": {}},
])
def test_malformed_policy_is_rejected(bad):
    with pytest.raises(PolicyError):
        policy_from_mapping(bad)


def test_policy_round_trips_through_json():
    policy = load_policy(op_type="gqa_paged")
    assert GatePolicy.model_validate_json(policy.model_dump_json()) == policy


# --------------------------------------------------------------------------------------------------
# Speed: the gate runs on every candidate in the agent loop (budget ~50 ms for the whole static stage).


def _lines_of(source: str, at_least: int) -> str:
    copies = -(-at_least // len(source.splitlines()))
    return "\n".join([source] * copies)


def test_scanning_2000_lines_is_fast(policy):
    from pathlib import Path

    python_source = _lines_of(HONEST_TRITON_GQA_DECODE, 2000)
    cuda_source = _lines_of(HONEST_CUDA_GQA_DECODE, 2000)
    inline = (Path(__file__).parent / "gate_corpus" / "honest" / "cuda_load_inline" / "main.py").read_text()
    inline_source = _lines_of(inline, 2000)  # C++ in load_inline strings, scanned with the C++ rules
    assert len(python_source.splitlines()) >= 2000 and len(cuda_source.splitlines()) >= 2000
    timings = {}
    for name, sources, language in (("python", {"main.py": python_source}, "triton"),
                                    ("cuda", {"main.cu": cuda_source}, "cuda"),
                                    ("load_inline", {"main.py": inline_source}, "python")):
        scan_sources(sources, language, policy)  # warm regex/compile caches
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            scan_sources(sources, language, policy)
            best = min(best, time.perf_counter() - start)
        timings[name] = best
    # Typically ~10-40 ms; the bound is loose so slow CI machines do not flake.
    assert all(seconds < 0.5 for seconds in timings.values()), timings
