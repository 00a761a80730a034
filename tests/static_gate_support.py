"""Static gate test support: honest GQA decode samples (Triton and CUDA) and helpers that scan a source and
describe findings; the `policy` and `gqa_policy` fixtures live in conftest.py."""

from __future__ import annotations

import textwrap

from harness.audits.static_gate import Finding, GatePolicy, scan_sources

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


def scan_py(source: str, policy: GatePolicy, path: str = "main.py") -> list[Finding]:
    return scan_sources({path: textwrap.dedent(source)}, "triton", policy)


def scan_cpp(source: str, policy: GatePolicy, path: str = "kernel.cu") -> list[Finding]:
    return scan_sources({path: textwrap.dedent(source)}, "cuda", policy)


def describe(findings: list[Finding]) -> str:
    return "\n".join(f"{f.path}:{f.line}:{f.col} {f.rule} [{f.severity}] {f.message}" for f in findings)
