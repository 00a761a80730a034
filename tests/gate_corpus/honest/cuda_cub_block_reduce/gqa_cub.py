# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode (page size 1) in CUDA through load_inline: one block of 128 threads per (request, q head).

Tokens are taken 128 at a time: thread t scores token t of the chunk (its 128-wide dot product with q, q staged in
shared memory as float), cub::BlockReduce gives the chunk's max and the sum of its exponentials for the online
softmax, and thread d then accumulates p . V over the chunk for its output dimension d. LSE is base 2."""

import math

import torch
from torch.utils.cpp_extension import load_inline

_CPP = "void gqa_decode(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor indptr, torch::Tensor indices, double sm_scale, torch::Tensor out, torch::Tensor lse);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

constexpr int kDim = 128;
constexpr int kThreads = 128;

__global__ void gqa_decode_cub_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                      const __nv_bfloat16* __restrict__ v, const int* __restrict__ indptr,
                                      const int* __restrict__ indices, float scale_log2, int num_qo, int num_kv,
                                      __nv_bfloat16* __restrict__ out, float* __restrict__ lse) {
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ float q_s[kDim];
  __shared__ float p_s[kThreads];
  __shared__ int row_s[kThreads];
  __shared__ float bcast;

  const int b = blockIdx.x, h = blockIdx.y, t = threadIdx.x;
  const int kvh = h / (num_qo / num_kv);
  q_s[t] = __bfloat162float(q[(b * num_qo + h) * kDim + t]);
  const int start = indptr[b], len = indptr[b + 1] - start;
  float m = -INFINITY, l = 0.f, acc = 0.f;
  __syncthreads();
  for (int c = 0; c < len; c += kThreads) {
    const bool ok = c + t < len;
    float s = -INFINITY;
    int row = 0;
    if (ok) {
      row = indices[start + c + t];
      const __nv_bfloat16* kr = k + (static_cast<long long>(row) * num_kv + kvh) * kDim;
      float dot = 0.f;
#pragma unroll 8
      for (int d = 0; d < kDim; ++d) dot += q_s[d] * __bfloat162float(kr[d]);
      s = dot * scale_log2;
    }
    row_s[t] = row;
    float cmax = BlockReduce(temp).Reduce(s, cuda::maximum<>{});
    if (t == 0) bcast = cmax;
    __syncthreads();
    const float m_new = fmaxf(m, bcast);
    const float p = ok ? exp2f(s - m_new) : 0.f;
    p_s[t] = p;
    __syncthreads();
    float csum = BlockReduce(temp).Sum(p);
    if (t == 0) bcast = csum;
    __syncthreads();
    const float alpha = exp2f(m - m_new);
    l = l * alpha + bcast;
    acc *= alpha;
    const int n = min(kThreads, len - c);
    for (int j = 0; j < n; ++j)
      acc += p_s[j] * __bfloat162float(v[(static_cast<long long>(row_s[j]) * num_kv + kvh) * kDim + t]);
    m = m_new;
    __syncthreads();
  }
  out[(b * num_qo + h) * kDim + t] = __float2bfloat16(len > 0 ? acc / l : 0.f);
  if (t == 0) lse[b * num_qo + h] = len > 0 ? m + log2f(l) : -INFINITY;
}

void gqa_decode(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor indptr, torch::Tensor indices,
                double sm_scale, torch::Tensor out, torch::Tensor lse) {
  TORCH_CHECK(q.size(2) == kDim, "head_dim must be 128");
  const at::cuda::OptionalCUDAGuard guard(device_of(q));
  const int batch = q.size(0), num_qo = q.size(1), num_kv = k.size(2);
  dim3 grid(batch, num_qo);
  gqa_decode_cub_kernel<<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(q.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(k.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(v.data_ptr<at::BFloat16>()), indptr.data_ptr<int>(),
      indices.data_ptr<int>(), static_cast<float>(sm_scale * 1.4426950408889634), num_qo, num_kv,
      reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()), lse.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = load_inline(name="gqa_decode_cub", cpp_sources=_CPP, cuda_sources=_CUDA, functions=["gqa_decode"],
                   extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo"], verbose=False)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    _ext.gqa_decode(q, k_cache, v_cache, kv_indptr, kv_indices, scale, output, lse)
